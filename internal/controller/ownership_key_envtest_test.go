package controller_test

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"github.com/prometheus/client_golang/prometheus/testutil"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	apimeta "k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	crawlv1alpha1 "github.com/egress-proxies/egress-proxies-operator/api/v1alpha1"
	"github.com/egress-proxies/egress-proxies-operator/internal/config"
	"github.com/egress-proxies/egress-proxies-operator/internal/controller"
	"github.com/egress-proxies/egress-proxies-operator/internal/ownership"
	"github.com/egress-proxies/egress-proxies-operator/internal/provider"
	"github.com/egress-proxies/egress-proxies-operator/internal/testing/fakeprovider"
)

// keyEntry is the provider entry of the key-loss tests: its own name, so
// that its cluster-scoped ProviderHealth (and the start-afresh annotation)
// meets no other test's.
const keyEntry = "keyloss"

func keyLossConfig(t *testing.T) *config.Config {
	t.Helper()
	cfg, err := config.Parse([]byte(`
providers:
  - name: `+keyEntry+`
    type: fake
    zones: [rack-a]
    machineTypes:
        small: {cores: 1, memoryMiB: 512, diskGiB: 8}
    images: [debian-12]
`), fakeprovider.Registry())
	if err != nil {
		t.Fatalf("test config: %v", err)
	}
	return cfg
}

// keySecrets runs the key Secret's life as the operator and an
// administrator do: the operator's KeyLoader reads or creates it, the
// administrator backs it up, loses it and restores it with plain API calls
// (docs/security.md, "Backing up and restoring the ownership key").
type keySecrets struct {
	t   *testing.T
	ref ownership.KeyRef
}

// load is one operator start: the leader's KeyLoader gives the identity
// its key, creating the Secret when it is missing.
func (k keySecrets) load() *ownership.Identity {
	k.t.Helper()
	id, err := ownership.NewPending("keyloss")
	if err != nil {
		k.t.Fatal(err)
	}
	l := &ownership.KeyLoader{Client: k8s, Ref: k.ref, Identity: id}
	if err := l.Start(context.Background()); err != nil {
		k.t.Fatalf("loading the key: %v", err)
	}
	return id
}

// backup is `kubectl get secret -o yaml` without the server's fields.
func (k keySecrets) backup() *corev1.Secret {
	k.t.Helper()
	var s corev1.Secret
	if err := k8s.Get(context.Background(), client.ObjectKey{Namespace: k.ref.Namespace, Name: k.ref.Name}, &s); err != nil {
		k.t.Fatal(err)
	}
	return &corev1.Secret{
		ObjectMeta: metav1.ObjectMeta{Namespace: s.Namespace, Name: s.Name, Labels: s.Labels, Annotations: s.Annotations},
		Immutable:  s.Immutable, Type: s.Type, Data: s.Data,
	}
}

// remove is `kubectl delete secret`: a loss, or the first step of a
// restore (the Secret is immutable).
func (k keySecrets) remove() {
	k.t.Helper()
	s := &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Namespace: k.ref.Namespace, Name: k.ref.Name}}
	if err := k8s.Delete(context.Background(), s); err != nil && !apierrors.IsNotFound(err) {
		k.t.Fatal(err)
	}
	eventually(k.t, 10*time.Second, func() (bool, string) {
		return apierrors.IsNotFound(k8s.Get(context.Background(), client.ObjectKeyFromObject(s), &corev1.Secret{})), "the key Secret is still there"
	})
}

// restore is `kubectl apply -f backup.yaml` after remove.
func (k keySecrets) restore(b *corev1.Secret) {
	k.t.Helper()
	k.remove()
	if err := k8s.Create(context.Background(), b.DeepCopy()); err != nil {
		k.t.Fatalf("restoring the key Secret: %v", err)
	}
}

// keyLossWorld is a fleet of two Ready Proxies made under the first key,
// its backup, and a second operator start after the Secret was lost.
type keyLossWorld struct {
	ns       string
	secrets  keySecrets
	world    *fakeprovider.Provider
	backup   *corev1.Secret
	fleet    map[string]string // Proxy name -> instance ID
	newKey   *ownership.Identity
	lost     *operator
	creates0 int
}

