package cluster_test

import (
	"context"
	"crypto/tls"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/url"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/go-logr/logr"
	coordinationv1 "k8s.io/api/coordination/v1"
	corev1 "k8s.io/api/core/v1"
	apiextensionsv1 "k8s.io/apiextensions-apiserver/pkg/apis/apiextensions/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/types"
	clientgoscheme "k8s.io/client-go/kubernetes/scheme"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"
	logf "sigs.k8s.io/controller-runtime/pkg/log"

	crawlv1alpha1 "github.com/egress-proxies/egress-proxies-operator/api/v1alpha1"
	"github.com/egress-proxies/egress-proxies-operator/internal/setup"
	"github.com/egress-proxies/egress-proxies-operator/internal/testing/kubelab"
	"github.com/egress-proxies/egress-proxies-operator/internal/testing/modroot"
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

// tierEnv turns the tier on: `make test` and `make test-cluster` set it,
// after `make cluster-world` built the cluster's binaries, so that a plain
// `go test ./...` as root never starts that long build by surprise.
const tierEnv = "EGRESS_CLUSTER_TIER"

// providersYAML is the providers configuration the test deploys, edited as
// docs/configuration.md says: the shipped `cluster` entry, and one with
// hostNetwork in the same namespace (the shipped pods Role covers it). Both
// allow the test's target, the host end of the world's veth (%[1]s): the
// built-in deny list refuses documentation ranges such as 198.51.100.0/24.
const providersYAML = `providers:
  - name: cluster
    type: kubernetes
    zones: [default]
    machineTypes:
        tiny: {cores: 1, memoryMiB: 64}
    images: [default]
    egressPolicy: {allowCIDRs: [%[1]s/32]}
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
    egressPolicy: {allowCIDRs: [%[1]s/32]}
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

// tierOn skips the test unless the tier is on and the machine can run it.
func tierOn(t *testing.T) {
	t.Helper()
	if testing.Short() {
		t.Skip("the cluster tier does not run in -short mode")
	}
	if os.Getenv(tierEnv) != "1" {
		t.Skip("the cluster tier runs in `make test` and `make test-cluster` (" + tierEnv + "=1, docs/testing.md)")
	}
	if why := kubelab.Supported(); why != "" && os.Getenv("CI") != "true" {
		t.Skip(why)
	}
}

// tierCluster skips unless the tier is on, builds the image once per test
// process (`make image`, as users build it) and the crawler's (`make
// crawler-image`), and starts a cluster with both and the images of more
// imported. On failure it prints the operator's
// logs.
func tierCluster(t *testing.T, more ...string) *kubelab.Cluster {
	t.Helper()
	tierOn(t)
	imageOnce.Do(func() {
		began := time.Now()
		imagePath = filepath.Join(imageDir, "image.tar")
		crawlerPath = filepath.Join(imageDir, "crawler.tar")
		bin := "BIN_DIR=" + filepath.Join(imageDir, "bin")
		errImage = kubelab.Make(t.Context(), "image", "IMAGE_TAR="+imagePath, bin)
		t.Logf("make image: %s", time.Since(began).Round(time.Millisecond))
		if errImage == nil {
			errImage = kubelab.Make(t.Context(), "crawler-image", "CRAWLER_TAR="+crawlerPath, "CRAWLER_IMG="+crawlerImage, bin)
		}
	})
	if errImage != nil {
		t.Fatal(errImage)
	}
	c := kubelab.Start(t, kubelab.Options{Images: append([]string{imagePath, crawlerPath}, more...)})
	t.Cleanup(func() {
		if t.Failed() {
			out, err := c.Kubectl(context.Background(), "", "-n", operatorNS, "logs", "deployment/"+deployment, "--all-containers", "--tail=300")
			t.Logf("operator logs:\n%s%v", out, err)
		}
	})
	return c
}

// The image is built once for the tests of this process, in imageDir,
// which TestMain removes.
var (
	imageDir  string
	imageOnce sync.Once
	imagePath string
	errImage  error
	// crawlerPath is the crawler's image (hack/crawler), crawlerImage its
	// name: a pod that fetches through a proxy, as a crawler would.
	crawlerPath string
)

const crawlerImage = "egress-proxies-crawler:tier"

func TestMain(m *testing.M) {
	var err error
	if imageDir, err = os.MkdirTemp("", "egress-cluster-image-"); err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
	code := m.Run()
	_ = os.RemoveAll(imageDir)
	os.Exit(code)
}

func TestShippedInstall(t *testing.T) {
	// The tier's clusters run side by side, each in a slot of its own
	// (kubelab): most of each test is waiting on its cluster.
	t.Parallel()
	c := tierCluster(t)
	ctx := t.Context()
	work := t.TempDir()
	// The install as the README says it: `make deploy`, with a copy of
	// config/ whose providers.yaml is edited (docs/configuration.md).
	// A Proxmox VE cluster beside the node: the simulator on the node's
	// network, and its entry in the providers configuration.
	sim := startSimulator(t, c)
	began := time.Now()
	if err := kubelab.Make(ctx, "deploy", "CONFIG_DIR="+editedConfig(t, fmt.Sprintf(providersYAML, c.HostIP)+sim.entry(c.HostIP)),
		"INSTALLER="+filepath.Join(work, "install.yaml"), "KUBECTL="+filepath.Join(c.Bin, "kubectl"),
		"KUBECONFIG="+c.Kubeconfig); err != nil {
		t.Fatal(err)
	}
	// docs/proxmox.md's next step: the token's Secret, which the
	// Deployment mounts (optional: the operator started without it).
	sim.proxmoxTokenSecret(t, c)
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
	t.Run("proxmox entry from inside the cluster", func(t *testing.T) {
		proxmoxFromInside(t, c, cl, sim, target)
	})
	t.Run("pool of three", func(t *testing.T) {
		pool(t, cl)
	})
	t.Run("gateway in front of the pool", func(t *testing.T) {
		gatewayFront(t, c, cl, target)
	})
	t.Run("kubectl egress", func(t *testing.T) {
		kubectlEgress(t, c, cl, target)
	})
	t.Run("metrics endpoint", func(t *testing.T) {
		metricsEndpoint(t, c, cl)
	})
	t.Run("leader election", func(t *testing.T) {
		leaderElection(t, c, cl, target)
	})
	t.Run("pod security", func(t *testing.T) {
		podSecurity(t, cl)
	})
	t.Run("nothing left", func(t *testing.T) {
		nothingLeft(t, c, cl)
	})
}

// editedConfig returns a copy of config/ whose manager/providers.yaml is
// the test's, as a user who edited the file would have.
func editedConfig(t *testing.T, providers string) string {
	t.Helper()
	root, err := modroot.Find()
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
	return dst
}

func newClient(t *testing.T, c *kubelab.Cluster) client.Client {
	t.Helper()
	// The client logs nothing the test reads; without a logger
	// controller-runtime prints a stack trace to say so.
	logf.SetLogger(logr.Discard())
	s := runtime.NewScheme()
	for _, add := range []func(*runtime.Scheme) error{clientgoscheme.AddToScheme, apiextensionsv1.AddToScheme, crawlv1alpha1.AddToScheme} {
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

// targetAnswer starts the target's answer; the address the request came
// from (the proxy's egress address) follows.
const targetAnswer = "reached through the proxy from "

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
		Handler: http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			host, _, _ := net.SplitHostPort(r.RemoteAddr)
			_, _ = io.WriteString(w, targetAnswer+host+"\n")
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

// operatorPods returns the operator's pods that are not being deleted.
func operatorPods(t *testing.T, cl client.Client) []corev1.Pod {
	t.Helper()
	pods := &corev1.PodList{}
	if err := cl.List(t.Context(), pods, client.InNamespace(operatorNS), client.MatchingLabels{"control-plane": "controller-manager"}); err != nil {
		t.Fatal(err)
	}
	var out []corev1.Pod
	for _, p := range pods.Items {
		if p.DeletionTimestamp == nil {
			out = append(out, p)
		}
	}
	return out
}

// rolledOut waits for the operator's Deployment to finish its rollout.
func rolledOut(t *testing.T, c *kubelab.Cluster) {
	t.Helper()
	if out, err := c.Kubectl(t.Context(), "", "-n", operatorNS, "rollout", "status", "deployment/"+deployment, "--timeout="+deployTimeout.String()); err != nil {
		t.Fatalf("%v\n%s", err, out)
	}
}

// onlyProxyPod returns the UID of the one proxy pod, that of p.
func onlyProxyPod(t *testing.T, cl client.Client, p *crawlv1alpha1.Proxy) types.UID {
	t.Helper()
	pods := &corev1.PodList{}
	if err := cl.List(t.Context(), pods, client.InNamespace(podsNS)); err != nil || len(pods.Items) != 1 {
		t.Fatalf("want the one pod of Proxy %s: %d pods, %v", p.Name, len(pods.Items), err)
	}
	return pods.Items[0].UID
}

// keptAcrossUpgrade checks that an upgrade re-created nothing: p, made
// before it, is Ready on its instance, its pod (UID before) is still there,
// and there are want proxy pods in all.
func keptAcrossUpgrade(t *testing.T, cl client.Client, p *crawlv1alpha1.Proxy, before types.UID, want int) {
	t.Helper()
	got := &crawlv1alpha1.Proxy{}
	if err := cl.Get(t.Context(), client.ObjectKeyFromObject(p), got); err != nil {
		t.Fatal(err)
	}
	if got.Status.InstanceID != p.Status.InstanceID || got.Status.Phase != crawlv1alpha1.ProxyPhaseReady {
		t.Errorf("after the upgrade Proxy %s is %s on instance %q; want Ready on %q, not re-created", p.Name, got.Status.Phase, got.Status.InstanceID, p.Status.InstanceID)
	}
	pods := &corev1.PodList{}
	if err := cl.List(t.Context(), pods, client.InNamespace(podsNS)); err != nil {
		t.Fatal(err)
	}
	kept := false
	for _, pod := range pods.Items {
		kept = kept || pod.UID == before
	}
	if !kept || len(pods.Items) != want {
		t.Errorf("after the upgrade: %d proxy pods, Proxy %s's pod kept: %v; want %d and kept", len(pods.Items), p.Name, kept, want)
	}
}

// metricsEndpoint scrapes the operator's pod the way Prometheus does, with
// the token of a ServiceAccount bound to the shipped metrics-reader
// ClusterRole; without a token, or with one that lacks the role, it is
// refused.
func metricsEndpoint(t *testing.T, c *kubelab.Cluster, cl client.Client) {
	ctx := t.Context()
	for _, sa := range []string{"scraper", "stranger"} {
		if out, err := c.Kubectl(ctx, "", "-n", servedNS, "create", "serviceaccount", sa); err != nil {
			t.Fatalf("%v\n%s", err, out)
		}
	}
	if out, err := c.Kubectl(ctx, "", "create", "clusterrolebinding", "e2e-scraper",
		"--clusterrole=egress-proxies-operator-metrics-reader", "--serviceaccount="+servedNS+":scraper"); err != nil {
		t.Fatalf("%v\n%s", err, out)
	}
	t.Cleanup(func() { _, _ = c.Kubectl(context.Background(), "", "delete", "clusterrolebinding", "e2e-scraper") })
	token := func(sa string) string {
		out, err := c.Kubectl(ctx, "", "-n", servedNS, "create", "token", sa)
		if err != nil {
			t.Fatal(err)
		}
		return strings.TrimSpace(out)
	}
	pods := operatorPods(t, cl)
	if len(pods) != 1 {
		t.Fatalf("%d operator pods, want 1", len(pods))
	}
	endpoint := "https://" + net.JoinHostPort(pods[0].Status.PodIP, "8443") + "/metrics"
	hc := &http.Client{Timeout: 30 * time.Second, Transport: &http.Transport{
		// The endpoint's certificate is the one controller-runtime makes
		// for itself; what is under test is who may read, not the chain.
		TLSClientConfig: &tls.Config{InsecureSkipVerify: true},
	}}
	scrape := func(bearer string) (int, string) {
		req, err := http.NewRequestWithContext(ctx, http.MethodGet, endpoint, nil)
		if err != nil {
			t.Fatal(err)
		}
		if bearer != "" {
			req.Header.Set("Authorization", "Bearer "+bearer)
		}
		resp, err := hc.Do(req)
		if err != nil {
			t.Fatalf("scraping %s: %v", endpoint, err)
		}
		defer func() { _ = resp.Body.Close() }()
		b, _ := io.ReadAll(resp.Body)
		return resp.StatusCode, string(b)
	}
	for _, tc := range []struct {
		name, reason, token string
		want                int
	}{
		{name: "metrics-reader", reason: "the documented role is enough", token: token("scraper"), want: http.StatusOK},
		{name: "anonymous", reason: "metrics are not public", want: http.StatusUnauthorized},
		{name: "without the role", reason: "a valid token is not enough", token: token("stranger"), want: http.StatusForbidden},
	} {
		code, body := scrape(tc.token)
		if code != tc.want {
			t.Errorf("%s (%s): status %d, want %d", tc.name, tc.reason, code, tc.want)
		}
		if tc.want == http.StatusOK && !strings.Contains(body, "egress_proxies_") {
			t.Errorf("%s: the answer has no egress_proxies_ metric:\n%.500s", tc.name, body)
		}
	}
}

// leaderElection runs two replicas: one holds the lease and acts; when its
// pod is deleted the other takes the lease, a new Proxy becomes Ready, and
// no Proxy got a second pod.
func leaderElection(t *testing.T, c *kubelab.Cluster, cl client.Client, tg target) {
	ctx := t.Context()
	if out, err := c.Kubectl(ctx, "", "-n", operatorNS, "scale", "deployment/"+deployment, "--replicas=2"); err != nil {
		t.Fatalf("%v\n%s", err, out)
	}
	rolledOut(t, c)
	holder := func() string {
		l := &coordinationv1.Lease{}
		if err := cl.Get(ctx, client.ObjectKey{Namespace: operatorNS, Name: setup.LeaderElectionID}, l); err != nil || l.Spec.HolderIdentity == nil {
			return ""
		}
		// controller-runtime's identity is "<pod name>_<uuid>".
		name, _, _ := strings.Cut(*l.Spec.HolderIdentity, "_")
		return name
	}
	var leader string
	poll.Until(t, readyTimeout, func() (bool, string) {
		leader = holder()
		for _, p := range operatorPods(t, cl) {
			if p.Name == leader {
				return true, ""
			}
		}
		return false, fmt.Sprintf("lease held by %q, not one of the operator's pods", leader)
	})
	began := time.Now()
	if err := cl.Delete(ctx, &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Namespace: operatorNS, Name: leader}}); err != nil {
		t.Fatal(err)
	}
	var next string
	poll.Until(t, readyTimeout, func() (bool, string) {
		next = holder()
		return next != "" && next != leader, fmt.Sprintf("lease held by %q", next)
	})
	t.Logf("lease moved from %s to %s in %s", leader, next, time.Since(began).Round(time.Millisecond))
	serves(t, cl, proxy("after-failover", "cluster", 3128), tg)
	proxies := &crawlv1alpha1.ProxyList{}
	if err := cl.List(ctx, proxies, client.InNamespace(servedNS)); err != nil {
		t.Fatal(err)
	}
	pods := &corev1.PodList{}
	if err := cl.List(ctx, pods, client.InNamespace(podsNS)); err != nil {
		t.Fatal(err)
	}
	if len(pods.Items) != len(proxies.Items) {
		names := make([]string, 0, len(pods.Items))
		for _, p := range pods.Items {
			names = append(names, p.Name)
		}
		t.Errorf("%d proxy pods for %d Proxies after the failover: %v", len(pods.Items), len(proxies.Items), names)
	}
}

// podSecurity checks the operator's pods as they ran through everything
// above: admitted under the namespace's enforced restricted profile, with
// the shipped security settings, and never restarted (nothing it writes
// needs a writable root filesystem).
func podSecurity(t *testing.T, cl client.Client) {
	ns := &corev1.Namespace{}
	if err := cl.Get(t.Context(), client.ObjectKey{Name: operatorNS}, ns); err != nil {
		t.Fatal(err)
	}
	if got := ns.Labels["pod-security.kubernetes.io/enforce"]; got != "restricted" {
		t.Errorf("namespace %s enforces pod security %q, want restricted", operatorNS, got)
	}
	for _, p := range operatorPods(t, cl) {
		psc := p.Spec.SecurityContext
		if psc == nil || psc.SeccompProfile == nil || psc.SeccompProfile.Type != corev1.SeccompProfileTypeRuntimeDefault {
			t.Errorf("pod %s: seccomp profile is not RuntimeDefault", p.Name)
		}
		for _, ctr := range p.Spec.Containers {
			sc := ctr.SecurityContext
			if sc == nil || !ptr.Deref(sc.ReadOnlyRootFilesystem, false) || ptr.Deref(sc.AllowPrivilegeEscalation, true) || !ptr.Deref(sc.RunAsNonRoot, false) {
				t.Errorf("pod %s container %s: security context %+v, want a read-only root, no privilege escalation, non-root", p.Name, ctr.Name, sc)
			}
		}
		for _, st := range p.Status.ContainerStatuses {
			if st.RestartCount != 0 {
				t.Errorf("pod %s container %s restarted %d times", p.Name, st.Name, st.RestartCount)
			}
		}
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
