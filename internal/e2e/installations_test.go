package e2e_test

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/rest"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/yaml"

	crawlv1alpha1 "github.com/egress-proxies/egress-proxies-operator/api/v1alpha1"
	"github.com/egress-proxies/egress-proxies-operator/internal/controller"
	"github.com/egress-proxies/egress-proxies-operator/internal/ownership"
	"github.com/egress-proxies/egress-proxies-operator/internal/provider"
	"github.com/egress-proxies/egress-proxies-operator/internal/testing/poll"
	"github.com/egress-proxies/egress-proxies-operator/internal/testing/pvelab"
	"github.com/egress-proxies/egress-proxies-operator/internal/testing/testenv"
)

// installation is one operator in a cluster of its own: its control plane,
// its namespace and its identity, loaded from its key Secret as the binary
// does.
type installation struct {
	name string
	env  *testenv.Env
	ns   string
	id   *ownership.Identity
}

func newInstallation(t *testing.T, name string, env *testenv.Env) *installation {
	t.Helper()
	ctx := context.Background()
	ns := &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{GenerateName: name + "-"}}
	if err := env.Client.Create(ctx, ns); err != nil {
		t.Fatal(err)
	}
	// As the operator's ServiceAccount with only the shipped Role for its
	// key Secret: the first start creates the key, the next reads it.
	c := asKeyOwner(t, env, ns.Name)
	ref := ownership.KeyRef{Namespace: ns.Name, Name: ownership.DefaultKeySecret}
	id, err := ownership.LoadOrCreate(ctx, c, ref, name)
	if err != nil {
		t.Fatalf("the first start, with the ownership key Role only: %v", err)
	}
	again, err := ownership.LoadOrCreate(ctx, c, ref, name)
	if err != nil {
		t.Fatalf("a restart, with the ownership key Role only: %v", err)
	}
	if m := (ownership.Mark{Installation: name, Name: "n"}); !again.Owns(m, id.Sign(m)) {
		t.Fatal("a restarted operator has another key")
	}
	return &installation{name: name, env: env, ns: ns.Name, id: id}
}

