package manifests

import (
	"bytes"
	"context"
	"fmt"
	"io/fs"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"sort"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/yaml"
)

// The chart, as a release named like the reference prefix installs it into
// the reference namespace: its names are then config/default's.
const (
	chartDir       = "charts/egress-proxies-operator"
	releaseName    = "egress-proxies-operator"
	releaseNS      = "egress-proxies-system"
	allOnValues    = chartDir + "/ci/all-on-values.yaml"
	helmCmdTimeout = 20 * time.Minute
)

var (
	helmOnce sync.Once
	helmPath string
	errHelm  error
)

// helmBin returns the helm pinned in tools/go.mod, built once per test
// binary by `go tool -n` (the first build takes minutes on a loaded machine).
func helmBin(t *testing.T) string {
	t.Helper()
	helmOnce.Do(func() {
		goBin, err := exec.LookPath("go")
		if err != nil {
			errHelm = fmt.Errorf("building helm needs go on the PATH: %w", err)
			return
		}
		ctx, cancel := context.WithTimeout(context.Background(), helmCmdTimeout)
		defer cancel()
		cmd := exec.CommandContext(ctx, goBin, "tool", "-modfile=tools/go.mod", "-n", "helm")
		cmd.Dir = repoRoot(t)
		var stderr bytes.Buffer
		cmd.Stderr = &stderr
		out, err := cmd.Output()
		if err != nil {
			errHelm = fmt.Errorf("building helm from tools/go.mod: %w: %s", err, stderr.String())
			return
		}
		helmPath = strings.TrimSpace(string(out))
	})
	if errHelm != nil {
		t.Fatal(errHelm)
	}
	return helmPath
}

// runHelm runs the pinned helm at the repository root and returns its
// standard output, or an error holding its standard error.
func runHelm(t *testing.T, args ...string) (string, error) {
	t.Helper()
	bin := helmBin(t)
	ctx, cancel := context.WithTimeout(context.Background(), helmCmdTimeout)
	defer cancel()
	cmd := exec.CommandContext(ctx, bin, args...)
	cmd.Dir = repoRoot(t)
	home := t.TempDir()
	// No repositories, no cache, no kubeconfig of the machine's.
	cmd.Env = []string{"HOME=" + home, "PATH=" + os.Getenv("PATH"), "HELM_CACHE_HOME=" + home + "/cache",
		"HELM_CONFIG_HOME=" + home + "/config", "HELM_DATA_HOME=" + home + "/data", "KUBECONFIG=" + home + "/none"}
	var stdout, stderr bytes.Buffer
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	if err := cmd.Run(); err != nil {
		return stdout.String(), fmt.Errorf("helm %s: %w: %s%s", strings.Join(args, " "), err, stderr.String(), stdout.String())
	}
	return stdout.String(), nil
}

// renderChart runs `helm template` on the chart with extra arguments
// (-f file, --set k=v) and returns one YAML document per object.
func renderChart(t *testing.T, extra ...string) ([][]byte, error) {
	t.Helper()
	args := append([]string{"template", releaseName, chartDir, "--namespace", releaseNS}, extra...)
	out, err := runHelm(t, args...)
	if err != nil {
		return nil, err
	}
	return splitDocs(out), nil
}

func mustRenderChart(t *testing.T, extra ...string) [][]byte {
	t.Helper()
	docs, err := renderChart(t, extra...)
	if err != nil {
		t.Fatal(err)
	}
	return docs
}

var docSeparator = regexp.MustCompile(`(?m)^---\s*$`)

// splitDocs splits a multi-document YAML stream, dropping documents that
// hold only comments.
func splitDocs(s string) [][]byte {
	var docs [][]byte
	for _, d := range docSeparator.Split(s, -1) {
		var m map[string]any
		if err := yaml.Unmarshal([]byte(d), &m); err == nil && len(m) == 0 {
			continue
		}
		docs = append(docs, []byte(d))
	}
	return docs
}

// object is one rendered object as plain data.
type object = map[string]any

type objKey struct{ kind, namespace, name string }

func (k objKey) String() string { return k.kind + " " + k.namespace + "/" + k.name }

