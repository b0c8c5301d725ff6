package kubelab

import (
	"context"
	"errors"
	"fmt"
	"net/netip"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strings"
	"sync"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/clientcmd"

	"github.com/egress-proxies/egress-proxies-operator/internal/testing/modroot"
	"github.com/egress-proxies/egress-proxies-operator/internal/testing/poll"
)

// Options says what a world holds besides its control plane and node.
type Options struct {
	// Images are docker-format tarballs (make image) imported into the
	// node's containerd, under the names they carry, before Start returns.
	Images []string
	// Logf receives progress lines; nil discards them.
	Logf func(format string, args ...any)
}

// Cluster is a running world. Its fields are fixed for its life.
type Cluster struct {
	// Kubeconfig is an administrator's kubeconfig (system:masters);
	// Config is the same as a rest.Config, Client a clientset of it.
	Kubeconfig string
	Config     *rest.Config
	Client     kubernetes.Interface
	// NodeName is the one node; NodeIP its InternalIP and the API server's
	// address, which the host reaches; PodCIDR the pods' addresses, which
	// the host reaches too (one route through NodeIP).
	NodeName string
	NodeIP   netip.Addr
	PodCIDR  netip.Prefix
	// NodeLocal is a /29 that is local to the node's network namespace
	// (each of its addresses on its loopback as a /32, so every one of them,
	// the last included, is an ordinary local address) and routed
	// from the host through NodeIP: a test runs a server on the node's
	// network (InNode) at addresses of its own, which the pods and the
	// host reach, the way they would reach a machine beside the node.
	NodeLocal netip.Prefix
	// HostIP is the host's end of the veth: the machine's address as the
	// node and the pods see it (a test's servers listen there).
	HostIP netip.Addr
	// Dir is the world's work directory; Bin the directory of the
	// Kubernetes binaries (kubectl among them).
	Dir string
	Bin string

	slot   slot
	pki    *pki
	logf   func(string, ...any)
	mu     sync.Mutex
	holder *proc
	procs  []*proc
	// mountPoints are directories created on the machine to mount over
	// (see privatePaths); removed when empty at teardown.
	mountPoints []string
	stopped     bool
}

// Supported says why the machine cannot run a world, or "" when it can.
func Supported() string {
	if runtime.GOOS != "linux" {
		return "the test cluster needs Linux"
	}
	if os.Geteuid() != 0 {
		return "the test cluster needs root (network namespaces, mounts, cgroups, a kubelet)"
	}
	return ""
}

// Start brings a world up for a test and registers its teardown with
// t.Cleanup. Without root or Linux it skips the test, unless CI=true, where
// it fails it. When the test fails, the teardown first logs the cluster's
// events and the daemons' last lines.
func Start(t testing.TB, opts Options) *Cluster {
	t.Helper()
	if testing.Short() {
		t.Skip("kubelab: a real cluster is not started in -short mode")
	}
	if why := Supported(); why != "" {
		if os.Getenv("CI") == "true" {
			t.Fatalf("kubelab: %s, and CI=true: CI must run this tier", why)
		}
		t.Skip("kubelab: " + why)
	}
	if opts.Logf == nil {
		opts.Logf = t.Logf
	}
	c, err := New(t.Context(), opts)
	if c != nil {
		t.Cleanup(func() {
			if t.Failed() {
				t.Logf("kubelab: the cluster as the test failed:\n%s", c.Diagnostics(context.Background()))
			}
			if err := c.Stop(); err != nil {
				t.Errorf("kubelab: teardown: %v", err)
			}
		})
	}
	if err != nil {
		t.Fatalf("kubelab: %v", err)
	}
	return c
}

