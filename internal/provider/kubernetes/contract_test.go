package kubernetes_test

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"sync"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/client/interceptor"

	"github.com/egress-proxies/egress-proxies-operator/internal/config"
	"github.com/egress-proxies/egress-proxies-operator/internal/ownership"
	"github.com/egress-proxies/egress-proxies-operator/internal/ownership/ownershiptest"
	"github.com/egress-proxies/egress-proxies-operator/internal/provider"
	"github.com/egress-proxies/egress-proxies-operator/internal/provider/kubernetes"
	"github.com/egress-proxies/egress-proxies-operator/internal/provider/providertest"
)

// TestContract runs the provider contract suite on envtest.
func TestContract(t *testing.T) {
	needEnvtest(t)
	providertest.Run(t, func(t *testing.T) providertest.Harness {
		podNS, proxyNS := podNamespace(t), servedNamespace(t)
		return &contractHarness{entry: entry(t, podNS, ""), podNS: podNS, proxyNS: proxyNS}
	})
}

// contractHarness runs the provider on a client that can fail as an outage
// or a crash would.
type contractHarness struct {
	entry          *config.Entry
	podNS, proxyNS string

	mu   sync.Mutex
	down bool
}

// errOutage is what the API server's absence looks like to a client.
var errOutage = apierrors.NewServiceUnavailable("the API server does not answer")

// newProvider builds a provider on a client whose calls pass through the
// harness's faults. writesOK < 0 lets every write through.
func (h *contractHarness) newProvider(t *testing.T, writesOK int) provider.Provider {
	t.Helper()
	return h.newProviderOf(t, writesOK, testOwnership)
}

// newProviderOf is newProvider for the installation id.
func (h *contractHarness) newProviderOf(t *testing.T, writesOK int, id *ownership.Identity) provider.Provider {
	t.Helper()
	base, err := client.NewWithWatch(asOperator(t), client.Options{Scheme: scheme})
	if err != nil {
		t.Fatal(err)
	}
	read := func() error {
		h.mu.Lock()
		defer h.mu.Unlock()
		if h.down {
			return errOutage
		}
		return nil
	}
	writes := 0
	write := func() error {
		if err := read(); err != nil {
			return err
		}
		h.mu.Lock()
		defer h.mu.Unlock()
		if writesOK >= 0 && writes >= writesOK {
			return errors.New("the operator died")
		}
		writes++
		return nil
	}
	c := interceptor.NewClient(base, interceptor.Funcs{
		Get: func(ctx context.Context, c client.WithWatch, key client.ObjectKey, obj client.Object, opts ...client.GetOption) error {
			if err := read(); err != nil {
				return err
			}
			return c.Get(ctx, key, obj, opts...)
		},
		List: func(ctx context.Context, c client.WithWatch, list client.ObjectList, opts ...client.ListOption) error {
			if err := read(); err != nil {
				return err
			}
			return c.List(ctx, list, opts...)
		},
		Create: func(ctx context.Context, c client.WithWatch, obj client.Object, opts ...client.CreateOption) error {
			if err := write(); err != nil {
				return err
			}
			return c.Create(ctx, obj, opts...)
		},
		Delete: func(ctx context.Context, c client.WithWatch, obj client.Object, opts ...client.DeleteOption) error {
			if err := write(); err != nil {
				return err
			}
			return c.Delete(ctx, obj, opts...)
		},
		Update: func(ctx context.Context, c client.WithWatch, obj client.Object, opts ...client.UpdateOption) error {
			if err := write(); err != nil {
				return err
			}
			return c.Update(ctx, obj, opts...)
		},
		Patch: func(ctx context.Context, c client.WithWatch, obj client.Object, patch client.Patch, opts ...client.PatchOption) error {
			if err := write(); err != nil {
				return err
			}
			return c.Patch(ctx, obj, patch, opts...)
		},
	})
	p, err := kubernetes.New(h.entry, provider.Deps{Ownership: id, Client: c, APIReader: c, OwnImage: "registry.example/egress-proxies-operator:test"})
	if err != nil {
		t.Fatal(err)
	}
	return p
}

func (h *contractHarness) Provider(t *testing.T) provider.Provider { return h.newProvider(t, -1) }

// Request refers to a credentials Secret of its own, holding the password.
func (h *contractHarness) Request(t *testing.T, uid, name string) provider.Request {
	t.Helper()
	s := &corev1.Secret{
		ObjectMeta: metav1.ObjectMeta{Namespace: h.proxyNS, Name: name + "-credentials",
			Labels: map[string]string{kubernetes.LabelManagedBy: kubernetes.LabelManagedByValue}},
		Data: map[string][]byte{"username": []byte("u1"), "password": []byte("sentinel-password")},
	}
	if err := k8s.Create(context.Background(), s); err != nil && !apierrors.IsAlreadyExists(err) {
		t.Fatal(err)
	}
	req := request(h.proxyNS, &provider.SecretRef{Namespace: h.proxyNS, Name: s.Name, UsernameKey: "username", PasswordKey: "password"})
	req.OwnerUID, req.Name = uid, name
	return req
}

