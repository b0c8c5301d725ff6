package e2e_test

import (
	"context"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"net/url"
	"os"
	"strings"
	"sync"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	crawlv1alpha1 "github.com/egress-proxies/egress-proxies-operator/api/v1alpha1"
	"github.com/egress-proxies/egress-proxies-operator/internal/config"
	"github.com/egress-proxies/egress-proxies-operator/internal/controller"
	"github.com/egress-proxies/egress-proxies-operator/internal/testing/poll"
	"github.com/egress-proxies/egress-proxies-operator/internal/testing/pvelab"
	"github.com/egress-proxies/egress-proxies-operator/internal/testing/pvesim"
	"github.com/egress-proxies/egress-proxies-operator/internal/testing/testenv"
)

var env *testenv.Env

func TestMain(m *testing.M) {
	os.Exit(testenv.Main(m, func(e *testenv.Env) { env = e }))
}

// world is a two-node simulated Proxmox VE cluster at 200 times real-host
// pace, whose VMs serve, with one zone over both nodes.
type world struct {
	*pvelab.Lab
	cfg *config.Config
}

func newWorld(t *testing.T) *world {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	t.Cleanup(cancel)
	lab, err := pvelab.Start(ctx, pvelab.Options{Nodes: 2, Speed: 200, Guests: true,
		Zones: map[string][]string{"rack-a": {"pve1", "pve2"}}, PollInterval: 20 * time.Millisecond, Dir: t.TempDir()})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(lab.Close)
	return &world{Lab: lab, cfg: lab.Config}
}

// startOperator runs the operator, as the binary wires it, confined to
// namespace ns, with a fresh provider as a restarted binary would have; stop
// ends it and waits, and runs at cleanup if the test did not call it.
func (w *world) startOperator(t *testing.T, ns string) (stop func()) {
	t.Helper()
	stopErr, err := w.StartOperator(context.Background(), pvelab.OperatorOptions{
		RestConfig: env.Config, ServiceAccount: env, Scheme: env.Scheme, Namespace: ns,
		Controller: controller.Options{
			PollInterval: 50 * time.Millisecond, ResyncInterval: 200 * time.Millisecond,
			HealthInterval: 200 * time.Millisecond, GCInterval: time.Hour,
		},
	})
	if err != nil {
		t.Fatal(err)
	}
	var once sync.Once
	stop = func() { once.Do(func() { _ = stopErr() }) }
	t.Cleanup(stop)
	return stop
}

// calls counts the API requests the simulator has answered.
func (w *world) calls() int64 {
	var n int64
	for _, count := range w.Sim.Counters() {
		n += count
	}
	return n
}

