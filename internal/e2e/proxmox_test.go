package e2e_test

import (
	"context"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"net/url"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/cache"
	"sigs.k8s.io/controller-runtime/pkg/client"
	metricsserver "sigs.k8s.io/controller-runtime/pkg/metrics/server"

	crawlv1alpha1 "github.com/egress-proxies/egress-proxies-operator/api/v1alpha1"
	"github.com/egress-proxies/egress-proxies-operator/internal/config"
	"github.com/egress-proxies/egress-proxies-operator/internal/controller"
	"github.com/egress-proxies/egress-proxies-operator/internal/metrics"
	"github.com/egress-proxies/egress-proxies-operator/internal/provider"
	"github.com/egress-proxies/egress-proxies-operator/internal/provider/instrumented"
	"github.com/egress-proxies/egress-proxies-operator/internal/provider/proxmox"
	"github.com/egress-proxies/egress-proxies-operator/internal/pvesim"
	"github.com/egress-proxies/egress-proxies-operator/internal/pvesim/guests"
	"github.com/egress-proxies/egress-proxies-operator/internal/testing/testenv"
)

var env *testenv.Env

func TestMain(m *testing.M) {
	os.Exit(testenv.Main(m, func(e *testenv.Env) { env = e }))
}

// simCluster is a two-node simulated Proxmox VE cluster with one template
// per node, at 200 times real-host pace.
const simCluster = `
speed: 200
nodes: [{name: pve1}, {name: pve2}]
storages:
  - {id: local-lvm, type: lvmthin, content: [images]}
  - {id: seeds, type: dir, content: [iso]}
templates:
  - vmid: 9000
    node: pve1
    name: debian-13
    disks: [{slot: scsi0, storage: local-lvm, size: 3G}]
    boot: order=scsi0
    net0: virtio=BC:24:11:00:90:00,bridge=vmbr0
    agent: "1"
tokens:
  - id: "op@pve!e2e"
    secret: "fake-e2e-secret"
    acl:
      - path: /
        privileges: [VM.Allocate, VM.Clone, VM.Config.Disk, VM.Config.CPU, VM.Config.Memory, VM.Config.Network,
          VM.Config.Options, VM.Config.CDROM, VM.PowerMgmt, VM.Monitor, VM.GuestAgent.Audit, VM.Audit,
          Datastore.AllocateSpace, Datastore.AllocateTemplate, Datastore.Audit, SDN.Use, Sys.Audit]
      - path: /storage/seeds
        privileges: [Datastore.Allocate, Datastore.AllocateTemplate, Datastore.AllocateSpace, Datastore.Audit]
`

// world is a simulator, its guests, and the providers configuration that
// points the operator at it.
type world struct {
	sim *pvesim.Sim
	cfg *config.Config
}

func newWorld(t *testing.T) *world {
	t.Helper()
	simCfg, err := pvesim.ParseConfig([]byte(simCluster))
	if err != nil {
		t.Fatal(err)
	}
	runner := &guests.Runner{}
	t.Cleanup(runner.Close)
	sim, err := pvesim.New(simCfg, pvesim.WithGuestRunner(runner))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = sim.Close() })
	ctx, cancel := context.WithCancel(context.Background())
	t.Cleanup(cancel)
	base, err := sim.Serve(ctx, pvesim.ServeOptions{Addr: "127.0.0.1:0", TLS: true})
	if err != nil {
		t.Fatal(err)
	}
	dir := t.TempDir()
	token, ca := filepath.Join(dir, "token"), filepath.Join(dir, "ca.pem")
	if err := os.WriteFile(token, []byte("op@pve!e2e=fake-e2e-secret\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(ca, sim.CACertPEM(), 0o600); err != nil {
		t.Fatal(err)
	}
	cfg, err := config.Parse([]byte(fmt.Sprintf(`
providers:
  - name: lab
    type: proxmox
    zones: [rack-a]
    machineTypes: [{name: small, cpus: 1, memoryMiB: 512}]
    images: [debian-13]
    proxmox:
      apiURL: %s
      tokenFile: %s
      caFile: %s
      zones: {rack-a: {nodes: [pve1, pve2]}}
      images: {debian-13: {templateVMID: 9000}}
      isoStorage: seeds
      acceptLoopbackAddresses: true
      budgets: {pollInterval: 20ms}
`, base, token, ca)), config.Registry{config.ProxmoxType: func() config.Block { return &config.ProxmoxBlock{} }})
	if err != nil {
		t.Fatal(err)
	}
	return &world{sim: sim, cfg: cfg}
}