// New brings a world up. On error it returns the half-started world too (nil
// only when no slot was taken), for its diagnostics and Stop.
func New(ctx context.Context, opts Options) (*Cluster, error) {
	logf := opts.Logf
	if logf == nil {
		logf = func(string, ...any) {}
	}
	began := time.Now()
	bin, err := Binaries(ctx)
	if err != nil {
		return nil, err
	}
	s, err := takeSlot(ctx, 30*time.Minute)
	if err != nil {
		return nil, err
	}
	if err := s.sweep(logf); err != nil { //nolint:contextcheck // sweeping is cleanup that must run to its end even when ctx ends.
		s.release()
		return nil, fmt.Errorf("sweeping what a killed world left in slot %d: %w", s.n, err)
	}
	c := &Cluster{
		Dir:       s.dir,
		Bin:       bin,
		NodeName:  fmt.Sprintf("kubelab-%d", s.n),
		NodeIP:    s.nodeIP,
		PodCIDR:   s.podCIDR,
		NodeLocal: s.nodeLocal,
		HostIP:    s.hostIP,
		slot:      s,
		logf:      logf,
	}
	if err := c.start(ctx, opts); err != nil {
		return c, err
	}
	logf("kubelab: cluster up in %s (slot %d, API server https://%s:6443, pods %s, kubeconfig %s)",
		time.Since(began).Round(time.Millisecond), s.n, c.NodeIP, c.PodCIDR, c.Kubeconfig)
	return c, nil
}

func (c *Cluster) start(ctx context.Context, opts Options) error {
	for _, d := range []string{"log", "etcd", "containerd", "kubelet", "pod-logs", "volume-plugins"} {
		if err := os.MkdirAll(filepath.Join(c.Dir, d), 0o700); err != nil {
			return err
		}
	}
	if err := saveSysctls(c.slot.n); err != nil {
		return fmt.Errorf("saving the sysctls the kubelet changes: %w", err)
	}
	if err := c.network(ctx); err != nil {
		return fmt.Errorf("network: %w", err)
	}
	if err := c.mountNamespace(ctx); err != nil {
		return fmt.Errorf("mount namespace: %w", err)
	}
	if err := makeCgroups(c.slot.cgroup); err != nil {
		return fmt.Errorf("cgroups: %w", err)
	}
	if err := c.certificates(); err != nil {
		return fmt.Errorf("certificates: %w", err)
	}
	if err := c.writeConfigs(); err != nil {
		return err
	}
	if err := c.controlPlane(ctx); err != nil {
		return err
	}
	if err := c.node(ctx, opts.Images); err != nil {
		return err
	}
	return nil
}

// network creates the namespace, the veth pair and the one host route (see
// the package doc).
func (c *Cluster) network(ctx context.Context) error {
	s := c.slot
	inNS := func(args ...string) []string { return append([]string{"-n", s.netns}, args...) }
	steps := [][]string{
		{"netns", "add", s.netns},
		{"link", "add", s.hostVeth, "type", "veth", "peer", "name", s.nodeVeth, "netns", s.netns},
		{"addr", "add", s.hostIP.String(), "peer", s.nodeIP.String() + "/32", "dev", s.hostVeth},
		{"link", "set", s.hostVeth, "up"},
		inNS("link", "set", "lo", "up"),
		inNS("addr", "add", s.nodeIP.String(), "peer", s.hostIP.String()+"/32", "dev", s.nodeVeth),
		inNS("link", "set", s.nodeVeth, "up"),
		{"route", "add", s.podCIDR.String(), "via", s.nodeIP.String(), "dev", s.hostVeth},
	}
	// Every node-local address on its own (/32): the /29 as one address
	// would make its last address the loopback's broadcast address, which
	// nothing can connect to (ENETUNREACH), and the guest a test placed
	// there unreachable.
	for a := s.nodeLocal.Addr(); s.nodeLocal.Contains(a); a = a.Next() {
		steps = append(steps, inNS("addr", "add", a.String()+"/32", "dev", "lo"))
	}
	steps = append(steps, []string{"route", "add", s.nodeLocal.String(), "via", s.nodeIP.String(), "dev", s.hostVeth})
	for _, args := range steps {
		if err := run(ctx, "ip", args...); err != nil {
			return err
		}
	}
	// Forwarding between the pods' bridge and the veth, inside only.
	return run(ctx, "nsenter", "--net=/run/netns/"+s.netns, "sysctl", "-q", "-w", "net.ipv4.ip_forward=1")
}

