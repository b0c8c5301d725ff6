package proxypool_test

import (
	"os"
	"testing"

	"sigs.k8s.io/controller-runtime/pkg/client"

	crawlv1alpha1 "github.com/egress-proxies/egress-proxies-operator/api/v1alpha1"
	"github.com/egress-proxies/egress-proxies-operator/internal/config"
	"github.com/egress-proxies/egress-proxies-operator/internal/controller"
	"github.com/egress-proxies/egress-proxies-operator/internal/testing/ctrlsuite"
	"github.com/egress-proxies/egress-proxies-operator/internal/testing/fakeprovider"
	"github.com/egress-proxies/egress-proxies-operator/internal/testing/poll"
	"github.com/egress-proxies/egress-proxies-operator/internal/testing/testenv"
)

// The envtest control plane is shared by every test of the package; each
// test runs its own operator (manager, with all the loops) in its own
// namespace (internal/testing/ctrlsuite).
var (
	env *testenv.Env
	k8s client.Client
)

func TestMain(m *testing.M) {
	os.Exit(testenv.Main(m, func(e *testenv.Env) {
		env = e
		if e != nil {
			k8s = e.Client
		}
	}))
}

// operator is one running manager with the controllers under test.
type operator = ctrlsuite.Operator

type operatorOptions struct {
	namespace string
	fake      *fakeprovider.Provider
	cfg       *config.Config
	opts      controller.Options
}

// startOperator runs the controllers in namespace against envtest with the
// fake provider, and stops them when the test ends.
func startOperator(t *testing.T, oo operatorOptions) *operator {
	t.Helper()
	return ctrlsuite.Start(t, env, ctrlsuite.Options{Namespace: oo.namespace, Fake: oo.fake, Cfg: oo.cfg, Opts: oo.opts})
}

// newNamespace creates a namespace for one test, or skips it in -short
// mode without a control plane.
func newNamespace(t *testing.T) string {
	t.Helper()
	return ctrlsuite.NewNamespace(t, env)
}

// newProxy returns a valid Proxy on the "lab" entry; eventually and
// consistently poll instead of sleeping, eventually's timeout following the
// machine's pace (internal/testing/poll).
var (
	newProxy     = ctrlsuite.NewProxy
	eventually   = poll.UntilPaced
	consistently = poll.Always
)

// getProxy reads a Proxy from the API server.
func getProxy(t *testing.T, ns, name string) *crawlv1alpha1.Proxy {
	t.Helper()
	return ctrlsuite.GetProxy(t, k8s, ns, name)
}

// waitEvents waits until the events regarding an object hold every one of
// wants (ctrlsuite.WaitEvents).
func waitEvents(t *testing.T, ns, name string, wants ...string) string {
	t.Helper()
	return ctrlsuite.WaitEvents(t, k8s, ns, name, wants...)
}
