package cluster_test

import (
	"context"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/url"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	clientgoscheme "k8s.io/client-go/kubernetes/scheme"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/kustomize/api/krusty"
	"sigs.k8s.io/kustomize/kyaml/filesys"

	crawlv1alpha1 "github.com/egress-proxies/egress-proxies-operator/api/v1alpha1"
	"github.com/egress-proxies/egress-proxies-operator/internal/testing/kubelab"
	"github.com/egress-proxies/egress-proxies-operator/internal/testing/poll"
)

// The names the shipped config/default gives.
const (
	operatorNS  = "egress-proxies-system"
	deployment  = "egress-proxies-operator-controller-manager"
	podsNS      = "egress-proxies"
	servedNS    = "crawlers"
	managedBy   = "app.kubernetes.io/managed-by=egress-proxies-operator"
	hostNetPort = 31280
)

// tierEnv turns the tier on: `make test-cluster` sets it. Until the tier is
// part of `make test`, a plain `go test ./...` (as root on CI) must not
// start a cold build of the cluster's binaries.
const tierEnv = "EGRESS_CLUSTER_TIER"

// providersYAML is the providers configuration the test deploys, edited as
// docs/configuration.md says: the shipped `cluster` entry, and one with
// hostNetwork in the same namespace (the shipped pods Role covers it).
const providersYAML = `providers:
  - name: cluster
    type: kubernetes
    zones: [default]
    machineTypes:
        tiny: {cores: 1, memoryMiB: 64}
    images: [default]
    kubernetes:
      namespace: egress-proxies
      zones:
        default: {nodeSelector: {kubernetes.io/os: linux}}
      resources:
        tiny: {requests: {cpu: 10m, memory: 16Mi}, limits: {memory: 64Mi}}
  - name: cluster-host
    type: kubernetes
    zones: [default]
    machineTypes:
        tiny: {cores: 1, memoryMiB: 64}
    images: [default]
    kubernetes:
      namespace: egress-proxies
      hostNetwork: true
      zones:
        default: {nodeSelector: {kubernetes.io/os: linux}}
      resources:
        tiny: {requests: {cpu: 10m, memory: 16Mi}, limits: {memory: 64Mi}}
`

// timeouts follow this machine's pace: a loaded two-core CI machine starts a
// pod in 2 to 10 s, the operator's Deployment in under a minute; these are
// ten times that.
const (
	deployTimeout = 5 * time.Minute
	readyTimeout  = 5 * time.Minute
	goneTimeout   = 5 * time.Minute
)

func TestShippedInstall(t *testing.T) {
	if testing.Short() {
		t.Skip("the cluster tier does not run in -short mode")
	}
	if os.Getenv(tierEnv) != "1" {
		t.Skip("the cluster tier runs with `make test-cluster` (" + tierEnv + "=1); it is not part of `make test` yet (docs/testing.md)")
	}
	if why := kubelab.Supported(); why != "" && os.Getenv("CI") != "true" {
		t.Skip(why)
	}
	ctx := t.Context()
	work := t.TempDir()
	// The image as users build it.
	began := time.Now()
	image := filepath.Join(work, "image.tar")
	if err := kubelab.Make(ctx, "image", "IMAGE_TAR="+image, "BIN_DIR="+filepath.Join(work, "bin")); err != nil {
		t.Fatal(err)
	}
	t.Logf("make image: %s", time.Since(began).Round(time.Millisecond))
	c := kubelab.Start(t, kubelab.Options{Images: []string{image}})
	t.Cleanup(func() {
		if t.Failed() {
			out, err := c.Kubectl(context.Background(), "", "-n", operatorNS, "logs", "deployment/"+deployment, "--all-containers", "--tail=300")
			t.Logf("operator logs:\n%s%v", out, err)
		}
	})

	rendered := render(t, providersYAML)
	began = time.Now()
	if out, err := c.Kubectl(ctx, rendered, "apply", "--server-side", "-f", "-"); err != nil {
		t.Fatalf("applying config/default: %v\n%s", err, out)
	}
	if out, err := c.Kubectl(ctx, "", "-n", operatorNS, "wait", "--for=condition=Available",
		"--timeout="+deployTimeout.String(), "deployment/"+deployment); err != nil {
		t.Fatalf("the operator's Deployment did not become available: %v\n%s", err, out)
	}
	t.Logf("config/default applied, Deployment available in %s", time.Since(began).Round(time.Millisecond))

	cl := newClient(t, c)
	target := startTarget(t, c)

	t.Run("kubernetes provider", func(t *testing.T) {
		p := proxy("web", "cluster", 3128)
		serves(t, cl, p, target)
	})
	t.Run("kubernetes provider with hostNetwork", func(t *testing.T) {
		p := proxy("web-host", "cluster-host", hostNetPort)
		got := serves(t, cl, p, target)
		if got.Status.Address != c.NodeIP.String() {
			t.Errorf("a hostNetwork proxy's address is %q, want the node's %s", got.Status.Address, c.NodeIP)
		}
	})
	t.Run("pool of three", func(t *testing.T) {
		pool(t, cl)
	})
	t.Run("nothing left", func(t *testing.T) {
		nothingLeft(t, c, cl)
	})
}

