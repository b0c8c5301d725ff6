package monitoring_test

import (
	"bytes"
	"context"
	"encoding/json"
	"os"
	"os/exec"
	"path/filepath"
	"testing"
	"time"

	"sigs.k8s.io/yaml"

	"github.com/egress-proxies/egress-proxies-operator/internal/testing/modroot"
)

// repoRoot is the repository's root directory.
func repoRoot(t *testing.T) string {
	t.Helper()
	root, err := modroot.Find()
	if err != nil {
		t.Fatal(err)
	}
	return root
}

// need returns the path of a binary of Debian's prometheus package.
func need(t *testing.T, name string) string {
	t.Helper()
	p, err := exec.LookPath(name)
	if err != nil {
		t.Fatalf("%s not found: run hack/prometheus/install.sh (make test does), which installs Debian's prometheus package", name)
	}
	return p
}

// promtool runs promtool in dir with stdin and returns its combined output.
func promtool(t *testing.T, dir string, stdin []byte, args ...string) (string, error) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	cmd := exec.CommandContext(ctx, need(t, "promtool"), args...)
	cmd.Dir = dir
	cmd.Stdin = bytes.NewReader(stdin)
	out, err := cmd.CombinedOutput()
	return string(out), err
}

// ruleFile is the alerts' source, a PrometheusRule.
const ruleFile = "config/prometheus/rules/prometheus_rule.yaml"

// ruleGroups is the spec of the PrometheusRule: a Prometheus rules file.
type ruleGroups struct {
	Groups []struct {
		Name  string `json:"name"`
		Rules []struct {
			Alert       string            `json:"alert"`
			Expr        string            `json:"expr"`
			For         string            `json:"for"`
			Labels      map[string]string `json:"labels"`
			Annotations map[string]string `json:"annotations"`
		} `json:"rules"`
	} `json:"groups"`
}

// loadRules reads the PrometheusRule and returns its spec, parsed and as a
// rules file's YAML.
func loadRules(t *testing.T) (*ruleGroups, []byte) {
	t.Helper()
	data, err := os.ReadFile(filepath.Join(repoRoot(t), ruleFile))
	if err != nil {
		t.Fatal(err)
	}
	var pr struct {
		Kind string          `json:"kind"`
		Spec json.RawMessage `json:"spec"`
	}
	if err := yaml.Unmarshal(data, &pr); err != nil {
		t.Fatalf("%s: %v", ruleFile, err)
	}
	if pr.Kind != "PrometheusRule" {
		t.Fatalf("%s: kind %q, want PrometheusRule", ruleFile, pr.Kind)
	}
	var g ruleGroups
	if err := json.Unmarshal(pr.Spec, &g); err != nil {
		t.Fatalf("%s: spec: %v", ruleFile, err)
	}
	spec, err := yaml.JSONToYAML(pr.Spec)
	if err != nil {
		t.Fatal(err)
	}
	return &g, spec
}

// writeRules writes the rules file into a new directory and returns it.
func writeRules(t *testing.T) (string, *ruleGroups) {
	t.Helper()
	g, spec := loadRules(t)
	dir := t.TempDir()
	if err := os.WriteFile(filepath.Join(dir, "rules.yaml"), spec, 0o600); err != nil {
		t.Fatal(err)
	}
	return dir, g
}

func copyFile(t *testing.T, src, dst string) {
	t.Helper()
	data, err := os.ReadFile(src)
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(dst, data, 0o600); err != nil {
		t.Fatal(err)
	}
}