// index decodes every document and keys it by kind, namespace and name.
func index(t *testing.T, docs [][]byte) map[objKey]object {
	t.Helper()
	out := map[objKey]object{}
	for _, d := range docs {
		var o object
		if err := yaml.Unmarshal(d, &o); err != nil {
			t.Fatalf("decoding %.80q: %v", d, err)
		}
		md, _ := o["metadata"].(map[string]any)
		ns, _ := md["namespace"].(string)
		name, _ := md["name"].(string)
		k := objKey{fmt.Sprint(o["kind"]), ns, name}
		if _, dup := out[k]; dup {
			t.Fatalf("%s is rendered twice", k)
		}
		out[k] = o
	}
	return out
}

// at walks o along path and returns the map there, or nil.
func at(o object, path ...string) map[string]any {
	cur := o
	for _, p := range path {
		next, ok := cur[p].(map[string]any)
		if !ok {
			return nil
		}
		cur = next
	}
	return cur
}

// helmLabels are the labels Helm's conventions add to every object, and the
// one kustomize's objects carry instead.
var helmLabels = []string{"helm.sh/chart", "app.kubernetes.io/instance", "app.kubernetes.io/version", "app.kubernetes.io/managed-by"}

// podTemplate returns the pod template's metadata of a Deployment, or nil.
func podTemplateMeta(o object) map[string]any { return at(o, "spec", "template", "metadata") }

// managerContainer returns the manager container of a Deployment.
func managerContainer(o object) map[string]any {
	spec := at(o, "spec", "template", "spec")
	cs, _ := spec["containers"].([]any)
	for _, c := range cs {
		if m, ok := c.(map[string]any); ok && m["name"] == "manager" {
			return m
		}
	}
	return nil
}

// chartDifference is a difference between the chart's default render and
// config/default's that is intended. apply removes it from the two renders
// (kustomize's, the chart's) and reports whether it found it: a named
// difference that no longer exists is stale and fails the test too.
type chartDifference struct {
	name   string
	reason string
	apply  func(kust, chart map[objKey]object) bool
}