// clones returns the VMs that are not templates.
func (w *world) clones() []pvesim.VMInfo {
	var out []pvesim.VMInfo
	for _, vm := range w.sim.VMs() {
		if !vm.Template {
			out = append(out, vm)
		}
	}
	return out
}

// seedLeft reports whether a seed ISO of the named instance is still on
// any node's seed storage.
func (w *world) seedLeft(instanceName string) bool {
	for _, node := range []string{"pve1", "pve2"} {
		if _, ok := w.sim.VolumePath(node, "seeds:iso/"+instanceName+"-seed.iso"); ok {
			return true
		}
	}
	return false
}

// startOperator runs the controllers with the proxmox provider, as the
// binary wires them, confined to namespace ns; stop ends it and waits.
func (w *world) startOperator(t *testing.T, ns string) (stop func()) {
	t.Helper()
	cacheOpts := controller.CacheOptions()
	cacheOpts.DefaultNamespaces = map[string]cache.Config{ns: {}}
	mgr, err := ctrl.NewManager(env.Config, ctrl.Options{
		Scheme: env.Scheme, Metrics: metricsserver.Options{BindAddress: "0"}, HealthProbeBindAddress: "0", Cache: cacheOpts,
	})
	if err != nil {
		t.Fatal(err)
	}
	m, err := metrics.New(prometheus.NewRegistry())
	if err != nil {
		t.Fatal(err)
	}
	e := &w.cfg.Providers[0]
	p, err := proxmox.New(proxmox.Options{Entry: e})
	if err != nil {
		t.Fatal(err)
	}
	if err := controller.SetupWithManager(mgr, controller.Options{
		Config: w.cfg, Metrics: m, SkipNameValidation: true,
		Providers:    map[string]provider.Provider{e.Name: instrumented.Wrap(p, instrumented.Options{Name: e.Name, Type: e.Type, Metrics: m})},
		PollInterval: 50 * time.Millisecond, ResyncInterval: 200 * time.Millisecond,
		HealthInterval: 200 * time.Millisecond, GCInterval: time.Hour,
	}); err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() {
		defer close(done)
		_ = mgr.Start(ctx)
	}()
	var once bool
	stop = func() {
		if !once {
			once = true
			cancel()
			<-done
		}
	}
	t.Cleanup(stop)
	return stop
}

func newNamespace(t *testing.T) string {
	t.Helper()
	testenv.Need(t, env)
	ns := &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{GenerateName: "e2e-"}}
	if err := env.Client.Create(context.Background(), ns); err != nil {
		t.Fatal(err)
	}
	return ns.Name
}

func getProxy(t *testing.T, key client.ObjectKey) *crawlv1alpha1.Proxy {
	t.Helper()
	var p crawlv1alpha1.Proxy
	if err := env.Client.Get(context.Background(), key, &p); err != nil {
		t.Fatal(err)
	}
	return &p
}

// get sends a GET to target through the proxy URL (with or without
// credentials) and returns the status code, or 0 on a transport error.
func get(t *testing.T, proxyURL *url.URL, target string) int {
	t.Helper()
	tr := &http.Transport{Proxy: http.ProxyURL(proxyURL)}
	defer tr.CloseIdleConnections()
	req, err := http.NewRequestWithContext(context.Background(), http.MethodGet, target, nil)
	if err != nil {
		t.Fatal(err)
	}
	resp, err := (&http.Client{Transport: tr, Timeout: 10 * time.Second}).Do(req)
	if err != nil {
		return 0
	}
	defer func() { _ = resp.Body.Close() }()
	_, _ = io.Copy(io.Discard, resp.Body)
	return resp.StatusCode
}