func startKeyLossWorld(t *testing.T) *keyLossWorld {
	t.Helper()
	ns := newNamespace(t)
	ctx := context.Background()
	w := &keyLossWorld{ns: ns, secrets: keySecrets{t: t, ref: ownership.KeyRef{Namespace: ns, Name: ownership.DefaultKeySecret}}, fleet: map[string]string{}}
	ph := &crawlv1alpha1.ProviderHealth{ObjectMeta: metav1.ObjectMeta{Name: keyEntry}}
	t.Cleanup(func() { _ = k8s.Delete(context.Background(), ph) })

	first := w.secrets.load()
	w.world = fakeprovider.New(nil).ForInstallation(first)
	w.backup = w.secrets.backup()
	op := startOperator(t, operatorOptions{namespace: ns, fake: w.world, ownership: first, cfg: keyLossConfig(t)})
	for _, name := range []string{"a", "b"} {
		p := newProxy(ns, name)
		p.Spec.Provider = keyEntry
		if err := k8s.Create(ctx, p); err != nil {
			t.Fatal(err)
		}
	}
	for _, name := range []string{"a", "b"} {
		w.fleet[name] = waitPhase(t, ns, name, crawlv1alpha1.ProxyPhaseReady, crawlv1alpha1.ReasonInstanceRunning).Status.InstanceID
	}
	op.stop()

	// The Secret is lost; the next leader mints a new key.
	w.secrets.remove()
	w.newKey = w.secrets.load()
	if w.newKey.KeyID() == first.KeyID() {
		t.Fatal("the new key is the old one")
	}
	w.creates0 = w.world.CallCount(provider.OpCreate)
	// Garbage collection passes often: its listings are what see a fresh
	// fleet verify after a start afresh.
	w.lost = startOperator(t, operatorOptions{namespace: ns, fake: w.world.ForInstallation(w.newKey), ownership: w.newKey, cfg: keyLossConfig(t),
		opts: controller.Options{HealthInterval: 100 * time.Millisecond, GCInterval: 200 * time.Millisecond}})
	c := waitOwnershipReason(t, crawlv1alpha1.ReasonOwnershipKeyMismatch)
	for _, id := range w.fleet {
		if !strings.Contains(c.Message, id) {
			t.Errorf("the mismatch message does not list the old instance %s: %s", id, c.Message)
		}
	}
	if !strings.Contains(c.Message, w.newKey.KeyID()) {
		t.Errorf("the mismatch message does not name the current key %s: %s", w.newKey.KeyID(), c.Message)
	}
	for name := range w.fleet {
		waitPhase(t, ns, name, crawlv1alpha1.ProxyPhaseReady, crawlv1alpha1.ReasonOwnershipKeyMismatch)
	}
	return w
}

// waitOwnershipReason waits for the key-loss entry's OwnershipKey
// condition to have reason and returns it.
func waitOwnershipReason(t *testing.T, reason string) *metav1.Condition {
	t.Helper()
	var c *metav1.Condition
	eventually(t, 20*time.Second, func() (bool, string) {
		var ph crawlv1alpha1.ProviderHealth
		if err := k8s.Get(context.Background(), client.ObjectKey{Name: keyEntry}, &ph); err != nil {
			return false, err.Error()
		}
		c = apimeta.FindStatusCondition(ph.Status.Conditions, crawlv1alpha1.ConditionOwnershipKey)
		if c == nil {
			return false, "no OwnershipKey condition"
		}
		return c.Reason == reason, fmt.Sprintf("OwnershipKey %s/%s: %s", c.Status, c.Reason, c.Message)
	})
	return c
}

// instanceIDs are the IDs of every instance on the fake, ours or not.
func instanceIDs(f *fakeprovider.Provider) []string {
	var out []string
	for _, in := range f.Instances() {
		out = append(out, string(in.ID))
	}
	return out
}