var chartDifferences = []chartDifference{
	{
		name: "operator namespace not rendered",
		reason: "Helm installs into an existing namespace (helm install --create-namespace), which an uninstall leaves, " +
			"with the ownership key Secret in it; config/default renders egress-proxies-system",
		apply: func(kust, _ map[objKey]object) bool {
			k := objKey{"Namespace", "", releaseNS}
			_, ok := kust[k]
			delete(kust, k)
			return ok
		},
	},
	{
		name:   "Helm's labels",
		reason: "every chart object carries helm.sh/chart, app.kubernetes.io/instance, version and managed-by Helm; kustomize's say managed-by kustomize",
		apply: func(kust, chart map[objKey]object) bool {
			found := false
			for _, objs := range []map[objKey]object{kust, chart} {
				for _, o := range objs {
					labels := at(o, "metadata", "labels")
					for _, l := range helmLabels {
						if _, ok := labels[l]; ok {
							found = true
							delete(labels, l)
						}
					}
				}
			}
			return found
		},
	},
	{
		name:   "labels on generated objects",
		reason: "controller-gen writes the CRDs and the roles of role.yaml without labels; the chart labels everything it installs",
		apply: func(kust, chart map[objKey]object) bool {
			found := false
			for k, o := range chart {
				ko, ok := kust[k]
				if !ok || at(ko, "metadata", "labels") != nil {
					continue
				}
				if labels := at(o, "metadata", "labels"); labels != nil {
					delete(labels, "app.kubernetes.io/name")
					if len(labels) == 0 {
						delete(at(o, "metadata"), "labels")
					}
					found = true
				}
			}
			return found
		},
	},
	{
		name:   "kept on uninstall",
		reason: "CRDs and created Namespaces carry helm.sh/resource-policy: keep: deleting them deletes every Proxy, or the Proxies and proxy pods in them",
		apply: func(_, chart map[objKey]object) bool {
			found := false
			for k, o := range chart {
				if k.kind != "CustomResourceDefinition" && k.kind != "Namespace" {
					continue
				}
				ann := at(o, "metadata", "annotations")
				if ann["helm.sh/resource-policy"] == "keep" {
					found = true
					delete(ann, "helm.sh/resource-policy")
					if len(ann) == 0 {
						delete(at(o, "metadata"), "annotations")
					}
				}
			}
			return found
		},
	},
	{
		name:   "pod instance label",
		reason: "the pods carry app.kubernetes.io/instance, as Helm users filter by; the selector stays config/default's, so a Deployment moved from kustomize to Helm keeps it",
		apply: func(_, chart map[objKey]object) bool {
			found := false
			for k, o := range chart {
				if k.kind == "Deployment" {
					labels := at(podTemplateMeta(o), "labels")
					if _, ok := labels["app.kubernetes.io/instance"]; ok {
						found = true
						delete(labels, "app.kubernetes.io/instance")
					}
				}
			}
			return found
		},
	},
	{
		name:   "providers checksum",
		reason: "the operator reads its configuration once, at start: a change to the chart's ConfigMap rolls the pods",
		apply: func(_, chart map[objKey]object) bool {
			found := false
			for k, o := range chart {
				if k.kind == "Deployment" {
					ann := at(podTemplateMeta(o), "annotations")
					if _, ok := ann["checksum/providers-config"]; ok {
						found = true
						delete(ann, "checksum/providers-config")
					}
				}
			}
			return found
		},
	},
	{
		name:   "image tag",
		reason: "the chart's image tag defaults to its appVersion, a release; config/default's is dev, the local build's",
		apply: func(kust, chart map[objKey]object) bool {
			found := false
			for _, objs := range []map[objKey]object{kust, chart} {
				for k, o := range objs {
					if k.kind != "Deployment" {
						continue
					}
					c := managerContainer(o)
					if c == nil {
						continue
					}
					image, _ := c["image"].(string)
					repo, _, _ := strings.Cut(image, ":")
					c["image"] = repo + ":TAG"
					env, _ := c["env"].([]any)
					for _, e := range env {
						if m, ok := e.(map[string]any); ok && m["name"] == "OPERATOR_IMAGE" && m["value"] == image {
							m["value"] = repo + ":TAG"
						}
					}
					found = found || repo != image
				}
			}
			return found
		},
	},
	{
		name:   "probe defaults spelled out",
		reason: "values.yaml shows timeoutSeconds 1 and failureThreshold 3, Kubernetes' defaults, so that they can be found and changed",
		apply: func(kust, chart map[objKey]object) bool {
			found := false
			for k, o := range chart {
				c := managerContainer(o)
				if k.kind != "Deployment" || c == nil {
					continue
				}
				kc := managerContainer(kust[k])
				for _, p := range []string{"livenessProbe", "readinessProbe"} {
					probe, _ := c[p].(map[string]any)
					kprobe, _ := kc[p].(map[string]any)
					for field, def := range map[string]float64{"timeoutSeconds": 1, "failureThreshold": 3} {
						if _, inKust := kprobe[field]; !inKust && probe[field] == def {
							delete(probe, field)
							found = true
						}
					}
				}
			}
			return found
		},
	},
}

// compareRenders compares two renders object by object after removing the
// named differences, and reports every other difference.
func compareRenders(t *testing.T, kust, chart map[objKey]object, diffs []chartDifference) {
	t.Helper()
	for _, d := range diffs {
		if !d.apply(kust, chart) {
			t.Errorf("named difference %q (%s) is not in the renders any more: remove it from chartDifferences", d.name, d.reason)
		}
	}
	var keys []objKey
	seen := map[objKey]bool{}
	for k := range kust {
		keys, seen[k] = append(keys, k), true
	}
	for k := range chart {
		if !seen[k] {
			keys = append(keys, k)
		}
	}
	sort.Slice(keys, func(i, j int) bool { return keys[i].String() < keys[j].String() })
	for _, k := range keys {
		ko, inKust := kust[k]
		co, inChart := chart[k]
		switch {
		case !inChart:
			t.Errorf("%s: rendered by kustomize, not by the chart", k)
		case !inKust:
			t.Errorf("%s: rendered by the chart, not by kustomize", k)
		default:
			if diff := cmp.Diff(ko, co); diff != "" {
				t.Errorf("%s differs (-kustomize +chart):\n%s", k, diff)
			}
		}
	}
}

