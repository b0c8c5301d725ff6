package controller_test

import (
	"context"
	"fmt"
	"os"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/sdk/trace/tracetest"
	corev1 "k8s.io/api/core/v1"
	apimeta "k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/client-go/rest"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"
	logf "sigs.k8s.io/controller-runtime/pkg/log"

	crawlv1alpha1 "github.com/egress-proxies/egress-proxies-operator/api/v1alpha1"
	"github.com/egress-proxies/egress-proxies-operator/internal/config"
	"github.com/egress-proxies/egress-proxies-operator/internal/controller"
	"github.com/egress-proxies/egress-proxies-operator/internal/metrics"
	"github.com/egress-proxies/egress-proxies-operator/internal/ownership"
	"github.com/egress-proxies/egress-proxies-operator/internal/ownership/ownershiptest"
	"github.com/egress-proxies/egress-proxies-operator/internal/provider"
	"github.com/egress-proxies/egress-proxies-operator/internal/setup"
	"github.com/egress-proxies/egress-proxies-operator/internal/testing/fakeprobe"
	"github.com/egress-proxies/egress-proxies-operator/internal/testing/fakeprovider"
	"github.com/egress-proxies/egress-proxies-operator/internal/testing/logbuf"
	"github.com/egress-proxies/egress-proxies-operator/internal/testing/poll"
	"github.com/egress-proxies/egress-proxies-operator/internal/testing/testenv"
)

// The envtest control plane is shared by every test of the package; each
// test runs its own operator (manager) in its own namespace.
var (
	env        *testenv.Env
	restConfig *rest.Config
	k8s        client.Client
	scheme     *runtime.Scheme
)

func TestMain(m *testing.M) {
	os.Exit(testenv.Main(m, func(e *testenv.Env) {
		env = e
		if e != nil {
			restConfig, k8s, scheme = e.Config, e.Client, e.Scheme
		}
	}))
}

// testConfig is a providers configuration with one fake entry "lab" with
// two zones.
func testConfig(t *testing.T) *config.Config {
	t.Helper()
	cfg, err := config.Parse([]byte(`
providers:
  - name: lab
    type: fake
    zones: [rack-a, rack-b]
    machineTypes:
        small: {cores: 1, memoryMiB: 512, diskGiB: 8}
    images: [debian-12]
`), fakeprovider.Registry())
	if err != nil {
		t.Fatalf("test config: %v", err)
	}
	return cfg
}

// operator is one running manager with the controllers under test.
type operator struct {
	fake    *fakeprovider.Provider
	prober  *fakeprobe.Prober
	reg     *prometheus.Registry
	metrics *metrics.Metrics
	logs    *logbuf.Buffer
	spans   *tracetest.SpanRecorder
	cancel  context.CancelFunc
	done    chan struct{}
}

// stop stops the manager and waits for it.
func (o *operator) stop() {
	o.cancel()
	<-o.done
}

type operatorOptions struct {
	// namespace confines the operator's cache, so that operators of
	// earlier tests' Proxies never meet this test's fake.
	namespace string
	fake      *fakeprovider.Provider
	cfg       *config.Config
	opts      controller.Options
	// providers, when set for an entry, serve it instead of fake.
	providers map[string]provider.Provider
	// ownership, when set, is the operator's identity (it should be the
	// fake's, whose key signs the instances); else a test installation's.
	ownership *ownership.Identity
}

// startOperator runs the controllers against envtest with the fake provider
// behind the same instrumentation as in production, and stops them when the
// test ends.
func startOperator(t *testing.T, oo operatorOptions) *operator {
	t.Helper()
	if oo.fake == nil {
		oo.fake = fakeprovider.New(nil)
	}
	if oo.cfg == nil {
		oo.cfg = testConfig(t)
	}
	o := &operator{fake: oo.fake, reg: prometheus.NewRegistry(), logs: &logbuf.Buffer{}, spans: tracetest.NewSpanRecorder()}
	log := o.logs.Logger(2)
	tp := sdktrace.NewTracerProvider(sdktrace.WithSpanProcessor(o.spans))
	t.Cleanup(func() { _ = tp.Shutdown(context.Background()) })
	if oo.namespace == "" {
		t.Fatal("startOperator needs a namespace")
	}
	opts := oo.opts
	opts.SkipNameValidation = true
	if opts.Prober == nil {
		o.prober = fakeprobe.New()
		opts.Prober = o.prober
	}
	if opts.ProbeInterval == 0 {
		opts.ProbeInterval = 100 * time.Millisecond
	}
	if opts.PollInterval == 0 {
		opts.PollInterval = 50 * time.Millisecond
	}
	if opts.ResyncInterval == 0 {
		opts.ResyncInterval = 200 * time.Millisecond
	}
	if opts.HealthInterval == 0 {
		opts.HealthInterval = time.Hour
	}
	if opts.GCInterval == 0 {
		// Tests run garbage collection by hand with RunOnce.
		opts.GCInterval = time.Hour
	}
	id := oo.ownership
	if id == nil {
		id = ownershiptest.Identity("controller-tests")
	}
	op, err := setup.New(setup.Options{
		RestConfig: asOperator(t, oo.namespace),
		Config:     oo.cfg,
		Types:      provider.Types{fakeprovider.TypeFor(oo.fake)},
		Providers:  oo.providers,
		Ownership:  id,
		Namespaces: []string{oo.namespace},
		Manager:    ctrl.Options{Scheme: scheme},
		Controller: opts,
		Registerer: o.reg,
		Tracer:     tp.Tracer("test"),
		Log:        log,
	})
	if err != nil {
		t.Fatal(err)
	}
	o.metrics = op.Metrics
	mgr := op.Manager
	ctx, cancel := context.WithCancel(logf.IntoContext(context.Background(), log))
	o.cancel, o.done = cancel, make(chan struct{})
	go func() {
		defer close(o.done)
		if err := mgr.Start(ctx); err != nil {
			t.Errorf("manager stopped with an error: %v", err)
		}
	}()
	t.Cleanup(func() {
		o.stop()
		if t.Failed() {
			t.Logf("operator log:\n%s", o.logs.String())
		}
	})
	return o
}