// mountNamespace starts the holder, a process in the world's network
// namespace and a private mount namespace, and bind-mounts the world's
// directories there over the paths of privatePaths.
func (c *Cluster) mountNamespace(ctx context.Context) error {
	holder, err := start(ctx, c.Dir, "holder", "nsenter", "--net=/run/netns/"+c.slot.netns, "--",
		"unshare", "--mount", "--propagation", "private", "--", "sleep", "infinity")
	if err != nil {
		return err
	}
	c.holder = holder
	mine, err := os.Readlink("/proc/self/ns/mnt")
	if err != nil {
		return err
	}
	pid := holder.cmd.Process.Pid
	if err := poll.WaitPaced(ctx, time.Minute, func() (bool, string) {
		if err := holder.exited(); err != nil {
			return true, ""
		}
		theirs, err := os.Readlink(fmt.Sprintf("/proc/%d/ns/mnt", pid))
		return err == nil && theirs != mine, "the holder has not entered its mount namespace"
	}); err != nil {
		return err
	}
	if err := holder.exited(); err != nil {
		return err
	}
	for target, src := range privatePaths {
		src = filepath.Join(c.Dir, src)
		if err := os.MkdirAll(src, 0o755); err != nil { //nolint:gosec // G301: like the directories they stand for.
			return err
		}
		if _, err := os.Stat(target); errors.Is(err, os.ErrNotExist) {
			if err := os.MkdirAll(target, 0o755); err != nil { //nolint:gosec // G301: like the directories they stand for.
				return err
			}
			c.mountPoints = append(c.mountPoints, target)
		}
		argv := c.inWorld("mount", "--bind", src, target)
		if err := run(ctx, argv[0], argv[1:]...); err != nil {
			return err
		}
	}
	return nil
}

func (c *Cluster) certificates() error {
	p, err := newPKI(filepath.Join(c.Dir, "pki"))
	if err != nil {
		return err
	}
	c.pki = p
	node := c.NodeIP.String()
	if err := p.issue("apiserver", "kube-apiserver", nil, "127.0.0.1", node, serviceIP, "localhost",
		"kubernetes", "kubernetes.default", "kubernetes.default.svc", "kubernetes.default.svc.cluster.local"); err != nil {
		return err
	}
	for _, cl := range []struct{ name, cn, org string }{
		{"admin", "kubelab-admin", "system:masters"},
		{"apiserver-kubelet-client", "kube-apiserver-kubelet-client", "system:masters"},
		{"controller-manager", "system:kube-controller-manager", ""},
		{"scheduler", "system:kube-scheduler", ""},
		{"kube-proxy", "system:kube-proxy", ""},
		{"kubelet", "system:node:" + c.NodeName, "system:nodes"},
	} {
		var orgs []string
		if cl.org != "" {
			orgs = []string{cl.org}
		}
		if err := p.issue(cl.name, cl.cn, orgs); err != nil {
			return err
		}
		if cl.name == "apiserver-kubelet-client" {
			continue
		}
		path, err := p.kubeconfig(cl.name, "https://"+node+":6443")
		if err != nil {
			return err
		}
		if cl.name == "admin" {
			c.Kubeconfig = path
		}
	}
	return nil
}

// daemon starts one of the world's processes in its namespaces.
func (c *Cluster) daemon(ctx context.Context, name string, argv ...string) error {
	p, err := start(ctx, c.Dir, name, c.inWorld(argv...)...)
	if err != nil {
		return err
	}
	c.mu.Lock()
	c.procs = append(c.procs, p)
	c.mu.Unlock()
	return nil
}

// exitedDaemon returns the error of the first daemon that has exited.
func (c *Cluster) exitedDaemon() error {
	c.mu.Lock()
	defer c.mu.Unlock()
	for _, p := range append([]*proc{c.holder}, c.procs...) {
		if err := p.exited(); err != nil {
			return err
		}
	}
	return nil
}

// wait polls cond until it holds, a daemon exits, or quiet times the
// machine's measured slowdown passes (poll.WaitPaced). quiet is generous
// for a quiet machine, so the bound is never shorter than it, and a loaded
// one gets proportionally more: a cold run beside other builds saw the API
// server take 3 of its 5 quiet minutes.
func (c *Cluster) wait(ctx context.Context, what string, quiet time.Duration, cond func() error) error {
	began := time.Now()
	var dead error
	err := poll.WaitPaced(ctx, quiet, func() (bool, string) {
		if dead = c.exitedDaemon(); dead != nil {
			return true, ""
		}
		if err := cond(); err != nil {
			return false, err.Error()
		}
		return true, ""
	})
	if dead != nil {
		return fmt.Errorf("waiting for %s: %w", what, dead)
	}
	if err != nil {
		return fmt.Errorf("waiting for %s: %w", what, err)
	}
	c.logf("kubelab: %s after %s", what, time.Since(began).Round(time.Millisecond))
	return nil
}

