package monitoring_test

import (
	"context"
	"encoding/json"
	"fmt"
	"net"
	"net/http"
	"net/http/httptest"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"sort"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"
	ctrlmetrics "sigs.k8s.io/controller-runtime/pkg/metrics"
	metricsserver "sigs.k8s.io/controller-runtime/pkg/metrics/server"

	crawlv1alpha1 "github.com/egress-proxies/egress-proxies-operator/api/v1alpha1"
	"github.com/egress-proxies/egress-proxies-operator/internal/controller"
	"github.com/egress-proxies/egress-proxies-operator/internal/probe"
	"github.com/egress-proxies/egress-proxies-operator/internal/provider"
	"github.com/egress-proxies/egress-proxies-operator/internal/testing/poll"
	"github.com/egress-proxies/egress-proxies-operator/internal/testing/pvelab"
	"github.com/egress-proxies/egress-proxies-operator/internal/testing/testenv"
)

var env *testenv.Env

func TestMain(m *testing.M) {
	os.Exit(testenv.Main(m, func(e *testenv.Env) { env = e }))
}

// loopbackPort returns a port free on 127.0.0.1 now.
func loopbackPort(t *testing.T) int {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = l.Close() }()
	a, ok := l.Addr().(*net.TCPAddr)
	if !ok {
		t.Fatalf("listener address %v", l.Addr())
	}
	return a.Port
}

// startPrometheus runs Debian's prometheus on loopback, scraping only the
// operator's and the gateways' metrics on loopback every second and
// evaluating the alerts, and returns its address. Each gateway's target has
// the labels the gateway PodMonitor's relabelling gives a pod's
// (config/prometheus/gateway_monitor.yaml).
func startPrometheus(ctx context.Context, t *testing.T, target string, gateways ...*gatewayTarget) string {
	t.Helper()
	dir, _ := writeRules(t)
	cfg := fmt.Sprintf(`global: {scrape_interval: 1s, evaluation_interval: 1s}
rule_files: [rules.yaml]
scrape_configs:
- job_name: egress-proxies-operator
  static_configs: [{targets: [%q]}]
- job_name: egress-proxies-gateways
  static_configs:
`, target)
	var b strings.Builder
	b.WriteString(cfg)
	for _, g := range gateways {
		fmt.Fprintf(&b, "  - {targets: [%q], labels: {namespace: %q, gateway: %q, pod: %q}}\n", g.metrics, g.namespace, g.name, g.name+"-0")
	}
	cfg = b.String()
	if err := os.WriteFile(filepath.Join(dir, "prometheus.yml"), []byte(cfg), 0o600); err != nil {
		t.Fatal(err)
	}
	addr := fmt.Sprintf("127.0.0.1:%d", loopbackPort(t))
	cmd := exec.CommandContext(ctx, need(t, "prometheus"), "--config.file="+filepath.Join(dir, "prometheus.yml"),
		"--storage.tsdb.path="+filepath.Join(dir, "data"), "--web.listen-address="+addr, "--log.level=warn")
	log, err := os.Create(filepath.Join(dir, "prometheus.log"))
	if err != nil {
		t.Fatal(err)
	}
	cmd.Stdout, cmd.Stderr = log, log
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		_ = cmd.Process.Kill()
		_ = cmd.Wait()
		if t.Failed() {
			out, _ := os.ReadFile(log.Name())
			t.Logf("prometheus log:\n%s", out)
		}
	})
	if err := poll.Wait(ctx, 2*time.Minute, func() (bool, string) {
		req, err := http.NewRequestWithContext(ctx, http.MethodGet, "http://"+addr+"/-/ready", nil)
		if err != nil {
			return false, err.Error()
		}
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			return false, err.Error()
		}
		_ = resp.Body.Close()
		return resp.StatusCode == http.StatusOK, "prometheus not ready: " + resp.Status
	}); err != nil {
		t.Fatal(err)
	}
	return addr
}

// promResult is an answer of /api/v1/query.
type promResult struct {
	Status string `json:"status"`
	Error  string `json:"error"`
	Data   struct {
		Result []struct {
			Metric map[string]string `json:"metric"`
			Value  [2]any            `json:"value"`
		} `json:"result"`
	} `json:"data"`
}