// asOperator returns the rest.Config an operator serving namespace ns runs
// with: the operator's ServiceAccount with the shipped RBAC
// (config/rbac/role.yaml) applied as the default install binds it (the
// namespace role only in ns), through impersonation. A right the
// controllers need and the markers lack fails the test that needs it, not a
// first install.
func asOperator(t *testing.T, ns string) *rest.Config {
	t.Helper()
	cfg, err := env.AsOperator(context.Background(), testenv.RBAC{Namespaces: []string{ns}})
	if err != nil {
		t.Fatalf("running as the operator's ServiceAccount: %v", err)
	}
	return cfg
}

// needEnvtest skips an envtest case in -short mode without a control plane.
func needEnvtest(t *testing.T) {
	t.Helper()
	testenv.Need(t, env)
}

// newNamespace creates a namespace for one test. Every envtest case starts
// with it, so it is also where such cases skip in -short mode without a
// control plane.
func newNamespace(t *testing.T) string {
	t.Helper()
	needEnvtest(t)
	ns := &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{GenerateName: "test-"}}
	if err := k8s.Create(context.Background(), ns); err != nil {
		t.Fatal(err)
	}
	return ns.Name
}

// newProxy returns a valid Proxy on the "lab" entry.
func newProxy(ns, name string) *crawlv1alpha1.Proxy {
	return &crawlv1alpha1.Proxy{
		ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: name},
		Spec: crawlv1alpha1.ProxySpec{
			Provider: "lab", Zone: "rack-a", MachineType: "small", Image: "debian-12",
		},
	}
}

// eventually and consistently poll instead of sleeping (internal/testing/poll).
// eventually's timeout is what the wait takes at most on a quiet machine:
// the bound follows the machine's measured pace (poll.UntilPaced), since the
// operator's work in envtest (reconciles, the API server, etcd) slows down
// with the machine, as on a CI runner beside a CPU hog. consistently's
// duration stays fixed: a condition that must hold only gets a longer look
// than it needs when the machine is slow.
func eventually(t *testing.T, timeout time.Duration, cond func() (bool, string)) {
	t.Helper()
	poll.UntilPaced(t, timeout, cond)
}

func consistently(t *testing.T, d time.Duration, cond func() (bool, string)) {
	t.Helper()
	poll.Always(t, d, cond)
}

// getProxy reads a Proxy from the API server.
func getProxy(t *testing.T, ns, name string) *crawlv1alpha1.Proxy {
	t.Helper()
	var p crawlv1alpha1.Proxy
	if err := k8s.Get(context.Background(), client.ObjectKey{Namespace: ns, Name: name}, &p); err != nil {
		t.Fatalf("getting proxy %s/%s: %v", ns, name, err)
	}
	return &p
}

// waitPhase waits until the Proxy has the phase and the Ready reason.
func waitPhase(t *testing.T, ns, name string, phase crawlv1alpha1.ProxyPhase, reason string) *crawlv1alpha1.Proxy {
	t.Helper()
	var last *crawlv1alpha1.Proxy
	eventually(t, 20*time.Second, func() (bool, string) {
		var p crawlv1alpha1.Proxy
		if err := k8s.Get(context.Background(), client.ObjectKey{Namespace: ns, Name: name}, &p); err != nil {
			return false, err.Error()
		}
		last = &p
		c := apimeta.FindStatusCondition(p.Status.Conditions, crawlv1alpha1.ConditionReady)
		got := "no Ready condition"
		if c != nil {
			got = fmt.Sprintf("phase %s, Ready %s/%s: %s", p.Status.Phase, c.Status, c.Reason, c.Message)
		}
		return p.Status.Phase == phase && c != nil && c.Reason == reason, got
	})
	return last
}

// eventsFor returns the notes of the events.k8s.io events regarding an
// object, as "reason: note".
func eventsFor(t *testing.T, ns, name string) []string {
	t.Helper()
	var list eventsList
	if err := list.load(ns); err != nil {
		t.Fatalf("listing events: %v", err)
	}
	var out []string
	for _, e := range list.Items {
		if e.Regarding.Name == name {
			out = append(out, e.Reason+": "+e.Note)
		}
	}
	return out
}

// waitEvents waits until the events regarding an object (eventsFor) hold
// every one of wants, and returns them joined by newlines. The recorder
// sends events from its own goroutine: one emitted in the reconcile whose
// write the test just saw (the status, the finalizer's release) may reach
// the API server after the test looked.
func waitEvents(t *testing.T, ns, name string, wants ...string) string {
	t.Helper()
	var events string
	eventually(t, 10*time.Second, func() (bool, string) {
		events = strings.Join(eventsFor(t, ns, name), "\n")
		for _, want := range wants {
			if !strings.Contains(events, want) {
				return false, fmt.Sprintf("no event with %q among:\n%s", want, events)
			}
		}
		return true, ""
	})
	return events
}

// containsAny reports which of the haystacks contain needle.
func containsAny(needle string, haystacks map[string]string) []string {
	var where []string
	for name, h := range haystacks {
		if strings.Contains(h, needle) {
			where = append(where, name)
		}
	}
	return where
}
