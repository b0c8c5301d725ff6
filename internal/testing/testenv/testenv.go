package testenv

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/go-logr/logr"
	corev1 "k8s.io/api/core/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	kruntime "k8s.io/apimachinery/pkg/runtime"
	clientgoscheme "k8s.io/client-go/kubernetes/scheme"
	"k8s.io/client-go/rest"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/envtest"
	logf "sigs.k8s.io/controller-runtime/pkg/log"
	"sigs.k8s.io/yaml"

	crawlv1alpha1 "github.com/egress-proxies/egress-proxies-operator/api/v1alpha1"
	"github.com/egress-proxies/egress-proxies-operator/internal/testing/modroot"
	"github.com/egress-proxies/egress-proxies-operator/internal/testing/poll"
)

// Env is a running control plane with the project's CRDs installed.
type Env struct {
	// Environment is the envtest environment, for AddUser and the like.
	Environment *envtest.Environment
	// Config reaches the API server as an administrator.
	Config *rest.Config
	// Client is a direct (uncached) client with Scheme.
	Client client.Client
	// Scheme knows the built-in kinds and this project's.
	Scheme *kruntime.Scheme
}

// Main is a TestMain body. It starts the control plane, hands it to use, runs
// the tests and stops it. In -short mode without KUBEBUILDER_ASSETS it runs
// the tests without a control plane (use gets nil, and envtest cases skip
// through Need); without -short it fails, so that `make test` can never pass
// by skipping the envtest cases.
func Main(m *testing.M, use func(*Env)) int {
	flag.Parse()
	// Tests give their operators their own loggers; the global one only
	// catches client-go's background chatter.
	logf.SetLogger(logr.Discard())
	if os.Getenv("KUBEBUILDER_ASSETS") == "" {
		if testing.Short() {
			use(nil)
			return m.Run()
		}
		fmt.Fprintln(os.Stderr, "KUBEBUILDER_ASSETS is not set: run `make test`, which builds kube-apiserver and etcd once "+
			"(hack/envtest/setup.sh), or `go test -short` to skip the envtest cases")
		return 1
	}
	e, err := start()
	if err != nil {
		fmt.Fprintf(os.Stderr, "starting envtest: %v\n", err)
		return 1
	}
	use(e)
	code := m.Run()
	if err := e.Environment.Stop(); err != nil {
		fmt.Fprintf(os.Stderr, "stopping envtest: %v\n", err)
	}
	return code
}

// Start starts another control plane with the project's CRDs, for a test
// that needs two clusters (two installations of the operator, each in its
// own cluster, sharing one hypervisor). It needs KUBEBUILDER_ASSETS; stop
// it with Environment.Stop.
func Start() (*Env, error) { return start() }

// Scheme knows the built-in kinds and this project's, as Env.Scheme does:
// the scheme of the unit tests' fake clients.
func Scheme(t testing.TB) *kruntime.Scheme {
	t.Helper()
	scheme, err := newScheme()
	if err != nil {
		t.Fatal(err)
	}
	return scheme
}

func newScheme() (*kruntime.Scheme, error) {
	scheme := kruntime.NewScheme()
	if err := errors.Join(clientgoscheme.AddToScheme(scheme), crawlv1alpha1.AddToScheme(scheme)); err != nil {
		return nil, err
	}
	return scheme, nil
}

func start() (*Env, error) {
	scheme, err := newScheme()
	if err != nil {
		return nil, err
	}
	root, err := modroot.Find()
	if err != nil {
		return nil, err
	}
	// kube-apiserver's start waits envtest's 20 s on a quiet machine, the
	// machine's pace on a loaded one (it timed out five times in a row at
	// load average 40).
	env := &envtest.Environment{CRDDirectoryPaths: []string{filepath.Join(root, "config", "crd", "bases")}, ErrorIfCRDPathMissing: true, Scheme: scheme,
		ControlPlaneStartTimeout: poll.Paced(20 * time.Second)}
	cfg, err := env.Start()
	if err != nil {
		return nil, err
	}
	c, err := client.New(cfg, client.Options{Scheme: scheme})
	if err != nil {
		_ = env.Stop()
		return nil, err
	}
	return &Env{Environment: env, Config: cfg, Client: c, Scheme: scheme}, nil
}

// Need skips an envtest case when there is no control plane (-short mode
// without KUBEBUILDER_ASSETS).
func Need(t *testing.T, e *Env) {
	t.Helper()
	if e == nil {
		t.Skip("envtest case: needs KUBEBUILDER_ASSETS (run make test)")
	}
}

// OperatorUser is the user the operator runs as in a cluster: the
// ServiceAccount config/default binds the shipped roles to.
const OperatorUser = "system:serviceaccount:egress-proxies-system:egress-proxies-controller-manager"

// Names of the generated ClusterRoles (config/rbac/role.yaml).
const (
	// ClusterWideRole holds the rights the operator needs in the whole
	// cluster; config/rbac binds it with a ClusterRoleBinding.
	ClusterWideRole = "manager-role"
	// NamespaceRole holds the rights the operator needs in each namespace it
	// serves; config/namespaces binds it with a RoleBinding in each.
	NamespaceRole = "namespace-role"
)

