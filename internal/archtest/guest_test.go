package archtest

import (
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"testing"
)

// guestCommand is the guest binary, which a VM member's guest receives
// through the provider's API at every new version: what it links is paid
// for in bytes per storage and in the guest's memory.
const guestCommand = "cmd/egress-proxy"

// guestForbidden says whether a package is one the guest binary must not
// link at any depth: the Kubernetes client stack (and so its API types) and
// the operator's telemetry, none of which a guest's forward proxy uses.
var guestForbidden = prefix("k8s.io", "sigs.k8s.io", "go.opentelemetry.io", "google.golang.org/grpc")

// checkGuest returns one line per forbidden package that g says the guest
// binary links (g: the guest command and all it links, from go list -deps).
func checkGuest(g map[string][]string) []string {
	var bad []string
	for _, dep := range g[guestCommand] {
		if guestForbidden(dep) {
			bad = append(bad, guestCommand+" links "+dep+"; the guest engine (internal/proxycmd) must not need it")
		}
	}
	return bad
}

// TestGuestEngineDeps: the guest binary links no API machinery, however
// deep an import would bring it (the layer table sees only the module's
// own packages).
func TestGuestEngineDeps(t *testing.T) {
	cmd := exec.Command("go", "list", "-deps", "./"+guestCommand)
	cmd.Dir = filepath.Join("..", "..")
	out, err := cmd.Output()
	if err != nil {
		t.Fatalf("go list -deps %s: %v", guestCommand, err)
	}
	deps := strings.Fields(string(out))
	if !slices.Contains(deps, module+"internal/forwardproxy") {
		t.Fatalf("go list -deps %s does not list the forward proxy; the check would see nothing", guestCommand)
	}
	bad := checkGuest(map[string][]string{guestCommand: deps})
	if len(bad) > 0 {
		t.Errorf("the guest binary links API machinery (%d packages):\n  %s", len(bad), strings.Join(bad[:min(5, len(bad))], "\n  "))
	}
}

// TestCheckGuestCatches: the check refuses what it is there to refuse.
func TestCheckGuestCatches(t *testing.T) {
	catches(t, "checkGuest", checkGuest, []checkCase{
		{reason: "client-go, at any depth", g: map[string][]string{guestCommand: {"net/http", "k8s.io/client-go/rest"}}, want: 1},
		{reason: "sigs.k8s.io/yaml comes with the API machinery", g: map[string][]string{guestCommand: {"sigs.k8s.io/yaml"}}, want: 1},
		{reason: "OpenTelemetry and gRPC", g: map[string][]string{guestCommand: {"go.opentelemetry.io/otel", "google.golang.org/grpc/codes"}}, want: 2},
		{reason: "the forward proxy and Prometheus' client are what it needs", g: map[string][]string{guestCommand: {
			module + "internal/forwardproxy", "github.com/prometheus/client_golang/prometheus", "google.golang.org/protobuf/proto"}}, want: 0},
		{reason: "a name that only starts like a forbidden one is fine", g: map[string][]string{guestCommand: {"k8s.io.example/x"}}, want: 0},
	})
}
