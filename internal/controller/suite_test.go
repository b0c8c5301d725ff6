package controller_test

import (
	"context"
	"fmt"
	"os"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"go.opentelemetry.io/otel/sdk/trace/tracetest"
	apimeta "k8s.io/apimachinery/pkg/api/meta"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/client-go/rest"
	"sigs.k8s.io/controller-runtime/pkg/client"

	crawlv1alpha1 "github.com/egress-proxies/egress-proxies-operator/api/v1alpha1"
	"github.com/egress-proxies/egress-proxies-operator/internal/config"
	"github.com/egress-proxies/egress-proxies-operator/internal/controller"
	"github.com/egress-proxies/egress-proxies-operator/internal/metrics"
	"github.com/egress-proxies/egress-proxies-operator/internal/ownership"
	"github.com/egress-proxies/egress-proxies-operator/internal/provider"
	"github.com/egress-proxies/egress-proxies-operator/internal/testing/ctrlsuite"
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
// two zones (ctrlsuite.Config).
func testConfig(t *testing.T) *config.Config { return ctrlsuite.Config(t) }

// operator is one running manager with the controllers under test
// (ctrlsuite.Operator).
type operator struct {
	fake    *fakeprovider.Provider
	prober  *fakeprobe.Prober
	reg     *prometheus.Registry
	metrics *metrics.Metrics
	logs    *logbuf.Buffer
	spans   *tracetest.SpanRecorder
	op      *ctrlsuite.Operator
}

// stop stops the manager and waits for it.
func (o *operator) stop() { o.op.Stop() }

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
// test ends (ctrlsuite.Start).
func startOperator(t *testing.T, oo operatorOptions) *operator {
	t.Helper()
	op := ctrlsuite.Start(t, env, ctrlsuite.Options{Namespace: oo.namespace, Fake: oo.fake, Cfg: oo.cfg, Opts: oo.opts,
		Providers: oo.providers, Ownership: oo.ownership})
	return &operator{fake: op.Fake, prober: op.Prober, reg: op.Reg, metrics: op.Metrics, logs: op.Logs, spans: op.Spans, op: op}
}

// needEnvtest skips an envtest case in -short mode without a control plane.
func needEnvtest(t *testing.T) {
	t.Helper()
	testenv.Need(t, env)
}

// newNamespace creates a namespace for one test; envtest cases skip there
// in -short mode without a control plane (ctrlsuite.NewNamespace).
func newNamespace(t *testing.T) string {
	t.Helper()
	return ctrlsuite.NewNamespace(t, env)
}

// newProxy returns a valid Proxy on the "lab" entry.
func newProxy(ns, name string) *crawlv1alpha1.Proxy { return ctrlsuite.NewProxy(ns, name) }

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
	return ctrlsuite.GetProxy(t, k8s, ns, name)
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
	return ctrlsuite.EventsFor(t, k8s, ns, name)
}

// waitEvents waits until the events regarding an object hold every one of
// wants, and returns them joined by newlines (ctrlsuite.WaitEvents).
func waitEvents(t *testing.T, ns, name string, wants ...string) string {
	t.Helper()
	return ctrlsuite.WaitEvents(t, k8s, ns, name, wants...)
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
