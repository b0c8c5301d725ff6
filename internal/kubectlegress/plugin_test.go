package kubectlegress_test

import (
	"bytes"
	"context"
	"encoding/json"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/cli-runtime/pkg/genericclioptions"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/envtest"

	crawlv1alpha1 "github.com/egress-proxies/egress-proxies-operator/api/v1alpha1"
	"github.com/egress-proxies/egress-proxies-operator/internal/kubectlegress"
	"github.com/egress-proxies/egress-proxies-operator/internal/testing/testenv"
)

var env *testenv.Env

func TestMain(m *testing.M) {
	os.Exit(testenv.Main(m, func(e *testenv.Env) { env = e }))
}

// password is the proxies' password: it must not be printed unless asked.
const password = "s3cret-proxy-password"

// world is a namespace with a pool, its list, a Ready Proxy with its
// credentials Secret, a Failed one, and a ProviderHealth; and a kubeconfig
// that reaches the control plane.
type world struct {
	ns, kubeconfig string
}

func newWorld(t *testing.T) *world {
	t.Helper()
	testenv.Need(t, env)
	ctx := context.Background()
	c := env.Client
	ns := &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{GenerateName: "plugin-"}}
	mustDo(t, c.Create(ctx, ns))
	w := &world{ns: ns.Name}

	user, err := env.Environment.AddUser(envtest.User{Name: "plugin-" + ns.Name, Groups: []string{"system:masters"}}, nil)
	mustDo(t, err)
	kc, err := user.KubeConfig()
	mustDo(t, err)
	w.kubeconfig = filepath.Join(t.TempDir(), "kubeconfig")
	mustDo(t, os.WriteFile(w.kubeconfig, kc, 0o600))

	spec := crawlv1alpha1.ProxySpec{Provider: "lab", MachineType: "small", Image: "debian-13"}
	pool := &crawlv1alpha1.ProxyPool{ObjectMeta: metav1.ObjectMeta{Namespace: w.ns, Name: "crawl"},
		Spec: crawlv1alpha1.ProxyPoolSpec{Replicas: ptr.To[int32](2), Template: crawlv1alpha1.ProxyTemplate{Spec: spec}}}
	mustDo(t, c.Create(ctx, pool))
	pool.Status = crawlv1alpha1.ProxyPoolStatus{Replicas: 2, Desired: 2, Ready: 1, Serving: 1, DistinctEgressAddresses: 1, ListSecretName: "crawl-proxies"}
	mustDo(t, c.Status().Update(ctx, pool))
	mustDo(t, c.Create(ctx, &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Namespace: w.ns, Name: "crawl-proxies"},
		Data: map[string][]byte{"proxies.txt": []byte("http://crawl-0:" + password + "@198.51.100.7:3128\n")}}))

	ready := &crawlv1alpha1.Proxy{ObjectMeta: metav1.ObjectMeta{Namespace: w.ns, Name: "crawl-0",
		Labels: map[string]string{crawlv1alpha1.LabelPool: "crawl"}}, Spec: spec}
	mustDo(t, c.Create(ctx, ready))
	ready.Status = crawlv1alpha1.ProxyStatus{Phase: crawlv1alpha1.ProxyPhaseReady, Address: "198.51.100.7", EgressIP: "203.0.113.7",
		CredentialsSecretName: "crawl-0-proxy-credentials", Conditions: []metav1.Condition{
			{Type: crawlv1alpha1.ConditionReady, Status: metav1.ConditionTrue, Reason: "Running", Message: "the instance runs", LastTransitionTime: metav1.Now()},
			{Type: crawlv1alpha1.ConditionServing, Status: metav1.ConditionTrue, Reason: "ProbePassed", Message: "ok", LastTransitionTime: metav1.Now()},
		}}
	mustDo(t, c.Status().Update(ctx, ready))
	mustDo(t, c.Create(ctx, &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Namespace: w.ns, Name: "crawl-0-proxy-credentials"},
		Data: map[string][]byte{"url": []byte("http://crawl-0:" + password + "@198.51.100.7:3128")}}))

	failed := &crawlv1alpha1.Proxy{ObjectMeta: metav1.ObjectMeta{Namespace: w.ns, Name: "broken"}, Spec: spec}
	mustDo(t, c.Create(ctx, failed))
	failed.Status = crawlv1alpha1.ProxyStatus{Phase: crawlv1alpha1.ProxyPhaseFailed, Conditions: []metav1.Condition{
		{Type: crawlv1alpha1.ConditionReady, Status: metav1.ConditionFalse, Reason: "InvalidSpec",
			Message: `provider "lab" has no image "debian-13"; fix spec.image`, LastTransitionTime: metav1.Now()},
	}}
	mustDo(t, c.Status().Update(ctx, failed))

	h := &crawlv1alpha1.ProviderHealth{ObjectMeta: metav1.ObjectMeta{Name: "lab-" + w.ns}}
	if err := c.Create(ctx, h); err != nil {
		t.Fatal(err)
	}
	h.Status = crawlv1alpha1.ProviderHealthStatus{Type: "proxmox", Conditions: []metav1.Condition{
		{Type: crawlv1alpha1.ConditionHealthy, Status: metav1.ConditionFalse, Reason: "NoHealthyTarget",
			Message: "no node answers: check the API URL", LastTransitionTime: metav1.Now()},
	}}
	mustDo(t, c.Status().Update(ctx, h))
	return w
}

