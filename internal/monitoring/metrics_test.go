package monitoring_test

import (
	"bytes"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/common/expfmt"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"sigs.k8s.io/controller-runtime/pkg/client/fake"

	crawlv1alpha1 "github.com/egress-proxies/egress-proxies-operator/api/v1alpha1"
	"github.com/egress-proxies/egress-proxies-operator/internal/metrics"
)

// operatorMetrics returns the operator's own metrics in the text format,
// each with one series, and their names.
func operatorMetrics(t *testing.T) ([]byte, []string) {
	t.Helper()
	reg := prometheus.NewRegistry()
	m, err := metrics.New(reg)
	if err != nil {
		t.Fatal(err)
	}
	m.ProviderCallDuration.WithLabelValues("lab", "proxmox", "create", metrics.OutcomeOK).Observe(0.2)
	m.ProviderCallErrors.WithLabelValues("lab", "proxmox", "create", "Transient").Inc()
	m.CreateToReady.WithLabelValues("lab").Observe(40)
	m.Replacements.WithLabelValues("lab", "vanished").Inc()
	m.GCDeletions.WithLabelValues("lab").Inc()
	m.GCLastSuccess.WithLabelValues("lab").SetToCurrentTime()
	m.OwnershipUnverified.WithLabelValues("lab").Set(2)
	m.ProbeDuration.WithLabelValues("lab").Observe(0.05)
	m.ProbeFailures.WithLabelValues("lab").Inc()
	m.PoolMembers.WithLabelValues("crawlers", "crawl").Set(3)
	m.PoolServing.WithLabelValues("crawlers", "crawl").Set(2)
	m.PoolRotations.WithLabelValues("crawlers", "crawl", "maxAge").Inc()

	s := runtime.NewScheme()
	if err := crawlv1alpha1.AddToScheme(s); err != nil {
		t.Fatal(err)
	}
	p := &crawlv1alpha1.Proxy{ObjectMeta: metav1.ObjectMeta{Namespace: "crawlers", Name: "a"}}
	p.Spec.Provider, p.Status.Phase, p.Status.EgressIP = "lab", crawlv1alpha1.ProxyPhaseReady, "198.51.100.1"
	h := &crawlv1alpha1.ProviderHealth{ObjectMeta: metav1.ObjectMeta{Name: "lab"}}
	h.Status.Type = "proxmox"
	h.Status.Conditions = []metav1.Condition{{Type: crawlv1alpha1.ConditionHealthy, Status: metav1.ConditionTrue, Reason: "AllTargetsHealthy"}}
	pool := &crawlv1alpha1.ProxyPool{ObjectMeta: metav1.ObjectMeta{Namespace: "crawlers", Name: "crawl"}}
	reader := fake.NewClientBuilder().WithScheme(s).WithObjects(p, h, pool).Build()
	reg.MustRegister(&metrics.ProxiesCollector{Reader: reader}, &metrics.ObjectsCollector{Reader: reader})

	families, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	var buf bytes.Buffer
	enc := expfmt.NewEncoder(&buf, expfmt.NewFormat(expfmt.TypeTextPlain))
	var names []string
	for _, f := range families {
		if len(f.GetMetric()) == 0 {
			t.Errorf("%s has no series here: give it one, or promtool does not see it", f.GetName())
		}
		names = append(names, f.GetName())
		if err := enc.Encode(f); err != nil {
			t.Fatal(err)
		}
	}
	return buf.Bytes(), names
}

// TestMetricsLint lists the operator's metrics and checks them with
// promtool check metrics: base units, _total on counters, no reserved
// suffixes, help on every metric. Each is also documented.
func TestMetricsLint(t *testing.T) {
	text, names := operatorMetrics(t)
	// 12 collectors of metrics.New, 2 of ProxiesCollector, 2 of ObjectsCollector.
	if len(names) != 16 {
		t.Errorf("%d metrics listed, want 16: %v", len(names), names)
	}
	if out, err := promtool(t, t.TempDir(), text, "check", "metrics"); err != nil || strings.TrimSpace(out) != "" {
		t.Errorf("promtool check metrics: %v\n%s", err, out)
	}
	doc, err := os.ReadFile(filepath.Join(repoRoot(t), "docs", "configuration.md"))
	if err != nil {
		t.Fatal(err)
	}
	for _, n := range names {
		if !strings.Contains(string(doc), "| `"+n+"` |") {
			t.Errorf("%s is not in the metrics table of docs/configuration.md", n)
		}
	}
}

// TestMetricsLintFails: promtool does complain about a metric that breaks
// the conventions, so the lint above can fail.
func TestMetricsLintFails(t *testing.T) {
	bad := "# HELP egress_proxies_probe_failures Failed probes.\n# TYPE egress_proxies_probe_failures counter\negress_proxies_probe_failures 1\n"
	out, err := promtool(t, t.TempDir(), []byte(bad), "check", "metrics")
	if err == nil && !strings.Contains(out, "_total") {
		t.Errorf("promtool check metrics passed a counter without _total:\n%s", out)
	}
}