// TestProxyOnProxmoxServesRequests is the first "done when": a Proxy
// on a proxmox entry pointing at the simulator goes Ready with an address,
// a request through its URL with its credentials reaches a loopback HTTP
// server, and without credentials it is refused; deleting it leaves no VM.
func TestProxyOnProxmoxServesRequests(t *testing.T) {
	ns := newNamespace(t)
	w := newWorld(t)
	w.startOperator(t, ns)
	ctx := context.Background()
	origin := httptest.NewServer(http.HandlerFunc(func(rw http.ResponseWriter, _ *http.Request) {
		_, _ = fmt.Fprint(rw, "origin")
	}))
	defer origin.Close()

	key := client.ObjectKey{Namespace: ns, Name: "egress-1"}
	proxy := &crawlv1alpha1.Proxy{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: key.Name},
		Spec: crawlv1alpha1.ProxySpec{Provider: "lab", MachineType: "small", Image: "debian-13"}}
	if err := env.Client.Create(ctx, proxy); err != nil {
		t.Fatal(err)
	}
	var p *crawlv1alpha1.Proxy
	testenv.Eventually(t, 60*time.Second, func() (bool, string) {
		p = getProxy(t, key)
		return p.Status.Phase == crawlv1alpha1.ProxyPhaseReady, fmt.Sprintf("phase %s %v", p.Status.Phase, p.Status.Conditions)
	})
	var secret corev1.Secret
	if err := env.Client.Get(ctx, client.ObjectKey{Namespace: ns, Name: p.Status.CredentialsSecretName}, &secret); err != nil {
		t.Fatal(err)
	}
	testenv.Eventually(t, 10*time.Second, func() (bool, string) {
		_ = env.Client.Get(ctx, client.ObjectKeyFromObject(&secret), &secret)
		return len(secret.Data["url"]) > 0, "the secret has no url yet"
	})
	withCreds, err := url.Parse(string(secret.Data["url"]))
	if err != nil {
		t.Fatal(err)
	}
	if code := get(t, withCreds, origin.URL); code != http.StatusOK {
		t.Errorf("through %s with the Secret's credentials: status %d, want 200", p.Status.URL, code)
	}
	without, _ := url.Parse(p.Status.URL)
	if code := get(t, without, origin.URL); code != http.StatusProxyAuthRequired {
		t.Errorf("through %s without credentials: status %d, want 407", p.Status.URL, code)
	}
	if n := len(w.clones()); n != 1 {
		t.Errorf("VMs = %d, want 1", n)
	}

	if err := env.Client.Delete(ctx, p); err != nil {
		t.Fatal(err)
	}
	testenv.Eventually(t, 60*time.Second, func() (bool, string) {
		err := env.Client.Get(ctx, key, &crawlv1alpha1.Proxy{})
		return apierrors.IsNotFound(err), "proxy still exists"
	})
	if vms := w.clones(); len(vms) != 0 {
		t.Errorf("VMs left after delete: %+v", vms)
	}
	if w.seedLeft(p.Status.InstanceName) {
		t.Errorf("the seed of %s was left behind", p.Status.InstanceName)
	}
}

// TestUnreachableNodeShowsInHealthAndKeepsItsProxy: a node that stops
// answering shows as Unreachable within one check interval, and its proxy is
// neither replaced nor duplicated meanwhile.
func TestUnreachableNodeShowsInHealthAndKeepsItsProxy(t *testing.T) {
	ns := newNamespace(t)
	w := newWorld(t)
	w.startOperator(t, ns)
	ctx := context.Background()
	key := client.ObjectKey{Namespace: ns, Name: "egress-1"}
	proxy := &crawlv1alpha1.Proxy{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: key.Name},
		Spec: crawlv1alpha1.ProxySpec{Provider: "lab", MachineType: "small", Image: "debian-13"}}
	if err := env.Client.Create(ctx, proxy); err != nil {
		t.Fatal(err)
	}
	var ready *crawlv1alpha1.Proxy
	testenv.Eventually(t, 60*time.Second, func() (bool, string) {
		ready = getProxy(t, key)
		return ready.Status.Phase == crawlv1alpha1.ProxyPhaseReady, "phase " + string(ready.Status.Phase)
	})
	node := ready.Status.Node
	w.sim.SetNodeUnreachable(node, true, 595, "")
	testenv.Eventually(t, 5*time.Second, func() (bool, string) {
		var ph crawlv1alpha1.ProviderHealth
		if err := env.Client.Get(ctx, client.ObjectKey{Name: "lab"}, &ph); err != nil {
			return false, err.Error()
		}
		for _, tg := range ph.Status.Targets {
			if tg.Name == node {
				return !tg.Healthy && tg.Reason == "Unreachable", fmt.Sprintf("%s: %s", tg.Name, tg.Reason)
			}
		}
		return false, fmt.Sprintf("no target %s in %+v", node, ph.Status.Targets)
	})
	testenv.Consistently(t, 2*time.Second, func() (bool, string) {
		p := getProxy(t, key)
		n := len(w.clones())
		return p.Status.InstanceID == ready.Status.InstanceID && p.DeletionTimestamp == nil && n == 1,
			fmt.Sprintf("instance %s (was %s), %d VMs, phase %s", p.Status.InstanceID, ready.Status.InstanceID, n, p.Status.Phase)
	})
	w.sim.SetNodeUnreachable(node, false, 0, "")
	testenv.Eventually(t, 10*time.Second, func() (bool, string) {
		p := getProxy(t, key)
		return p.Status.Phase == crawlv1alpha1.ProxyPhaseReady && p.Status.InstanceID == ready.Status.InstanceID, "phase " + string(p.Status.Phase)
	})
}