// render builds config/default from a copy of config/ whose
// manager/providers.yaml is the test's, as a user who edited the file would.
func render(t *testing.T, providers string) string {
	t.Helper()
	root, err := kubelab.RepoRoot()
	if err != nil {
		t.Fatal(err)
	}
	dst := filepath.Join(t.TempDir(), "config")
	if err := os.CopyFS(dst, os.DirFS(filepath.Join(root, "config"))); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(dst, "manager", "providers.yaml"), []byte(providers), 0o600); err != nil {
		t.Fatal(err)
	}
	res, err := krusty.MakeKustomizer(krusty.MakeDefaultOptions()).Run(filesys.MakeFsOnDisk(), filepath.Join(dst, "default"))
	if err != nil {
		t.Fatalf("kustomize build config/default: %v", err)
	}
	y, err := res.AsYaml()
	if err != nil {
		t.Fatal(err)
	}
	return string(y)
}

func newClient(t *testing.T, c *kubelab.Cluster) client.Client {
	t.Helper()
	s := runtime.NewScheme()
	for _, add := range []func(*runtime.Scheme) error{clientgoscheme.AddToScheme, crawlv1alpha1.AddToScheme} {
		if err := add(s); err != nil {
			t.Fatal(err)
		}
	}
	cl, err := client.New(c.Config, client.Options{Scheme: s})
	if err != nil {
		t.Fatal(err)
	}
	return cl
}

// target is an HTTP server on the host end of the world's veth: an address
// the proxies' default egress policy allows (198.51.100.0/24 is not in its
// deny list), reached from the pods and the node through the host route.
type target struct{ url string }

func startTarget(t *testing.T, c *kubelab.Cluster) target {
	t.Helper()
	ln, err := (&net.ListenConfig{}).Listen(t.Context(), "tcp", net.JoinHostPort(c.HostIP.String(), "0"))
	if err != nil {
		t.Fatal(err)
	}
	srv := &http.Server{
		ReadHeaderTimeout: 10 * time.Second,
		Handler: http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
			_, _ = io.WriteString(w, "reached through the proxy\n")
		}),
	}
	go func() { _ = srv.Serve(ln) }()
	t.Cleanup(func() { _ = srv.Close() })
	return target{url: "http://" + ln.Addr().String() + "/"}
}

func proxy(name, provider string, port int32) *crawlv1alpha1.Proxy {
	return &crawlv1alpha1.Proxy{
		ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: servedNS},
		Spec: crawlv1alpha1.ProxySpec{
			Provider: provider, Zone: "default", MachineType: "tiny", Image: "default",
			Port: port, Auth: crawlv1alpha1.ProxyAuthBasic,
		},
	}
}

