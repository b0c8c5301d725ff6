package ctrlsuite

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/sdk/trace/tracetest"
	corev1 "k8s.io/api/core/v1"
	eventsv1 "k8s.io/api/events/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
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

// Config is a providers configuration with one fake entry "lab" with
// two zones.
func Config(t *testing.T) *config.Config {
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

// Operator is one running manager with the controllers under test.
type Operator struct {
	// Fake is the provider of the "lab" entry.
	Fake *fakeprovider.Provider
	// Prober is the fake prober, unless Options.Opts named one.
	Prober *fakeprobe.Prober
	// Reg holds the operator's collectors; Metrics are its metrics.
	Reg     *prometheus.Registry
	Metrics *metrics.Metrics
	// Logs are the operator's log; Spans its reconcile spans.
	Logs  *logbuf.Buffer
	Spans *tracetest.SpanRecorder

	cancel context.CancelFunc
	done   chan struct{}
}

// Stop stops the manager and waits for it.
func (o *Operator) Stop() {
	o.cancel()
	<-o.done
}

// Options configure Start.
type Options struct {
	// Namespace confines the operator's cache, so that operators of
	// earlier tests' Proxies never meet this test's fake.
	Namespace string
	Fake      *fakeprovider.Provider
	Cfg       *config.Config
	Opts      controller.Options
	// Providers, when set for an entry, serve it instead of Fake.
	Providers map[string]provider.Provider
	// Ownership, when set, is the operator's identity (it should be the
	// fake's, whose key signs the instances); else a test installation's.
	Ownership *ownership.Identity
}

// Start runs the controllers against env with the fake provider behind
// the same instrumentation as in production, and stops them when the test
// ends.
func Start(t *testing.T, env *testenv.Env, oo Options) *Operator {
	t.Helper()
	if oo.Fake == nil {
		oo.Fake = fakeprovider.New(nil)
	}
	if oo.Cfg == nil {
		oo.Cfg = Config(t)
	}
	o := &Operator{Fake: oo.Fake, Reg: prometheus.NewRegistry(), Logs: &logbuf.Buffer{}, Spans: tracetest.NewSpanRecorder()}
	log := o.Logs.Logger(2)
	tp := sdktrace.NewTracerProvider(sdktrace.WithSpanProcessor(o.Spans))
	t.Cleanup(func() { _ = tp.Shutdown(context.Background()) })
	if oo.Namespace == "" {
		t.Fatal("startOperator needs a namespace")
	}
	opts := oo.Opts
	opts.SkipNameValidation = true
	if opts.Prober == nil {
		o.Prober = fakeprobe.New()
		opts.Prober = o.Prober
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
	id := oo.Ownership
	if id == nil {
		id = ownershiptest.Identity("controller-tests")
	}
	op, err := setup.New(setup.Options{
		RestConfig: AsOperator(t, env, oo.Namespace),
		Config:     oo.Cfg,
		Types:      provider.Types{fakeprovider.TypeFor(oo.Fake)},
		Providers:  oo.Providers,
		Ownership:  id,
		Namespaces: []string{oo.Namespace},
		Manager:    ctrl.Options{Scheme: env.Scheme},
		Controller: opts,
		Registerer: o.Reg,
		Tracer:     tp.Tracer("test"),
		Log:        log,
	})
	if err != nil {
		t.Fatal(err)
	}
	o.Metrics = op.Metrics
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
		o.Stop()
		if t.Failed() {
			t.Logf("operator log:\n%s", o.Logs.String())
		}
	})
	return o
}

// AsOperator returns the rest.Config an operator serving namespace ns runs
// with: the operator's ServiceAccount with the shipped RBAC
// (config/rbac/role.yaml) applied as the default install binds it (the
// namespace role only in ns), through impersonation. A right the
// controllers need and the markers lack fails the test that needs it, not a
// first install.
func AsOperator(t *testing.T, env *testenv.Env, ns string) *rest.Config {
	t.Helper()
	cfg, err := env.AsOperator(context.Background(), testenv.RBAC{Namespaces: []string{ns}})
	if err != nil {
		t.Fatalf("running as the operator's ServiceAccount: %v", err)
	}
	return cfg
}

// NewNamespace creates a namespace for one test. Every envtest case starts
// with it, so it is also where such cases skip in -short mode without a
// control plane.
func NewNamespace(t *testing.T, env *testenv.Env) string {
	t.Helper()
	testenv.Need(t, env)
	ns := &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{GenerateName: "test-"}}
	if err := env.Client.Create(context.Background(), ns); err != nil {
		t.Fatal(err)
	}
	return ns.Name
}

// NewProxy returns a valid Proxy on the "lab" entry.
func NewProxy(ns, name string) *crawlv1alpha1.Proxy {
	return &crawlv1alpha1.Proxy{
		ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: name},
		Spec: crawlv1alpha1.ProxySpec{
			Provider: "lab", Zone: "rack-a", MachineType: "small", Image: "debian-12",
		},
	}
}

// EventsFor returns the notes of the events.k8s.io events regarding an
// object, as "reason: note".
func EventsFor(t *testing.T, c client.Reader, ns, name string) []string {
	t.Helper()
	var list eventsv1.EventList
	if err := c.List(context.Background(), &list, client.InNamespace(ns)); err != nil {
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

// WaitEvents waits until the events regarding an object (EventsFor) hold
// every one of wants, and returns them joined by newlines. The recorder
// sends events from its own goroutine: one emitted in the reconcile whose
// write the test just saw (the status, the finalizer's release) may reach
// the API server after the test looked.
func WaitEvents(t *testing.T, c client.Reader, ns, name string, wants ...string) string {
	t.Helper()
	var events string
	poll.UntilPaced(t, 10*time.Second, func() (bool, string) {
		events = strings.Join(EventsFor(t, c, ns, name), "\n")
		for _, want := range wants {
			if !strings.Contains(events, want) {
				return false, fmt.Sprintf("no event with %q among:\n%s", want, events)
			}
		}
		return true, ""
	})
	return events
}

// GetProxy reads a Proxy through c.
func GetProxy(t *testing.T, c client.Reader, ns, name string) *crawlv1alpha1.Proxy {
	t.Helper()
	var p crawlv1alpha1.Proxy
	if err := c.Get(context.Background(), client.ObjectKey{Namespace: ns, Name: name}, &p); err != nil {
		t.Fatalf("getting proxy %s/%s: %v", ns, name, err)
	}
	return &p
}