func (c *Cluster) controlPlane(ctx context.Context) error {
	p := c.pki.path
	bin := func(n string) string { return filepath.Join(c.Bin, n) }
	if err := c.daemon(ctx, "etcd", bin("etcd"), "--data-dir", filepath.Join(c.Dir, "etcd"),
		"--listen-client-urls", "http://127.0.0.1:2379", "--advertise-client-urls", "http://127.0.0.1:2379",
		"--listen-peer-urls", "http://127.0.0.1:2380", "--unsafe-no-fsync", "--log-level", "warn"); err != nil {
		return err
	}
	if err := c.daemon(ctx, "kube-apiserver", bin("kube-apiserver"),
		"--etcd-servers", "http://127.0.0.1:2379",
		"--bind-address", "0.0.0.0", "--secure-port", "6443", "--advertise-address", c.NodeIP.String(),
		"--service-cluster-ip-range", serviceCIDR,
		"--cert-dir", filepath.Join(c.Dir, "apiserver-certs"),
		"--client-ca-file", p("ca.crt"),
		"--tls-cert-file", p("apiserver.crt"), "--tls-private-key-file", p("apiserver.key"),
		"--service-account-key-file", p("sa.pub"), "--service-account-signing-key-file", p("sa.key"),
		"--service-account-issuer", "https://kubernetes.default.svc.cluster.local",
		"--authorization-mode", "Node,RBAC",
		"--kubelet-client-certificate", p("apiserver-kubelet-client.crt"), "--kubelet-client-key", p("apiserver-kubelet-client.key"),
		"--kubelet-preferred-address-types", "InternalIP,Hostname",
		"--allow-privileged=true", "--profiling=false"); err != nil {
		return err
	}
	cfg, err := clientcmd.BuildConfigFromFlags("", c.Kubeconfig)
	if err != nil {
		return err
	}
	c.Config = cfg
	if c.Client, err = kubernetes.NewForConfig(cfg); err != nil {
		return err
	}
	if err := c.wait(ctx, "the API server to be ready", 5*time.Minute, func() error {
		rctx, cancel := context.WithTimeout(ctx, 10*time.Second)
		defer cancel()
		_, err := c.Client.Discovery().RESTClient().Get().AbsPath("/readyz").DoRaw(rctx)
		return err
	}); err != nil {
		return err
	}
	if err := c.daemon(ctx, "kube-controller-manager", bin("kube-controller-manager"),
		"--kubeconfig", p("controller-manager.kubeconfig"),
		"--authentication-kubeconfig", p("controller-manager.kubeconfig"),
		"--authorization-kubeconfig", p("controller-manager.kubeconfig"),
		"--bind-address", "127.0.0.1", "--leader-elect=false",
		"--root-ca-file", p("ca.crt"), "--service-account-private-key-file", p("sa.key"),
		"--use-service-account-credentials",
		"--cluster-signing-cert-file", p("ca.crt"), "--cluster-signing-key-file", p("ca.key"),
		"--service-cluster-ip-range", serviceCIDR); err != nil {
		return err
	}
	return c.daemon(ctx, "kube-scheduler", bin("kube-scheduler"),
		"--kubeconfig", p("scheduler.kubeconfig"),
		"--authentication-kubeconfig", p("scheduler.kubeconfig"),
		"--authorization-kubeconfig", p("scheduler.kubeconfig"),
		"--bind-address", "127.0.0.1", "--leader-elect=false")
}