// TestChartMatchesKustomize renders the chart with its default values and
// config/default, and compares them object by object: every difference is
// either one of chartDifferences, with its reason, or a failure.
func TestChartMatchesKustomize(t *testing.T) {
	compareRenders(t, index(t, renderDocs(t, "config/default")), index(t, mustRenderChart(t)), chartDifferences)
}

// TestChartAllNamespacesMatchesKustomize: servedNamespaces.all is the
// chart's config/all-namespaces.
func TestChartAllNamespacesMatchesKustomize(t *testing.T) {
	kust := index(t, renderDocsIn(t, swappedConfigTree(t, "- ../namespaces\n", "- ../all-namespaces\n"), "/config/default"))
	chart := index(t, mustRenderChart(t, "--set", "servedNamespaces.all=true"))
	compareRenders(t, kust, chart, chartDifferences)
}

// TestChartPassesTheDefaultChecks runs the checks of config/default on the
// chart's default render and on the one with every optional part on: the
// names resolve, the operator has its rights and no more, runs locked down,
// and mounts what it reads.
func TestChartPassesTheDefaultChecks(t *testing.T) {
	for _, tt := range []struct {
		name  string
		extra []string
	}{
		{"default values", nil},
		{"every optional part on", []string{"-f", allOnValues}},
	} {
		t.Run(tt.name, func(t *testing.T) {
			var core [][]byte
			for _, d := range mustRenderChart(t, tt.extra...) {
				switch kindOf(t, d) {
				case "ServiceMonitor", "PodMonitor", "PrometheusRule", "PodDisruptionBudget", "NetworkPolicy":
					// Checked by TestChartOptionalParts.
				default:
					core = append(core, d)
				}
			}
			b, err := decode(decoder(t), core)
			if err != nil {
				t.Fatal(err)
			}
			// helm install --create-namespace makes the release namespace;
			// Grafana's, where the dashboard goes, exists.
			for _, ns := range []string{releaseNS, "monitoring"} {
				b.Namespaces = append(b.Namespaces, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: ns}})
			}
			if err := runDefaultChecks(b); err != nil {
				t.Error(err)
			}
		})
	}
}

func kindOf(t *testing.T, doc []byte) string {
	t.Helper()
	var o struct{ Kind string }
	if err := yaml.Unmarshal(doc, &o); err != nil {
		t.Fatal(err)
	}
	return o.Kind
}

// TestChartLint runs `helm lint --strict` with the default values and with
// every optional part on.
func TestChartLint(t *testing.T) {
	for _, extra := range [][]string{nil, {"-f", allOnValues}} {
		if out, err := runHelm(t, append([]string{"lint", "--strict", chartDir}, extra...)...); err != nil {
			t.Errorf("helm lint %v: %v\n%s", extra, err, out)
		}
	}
}

