package proxygateway_test

import (
	"os"
	"testing"

	"k8s.io/client-go/rest"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/egress-proxies/egress-proxies-operator/internal/config"
	"github.com/egress-proxies/egress-proxies-operator/internal/controller"
	"github.com/egress-proxies/egress-proxies-operator/internal/testing/ctrlsuite"
	"github.com/egress-proxies/egress-proxies-operator/internal/testing/poll"
	"github.com/egress-proxies/egress-proxies-operator/internal/testing/testenv"
)

// The envtest control plane is shared by every test of the package; each
// test runs its own operator (manager, with all the loops) in its own
// namespace (internal/testing/ctrlsuite).
var (
	env        *testenv.Env
	restConfig *rest.Config
	k8s        client.Client
)

func TestMain(m *testing.M) {
	os.Exit(testenv.Main(m, func(e *testenv.Env) {
		env = e
		if e != nil {
			restConfig, k8s = e.Config, e.Client
		}
	}))
}

// operator is one running manager with the controllers under test.
type operator = ctrlsuite.Operator

type operatorOptions struct {
	namespace string
	cfg       *config.Config
	opts      controller.Options
}

// startOperator runs the controllers in namespace against envtest with the
// fake provider, and stops them when the test ends.
func startOperator(t *testing.T, oo operatorOptions) *operator {
	t.Helper()
	return ctrlsuite.Start(t, env, ctrlsuite.Options{Namespace: oo.namespace, Cfg: oo.cfg, Opts: oo.opts})
}

// eventsFor returns the notes of the events regarding an object, as
// "reason: note".
func eventsFor(t *testing.T, ns, name string) []string {
	t.Helper()
	return ctrlsuite.EventsFor(t, k8s, ns, name)
}

// newNamespace creates a namespace for one test, or skips it in -short
// mode without a control plane.
func newNamespace(t *testing.T) string {
	t.Helper()
	return ctrlsuite.NewNamespace(t, env)
}

// newProxy returns a valid Proxy on the "lab" entry; eventually polls
// instead of sleeping, its timeout following the machine's pace
// (internal/testing/poll).
var (
	newProxy   = ctrlsuite.NewProxy
	eventually = poll.UntilPaced
)
