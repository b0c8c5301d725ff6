package monitoring_test

import (
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
)

// TestRulesCheck: promtool check rules accepts the alerts.
func TestRulesCheck(t *testing.T) {
	dir, _ := writeRules(t)
	if out, err := promtool(t, dir, nil, "check", "rules", "rules.yaml"); err != nil {
		t.Fatalf("promtool check rules %s: %v\n%s", ruleFile, err, out)
	}
}

// TestRulesUnit runs testdata/alerts_test.yaml with promtool test rules:
// each alert fires when it should and stays quiet when it should not.
func TestRulesUnit(t *testing.T) {
	dir, _ := writeRules(t)
	copyFile(t, filepath.Join("testdata", "alerts_test.yaml"), filepath.Join(dir, "alerts_test.yaml"))
	if out, err := promtool(t, dir, nil, "test", "rules", "alerts_test.yaml"); err != nil {
		t.Fatalf("promtool test rules: %v\n%s", err, out)
	}
}

// TestEveryAlertIsTestedAndHasARunbook: each alert has a unit test that
// expects it to fire, a severity, a summary, and a runbook section in
// docs/monitoring.md that its runbook_url points at.
func TestEveryAlertIsTestedAndHasARunbook(t *testing.T) {
	_, g := writeRules(t)
	tests, err := os.ReadFile(filepath.Join("testdata", "alerts_test.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	doc, err := os.ReadFile(filepath.Join(repoRoot(t), "docs", "monitoring.md"))
	if err != nil {
		t.Fatal(err)
	}
	n := 0
	for _, grp := range g.Groups {
		for _, r := range grp.Rules {
			if r.Alert == "" {
				continue
			}
			n++
			// A test that expects it to fire: an exp_alerts list with an item
			// after its alertname.
			fires := regexp.MustCompile(`alertname: ` + r.Alert + `\n\s+exp_alerts:\n\s+- exp_labels`)
			if !fires.Match(tests) {
				t.Errorf("%s: no test in testdata/alerts_test.yaml expects it to fire", r.Alert)
			}
			if !strings.Contains(string(tests), "alertname: "+r.Alert+", exp_alerts: []") {
				t.Errorf("%s: no test in testdata/alerts_test.yaml expects it to stay quiet", r.Alert)
			}
			if r.Labels["severity"] != "warning" && r.Labels["severity"] != "critical" {
				t.Errorf("%s: severity %q, want warning or critical", r.Alert, r.Labels["severity"])
			}
			if r.Annotations["summary"] == "" || r.Annotations["description"] == "" {
				t.Errorf("%s: needs a summary and a description", r.Alert)
			}
			anchor := strings.ToLower(r.Alert)
			if want := "docs/monitoring.md#" + anchor; !strings.HasSuffix(r.Annotations["runbook_url"], want) {
				t.Errorf("%s: runbook_url %q, want one ending in %s", r.Alert, r.Annotations["runbook_url"], want)
			}
			if !regexp.MustCompile(`(?m)^### ` + r.Alert + `$`).Match(doc) {
				t.Errorf("%s: docs/monitoring.md has no section ### %s", r.Alert, r.Alert)
			}
		}
	}
	if n == 0 {
		t.Fatalf("%s holds no alerts", ruleFile)
	}
}