func (c *Cluster) node(ctx context.Context, images []string) error {
	if err := c.daemon(ctx, "containerd", "containerd", "--config", filepath.Join(c.Dir, "containerd", "config.toml")); err != nil {
		return err
	}
	if err := c.wait(ctx, "containerd to answer", 2*time.Minute, func() error {
		return run(ctx, "ctr", "--address", c.containerdSocket(), "version")
	}); err != nil {
		return err
	}
	pause, err := c.pauseImage(ctx)
	if err != nil {
		return err
	}
	for _, img := range append([]string{pause}, images...) {
		if err := c.ImportImage(ctx, img); err != nil {
			return err
		}
	}
	if err := c.daemon(ctx, "kube-proxy", filepath.Join(c.Bin, "kube-proxy"), "--config", filepath.Join(c.Dir, "kube-proxy", "config.yaml")); err != nil {
		return err
	}
	if err := c.daemon(ctx, "kubelet", filepath.Join(c.Bin, "kubelet"),
		"--config", filepath.Join(c.Dir, "kubelet", "config.yaml"),
		"--kubeconfig", c.pki.path("kubelet.kubeconfig"),
		"--root-dir", filepath.Join(c.Dir, "kubelet"),
		"--cert-dir", filepath.Join(c.Dir, "kubelet", "pki"),
		"--hostname-override", c.NodeName, "--node-ip", c.NodeIP.String()); err != nil {
		return err
	}
	if err := c.wait(ctx, "the node to be Ready", 5*time.Minute, func() error {
		n, err := c.Client.CoreV1().Nodes().Get(ctx, c.NodeName, metav1.GetOptions{})
		if err != nil {
			return err
		}
		for _, cond := range n.Status.Conditions {
			if cond.Type == corev1.NodeReady {
				if cond.Status == corev1.ConditionTrue {
					return nil
				}
				return fmt.Errorf("node Ready=%s: %s", cond.Status, cond.Message)
			}
		}
		return errors.New("node has no Ready condition yet")
	}); err != nil {
		return err
	}
	// Pods need their namespace's default ServiceAccount, which the
	// controller-manager creates.
	if err := c.wait(ctx, "the default ServiceAccount", 5*time.Minute, func() error {
		_, err := c.Client.CoreV1().ServiceAccounts("default").Get(ctx, "default", metav1.GetOptions{})
		return err
	}); err != nil {
		return err
	}
	// The controller-manager also publishes the cluster's CA as the
	// ConfigMap kube-root-ca.crt in every namespace, on its own time: a
	// test that snapshots the cluster to find what an uninstall leaves
	// must not take the cluster's own late objects for leftovers (a cold
	// run saw the four system namespaces' copies appear after the
	// snapshot). The cluster is up once they are all there.
	return c.wait(ctx, "the root CA ConfigMap in every namespace", 5*time.Minute, func() error {
		nss, err := c.Client.CoreV1().Namespaces().List(ctx, metav1.ListOptions{})
		if err != nil {
			return err
		}
		for _, ns := range nss.Items {
			if _, err := c.Client.CoreV1().ConfigMaps(ns.Name).Get(ctx, rootCAConfigMap, metav1.GetOptions{}); err != nil {
				return fmt.Errorf("namespace %s: %w", ns.Name, err)
			}
		}
		return nil
	})
}

// rootCAConfigMap is the ConfigMap in which the controller-manager
// publishes the cluster's CA in every namespace.
const rootCAConfigMap = "kube-root-ca.crt"

// ImportImage imports a docker-format tarball into the node's containerd
// (the k8s.io namespace the kubelet's CRI uses).
func (c *Cluster) ImportImage(ctx context.Context, tarball string) error {
	began := time.Now()
	if err := run(ctx, "ctr", "--address", c.containerdSocket(), "-n", "k8s.io", "images", "import", tarball); err != nil {
		return err
	}
	c.logf("kubelab: imported %s in %s", filepath.Base(tarball), time.Since(began).Round(time.Millisecond))
	return nil
}

// pauseImage builds the sandbox image with `make pause-image` into the
// world's directory.
func (c *Cluster) pauseImage(ctx context.Context) (string, error) {
	out := filepath.Join(c.Dir, "pause-image.tar")
	err := Make(ctx, "pause-image", "PAUSE_TAR="+out, "BIN_DIR="+filepath.Join(c.Dir, "bin"))
	return out, err
}

// Make runs a target of the repository's Makefile (the words the README
// gives users), from the repository's root.
func Make(ctx context.Context, target string, vars ...string) error {
	root, err := modroot.Find()
	if err != nil {
		return err
	}
	return MakeIn(ctx, root, target, vars...)
}

// MakeIn runs a target of the Makefile in dir: the repository's, or
// another tree's (an older commit's, to upgrade from).
func MakeIn(ctx context.Context, dir, target string, vars ...string) error {
	cmd := command(ctx, "make", append([]string{"--no-print-directory", "-C", dir, target}, vars...)...)
	out, err := cmd.CombinedOutput()
	if err != nil {
		return fmt.Errorf("make %s in %s: %w:\n%s", target, dir, err, out)
	}
	return nil
}