// RBAC says where AsOperator binds the shipped roles, as an install would.
type RBAC struct {
	// Namespaces are the namespaces the operator serves (setup.Options.
	// Namespaces, --namespaces): NamespaceRole is bound in each with a
	// RoleBinding, as config/namespaces does, and nowhere else.
	Namespaces []string
	// RoleNamespaces moves a namespaced Role of role.yaml, named by the
	// namespace it has there (egress-proxies, the kubernetes provider's
	// pods), into the namespaces a test uses instead. A Role whose namespace
	// is not a key is applied where it says.
	RoleNamespaces map[string][]string
}

// AsOperator applies the generated RBAC of config/rbac/role.yaml to the
// control plane, bound to OperatorUser the way the shipped kustomize tree
// binds it (ClusterWideRole cluster-wide, NamespaceRole in each served
// namespace, the Roles in their namespaces), and returns a rest.Config that
// impersonates OperatorUser. An operator run with it has the rights a real
// install gives it, no more: a rule missing from the markers fails the test
// that needs it. Bindings accumulate: one control plane may carry the
// bindings of many tests, each in its own namespaces.
func (e *Env) AsOperator(ctx context.Context, o RBAC) (*rest.Config, error) {
	root, err := modroot.Find()
	if err != nil {
		return nil, err
	}
	data, err := os.ReadFile(filepath.Join(root, "config", "rbac", "role.yaml")) //nolint:gosec // G304: the repository's own generated RBAC.
	if err != nil {
		return nil, fmt.Errorf("reading the generated RBAC: %w", err)
	}
	subject := []rbacv1.Subject{{Kind: rbacv1.UserKind, APIGroup: rbacv1.GroupName, Name: OperatorUser}}
	for _, doc := range strings.Split(string(data), "\n---") {
		if strings.TrimSpace(doc) == "" || strings.TrimSpace(doc) == "---" {
			continue
		}
		var meta metav1.TypeMeta
		if err := yaml.Unmarshal([]byte(doc), &meta); err != nil {
			return nil, fmt.Errorf("decoding the generated RBAC: %w", err)
		}
		switch meta.Kind {
		case "ClusterRole":
			var cr rbacv1.ClusterRole
			if err := yaml.UnmarshalStrict([]byte(doc), &cr); err != nil {
				return nil, fmt.Errorf("decoding ClusterRole: %w", err)
			}
			ref := rbacv1.RoleRef{APIGroup: rbacv1.GroupName, Kind: "ClusterRole", Name: cr.Name}
			objs := []client.Object{&cr}
			switch cr.Name {
			case ClusterWideRole:
				objs = append(objs, &rbacv1.ClusterRoleBinding{ObjectMeta: metav1.ObjectMeta{Name: cr.Name}, Subjects: subject, RoleRef: ref})
			case NamespaceRole:
				for _, ns := range o.Namespaces {
					objs = append(objs, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: ns}},
						&rbacv1.RoleBinding{ObjectMeta: metav1.ObjectMeta{Name: cr.Name, Namespace: ns}, Subjects: subject, RoleRef: ref})
				}
			default:
				return nil, fmt.Errorf("ClusterRole %s in the generated RBAC: AsOperator does not know how an install binds it", cr.Name)
			}
			if err := createAll(ctx, e.Client, objs...); err != nil {
				return nil, err
			}
		case "Role":
			var r rbacv1.Role
			if err := yaml.UnmarshalStrict([]byte(doc), &r); err != nil {
				return nil, fmt.Errorf("decoding Role: %w", err)
			}
			targets, moved := o.RoleNamespaces[r.Namespace]
			if !moved {
				targets = []string{r.Namespace}
			}
			for _, target := range targets {
				role := r.DeepCopy()
				role.Namespace = target
				ns := &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: target}}
				binding := &rbacv1.RoleBinding{ObjectMeta: metav1.ObjectMeta{Name: r.Name, Namespace: target}, Subjects: subject,
					RoleRef: rbacv1.RoleRef{APIGroup: rbacv1.GroupName, Kind: "Role", Name: r.Name}}
				if err := createAll(ctx, e.Client, ns, role, binding); err != nil {
					return nil, err
				}
			}
		default:
			return nil, fmt.Errorf("unexpected kind %q in the generated RBAC", meta.Kind)
		}
	}
	cfg := rest.CopyConfig(e.Config)
	cfg.Impersonate = rest.ImpersonationConfig{UserName: OperatorUser, Groups: []string{"system:serviceaccounts", "system:authenticated"}}
	return cfg, nil
}

// createAll creates objects, accepting those that exist already.
func createAll(ctx context.Context, c client.Client, objs ...client.Object) error {
	for _, o := range objs {
		if err := c.Create(ctx, o); err != nil && !apierrors.IsAlreadyExists(err) {
			return fmt.Errorf("creating %T %s: %w", o, o.GetName(), err)
		}
	}
	return nil
}
