package setup

import (
	"context"
	"os"
	"strings"
	"testing"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/egress-proxies/egress-proxies-operator/internal/testing/testenv"
)

var env *testenv.Env

func TestMain(m *testing.M) {
	os.Exit(testenv.Main(m, func(e *testenv.Env) { env = e }))
}

// TestCheckNamespaceAccess: the operator, as its ServiceAccount with the
// shipped RBAC, passes the check in the namespaces where namespace-role is
// bound, and is told, per namespace and right, what it lacks in one listed
// on --namespaces without the binding (the operator would otherwise wait
// for ever on caches that cannot sync).
func TestCheckNamespaceAccess(t *testing.T) {
	testenv.Need(t, env)
	ctx := context.Background()
	var served, unbound string
	for _, p := range []*string{&served, &unbound} {
		ns := &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{GenerateName: "access-"}}
		if err := env.Client.Create(ctx, ns); err != nil {
			t.Fatal(err)
		}
		*p = ns.Name
	}
	cfg, err := env.AsOperator(ctx, testenv.RBAC{Namespaces: []string{served}})
	if err != nil {
		t.Fatal(err)
	}
	if err := CheckNamespaceAccess(ctx, cfg, []string{served}); err != nil {
		t.Errorf("namespace-role bound in %s: %v", served, err)
	}
	if err := CheckNamespaceAccess(ctx, cfg, nil); err != nil {
		t.Errorf("every namespace is not checked here (the cache's watches say it): %v", err)
	}
	err = CheckNamespaceAccess(ctx, cfg, []string{served, unbound})
	want := "namespace " + unbound + ": the operator may not watch proxies, watch proxypools, watch configmaps, create secrets there"
	if err == nil || !strings.Contains(err.Error(), want) || strings.Contains(err.Error(), "namespace "+served+":") {
		t.Errorf("got %v\nwant only an error containing %q", err, want)
	}
}