// serves creates p, waits for it to be Ready, and checks the proxy for real
// from the host: 200 with the credentials of its Secret, 407 without, 403
// for a destination the egress policy denies.
func serves(t *testing.T, cl client.Client, p *crawlv1alpha1.Proxy, tg target) *crawlv1alpha1.Proxy {
	t.Helper()
	ctx := t.Context()
	if err := cl.Create(ctx, p); err != nil {
		t.Fatal(err)
	}
	began := time.Now()
	got := &crawlv1alpha1.Proxy{}
	poll.Until(t, readyTimeout, func() (bool, string) {
		if err := cl.Get(ctx, client.ObjectKeyFromObject(p), got); err != nil {
			return false, err.Error()
		}
		for _, cond := range got.Status.Conditions {
			if cond.Type == "Ready" {
				return cond.Status == metav1.ConditionTrue && got.Status.URL != "", fmt.Sprintf("phase %s, Ready %s %s: %s", got.Status.Phase, cond.Status, cond.Reason, cond.Message)
			}
		}
		return false, "phase " + string(got.Status.Phase) + ", no Ready condition"
	})
	t.Logf("Proxy %s Ready in %s at %s", p.Name, time.Since(began).Round(time.Millisecond), got.Status.URL)

	sec := &corev1.Secret{}
	if err := cl.Get(ctx, client.ObjectKey{Namespace: p.Namespace, Name: got.Status.CredentialsSecretName}, sec); err != nil {
		t.Fatalf("the Proxy's credentials Secret %q: %v", got.Status.CredentialsSecretName, err)
	}
	proxyURL, err := url.Parse(got.Status.URL)
	if err != nil {
		t.Fatal(err)
	}
	withCreds := *proxyURL
	withCreds.User = url.UserPassword(string(sec.Data["username"]), string(sec.Data["password"]))
	// The pod's readiness probe only says the port accepts connections:
	// the first request may still race the proxy's start on a loaded node.
	var last string
	poll.Until(t, readyTimeout, func() (bool, string) {
		code, err := get(ctx, &withCreds, tg.url)
		if err != nil {
			last = err.Error()
			return false, last
		}
		return code == http.StatusOK, fmt.Sprintf("status %d", code)
	})
	for _, tc := range []struct {
		name, reason string
		proxy        *url.URL
		dest         string
		want         int
	}{
		{name: "no credentials", reason: "never an open proxy", proxy: proxyURL, dest: tg.url, want: http.StatusProxyAuthRequired},
		{name: "wrong password", reason: "only the Secret's password", proxy: &url.URL{Scheme: "http", Host: proxyURL.Host, User: url.UserPassword(string(sec.Data["username"]), "not-the-password")}, dest: tg.url, want: http.StatusProxyAuthRequired},
		{name: "denied destination", reason: "the default egress policy refuses private ranges", proxy: &withCreds, dest: "http://10.20.30.40/", want: http.StatusForbidden},
		{name: "the API server's Service", reason: "the proxy always refuses KUBERNETES_SERVICE_HOST", proxy: &withCreds, dest: "http://203.0.113.129:443/", want: http.StatusForbidden},
	} {
		code, err := get(ctx, tc.proxy, tc.dest)
		if err != nil || code != tc.want {
			t.Errorf("%s (%s): status %d, %v; want %d", tc.name, tc.reason, code, err, tc.want)
		}
	}
	return got
}

// get sends one GET to dest through proxy and returns the status.
func get(ctx context.Context, proxy *url.URL, dest string) (int, error) {
	tr := &http.Transport{Proxy: http.ProxyURL(proxy), DisableKeepAlives: true}
	defer tr.CloseIdleConnections()
	hc := &http.Client{Transport: tr, Timeout: 30 * time.Second}
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, dest, nil)
	if err != nil {
		return 0, err
	}
	resp, err := hc.Do(req)
	if err != nil {
		return 0, err
	}
	defer func() { _ = resp.Body.Close() }()
	_, _ = io.Copy(io.Discard, resp.Body)
	return resp.StatusCode, nil
}