// query runs an instant query and returns how many series have a value
// that is a number (not NaN), or the query's error.
func query(ctx context.Context, addr, q string) (int, error) {
	u := "http://" + addr + "/api/v1/query?query=" + url.QueryEscape(q)
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, u, nil)
	if err != nil {
		return 0, err
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return 0, err
	}
	defer func() { _ = resp.Body.Close() }()
	var r promResult
	if err := json.NewDecoder(resp.Body).Decode(&r); err != nil {
		return 0, err
	}
	if r.Status != "success" {
		return 0, fmt.Errorf("%s", r.Error)
	}
	n := 0
	for _, s := range r.Data.Result {
		if v, _ := s.Value[1].(string); v != "NaN" {
			n++
		}
	}
	return n, nil
}

// dashboardQueries returns every target expression of every panel, with
// Grafana's $__rate_interval as 5m.
func dashboardQueries(t *testing.T) map[string]string {
	t.Helper()
	data, err := os.ReadFile(filepath.Join(repoRoot(t), "config", "prometheus", "dashboard", "egress-proxies.json"))
	if err != nil {
		t.Fatal(err)
	}
	var d struct {
		Panels []struct {
			Title   string `json:"title"`
			Type    string `json:"type"`
			Targets []struct {
				RefID string `json:"refId"`
				Expr  string `json:"expr"`
			} `json:"targets"`
		} `json:"panels"`
	}
	if err := json.Unmarshal(data, &d); err != nil {
		t.Fatal(err)
	}
	out := map[string]string{}
	for _, p := range d.Panels {
		if p.Type == "row" {
			continue
		}
		if len(p.Targets) == 0 {
			t.Errorf("panel %q has no query", p.Title)
		}
		for _, tg := range p.Targets {
			out[fmt.Sprintf("panel %q %s", p.Title, tg.RefID)] = strings.ReplaceAll(tg.Expr, "$__rate_interval", "5m")
		}
	}
	return out
}

// selectorRE finds the series selectors of an expression: the operator's
// metrics and up.
var selectorRE = regexp.MustCompile(`\b(egress_proxies_[a-z_]+|up)(\{[^}]*\})?`)

// alertQueries returns, for every alert, its expression and each series
// selector in it.
func alertQueries(t *testing.T) (exprs, selectors map[string]string) {
	t.Helper()
	_, g := writeRules(t)
	exprs, selectors = map[string]string{}, map[string]string{}
	for _, grp := range g.Groups {
		for _, r := range grp.Rules {
			exprs["alert "+r.Alert] = r.Expr
			for _, sel := range selectorRE.FindAllString(r.Expr, -1) {
				selectors[fmt.Sprintf("alert %s reads %s", r.Alert, sel)] = sel
			}
		}
	}
	return exprs, selectors
}