// runUntilCalls runs the operator until n more API requests reached the
// simulator (or done holds), then kills it: an interruption at an observable
// point of the operator's work rather than after a guessed time.
func (w *world) runUntilCalls(t *testing.T, ns string, n int, done func() bool) {
	t.Helper()
	stop := w.startOperator(t, ns)
	defer stop()
	before := w.calls()
	poll.Until(t, 60*time.Second, func() (bool, string) {
		got := w.calls() - before
		return got >= int64(n) || done(), fmt.Sprintf("%d of %d API calls", got, n)
	})
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
		Spec: crawlv1alpha1.ProxySpec{Provider: pvelab.EntryName, MachineType: pvelab.MachineType, Image: pvelab.Image}}
	if err := env.Client.Create(ctx, proxy); err != nil {
		t.Fatal(err)
	}
	var p *crawlv1alpha1.Proxy
	poll.Until(t, 60*time.Second, func() (bool, string) {
		p = getProxy(t, key)
		return p.Status.Phase == crawlv1alpha1.ProxyPhaseReady, fmt.Sprintf("phase %s %v", p.Status.Phase, p.Status.Conditions)
	})
	var secret corev1.Secret
	if err := env.Client.Get(ctx, client.ObjectKey{Namespace: ns, Name: p.Status.CredentialsSecretName}, &secret); err != nil {
		t.Fatal(err)
	}
	poll.Until(t, 10*time.Second, func() (bool, string) {
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
	if n := len(w.Clones()); n != 1 {
		t.Errorf("VMs = %d, want 1", n)
	}

	if err := env.Client.Delete(ctx, p); err != nil {
		t.Fatal(err)
	}
	poll.Until(t, 60*time.Second, func() (bool, string) {
		err := env.Client.Get(ctx, key, &crawlv1alpha1.Proxy{})
		return apierrors.IsNotFound(err), "proxy still exists"
	})
	if vms := w.Clones(); len(vms) != 0 {
		t.Errorf("VMs left after delete: %+v", vms)
	}
	if w.SeedLeft(p.Status.InstanceName) {
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
		Spec: crawlv1alpha1.ProxySpec{Provider: pvelab.EntryName, MachineType: pvelab.MachineType, Image: pvelab.Image}}
	if err := env.Client.Create(ctx, proxy); err != nil {
		t.Fatal(err)
	}
	var ready *crawlv1alpha1.Proxy
	poll.Until(t, 60*time.Second, func() (bool, string) {
		ready = getProxy(t, key)
		return ready.Status.Phase == crawlv1alpha1.ProxyPhaseReady, "phase " + string(ready.Status.Phase)
	})
	node := ready.Status.Node
	w.Sim.SetNodeUnreachable(node, true, 595, "")
	poll.Until(t, 5*time.Second, func() (bool, string) {
		var ph crawlv1alpha1.ProviderHealth
		if err := env.Client.Get(ctx, client.ObjectKey{Name: pvelab.EntryName}, &ph); err != nil {
			return false, err.Error()
		}
		for _, tg := range ph.Status.Targets {
			if tg.Name == node {
				return !tg.Healthy && tg.Reason == "Unreachable", fmt.Sprintf("%s: %s", tg.Name, tg.Reason)
			}
		}
		return false, fmt.Sprintf("no target %s in %+v", node, ph.Status.Targets)
	})
	poll.Always(t, 2*time.Second, func() (bool, string) {
		p := getProxy(t, key)
		n := len(w.Clones())
		return p.Status.InstanceID == ready.Status.InstanceID && p.DeletionTimestamp == nil && n == 1,
			fmt.Sprintf("instance %s (was %s), %d VMs, phase %s", p.Status.InstanceID, ready.Status.InstanceID, n, p.Status.Phase)
	})
	w.Sim.SetNodeUnreachable(node, false, 0, "")
	poll.Until(t, 10*time.Second, func() (bool, string) {
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
		Spec: crawlv1alpha1.ProxySpec{Provider: pvelab.EntryName, MachineType: pvelab.MachineType, Image: pvelab.Image}}
	if err := env.Client.Create(ctx, proxy); err != nil {
		t.Fatal(err)
	}
	// Each round lets the operator run until one to three more API calls
	// reached the simulator, then kills it: the create is interrupted between
	// any two of its calls.
	ready := func() bool { return getProxy(t, key).Status.Phase == crawlv1alpha1.ProxyPhaseReady }
	restarts := 0
	for round := 0; ; round++ {
		w.runUntilCalls(t, ns, 1+round%3, ready)
		restarts++
		if n := len(w.Clones()); n > 1 {
			t.Fatalf("round %d: %d VMs for one Proxy", round, n)
		}
		if ready() || round > 60 {
			break
		}
	}
	w.startOperator(t, ns)
	poll.Until(t, 60*time.Second, func() (bool, string) {
		p := getProxy(t, key)
		return p.Status.Phase == crawlv1alpha1.ProxyPhaseReady, "phase " + string(p.Status.Phase)
	})
	if n := len(w.Clones()); n != 1 {
		t.Fatalf("after %d restarts during create: %d VMs, want 1", restarts, n)
	}
	t.Logf("create survived %d operator restarts", restarts)

	// The seed, which holds the proxy password, goes once the guest is up
	// (#12 item 6), whatever restarts interrupted the create.
	instanceName := getProxy(t, key).Status.InstanceName
	poll.Until(t, 30*time.Second, func() (bool, string) {
		return !w.SeedLeft(instanceName), "the seed of " + instanceName + " is still on the storage after Ready"
	})

	// The same during delete: stop and destroy are each interrupted
	// somewhere.
	if err := env.Client.Delete(ctx, getProxy(t, key)); err != nil {
		t.Fatal(err)
	}
	gone := func() bool { return apierrors.IsNotFound(env.Client.Get(ctx, key, &crawlv1alpha1.Proxy{})) }
	restarts = 0
	for round := 0; !gone() && round <= 60; round++ {
		w.runUntilCalls(t, ns, 1+round%3, gone)
		restarts++
	}
	w.startOperator(t, ns)
	poll.Until(t, 60*time.Second, func() (bool, string) { return gone(), "proxy still exists" })
	if vms := w.Clones(); len(vms) != 0 {
		t.Errorf("after %d restarts during delete, VMs left: %+v", restarts, vms)
	}
	t.Logf("delete survived %d operator restarts", restarts)
}

// TestEchoedTokenNeverReachesStatusOrEvents: an API that echoes the request's
// Authorization header in its errors (F1: message and reason phrase) gets the
// token into no Proxy condition, no event and no ProviderHealth status: the
// client redacts it at the source, and the redaction marker shows it was
// there.
func TestEchoedTokenNeverReachesStatusOrEvents(t *testing.T) {
	ns := newNamespace(t)
	w := newWorld(t)
	tk := w.Sim.Config().Tokens[0]
	echo := "refused: Authorization: PVEAPIToken=" + tk.ID + "=" + tk.Secret
	w.Sim.AddCallFault(pvesim.CallFault{Method: http.MethodGet, Path: "/cluster/resources", Status: 500, Message: echo})
	w.Sim.AddCallFault(pvesim.CallFault{Method: http.MethodGet, Path: "/nodes/{node}/storage/{storage}/status", Status: 500, Message: echo})
	w.startOperator(t, ns)
	ctx := context.Background()
	key := client.ObjectKey{Namespace: ns, Name: "egress-echo"}
	proxy := &crawlv1alpha1.Proxy{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: key.Name},
		Spec: crawlv1alpha1.ProxySpec{Provider: pvelab.EntryName, MachineType: pvelab.MachineType, Image: pvelab.Image}}
	if err := env.Client.Create(ctx, proxy); err != nil {
		t.Fatal(err)
	}
	// Everything the operator wrote about the failures, as text.
	written := func() string {
		var b strings.Builder
		var p crawlv1alpha1.Proxy
		if err := env.Client.Get(ctx, key, &p); err != nil {
			t.Fatal(err)
		}
		_, _ = fmt.Fprintf(&b, "%+v\n", p.Status)
		var events corev1.EventList
		if err := env.Client.List(ctx, &events, client.InNamespace(ns)); err != nil {
			t.Fatal(err)
		}
		for _, e := range events.Items {
			_, _ = fmt.Fprintf(&b, "event %s %s: %s\n", e.InvolvedObject.Name, e.Reason, e.Message)
		}
		var ph crawlv1alpha1.ProviderHealth
		if err := env.Client.Get(ctx, client.ObjectKey{Name: pvelab.EntryName}, &ph); err == nil {
			_, _ = fmt.Fprintf(&b, "health %+v\n", ph.Status)
		}
		return b.String()
	}
	var text string
	poll.Until(t, 30*time.Second, func() (bool, string) {
		text = written()
		// The echo in the Proxy's status, its events and the health.
		return strings.Count(text, "refused: Authorization: PVEAPIToken=") >= 3, "the failures are not reported yet:\n" + text
	})
	if strings.Contains(text, tk.Secret) {
		t.Errorf("the token secret reached a status, an event or the health:\n%s", text)
	}
	if strings.Count(text, "PVEAPIToken=[redacted]") < 3 {
		t.Errorf("want the echoed token replaced by [redacted] in the status, the events and the health:\n%s", text)
	}
}