// TestChartFilesAreCopies: what the chart reads with .Files is a byte-for-
// byte copy of config/ (make generate copies it; verify-generated fails when
// it was not run): one source for the CRDs, the RBAC rules, the providers
// configuration, the alerts, the dashboard and the gateways' PodMonitor.
func TestChartFilesAreCopies(t *testing.T) {
	root := repoRoot(t)
	sources := map[string]string{
		"files/providers.yaml":                          "config/manager/providers.yaml",
		"files/monitoring/prometheus_rule.yaml":         "config/prometheus/rules/prometheus_rule.yaml",
		"files/monitoring/egress-proxies.json":          "config/prometheus/dashboard/egress-proxies.json",
		"files/monitoring/gateway_monitor.yaml":         "config/prometheus/gateway_monitor.yaml",
		"files/rbac/role.yaml":                          "config/rbac/role.yaml",
		"files/rbac/leader_election_role.yaml":          "config/rbac/leader_election_role.yaml",
		"files/rbac/ownership_key_role.yaml":            "config/rbac/ownership_key_role.yaml",
		"files/rbac/metrics_auth_role.yaml":             "config/rbac/metrics_auth_role.yaml",
		"files/rbac/metrics_reader_role.yaml":           "config/rbac/metrics_reader_role.yaml",
		"files/rbac/gateway_ban_editor_role.yaml":       "config/rbac/gateway_ban_editor_role.yaml",
		"files/rbac/proxygateway_editor_role.yaml":      "config/rbac/proxygateway_editor_role.yaml",
		"files/admission/proxygateway_spec_policy.yaml": "config/admission/proxygateway_spec_policy.yaml",
	}
	crds, err := filepath.Glob(filepath.Join(root, "config", "crd", "bases", "*.yaml"))
	if err != nil || len(crds) == 0 {
		t.Fatalf("no CRDs in config/crd/bases (%v)", err)
	}
	for _, c := range crds {
		sources["files/crds/"+filepath.Base(c)] = "config/crd/bases/" + filepath.Base(c)
	}
	err = filepath.WalkDir(filepath.Join(root, chartDir, "files"), func(path string, d fs.DirEntry, err error) error {
		if err != nil || d.IsDir() {
			return err
		}
		rel, err := filepath.Rel(filepath.Join(root, chartDir), path)
		if _, ok := sources[rel]; !ok && err == nil {
			t.Errorf("%s/%s is a copy of nothing: remove it (make chart-files)", chartDir, rel)
		}
		return err
	})
	if err != nil {
		t.Fatal(err)
	}
	for dst, src := range sources {
		want, err := os.ReadFile(filepath.Join(root, src))
		if err != nil {
			t.Fatal(err)
		}
		got, err := os.ReadFile(filepath.Join(root, chartDir, dst))
		if err != nil || !bytes.Equal(got, want) {
			t.Errorf("%s/%s is not a copy of %s: run make generate", chartDir, dst, src)
		}
	}
}

// TestChartSchemaRefuses: values.schema.json refuses each kind of bad value
// with a message that names the value's path, and the templates refuse what
// a schema cannot see.
func TestChartSchemaRefuses(t *testing.T) {
	tests := []struct {
		name   string
		reason string
		set    []string
		want   []string
	}{
		{"unknown key", "a misspelt key would be ignored silently", []string{"replicas=2"},
			[]string{"additional properties 'replicas' not allowed"}},
		{"unknown nested key", "the same, one level down", []string{"image.name=x"},
			[]string{"at '/image'", "additional properties 'name' not allowed"}},
		{"wrong type", "a number where a count belongs", []string{"replicaCount=two"},
			[]string{"at '/replicaCount'", "got string, want integer"}},
		{"not in the enum", "Kubernetes knows three pull policies", []string{"image.pullPolicy=Sometimes"},
			[]string{"at '/image/pullPolicy'", "value must be one of 'Always', 'IfNotPresent', 'Never'"}},
		{"not a DNS label", "the installation ID goes into every instance's mark", []string{"installationID=Prod_EU"},
			[]string{"at '/installationID'"}},
		{"out of range", "a port is at most 65535", []string{"metrics.port=70000"},
			[]string{"at '/metrics/port'", "maximum"}},
		{"not a duration", "the operator's flags parse Go durations", []string{"controller.pollInterval=ten"},
			[]string{"at '/controller/pollInterval'", "does not match pattern"}},
		{"no served namespace", "a RoleBinding per namespace, and at least one, unless every namespace is served", []string{"servedNamespaces.names=null"},
			[]string{"at '/servedNamespaces"}},
		{"both providers sources", "an inline configuration and an existing ConfigMap exclude each other",
			[]string{"providers.config=providers: []", "providers.existingConfigMap=mine"},
			[]string{"at '/providers'"}},
		{"extra argument without dashes", "the manager's flags start with --", []string{"extraArgs[0]=leader-elect"},
			[]string{"at '/extraArgs/0'"}},
		{"served namespace is the release namespace", "creating it would make an uninstall delete the operator's own namespace",
			[]string{"servedNamespaces.names[0]=" + releaseNS},
			[]string{"namespace egress-proxies-system is the release namespace"}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			var args []string
			for _, s := range tt.set {
				args = append(args, "--set", s)
			}
			_, err := renderChart(t, args...)
			if err == nil {
				t.Fatalf("%s (%s): the chart rendered with %v", tt.name, tt.reason, tt.set)
			}
			for _, w := range tt.want {
				if !strings.Contains(err.Error(), w) {
					t.Errorf("%s (%s): got %v\nwant an error containing %q", tt.name, tt.reason, err, w)
				}
			}
		})
	}
}

