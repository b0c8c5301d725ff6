package archtest

import (
	"maps"
	"slices"
	"strings"
	"testing"
)

// dataPath are the packages that carry a gateway replica's traffic. They
// are fed from the API by internal/gateway/gatewaywatch and hold no API
// client themselves: a request or tunnel never waits on the API server,
// and the data path builds, tests and benchmarks without it.
var dataPath = []string{"internal/gateway"}

// apiClient says whether an import is one the data path must not have:
// the API clients and informers, the dynamic client's unstructured
// objects, the controller runtime, the Kubernetes API types and the
// project's own (exactly api/v1alpha1: api/v1alpha1/published, the
// contract the controller and the gateway share, is plain Go and allowed).
func apiClient(imp string) bool {
	return prefix("k8s.io/client-go", "k8s.io/apimachinery", "k8s.io/api", "sigs.k8s.io/controller-runtime")(imp) ||
		exact(module+"api/v1alpha1")(imp)
}

// checkDataPath returns one line per import of the data path that is an
// API client's.
func checkDataPath(g map[string][]string) []string {
	var bad []string
	for _, pkg := range slices.Sorted(maps.Keys(g)) {
		if !slices.Contains(dataPath, pkg) {
			continue
		}
		for _, imp := range g[pkg] {
			if apiClient(imp) {
				bad = append(bad, pkg+" (the data path) imports "+imp+"; feed it from internal/gateway/gatewaywatch instead")
			}
		}
	}
	return bad
}

// TestDataPathHasNoAPIClient: the gateway's data path imports no API
// client, no unstructured or dynamic client, no controller runtime and no
// API types.
func TestDataPathHasNoAPIClient(t *testing.T) {
	patterns := make([]string, 0, len(dataPath))
	for _, p := range dataPath {
		patterns = append(patterns, "./"+p)
	}
	g := imports(t, patterns...)
	if len(g) != len(dataPath) {
		t.Fatalf("go list found %d of the %d data path packages %q", len(g), len(dataPath), dataPath)
	}
	if bad := checkDataPath(g); len(bad) > 0 {
		t.Errorf("the data path imports an API client:\n  %s", strings.Join(bad, "\n  "))
	}
}

// TestCheckDataPathCatches: the check refuses what it is there to refuse.
func TestCheckDataPathCatches(t *testing.T) {
	catches(t, "checkDataPath", checkDataPath, []checkCase{
		{reason: "client-go", g: map[string][]string{"internal/gateway": {"k8s.io/client-go/kubernetes"}}, want: 1},
		{reason: "the dynamic client and unstructured objects", g: map[string][]string{"internal/gateway": {
			"k8s.io/client-go/dynamic", "k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"}}, want: 2},
		{reason: "the controller runtime", g: map[string][]string{"internal/gateway": {"sigs.k8s.io/controller-runtime/pkg/client"}}, want: 1},
		{reason: "the API types", g: map[string][]string{"internal/gateway": {module + "api/v1alpha1"}}, want: 1},
		{reason: "the published contract is fine", g: map[string][]string{"internal/gateway": {module + "api/v1alpha1/published", "net/http"}}, want: 0},
		{reason: "the watches may use the API", g: map[string][]string{"internal/gateway/gatewaywatch": {"k8s.io/client-go/dynamic"}}, want: 0},
		{reason: "a path that only starts like a forbidden one is fine", g: map[string][]string{"internal/gateway": {"k8s.io/apiextensions-like"}}, want: 0},
	})
}
