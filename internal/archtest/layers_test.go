package archtest

import (
	"bufio"
	"bytes"
	"maps"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"testing"
)

const module = "github.com/egress-proxies/egress-proxies-operator/"

// layer is one row of the table of docs/architecture.md ("Layers").
type layer struct {
	name string
	// match says whether a package (its path inside the module) is of the
	// layer. Rows are tried in order; the first that matches wins.
	match func(pkg string) bool
	// imports are the layers its packages may import, its own included
	// where they may import each other.
	imports []string
}

func prefix(ps ...string) func(string) bool {
	return func(pkg string) bool {
		for _, p := range ps {
			if pkg == p || strings.HasPrefix(pkg, p+"/") {
				return true
			}
		}
		return false
	}
}

func exact(ps ...string) func(string) bool {
	return func(pkg string) bool { return slices.Contains(ps, pkg) }
}

// testSupport is code that exists for tests: the test worlds, the
// end-to-end suites, the contract suite and other *test packages, the
// developer tools under hack/ and the simulator's command. It may import
// anything; nothing of the product may import it.
func testSupport(pkg string) bool {
	return prefix("internal/testing", "internal/e2e", "internal/archtest", "internal/doclinks", "internal/manifests", "internal/monitoring", "hack", "cmd/pvesim")(pkg) ||
		strings.HasSuffix(pkg, "test") // providertest, ownershiptest
}

// layers is the table, lowest first.
var layers = []layer{
	{name: "test support", match: testSupport,
		imports: []string{"test support", "api", "base", "engine", "gateway", "provider", "provider types", "controller shared", "controller loop", "controller", "setup", "client"}},
	{name: "api", match: prefix("api")},
	{name: "base", match: exact(
		"internal/config", "internal/keyedlock", "internal/sharedread", "internal/ownership",
		"internal/nocloud", "internal/cloudinit", "internal/forwardproxy", "internal/egress",
		"internal/probe", "internal/metrics", "internal/tracing"),
		imports: []string{"api", "base"}},
	// The forward proxy as a command, the one engine of every member: a
	// pod's `proxy` subcommand and the guest binary run it.
	{name: "engine", match: exact("internal/proxycmd"), imports: []string{"base"}},
	// The pool gateway's replica: the controller that makes its Deployment
	// shares only api/v1alpha1/published with it (names of flags, variables
	// and the published list), never its code. Its API watches
	// (internal/gateway/gatewaywatch) feed its data path, so the layer
	// imports itself.
	{name: "gateway", match: prefix("internal/gateway"), imports: []string{"api", "base", "gateway"}},
	{name: "provider", match: exact("internal/provider"), imports: []string{"api", "base"}},
	{name: "provider types", match: prefix("internal/provider"), imports: []string{"api", "base", "provider"}},
	// The control loops. The Proxy loop, garbage collection and provider
	// health are internal/controller itself; the ProxyPool and ProxyGateway
	// loops have packages of their own under it (controller loop), which
	// share only internal/controller/shared: a loop's package imports no
	// other loop's, nor internal/controller, which registers them. Neither
	// reaches the gateway's code nor a provider type.
	{name: "controller shared", match: exact("internal/controller/shared"), imports: []string{"api", "base", "provider"}},
	{name: "controller loop", match: func(pkg string) bool { return strings.HasPrefix(pkg, "internal/controller/") },
		imports: []string{"api", "base", "provider", "controller shared"}},
	{name: "controller", match: exact("internal/controller"), imports: []string{"api", "base", "provider", "controller shared", "controller loop"}},
	{name: "setup", match: prefix("internal/setup"), imports: []string{"api", "base", "engine", "gateway", "provider", "provider types", "controller"}},
	// A client of the API (the kubectl plugin) sees only the API's types,
	// never the control plane.
	{name: "client", match: exact("internal/kubectlegress"), imports: []string{"api"}},
	// The guest binary links the engine alone (TestGuestEngineDeps holds
	// what that brings in).
	{name: "guest", match: exact("cmd/egress-proxy"), imports: []string{"engine"}},
	{name: "cmd", match: prefix("cmd"), imports: []string{"api", "base", "engine", "gateway", "provider", "provider types", "controller", "setup", "client"}},
}

func layerOf(pkg string) (layer, bool) {
	for _, l := range layers {
		if l.match(pkg) {
			return l, true
		}
	}
	return layer{}, false
}

// graph returns every package of the module with the module's packages its
// non-test files import, by path inside the module.
func graph(t *testing.T) map[string][]string {
	t.Helper()
	g := imports(t, "./...")
	for pkg, imps := range g {
		var own []string
		for _, imp := range imps {
			if rest, ok := strings.CutPrefix(imp, module); ok {
				own = append(own, rest)
			}
		}
		g[pkg] = own
	}
	return g
}

// imports returns each package go list finds for patterns, by path inside
// the module, with every package its non-test files import, by full path.
func imports(t *testing.T, patterns ...string) map[string][]string {
	t.Helper()
	// The go command that runs this test (go test puts its GOROOT's bin
	// first on PATH).
	cmd := exec.Command("go", append([]string{"list", "-f", `{{.ImportPath}}{{range .Imports}} {{.}}{{end}}`}, patterns...)...)
	cmd.Dir = filepath.Join("..", "..")
	out, err := cmd.Output()
	if err != nil {
		t.Fatalf("go list: %v", err)
	}
	g := map[string][]string{}
	sc := bufio.NewScanner(bytes.NewReader(out))
	for sc.Scan() {
		if f := strings.Fields(sc.Text()); len(f) > 0 {
			g[strings.TrimPrefix(f[0], module)] = f[1:]
		}
	}
	return g
}