// TestOperatorRestartsDuringCreateAndDelete kills the operator at every
// step it can reach during create and delete and restarts it: the result is
// one VM while the Proxy lives and none after.
func TestOperatorRestartsDuringCreateAndDelete(t *testing.T) {
	ns := newNamespace(t)
	w := newWorld(t)
	ctx := context.Background()
	key := client.ObjectKey{Namespace: ns, Name: "egress-1"}
	proxy := &crawlv1alpha1.Proxy{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: key.Name},
		Spec: crawlv1alpha1.ProxySpec{Provider: "lab", MachineType: "small", Image: "debian-13"}}
	if err := env.Client.Create(ctx, proxy); err != nil {
		t.Fatal(err)
	}
	// Each round lets the operator run a short while, then kills it; the
	// create advances one or a few steps per round.
	restarts := 0
	for round := 0; ; round++ {
		stop := w.startOperator(t, ns)
		tick := time.NewTimer(time.Duration(20+round*15) * time.Millisecond)
		<-tick.C
		stop()
		restarts++
		if n := len(w.clones()); n > 1 {
			t.Fatalf("round %d: %d VMs for one Proxy", round, n)
		}
		if getProxy(t, key).Status.Phase == crawlv1alpha1.ProxyPhaseReady || round > 60 {
			break
		}
	}
	w.startOperator(t, ns)
	testenv.Eventually(t, 60*time.Second, func() (bool, string) {
		p := getProxy(t, key)
		return p.Status.Phase == crawlv1alpha1.ProxyPhaseReady, "phase " + string(p.Status.Phase)
	})
	if n := len(w.clones()); n != 1 {
		t.Fatalf("after %d restarts during create: %d VMs, want 1", restarts, n)
	}
	t.Logf("create survived %d operator restarts", restarts)

	// The same during delete: stop, seed delete and destroy are each
	// interrupted somewhere.
	instanceName := getProxy(t, key).Status.InstanceName
	if !w.seedLeft(instanceName) {
		t.Fatalf("no seed found for %s: the leak check below would pass vacuously", instanceName)
	}
	if err := env.Client.Delete(ctx, getProxy(t, key)); err != nil {
		t.Fatal(err)
	}
	gone := func() bool { return apierrors.IsNotFound(env.Client.Get(ctx, key, &crawlv1alpha1.Proxy{})) }
	restarts = 0
	for round := 0; !gone() && round <= 60; round++ {
		stop := w.startOperator(t, ns)
		tick := time.NewTimer(time.Duration(20+round*15) * time.Millisecond)
		<-tick.C
		stop()
		restarts++
	}
	w.startOperator(t, ns)
	testenv.Eventually(t, 60*time.Second, func() (bool, string) { return gone(), "proxy still exists" })
	if vms := w.clones(); len(vms) != 0 {
		t.Errorf("after %d restarts during delete, VMs left: %+v", restarts, vms)
	}
	if w.seedLeft(instanceName) {
		t.Errorf("after %d restarts during delete, the seed of %s was left behind", restarts, instanceName)
	}
	t.Logf("delete survived %d operator restarts", restarts)
}