// Binaries returns the directory of the cluster's binaries, building them
// (once, cached) with hack/cluster/setup.sh.
func Binaries(ctx context.Context) (string, error) {
	root, err := modroot.Find()
	if err != nil {
		return "", err
	}
	cmd := command(ctx, filepath.Join(root, "hack", "cluster", "setup.sh"))
	var stderr strings.Builder
	cmd.Stderr = &stderr
	out, err := cmd.Output()
	if err != nil {
		return "", fmt.Errorf("hack/cluster/setup.sh: %w: %s", err, stderr.String())
	}
	return strings.TrimSpace(string(out)), nil
}

// Kubectl runs the cluster's kubectl as the administrator and returns its
// standard output; the error carries its standard error.
func (c *Cluster) Kubectl(ctx context.Context, stdin string, args ...string) (string, error) {
	cmd := command(ctx, filepath.Join(c.Bin, "kubectl"), append([]string{"--kubeconfig", c.Kubeconfig}, args...)...)
	if stdin != "" {
		cmd.Stdin = strings.NewReader(stdin)
	}
	var stderr strings.Builder
	cmd.Stderr = &stderr
	out, err := cmd.Output()
	if err != nil {
		return string(out), fmt.Errorf("kubectl %s: %w: %s", strings.Join(args, " "), err, strings.TrimSpace(stderr.String()))
	}
	return string(out), nil
}

// InNode returns a command run in the node's network namespace (where
// hostNetwork pods and the Service range live).
func (c *Cluster) InNode(ctx context.Context, name string, args ...string) *exec.Cmd {
	argv := append([]string{"--net=/run/netns/" + c.slot.netns, "--", name}, args...)
	return command(ctx, "nsenter", argv...)
}

// Diagnostics returns what a failed test should print: the cluster's
// events, its pods, and the last lines of each daemon's log.
func (c *Cluster) Diagnostics(ctx context.Context) string {
	var b strings.Builder
	if c.Kubeconfig != "" && c.Bin != "" {
		for _, args := range [][]string{
			{"get", "events", "-A", "--sort-by=.lastTimestamp"},
			{"get", "pods", "-A", "-o", "wide"},
		} {
			dctx, cancel := context.WithTimeout(ctx, 30*time.Second)
			out, err := c.Kubectl(dctx, "", args...)
			cancel()
			fmt.Fprintf(&b, "--- kubectl %s\n%s", strings.Join(args, " "), out)
			if err != nil {
				fmt.Fprintf(&b, "(%v)\n", err)
			}
		}
	}
	c.mu.Lock()
	procs := append([]*proc(nil), c.procs...)
	c.mu.Unlock()
	for _, p := range procs {
		n := 15
		if p.name == "kubelet" {
			n = 60
		}
		fmt.Fprintf(&b, "--- %s (last %d lines of %s)\n%s\n", p.name, n, p.log, tail(p.log, n))
	}
	return b.String()
}

// Stop tears the world down: every process (the pods' with the daemons),
// the mounts (they go with the mount namespace's last process), the
// namespace, veth and route, the cgroups, the work directory; the sysctls
// are restored when no other world runs. It is safe to call twice.
func (c *Cluster) Stop() error {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.stopped {
		return nil
	}
	c.stopped = true
	began := time.Now()
	var errs []error
	// The kubelet first, so that it starts nothing while the rest goes.
	for _, p := range c.procs {
		if p.name == "kubelet" {
			_ = p.cmd.Process.Kill()
			<-p.done
		}
	}
	if err := c.slot.sweep(c.logf); err != nil {
		errs = append(errs, err)
	}
	for _, p := range append(c.procs, c.holder) {
		if p != nil {
			<-p.done
		}
	}
	// Only when no other world runs: removing a directory that is a mount
	// point in another world's mount namespace would detach its mount.
	if !othersRunning(c.slot.n) {
		for i := len(c.mountPoints) - 1; i >= 0; i-- {
			_ = os.Remove(c.mountPoints[i]) // only when empty
		}
	}
	if err := restoreSysctls(c.slot.n); err != nil {
		errs = append(errs, err)
	}
	c.slot.release()
	c.logf("kubelab: torn down in %s", time.Since(began).Round(time.Millisecond))
	return errors.Join(errs...)
}