func mustDo(t *testing.T, err error) {
	t.Helper()
	if err != nil {
		t.Fatal(err)
	}
}

// run runs the plugin with the world's kubeconfig and returns its exit
// code, standard output and standard error.
func (w *world) run(ctx context.Context, args ...string) (int, string, string) {
	var out, errOut bytes.Buffer
	code := kubectlegress.Run(ctx, append([]string{"--kubeconfig", w.kubeconfig}, args...),
		genericclioptions.IOStreams{In: strings.NewReader(""), Out: &out, ErrOut: &errOut})
	return code, out.String(), errOut.String()
}

func (w *world) proxy(ctx context.Context, t *testing.T, name string) *crawlv1alpha1.Proxy {
	t.Helper()
	var p crawlv1alpha1.Proxy
	mustDo(t, env.Client.Get(ctx, client.ObjectKey{Namespace: w.ns, Name: name}, &p))
	return &p
}

func TestStatus(t *testing.T) {
	w := newWorld(t)
	ctx := context.Background()
	code, out, errOut := w.run(ctx, "status", "-n", w.ns)
	if code != 0 {
		t.Fatalf("exit %d: %s", code, errOut)
	}
	for _, want := range []string{
		// desired, members, Ready, Serving, addresses
		regexp.QuoteMeta(w.ns+"/crawl") + `\s+2\s+2\s+1\s+1\s+1\n`,
		regexp.QuoteMeta(w.ns+"/broken") + `\s+Failed\s+lab\s+false\s+InvalidSpec\n`,
		"\nNot ready:\n",
		regexp.QuoteMeta("provider lab-" + w.ns + ": NoHealthyTarget: no node answers: check the API URL"),
		regexp.QuoteMeta("proxy " + w.ns + `/broken: InvalidSpec: provider "lab" has no image "debian-13"; fix spec.image`),
	} {
		if !regexp.MustCompile(want).MatchString(out) {
			t.Errorf("status lacks %s:\n%s", want, out)
		}
	}
	if strings.Contains(out, "203.0.113.7") {
		t.Errorf("the egress address is a -o wide column:\n%s", out)
	}

	code, out, _ = w.run(ctx, "status", "-n", w.ns, "-o", "wide")
	if code != 0 || !regexp.MustCompile(`198\.51\.100\.7\s+203\.0\.113\.7\n`).MatchString(out) {
		t.Errorf("-o wide: exit %d, want the address and egress columns:\n%s", code, out)
	}

	other := newWorld(t)
	code, out, errOut = w.run(ctx, "status", "-A", "-o", "json")
	if code != 0 {
		t.Fatalf("-A -o json: exit %d: %s", code, errOut)
	}
	var r kubectlegress.Report
	mustDo(t, json.Unmarshal([]byte(out), &r))
	seen := map[string]bool{}
	for _, p := range r.Proxies {
		seen[p.Namespace] = true
	}
	if !seen[w.ns] || !seen[other.ns] {
		t.Errorf("-A lists the namespaces %v, want both %s and %s", seen, w.ns, other.ns)
	}

	code, out, _ = w.run(ctx, "status", "-n", w.ns, "-o", "yaml")
	if code != 0 || !strings.Contains(out, "proxies:") {
		t.Errorf("-o yaml: exit %d:\n%s", code, out)
	}
	code, _, errOut = w.run(ctx, "status", "-o", "table")
	if code != 1 || !strings.Contains(errOut, "use -o json, -o yaml or -o wide") {
		t.Errorf("-o table: exit %d, %q; want 1 and the formats", code, errOut)
	}
}

func TestURL(t *testing.T) {
	w := newWorld(t)
	ctx := context.Background()
	tests := []struct {
		name   string
		reason string
		args   []string
		code   int
		want   string
		stderr string
	}{
		{"proxy", "a Proxy's URL from its credentials Secret, password hidden", []string{"url", "crawl-0"}, 0, "http://crawl-0:xxxxx@198.51.100.7:3128\n", ""},
		{"proxy with the password", "asked for with a flag", []string{"url", "crawl-0", "--show-password"}, 0,
			"http://crawl-0:" + password + "@198.51.100.7:3128\n", ""},
		{"pool", "a pool's list, password hidden", []string{"url", "crawl"}, 0, "http://crawl-0:xxxxx@198.51.100.7:3128\n", ""},
		{"nothing of that name", "the error says where it looked and what to try", []string{"url", "nope"}, 1, "",
			"no Proxy or ProxyPool nope in namespace " + w.ns + " (set -n"},
		{"a Proxy without credentials yet", "it says to wait", []string{"url", "broken"}, 1, "", "has no credentials Secret yet (phase Failed)"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			code, out, errOut := w.run(ctx, append(tt.args, "-n", w.ns)...)
			if code != tt.code || out != tt.want || !strings.Contains(errOut, tt.stderr) {
				t.Errorf("%s (%s): exit %d, out %q, err %q; want exit %d, out %q, err containing %q",
					tt.name, tt.reason, code, out, errOut, tt.code, tt.want, tt.stderr)
			}
			if !strings.Contains(strings.Join(tt.args, " "), "--show-password") && strings.Contains(out+errOut, password) {
				t.Errorf("%s: the password was printed without --show-password", tt.name)
			}
		})
	}
}