// TestChartOptionalParts renders every optional part and checks what each
// gives: the ServiceMonitor with its labels and interval, the alerts with
// their extra labels, the dashboard for the sidecar, the PodDisruptionBudget
// and NetworkPolicy on the operator's pods, and the flags the values set.
func TestChartOptionalParts(t *testing.T) {
	objs := index(t, mustRenderChart(t, "-f", allOnValues))
	get := func(kind, ns, name string) object {
		t.Helper()
		o, ok := objs[objKey{kind, ns, name}]
		if !ok {
			t.Fatalf("no %s %s/%s in the render", kind, ns, name)
		}
		return o
	}
	prefix := releaseName + "-"
	podLabels := map[string]any{"app.kubernetes.io/name": "egress-proxies-operator", "control-plane": "controller-manager"}

	t.Run("ServiceMonitor", func(t *testing.T) {
		sm := get("ServiceMonitor", releaseNS, prefix+"controller-manager-metrics-monitor")
		if got := at(sm, "metadata", "labels")["release"]; got != "kube-prometheus-stack" {
			t.Errorf("label release = %v, want the values' kube-prometheus-stack", got)
		}
		eps, _ := at(sm, "spec")["endpoints"].([]any)
		if len(eps) != 1 {
			t.Fatalf("endpoints: %v", eps)
		}
		ep := as[map[string]any](t, eps[0])
		if ep["interval"] != "30s" || ep["scrapeTimeout"] != "10s" || ep["scheme"] != "https" || ep["port"] != "https" {
			t.Errorf("endpoint %v: want interval 30s, scrapeTimeout 10s, https on port https", ep)
		}
		if diff := cmp.Diff(podLabels, at(sm, "spec", "selector", "matchLabels")); diff != "" {
			t.Errorf("selector (-want +got):\n%s", diff)
		}
	})
	t.Run("gateway PodMonitor", func(t *testing.T) {
		pm := get("PodMonitor", releaseNS, prefix+"gateway-metrics-monitor")
		if got := at(pm, "metadata", "labels")["release"]; got != "kube-prometheus-stack" {
			t.Errorf("label release = %v, want the values' kube-prometheus-stack", got)
		}
		// The spec is config/prometheus's, with the values' interval on
		// each endpoint, and nothing else.
		src, err := os.ReadFile(filepath.Join(repoRoot(t), "config", "prometheus", "gateway_monitor.yaml"))
		if err != nil {
			t.Fatal(err)
		}
		var want object
		if err := yaml.Unmarshal(src, &want); err != nil {
			t.Fatal(err)
		}
		for _, ep := range as[[]any](t, at(want, "spec")["podMetricsEndpoints"]) {
			as[map[string]any](t, ep)["interval"] = "15s"
		}
		if diff := cmp.Diff(at(want, "spec"), at(pm, "spec")); diff != "" {
			t.Errorf("spec (-want +got):\n%s", diff)
		}
	})
	t.Run("PrometheusRule", func(t *testing.T) {
		pr := get("PrometheusRule", releaseNS, prefix+"alerts")
		src, err := os.ReadFile(filepath.Join(repoRoot(t), "config", "prometheus", "rules", "prometheus_rule.yaml"))
		if err != nil {
			t.Fatal(err)
		}
		var want object
		if err := yaml.Unmarshal(src, &want); err != nil {
			t.Fatal(err)
		}
		// The chart adds additionalAlertLabels to every alert, and nothing else.
		for _, g := range as[[]any](t, at(want, "spec")["groups"]) {
			for _, r := range as[[]any](t, as[map[string]any](t, g)["rules"]) {
				at(as[map[string]any](t, r), "labels")["team"] = "platform"
			}
		}
		if diff := cmp.Diff(at(want, "spec"), at(pr, "spec")); diff != "" {
			t.Errorf("spec (-config/prometheus/rules with team: platform +chart):\n%s", diff)
		}
	})
	t.Run("dashboard", func(t *testing.T) {
		cm := get("ConfigMap", "monitoring", prefix+"dashboard")
		if got := at(cm, "metadata", "labels")["grafana_dashboard"]; got != "1" {
			t.Errorf("label grafana_dashboard = %v, want 1 (the sidecar's)", got)
		}
		if got := at(cm, "metadata", "annotations")["grafana_folder"]; got != "Egress proxies" {
			t.Errorf("annotation grafana_folder = %v", got)
		}
		src, err := os.ReadFile(filepath.Join(repoRoot(t), "config", "prometheus", "dashboard", "egress-proxies.json"))
		if err != nil {
			t.Fatal(err)
		}
		if got := at(cm, "data")["egress-proxies.json"]; got != strings.TrimSuffix(string(src), "\n") {
			t.Error("the dashboard is not config/prometheus/dashboard/egress-proxies.json")
		}
	})
	t.Run("PodDisruptionBudget", func(t *testing.T) {
		pdb := get("PodDisruptionBudget", releaseNS, prefix+"controller-manager")
		if got := at(pdb, "spec")["minAvailable"]; got != float64(1) {
			t.Errorf("minAvailable = %v, want 1", got)
		}
		if diff := cmp.Diff(podLabels, at(pdb, "spec", "selector", "matchLabels")); diff != "" {
			t.Errorf("selector (-want +got):\n%s", diff)
		}
	})
	t.Run("NetworkPolicy", func(t *testing.T) {
		np := get("NetworkPolicy", releaseNS, prefix+"controller-manager")
		if diff := cmp.Diff(podLabels, at(np, "spec", "podSelector", "matchLabels")); diff != "" {
			t.Errorf("podSelector (-want +got):\n%s", diff)
		}
		got, _ := yaml.Marshal(at(np, "spec")["ingress"])
		want := `- ports:
  - port: 8081
    protocol: TCP
- from:
  - namespaceSelector:
      matchLabels:
        kubernetes.io/metadata.name: monitoring
  ports:
  - port: 8443
    protocol: TCP
`
		if diff := cmp.Diff(want, string(got)); diff != "" {
			t.Errorf("ingress (-want +got):\n%s", diff)
		}
	})
	t.Run("manager", func(t *testing.T) {
		d := get("Deployment", releaseNS, prefix+"controller-manager")
		c := managerContainer(d)
		var args []string
		for _, a := range as[[]any](t, c["args"]) {
			args = append(args, as[string](t, a))
		}
		want := []string{
			"--leader-elect", "--health-probe-bind-address=:8081", "--providers-config=/etc/proxy-operator/config/providers.yaml",
			"--namespaces=crawlers,team-a", "--metrics-bind-address=:8443", "--leader-election-namespace=egress-proxies-system",
			"--installation-id=prod-eu", "--gc-grace-period=30m", "--gc-interval=20m", "--health-interval=2m",
			"--max-concurrent-reconciles=8", "--poll-interval=15s", "--probe-failure-threshold=5", "--probe-interval=1m",
			"--probe-timeout=10s", "--resync-interval=10m", "--zap-encoder=json", "--zap-log-level=debug",
			"--zap-stacktrace-level=panic", "--zap-time-encoding=rfc3339", "--enable-http2=false",
		}
		if diff := cmp.Diff(want, args); diff != "" {
			t.Errorf("args (-want +got):\n%s", diff)
		}
		env := map[string]any{}
		for _, e := range as[[]any](t, c["env"]) {
			m := as[map[string]any](t, e)
			env[as[string](t, m["name"])] = m["value"]
		}
		for name, value := range map[string]string{
			"OPERATOR_IMAGE":              "registry.example.com/egress/egress-proxies-operator:v0.1.0",
			"OTEL_TRACES_EXPORTER":        "otlp",
			"OTEL_EXPORTER_OTLP_ENDPOINT": "http://otel-collector.observability:4318",
			"OTEL_TRACES_SAMPLER":         "parentbased_traceidratio",
			"OTEL_TRACES_SAMPLER_ARG":     "0.1",
			"GOMEMLIMIT":                  "200MiB",
		} {
			if env[name] != value {
				t.Errorf("env %s = %v, want %s", name, env[name], value)
			}
		}
		spec := at(d, "spec", "template", "spec")
		for _, f := range []string{"nodeSelector", "tolerations", "affinity", "topologySpreadConstraints", "imagePullSecrets", "priorityClassName"} {
			if spec[f] == nil {
				t.Errorf("pod spec has no %s", f)
			}
		}
		if got := at(d, "spec")["replicas"]; got != float64(2) {
			t.Errorf("replicas = %v, want 2", got)
		}
		for _, ns := range []string{"crawlers", "team-a"} {
			get("RoleBinding", ns, prefix+"namespace-rolebinding")
		}
		if got := at(d, "metadata", "annotations")["example.com/contact"]; got != "platform@example.com" {
			t.Errorf("commonAnnotations not on the Deployment: %v", got)
		}
		if got := at(d, "metadata", "labels")["team"]; got != "platform" {
			t.Errorf("commonLabels not on the Deployment: %v", got)
		}
	})
}