// asKeyOwner applies config/rbac/ownership_key_role.yaml in ns, bound to
// the operator's user, and returns a client that impersonates that user:
// it has the rights on the key Secret an install gives, and no others.
func asKeyOwner(t *testing.T, env *testenv.Env, ns string) client.Client {
	t.Helper()
	ctx := context.Background()
	data, err := os.ReadFile(filepath.Join("..", "..", "config", "rbac", "ownership_key_role.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	var role rbacv1.Role
	if err := yaml.UnmarshalStrict(data, &role); err != nil {
		t.Fatal(err)
	}
	role.Namespace = ns
	binding := &rbacv1.RoleBinding{
		ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: role.Name},
		Subjects:   []rbacv1.Subject{{Kind: rbacv1.UserKind, APIGroup: rbacv1.GroupName, Name: testenv.OperatorUser}},
		RoleRef:    rbacv1.RoleRef{APIGroup: rbacv1.GroupName, Kind: "Role", Name: role.Name},
	}
	for _, o := range []client.Object{&role, binding} {
		if err := env.Client.Create(ctx, o); err != nil {
			t.Fatal(err)
		}
	}
	cfg := rest.CopyConfig(env.Config)
	cfg.Impersonate = rest.ImpersonationConfig{UserName: testenv.OperatorUser, Groups: []string{"system:serviceaccounts", "system:authenticated"}}
	c, err := client.New(cfg, client.Options{Scheme: env.Scheme})
	if err != nil {
		t.Fatal(err)
	}
	var list corev1.SecretList
	if err := c.List(ctx, &list, client.InNamespace(ns)); err == nil {
		t.Fatal("the ownership key Role lets the operator list Secrets")
	}
	return c
}

// TestTwoInstallationsOnOneClusterNeverCollectEachOther is #12 item 2:
// staging and production, each in its own Kubernetes cluster (so neither
// sees the other's Proxies), share one Proxmox VE cluster and one entry.
// Each collects garbage every 100 ms with a grace period of one second.
// Each installation's orphan is collected by its own operator, which shows
// that both collectors ran past the grace period; every Proxy of both keeps
// its VM throughout. Before marks named their installation, each collector
// took the other's VMs for orphans (their Proxies are in another cluster)
// and deleted them, and the Proxies were replaced.
func TestTwoInstallationsOnOneClusterNeverCollectEachOther(t *testing.T) {
	testenv.Need(t, env)
	other, err := testenv.Start()
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = other.Environment.Stop() })
	w := newWorld(t)
	installs := []*installation{newInstallation(t, "production", env), newInstallation(t, "staging", other)}
	if installs[0].id.Owns(ownership.Mark{Installation: "production"}, installs[1].id.Sign(ownership.Mark{Installation: "production"})) {
		t.Fatal("the two installations share a key")
	}
	for _, in := range installs {
		stop, err := w.StartOperator(context.Background(), pvelab.OperatorOptions{
			RestConfig: in.env.Config, Scheme: in.env.Scheme, Namespace: in.ns, Ownership: in.id,
			Controller: controller.Options{
				PollInterval: 50 * time.Millisecond, ResyncInterval: 200 * time.Millisecond,
				HealthInterval: 200 * time.Millisecond, GCInterval: 100 * time.Millisecond, GCGracePeriod: time.Second,
			},
		})
		if err != nil {
			t.Fatal(err)
		}
		var once sync.Once
		t.Cleanup(func() { once.Do(func() { _ = stop() }) })
	}

	// Two Proxies per installation, disjoint.
	ctx := context.Background()
	type proxyRef struct {
		in  *installation
		key client.ObjectKey
	}
	var proxies []proxyRef
	for _, in := range installs {
		for i := 1; i <= 2; i++ {
			p := &crawlv1alpha1.Proxy{ObjectMeta: metav1.ObjectMeta{Namespace: in.ns, Name: fmt.Sprintf("%s-%d", in.name, i)},
				Spec: crawlv1alpha1.ProxySpec{Provider: pvelab.EntryName, MachineType: pvelab.MachineType, Image: pvelab.Image}}
			if err := in.env.Client.Create(ctx, p); err != nil {
				t.Fatal(err)
			}
			proxies = append(proxies, proxyRef{in, client.ObjectKeyFromObject(p)})
		}
	}
	ready := map[client.ObjectKey]string{} // instance ID by Proxy
	for _, pr := range proxies {
		poll.Until(t, 60*time.Second, func() (bool, string) {
			var p crawlv1alpha1.Proxy
			if err := pr.in.env.Client.Get(ctx, pr.key, &p); err != nil {
				return false, err.Error()
			}
			ready[pr.key] = p.Status.InstanceID
			return p.Status.Phase == crawlv1alpha1.ProxyPhaseReady, fmt.Sprintf("%s: phase %s", pr.key, p.Status.Phase)
		})
	}

	// One orphan per installation: a VM of its own whose Proxy does not
	// exist, made by a provider of that installation.
	for _, in := range installs {
		p, err := w.NewProviderOf(in.id)
		if err != nil {
			t.Fatal(err)
		}
		req := provider.Request{OwnerUID: "gone-" + in.name, Owner: provider.ObjectRef{Namespace: in.ns, Name: "gone"},
			Name: "orphan-" + in.name, Zone: w.Zones[0], MachineType: pvelab.MachineType, Image: pvelab.Image,
			UserData: provider.NewSensitive([]byte("#cloud-config\n"))}
		poll.Until(t, 60*time.Second, func() (bool, string) {
			_, err := p.Create(ctx, req)
			if err != nil && !provider.IsInProgress(err) && !provider.IsTransient(err) {
				t.Fatalf("creating the orphan of %s: %v", in.name, err)
			}
			// On a loaded machine the making of the orphan can outlast
			// the grace period, and its own collector destroys it
			// midway: an orphan existed and was collected, which is
			// all this step needs (another Create would only make
			// another orphan that may meet the same fate).
			midway := provider.IsTransient(err) && strings.Contains(err.Error(), "destroyed while it was being made")
			return err == nil || midway, fmt.Sprint(err)
		})
	}
	names := func() []string {
		var out []string
		for _, vm := range w.Clones() {
			out = append(out, vm.Name)
		}
		return out
	}
	poll.Until(t, 60*time.Second, func() (bool, string) {
		left := names()
		return !slices.Contains(left, "orphan-production") && !slices.Contains(left, "orphan-staging"),
			fmt.Sprintf("VMs %v: each collector must remove its own orphan", left)
	})

	// Both collectors have now run past the grace period of every VM.
	for _, pr := range proxies {
		var p crawlv1alpha1.Proxy
		if err := pr.in.env.Client.Get(ctx, pr.key, &p); err != nil {
			t.Fatal(err)
		}
		if p.Status.InstanceID != ready[pr.key] || p.Status.Phase != crawlv1alpha1.ProxyPhaseReady {
			t.Errorf("%s (%s): phase %s, instance %s; want Ready on its first instance %s",
				pr.key, pr.in.name, p.Status.Phase, p.Status.InstanceID, ready[pr.key])
		}
		if !slices.Contains(names(), p.Status.InstanceName) {
			t.Errorf("the VM %s of %s (%s) is gone", p.Status.InstanceName, pr.key, pr.in.name)
		}
	}
	if got := len(w.Clones()); got != len(proxies) {
		t.Errorf("VMs = %v, want one per Proxy (%d)", names(), len(proxies))
	}
}