// TestLostKeyHoldsCreatesAndARestoredKeyRecognisesTheFleet: the key Secret
// is lost and a new key minted; the operator reports the old fleet loudly
// (condition, event, metric), creates nothing, replaces nothing. Restoring
// the Secret from its backup and restarting the operator recognises the
// fleet: the same instances, nothing re-created, the condition cleared.
func TestLostKeyHoldsCreatesAndARestoredKeyRecognisesTheFleet(t *testing.T) {
	w := startKeyLossWorld(t)
	ctx := context.Background()
	before := instanceIDs(w.world)

	// A new Proxy on the entry waits too, and says why.
	p := newProxy(w.ns, "c")
	p.Spec.Provider = keyEntry
	if err := k8s.Create(ctx, p); err != nil {
		t.Fatal(err)
	}
	waitPhase(t, w.ns, "c", crawlv1alpha1.ProxyPhasePending, crawlv1alpha1.ReasonOwnershipKeyMismatch)
	consistently(t, 2*time.Second, func() (bool, string) {
		n := w.world.CallCount(provider.OpCreate) - w.creates0
		return n == 0, fmt.Sprintf("%d creates on an entry whose fleet does not verify", n)
	})
	if diff := cmp.Diff(before, instanceIDs(w.world)); diff != "" {
		t.Errorf("instances changed while the key mismatched (-before +after):\n%s", diff)
	}
	if got := testutil.ToFloat64(w.lost.metrics.OwnershipUnverified.WithLabelValues(keyEntry)); got != 2 {
		t.Errorf("egress_proxies_ownership_unverified_instances = %v, want 2", got)
	}
	eventually(t, 10*time.Second, func() (bool, string) {
		var list eventsList
		if err := list.load("default"); err != nil {
			return false, err.Error()
		}
		for _, e := range list.Items {
			if e.Regarding.Kind == "ProviderHealth" && e.Regarding.Name == keyEntry && e.Reason == crawlv1alpha1.ReasonOwnershipKeyMismatch {
				return true, ""
			}
		}
		return false, "no OwnershipKeyMismatch event on the ProviderHealth"
	})

	// An annotation that names another key (left from an earlier loss, or
	// mistyped) waves nothing through.
	annotate(t, crawlv1alpha1.AnnotationStartAfresh, "aaaaaaaaaaaaaaaa")
	consistently(t, time.Second, func() (bool, string) {
		n := w.world.CallCount(provider.OpCreate) - w.creates0
		return n == 0, fmt.Sprintf("%d creates after a start-afresh annotation naming another key", n)
	})
	annotate(t, crawlv1alpha1.AnnotationStartAfresh, "")

	// The restore: stop the operator, put the backup back, start again.
	w.lost.stop()
	w.secrets.restore(w.backup)
	restored := w.secrets.load()
	startOperator(t, operatorOptions{namespace: w.ns, fake: w.world.ForInstallation(restored), ownership: restored, cfg: keyLossConfig(t),
		opts: controller.Options{HealthInterval: 100 * time.Millisecond}})
	for name, id := range w.fleet {
		got := waitPhase(t, w.ns, name, crawlv1alpha1.ProxyPhaseReady, crawlv1alpha1.ReasonInstanceRunning)
		if got.Status.InstanceID != id {
			t.Errorf("Proxy %s runs on %s after the restore, want its old instance %s", name, got.Status.InstanceID, id)
		}
	}
	waitPhase(t, w.ns, "c", crawlv1alpha1.ProxyPhaseReady, crawlv1alpha1.ReasonInstanceRunning)
	c := waitOwnershipReason(t, crawlv1alpha1.ReasonKeyVerified)
	if c.Status != metav1.ConditionTrue {
		t.Errorf("OwnershipKey after the restore = %s, want True", c.Status)
	}
	if n := w.world.CallCount(provider.OpCreate) - w.creates0; n != 1 {
		t.Errorf("%d creates after the restore, want 1 (the new Proxy c only)", n)
	}
	if got := len(w.world.Instances()); got != 3 {
		t.Errorf("%d instances after the restore, want 3 (a, b as before, and c): %v", got, instanceIDs(w.world))
	}
}

// TestStartAfreshAfterALostKey: the administrator gives up the old key by
// annotating the ProviderHealth with the current key's ID; the entry
// creates again, the old instances are never touched, and the condition
// keeps listing them for removal.
func TestStartAfreshAfterALostKey(t *testing.T) {
	w := startKeyLossWorld(t)
	annotate(t, crawlv1alpha1.AnnotationStartAfresh, w.newKey.KeyID())
	for name, old := range w.fleet {
		eventually(t, 20*time.Second, func() (bool, string) {
			p := getProxy(t, w.ns, name)
			c := apimeta.FindStatusCondition(p.Status.Conditions, crawlv1alpha1.ConditionReady)
			ok := c != nil && c.Reason == crawlv1alpha1.ReasonInstanceRunning && p.Status.InstanceID != old && p.Status.InstanceID != ""
			return ok, fmt.Sprintf("Proxy %s: instance %q (old %s), Ready %+v", name, p.Status.InstanceID, old, c)
		})
	}
	c := waitOwnershipReason(t, crawlv1alpha1.ReasonKeyVerified)
	for name, old := range w.fleet {
		if !strings.Contains(c.Message, old) {
			t.Errorf("the condition no longer lists Proxy %s's old instance %s: %s", name, old, c.Message)
		}
	}
	ids := instanceIDs(w.world)
	for name, old := range w.fleet {
		installation, sig, ok := w.world.MarkOf(provider.ID(old))
		if !ok || installation != "keyloss" || sig == "" {
			t.Errorf("Proxy %s's old instance %s was touched or removed: %v (%q, %q); instances %v", name, old, ok, installation, sig, ids)
		}
	}
	if len(ids) != 4 {
		t.Errorf("instances %v, want the 2 old ones and 2 new ones", ids)
	}
}

// annotate sets (or with "" removes) an annotation on the key-loss
// entry's ProviderHealth, as `kubectl annotate` does.
func annotate(t *testing.T, key, value string) {
	t.Helper()
	ctx := context.Background()
	var ph crawlv1alpha1.ProviderHealth
	if err := k8s.Get(ctx, client.ObjectKey{Name: keyEntry}, &ph); err != nil {
		t.Fatal(err)
	}
	patch := client.MergeFrom(ph.DeepCopy())
	if value == "" {
		delete(ph.Annotations, key)
	} else {
		if ph.Annotations == nil {
			ph.Annotations = map[string]string{}
		}
		ph.Annotations[key] = value
	}
	if err := k8s.Patch(ctx, &ph, patch); err != nil {
		t.Fatal(err)
	}
}