// TestPrometheusScrapesTheOperator runs the operator against the simulated
// Proxmox VE world, with its metrics on loopback, two gateways, and a real
// Prometheus scraping them; the world does what the panels and alerts are
// about (a pool, probes, a Failed Proxy, a vanished VM, a failed create, a
// probe that fails, an orphan for garbage collection, traffic through a
// gateway in front of the pool while a member stops, a gateway whose pool
// does not exist), and every dashboard query and every series the alerts
// read must return data, every alert expression evaluate, every rule be
// healthy.
func TestPrometheusScrapesTheOperator(t *testing.T) {
	testenv.Need(t, env)
	need(t, "prometheus")
	ctx, cancel := context.WithCancel(context.Background())
	t.Cleanup(cancel)

	ns := &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{GenerateName: "monitoring-"}}
	if err := env.Client.Create(ctx, ns); err != nil {
		t.Fatal(err)
	}
	echo := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		host, _, _ := net.SplitHostPort(r.RemoteAddr)
		_, _ = fmt.Fprintln(w, host)
	}))
	t.Cleanup(echo.Close)
	lab, err := pvelab.Start(ctx, pvelab.Options{Nodes: 2, Speed: 200, Guests: true, PollInterval: 20 * time.Millisecond,
		Dir: t.TempDir(), ProbeCheckURL: echo.URL + "/ip", ProbeDeniedURL: probe.DefaultDeniedURL})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(lab.Close)

	metricsAddr := fmt.Sprintf("127.0.0.1:%d", loopbackPort(t))
	stop, err := lab.StartOperator(ctx, pvelab.OperatorOptions{
		RestConfig: env.Config, Scheme: env.Scheme, Namespace: ns.Name,
		// Plain HTTP on loopback: the secure endpoint's authentication is
		// the cluster's, tested in internal/manifests and the cluster tier.
		Metrics:    metricsserver.Options{BindAddress: metricsAddr},
		Registerer: ctrlmetrics.Registry,
		Controller: controller.Options{
			PollInterval: 50 * time.Millisecond, ResyncInterval: 200 * time.Millisecond,
			HealthInterval: 200 * time.Millisecond,
			// Each entry's part of a GC pass must end within the
			// interval: long enough to delete the orphan's VM.
			GCInterval: 5 * time.Second, GCGracePeriod: time.Second,
			Prober: &probe.HTTP{Timeout: 2 * time.Second}, ProbeInterval: 200 * time.Millisecond, ProbeFailureThreshold: 2,
			PoolResyncInterval: 500 * time.Millisecond,
		},
	})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = stop() })
	// A gateway in front of the pool below, and one whose pool does not
	// exist: it has no member (EgressProxiesGatewayNoMembers).
	front := startGateway(ctx, t, ns.Name, "front", "crawl")
	typo := startGateway(ctx, t, ns.Name, "typo", "no-such-pool")
	prom := startPrometheus(ctx, t, metricsAddr, front, typo)

	// The lab has a zone per node: a lone Proxy names one (a pool spreads).
	spec := crawlv1alpha1.ProxySpec{Provider: pvelab.EntryName, Zone: lab.Zones[0], MachineType: pvelab.MachineType, Image: pvelab.Image}
	create := func(o client.Object) {
		t.Helper()
		if err := env.Client.Create(ctx, o); err != nil {
			t.Fatal(err)
		}
	}
	// A pool of three: pools, create-to-ready, provider calls, probes,
	// egress addresses.
	create(&crawlv1alpha1.ProxyPool{
		ObjectMeta: metav1.ObjectMeta{Namespace: ns.Name, Name: "crawl"},
		Spec:       crawlv1alpha1.ProxyPoolSpec{Replicas: ptr.To[int32](3), Template: crawlv1alpha1.ProxyTemplate{Spec: spec}},
	})
	// A Proxy of an image the entry lacks: phase Failed.
	bad := spec
	bad.Image = "no-such-image"
	create(&crawlv1alpha1.Proxy{ObjectMeta: metav1.ObjectMeta{Namespace: ns.Name, Name: "failed"}, Spec: bad})
	// A lone Proxy whose VM vanishes: a replacement, NotFound errors.
	create(&crawlv1alpha1.Proxy{ObjectMeta: metav1.ObjectMeta{Namespace: ns.Name, Name: "vanishing"}, Spec: spec})
	// The first clone call fails: a failed create.
	lab.Sim.FailNext(http.MethodPost, "/nodes/{node}/qemu/{vmid}/clone", 1, http.StatusInternalServerError, "simulated clone failure")

	vmOf := func(name string) int {
		t.Helper()
		var p crawlv1alpha1.Proxy
		waitFor(ctx, t, 3*time.Minute, func() (bool, string) {
			if err := env.Client.Get(ctx, client.ObjectKey{Namespace: ns.Name, Name: name}, &p); err != nil {
				return false, err.Error()
			}
			return p.Status.Phase == crawlv1alpha1.ProxyPhaseReady, fmt.Sprintf("Proxy %s is %s, not Ready (conditions %+v)", name, p.Status.Phase, p.Status.Conditions)
		})
		for _, vm := range lab.Clones() {
			if vm.Name == p.Status.InstanceName {
				return vm.VMID
			}
		}
		t.Fatalf("no VM named %s", p.Status.InstanceName)
		return 0
	}
	if !lab.Sim.Vanish(vmOf("vanishing")) {
		t.Fatal("the VM of Proxy vanishing did not vanish")
	}
	// An orphan: an instance of this installation whose Proxy does not
	// exist, made through the entry's provider as the operator makes them.
	prov, err := lab.NewProvider()
	if err != nil {
		t.Fatal(err)
	}
	orphan := provider.Request{OwnerUID: "uid-of-a-deleted-proxy", Owner: provider.ObjectRef{Namespace: ns.Name, Name: "gone"},
		Name: "orphan-" + ns.Name, Zone: lab.Zones[0], MachineType: pvelab.MachineType, Image: pvelab.Image,
		UserData: provider.NewSensitive([]byte("#cloud-config\n"))}
	waitFor(ctx, t, 3*time.Minute, func() (bool, string) {
		_, err := prov.Create(ctx, orphan)
		return err == nil, fmt.Sprintf("creating the orphan: %v", err)
	})
	// A pool member whose proxy stops answering: probe failures, then a
	// rotation.
	var members crawlv1alpha1.ProxyList
	waitFor(ctx, t, 3*time.Minute, func() (bool, string) {
		if err := env.Client.List(ctx, &members, client.InNamespace(ns.Name), client.MatchingLabels{crawlv1alpha1.LabelPool: "crawl"}); err != nil {
			return false, err.Error()
		}
		ready := 0
		for _, m := range members.Items {
			if m.Status.Phase == crawlv1alpha1.ProxyPhaseReady {
				ready++
			}
		}
		return ready == 3, fmt.Sprintf("%d of 3 pool members Ready", ready)
	})
	// Traffic through the gateway from when it has the three members on:
	// the member stopped below fails its requests at the gateway (failures,
	// retries, an ejection) before the operator replaces it.
	waitFor(ctx, t, 3*time.Minute, func() (bool, string) {
		return front.set.Len() == 3, fmt.Sprintf("the gateway has %d of 3 members", front.set.Len())
	})
	traffic, stopTraffic := context.WithCancel(ctx)
	sent := make(chan struct{})
	go func() { defer close(sent); sendTraffic(traffic, front, echo.URL) }()
	t.Cleanup(func() { stopTraffic(); <-sent })
	lab.StopGuestProxy(vmOf(members.Items[0].Name))

	// Every query returns data once the world has made it.
	queries := dashboardQueries(t)
	exprs, selectors := alertQueries(t)
	for k, v := range selectors {
		queries[k] = v
	}
	pending := map[string]string{}
	for k, v := range queries {
		pending[k] = v
	}
	waitFor(ctx, t, 5*time.Minute, func() (bool, string) {
		var errs []string
		for name, q := range pending {
			n, err := query(ctx, prom, q)
			switch {
			case err != nil:
				errs = append(errs, fmt.Sprintf("%s: %s: %v", name, q, err))
			case n > 0:
				delete(pending, name)
			}
		}
		if len(errs) > 0 {
			t.Fatalf("queries failed:\n%s", strings.Join(errs, "\n"))
		}
		var left []string
		for name, q := range pending {
			left = append(left, name+": "+q)
		}
		sort.Strings(left)
		return len(pending) == 0, fmt.Sprintf("%d of %d queries return no data yet:\n%s", len(pending), len(queries), strings.Join(left, "\n"))
	})
	for name, q := range exprs {
		if _, err := query(ctx, prom, q); err != nil {
			t.Errorf("%s: %v", name, err)
		}
	}
	// The rules evaluate without error; the Failed Proxy has its alert
	// pending (its for: is 5 minutes).
	var rules struct {
		Data struct {
			Groups []struct {
				Rules []struct {
					Name      string `json:"name"`
					Health    string `json:"health"`
					LastError string `json:"lastError"`
				} `json:"rules"`
			} `json:"groups"`
		} `json:"data"`
	}
	if err := json.Unmarshal(httpGet(ctx, t, "http://"+prom+"/api/v1/rules"), &rules); err != nil {
		t.Fatal(err)
	}
	for _, g := range rules.Data.Groups {
		for _, r := range g.Rules {
			if r.Health != "ok" {
				t.Errorf("rule %s: health %s: %s", r.Name, r.Health, r.LastError)
			}
		}
	}
	for _, a := range []string{
		`ALERTS{alertname="EgressProxiesProxiesFailed",alertstate="pending"}`,
		// Its for: is 5 minutes too.
		`ALERTS{alertname="EgressProxiesGatewayNoMembers",alertstate="pending",gateway="typo"}`,
	} {
		waitFor(ctx, t, time.Minute, func() (bool, string) {
			n, err := query(ctx, prom, a)
			return err == nil && n > 0, fmt.Sprintf("%s has no series (%v)", a, err)
		})
	}
	lintGatewayMetrics(t, front)
	// The gateway in front of the pool has members: no alert of it.
	if n, err := query(ctx, prom, `ALERTS{alertname="EgressProxiesGatewayNoMembers",gateway="front"}`); err != nil || n > 0 {
		t.Errorf("EgressProxiesGatewayNoMembers for the gateway with members: %d series (%v)", n, err)
	}
}

// waitFor polls cond until it holds, failing the test at timeout or when ctx
// ends.
func waitFor(ctx context.Context, t *testing.T, timeout time.Duration, cond func() (bool, string)) {
	t.Helper()
	if err := poll.Wait(ctx, timeout, cond); err != nil {
		t.Fatal(err)
	}
}