// check returns one line per import that breaks the table, and per
// package the table does not place.
func check(g map[string][]string) []string {
	var bad []string
	for _, pkg := range slices.Sorted(maps.Keys(g)) {
		l, ok := layerOf(pkg)
		if !ok {
			bad = append(bad, pkg+": in no layer; place it in the table of docs/architecture.md and of this test")
			continue
		}
		for _, imp := range g[pkg] {
			il, ok := layerOf(imp)
			if !ok {
				continue // reported as a package of its own
			}
			if il.name == "test support" && l.name != "test support" {
				bad = append(bad, pkg+" ("+l.name+") imports test support "+imp)
				continue
			}
			if il.name != "test support" && l.name != "test support" && !slices.Contains(l.imports, il.name) {
				bad = append(bad, pkg+" ("+l.name+") imports "+imp+" ("+il.name+"), which is not below it")
			}
		}
	}
	return bad
}

// TestLayers: the module's import graph keeps the table.
func TestLayers(t *testing.T) {
	if bad := check(graph(t)); len(bad) > 0 {
		t.Errorf("the import graph breaks the layers of docs/architecture.md:\n  %s", strings.Join(bad, "\n  "))
	}
}

// checkCase is an import graph a check must find want problems in.
type checkCase struct {
	reason string
	g      map[string][]string
	want   int
}

// catches runs check on each case: a check that let everything through
// would fail here.
func catches(t *testing.T, name string, check func(map[string][]string) []string, cases []checkCase) {
	t.Helper()
	for _, tc := range cases {
		if got := check(tc.g); len(got) != tc.want {
			t.Errorf("%s() = %q, want %d problems (%s)", name, got, tc.want, tc.reason)
		}
	}
}

// TestCheckCatches: the check refuses what it is there to refuse, so that a
// table that let everything through would fail here.
func TestCheckCatches(t *testing.T) {
	catches(t, "check", check, []checkCase{
		{reason: "a product package importing test support", g: map[string][]string{
			"internal/controller": {"internal/testing/poll"}, "internal/testing/poll": {}}, want: 1},
		{reason: "a provider type importing the controller", g: map[string][]string{
			"internal/provider/proxmox": {"internal/controller"}, "internal/controller": {}}, want: 1},
		{reason: "the controller importing a provider type", g: map[string][]string{
			"internal/controller": {"internal/provider/proxmox"}, "internal/provider/proxmox": {}}, want: 1},
		{reason: "the provider contract importing the base is fine", g: map[string][]string{
			"internal/provider": {"internal/config"}, "internal/config": {}}, want: 0},
		{reason: "test support importing the product is fine", g: map[string][]string{
			"internal/testing/pvelab": {"internal/setup"}, "internal/setup": {}}, want: 0},
		{reason: "the controller importing the gateway's code (it shares only api/v1alpha1/published with it)", g: map[string][]string{
			"internal/controller": {"internal/gateway"}, "internal/gateway": {}}, want: 1},
		{reason: "a controller loop's package importing the gateway's code", g: map[string][]string{
			"internal/controller/proxygateway": {"internal/gateway"}, "internal/gateway": {}}, want: 1},
		{reason: "a controller loop's package importing a provider type", g: map[string][]string{
			"internal/controller/proxypool": {"internal/provider/proxmox"}, "internal/provider/proxmox": {}}, want: 1},
		{reason: "a controller loop's package importing a sibling's", g: map[string][]string{
			"internal/controller/proxypool": {"internal/controller/proxygateway"}, "internal/controller/proxygateway": {}}, want: 1},
		{reason: "a controller loop's package importing internal/controller, which registers it", g: map[string][]string{
			"internal/controller/proxygateway": {"internal/controller"}, "internal/controller": {}}, want: 1},
		{reason: "the controller's shared package importing a loop's", g: map[string][]string{
			"internal/controller/shared": {"internal/controller/proxypool"}, "internal/controller/proxypool": {}}, want: 1},
		{reason: "the controller registering the loops, which share internal/controller/shared, is fine", g: map[string][]string{
			"internal/controller":              {"internal/controller/proxypool", "internal/controller/proxygateway", "internal/controller/shared"},
			"internal/controller/proxypool":    {"internal/controller/shared"},
			"internal/controller/proxygateway": {"internal/controller/shared"},
			"internal/controller/shared":       {}}, want: 0},
		{reason: "the engine importing the controller", g: map[string][]string{
			"internal/proxycmd": {"internal/controller"}, "internal/controller": {}}, want: 1},
		{reason: "the guest binary importing setup (the API machinery comes with it)", g: map[string][]string{
			"cmd/egress-proxy": {"internal/setup"}, "internal/setup": {}}, want: 1},
		{reason: "a package in no layer", g: map[string][]string{"internal/newthing": {}}, want: 1},
	})
}