// TestChartSwitches: the values that take objects away or change whose they
// are.
func TestChartSwitches(t *testing.T) {
	count := func(objs map[objKey]object, kind string) int {
		n := 0
		for k := range objs {
			if k.kind == kind {
				n++
			}
		}
		return n
	}
	t.Run("crds.install=false", func(t *testing.T) {
		if n := count(index(t, mustRenderChart(t, "--set", "crds.install=false")), "CustomResourceDefinition"); n != 0 {
			t.Errorf("%d CRDs rendered", n)
		}
	})
	t.Run("crds.keep=false", func(t *testing.T) {
		for k, o := range index(t, mustRenderChart(t, "--set", "crds.keep=false")) {
			if k.kind == "CustomResourceDefinition" && at(o, "metadata", "annotations")["helm.sh/resource-policy"] != nil {
				t.Errorf("%s is still kept on uninstall", k)
			}
		}
	})
	t.Run("providers.existingConfigMap", func(t *testing.T) {
		objs := index(t, mustRenderChart(t, "--set", "providers.existingConfigMap=my-providers"))
		if n := count(objs, "ConfigMap"); n != 0 {
			t.Errorf("%d ConfigMaps rendered; the existing one is the administrator's", n)
		}
		volumes := as[[]any](t, at(objs[objKey{"Deployment", releaseNS, releaseName + "-controller-manager"}], "spec", "template", "spec")["volumes"])
		got, _ := yaml.Marshal(volumes[0])
		if !strings.Contains(string(got), "name: my-providers") {
			t.Errorf("the providers volume does not name my-providers:\n%s", got)
		}
	})
	t.Run("providers.config", func(t *testing.T) {
		inline := "providers:\n- name: other\n  type: kubernetes\n"
		objs := index(t, mustRenderChart(t, "--set", "providers.config="+inline))
		cm := objs[objKey{"ConfigMap", releaseNS, releaseName + "-providers-config"}]
		if got := at(cm, "data")["providers.yaml"]; got != inline {
			t.Errorf("providers.yaml = %q, want %q", got, inline)
		}
	})
	t.Run("metrics.enabled=false", func(t *testing.T) {
		objs := index(t, mustRenderChart(t, "--set", "metrics.enabled=false", "--set", "metrics.serviceMonitor.enabled=true"))
		if n := count(objs, "Service") + count(objs, "ServiceMonitor"); n != 0 {
			t.Errorf("%d metrics Services or ServiceMonitors without a metrics endpoint", n)
		}
	})
	t.Run("namespaces not created", func(t *testing.T) {
		objs := index(t, mustRenderChart(t, "--set", "servedNamespaces.create=false", "--set", "podsNamespace.create=false"))
		if n := count(objs, "Namespace"); n != 0 {
			t.Errorf("%d Namespaces rendered", n)
		}
	})
}

// as asserts v's type, failing the test instead of panicking.
func as[T any](t *testing.T, v any) T {
	t.Helper()
	x, ok := v.(T)
	if !ok {
		t.Fatalf("%v is a %T, want a %T", v, v, x)
	}
	return x
}