func TestActions(t *testing.T) {
	w := newWorld(t)
	ctx := context.Background()
	pool := func() *crawlv1alpha1.ProxyPool {
		var p crawlv1alpha1.ProxyPool
		mustDo(t, env.Client.Get(ctx, client.ObjectKey{Namespace: w.ns, Name: "crawl"}, &p))
		return &p
	}

	t.Run("rotate all", func(t *testing.T) {
		if code, _, errOut := w.run(ctx, "rotate", "crawl", "-n", w.ns); code != 0 {
			t.Fatalf("exit %d: %s", code, errOut)
		}
		if got := pool().Annotations[crawlv1alpha1.AnnotationRotate]; got != "all" {
			t.Errorf("rotate annotation %q, want all", got)
		}
	})
	t.Run("rotate a member", func(t *testing.T) {
		if code, _, errOut := w.run(ctx, "rotate", "crawl", "crawl-0", "-n", w.ns); code != 0 {
			t.Fatalf("exit %d: %s", code, errOut)
		}
		if got := pool().Annotations[crawlv1alpha1.AnnotationRotate]; got != "crawl-0" {
			t.Errorf("rotate annotation %q, want crawl-0", got)
		}
	})
	t.Run("rotate what is not a member", func(t *testing.T) {
		code, _, errOut := w.run(ctx, "rotate", "crawl", "broken", "-n", w.ns)
		if code != 1 || !strings.Contains(errOut, "broken is not a member of pool") {
			t.Errorf("exit %d, %q", code, errOut)
		}
	})
	t.Run("retry a Failed Proxy", func(t *testing.T) {
		if code, _, errOut := w.run(ctx, "retry", "broken", "-n", w.ns); code != 0 {
			t.Fatalf("exit %d: %s", code, errOut)
		}
		if _, ok := w.proxy(ctx, t, "broken").Annotations[crawlv1alpha1.AnnotationRetry]; !ok {
			t.Error("no retry annotation")
		}
	})
	t.Run("retry a Ready Proxy", func(t *testing.T) {
		code, _, errOut := w.run(ctx, "retry", "crawl-0", "-n", w.ns)
		if code != 1 || !strings.Contains(errOut, "is Ready, not Failed") {
			t.Errorf("exit %d, %q", code, errOut)
		}
	})
	t.Run("release a Proxy not being deleted", func(t *testing.T) {
		code, _, errOut := w.run(ctx, "release", "broken", "-n", w.ns, "--yes")
		if code != 1 || !strings.Contains(errOut, "is not being deleted: delete it first") {
			t.Errorf("exit %d, %q", code, errOut)
		}
	})
	t.Run("release", func(t *testing.T) {
		// Held by a finalizer, as the operator's would hold it.
		p := w.proxy(ctx, t, "broken")
		p.Finalizers = []string{"test.example.com/hold"}
		mustDo(t, env.Client.Update(ctx, p))
		mustDo(t, env.Client.Delete(ctx, p))
		t.Cleanup(func() {
			p := w.proxy(ctx, t, "broken")
			p.Finalizers = nil
			_ = env.Client.Update(ctx, p)
		})
		code, _, errOut := w.run(ctx, "release", "broken", "-n", w.ns)
		if code != 1 || !strings.Contains(errOut, "WARNING: releasing proxy") || !strings.Contains(errOut, "run again with --yes") {
			t.Errorf("without --yes: exit %d, %q; want 1, the warning and how to confirm", code, errOut)
		}
		if _, ok := w.proxy(ctx, t, "broken").Annotations[crawlv1alpha1.AnnotationReleaseFinalizer]; ok {
			t.Error("released without --yes")
		}
		if code, _, errOut := w.run(ctx, "release", "broken", "-n", w.ns, "--yes"); code != 0 {
			t.Fatalf("--yes: exit %d: %s", code, errOut)
		}
		if _, ok := w.proxy(ctx, t, "broken").Annotations[crawlv1alpha1.AnnotationReleaseFinalizer]; !ok {
			t.Error("no release annotation")
		}
	})
	t.Run("no cluster", func(t *testing.T) {
		var out, errOut bytes.Buffer
		code := kubectlegress.Run(ctx, []string{"--kubeconfig", filepath.Join(t.TempDir(), "none"), "status"},
			genericclioptions.IOStreams{Out: &out, ErrOut: &errOut})
		if code != 1 || !strings.Contains(errOut.String(), "error: ") {
			t.Errorf("exit %d, %q", code, errOut.String())
		}
	})
}