func pool(t *testing.T, cl client.Client) {
	ctx := t.Context()
	p := &crawlv1alpha1.ProxyPool{
		ObjectMeta: metav1.ObjectMeta{Name: "crawl-pool", Namespace: servedNS},
		Spec: crawlv1alpha1.ProxyPoolSpec{
			Replicas: ptr.To[int32](3),
			Template: crawlv1alpha1.ProxyTemplate{Spec: crawlv1alpha1.ProxySpec{
				Provider: "cluster", Zone: "default", MachineType: "tiny", Image: "default", Port: 3128, Auth: crawlv1alpha1.ProxyAuthBasic,
			}},
		},
	}
	if err := cl.Create(ctx, p); err != nil {
		t.Fatal(err)
	}
	began := time.Now()
	got := &crawlv1alpha1.ProxyPool{}
	var list string
	poll.Until(t, readyTimeout, func() (bool, string) {
		if err := cl.Get(ctx, client.ObjectKeyFromObject(p), got); err != nil {
			return false, err.Error()
		}
		if got.Status.Ready != 3 || got.Status.ListSecretName == "" {
			return false, fmt.Sprintf("%d of 3 ready, list Secret %q", got.Status.Ready, got.Status.ListSecretName)
		}
		sec := &corev1.Secret{}
		if err := cl.Get(ctx, client.ObjectKey{Namespace: servedNS, Name: got.Status.ListSecretName}, sec); err != nil {
			return false, err.Error()
		}
		list = string(sec.Data["proxies.txt"])
		n := len(strings.Fields(list))
		return n == 3, fmt.Sprintf("proxies.txt has %d entries", n)
	})
	t.Logf("ProxyPool of 3 published in %s", time.Since(began).Round(time.Millisecond))
	pods := &corev1.PodList{}
	if err := cl.List(ctx, pods, client.InNamespace(podsNS)); err != nil {
		t.Fatal(err)
	}
	running := 0
	for _, pod := range pods.Items {
		if pod.Status.Phase == corev1.PodRunning && strings.Contains(list, pod.Status.PodIP+":") {
			running++
		}
	}
	if running != 3 {
		t.Errorf("%d running pods serve the published list, want 3:\n%s", running, list)
	}
}

// nothingLeft deletes every Proxy and ProxyPool and checks that their pods,
// Secrets and ConfigMaps go with them.
func nothingLeft(t *testing.T, c *kubelab.Cluster, cl client.Client) {
	ctx := t.Context()
	for _, obj := range []client.Object{&crawlv1alpha1.ProxyPool{}, &crawlv1alpha1.Proxy{}} {
		if err := cl.DeleteAllOf(ctx, obj, client.InNamespace(servedNS)); err != nil {
			t.Fatal(err)
		}
	}
	began := time.Now()
	poll.Until(t, goneTimeout, func() (bool, string) {
		var left []string
		proxies := &crawlv1alpha1.ProxyList{}
		if err := cl.List(ctx, proxies, client.InNamespace(servedNS)); err != nil {
			return false, err.Error()
		}
		for _, p := range proxies.Items {
			left = append(left, "Proxy "+p.Name)
		}
		for _, ns := range []string{podsNS, servedNS} {
			for _, kind := range []string{"pods", "secrets", "configmaps"} {
				out, err := c.Kubectl(ctx, "", "-n", ns, "get", kind, "-o", "name")
				if err != nil {
					return false, err.Error()
				}
				for _, name := range strings.Fields(out) {
					// Each namespace's own root CA ConfigMap is Kubernetes'.
					if name != "configmap/kube-root-ca.crt" {
						left = append(left, ns+"/"+name)
					}
				}
			}
		}
		return len(left) == 0, fmt.Sprintf("left: %v", left)
	})
	t.Logf("everything deleted in %s", time.Since(began).Round(time.Millisecond))
}