func (h *contractHarness) Secrets() []string { return []string{"sentinel-password"} }

func (h *contractHarness) MissingID() provider.ID { return kubernetes.ID(h.podNS, "missing") }

// Interrupt point n lets n writes reach the API server and fails the rest,
// as when the operator dies in the middle of Create.
func (h *contractHarness) Interrupt(t *testing.T, req provider.Request, n int) bool {
	_, err := h.newProvider(t, n).Create(context.Background(), req)
	return err != nil
}

func (h *contractHarness) SetOutage(_ *testing.T, on bool) {
	h.mu.Lock()
	defer h.mu.Unlock()
	h.down = on
}

// AddForeign makes a pod without the operator's labels; (forged) with
// them but for another provider entry; or with this installation's whole
// mark for the pod itself, unsigned or signed with another key.
func (h *contractHarness) AddForeign(t *testing.T, kind providertest.Foreign, name string) (provider.ID, bool) {
	t.Helper()
	pod := &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Namespace: h.podNS, Name: name, Labels: map[string]string{"app": "theirs"}},
		Spec:       corev1.PodSpec{Containers: []corev1.Container{{Name: "c", Image: "theirs"}}},
	}
	switch kind {
	case providertest.Unmarked:
	case providertest.Forged:
		pod.Labels = map[string]string{
			kubernetes.LabelManagedBy: kubernetes.LabelManagedByValue, kubernetes.LabelProvider: "another-entry",
			kubernetes.LabelOwnerUID: "uid-someone",
		}
		pod.Annotations = map[string]string{kubernetes.AnnotationName: name, kubernetes.AnnotationOwner: "ns/p"}
	case providertest.Unsigned, providertest.BadSignature, providertest.Sibling:
		entry := h.entry.Name
		if kind == providertest.Sibling {
			entry = providertest.SiblingEntry
		}
		pod.Labels = map[string]string{
			kubernetes.LabelManagedBy: kubernetes.LabelManagedByValue, kubernetes.LabelProvider: entry,
			kubernetes.LabelInstallation: testOwnership.Installation(), kubernetes.LabelOwnerUID: "uid-" + string(kind),
		}
		pod.Annotations = map[string]string{kubernetes.AnnotationName: name, kubernetes.AnnotationOwner: "ns/p",
			kubernetes.AnnotationCreatedAt: time.Now().UTC().Format(time.RFC3339)}
		if kind == providertest.BadSignature {
			forger, err := ownership.NewIdentity(testOwnership.Installation(), []byte("a forger's key of thirty-two b.."))
			if err != nil {
				t.Fatal(err)
			}
			pod.Annotations[kubernetes.AnnotationSignature] = forger.Sign(kubernetes.MarkOf(pod))
		}
		if kind == providertest.Sibling {
			// The installation's own key, for the other entry: that
			// entry's pod, which the entry under test must not count.
			pod.Annotations[kubernetes.AnnotationSignature] = testOwnership.Sign(kubernetes.MarkOf(pod))
		}
	default:
		return "", false
	}
	if err := k8s.Create(context.Background(), pod); err != nil {
		t.Fatal(err)
	}
	return kubernetes.ID(h.podNS, name), true
}

// CopyMark makes a pod of another name (pod names are unique) with the
// labels and annotations of from, signature included.
func (h *contractHarness) CopyMark(t *testing.T, from provider.ID) provider.ID {
	t.Helper()
	ns, name, _ := strings.Cut(string(from), "/")
	var src corev1.Pod
	if err := k8s.Get(context.Background(), client.ObjectKey{Namespace: ns, Name: name}, &src); err != nil {
		t.Fatal(err)
	}
	pod := &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: name + "-copy", Labels: src.Labels, Annotations: src.Annotations},
		Spec:       corev1.PodSpec{Containers: []corev1.Container{{Name: "c", Image: "theirs"}}},
	}
	if err := k8s.Create(context.Background(), pod); err != nil {
		t.Fatal(err)
	}
	return kubernetes.ID(ns, pod.Name)
}

// OtherInstallation is a provider of the same entry for another
// installation.
func (h *contractHarness) OtherInstallation(t *testing.T) provider.Provider {
	return h.newProviderOf(t, -1, ownershiptest.Identity("other-installation"))
}

func (h *contractHarness) Snapshot(t *testing.T, id provider.ID) string {
	t.Helper()
	var pod corev1.Pod
	ns, name, _ := strings.Cut(string(id), "/")
	err := k8s.Get(context.Background(), client.ObjectKey{Namespace: ns, Name: name}, &pod)
	switch {
	case apierrors.IsNotFound(err):
		return ""
	case err != nil:
		t.Fatal(err)
	}
	return fmt.Sprintf("version %s deleting %v labels %v", pod.ResourceVersion, pod.DeletionTimestamp, pod.Labels)
}
