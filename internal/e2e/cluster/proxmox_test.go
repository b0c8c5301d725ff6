package cluster_test

import (
	"bytes"
	"context"
	"crypto/tls"
	"crypto/x509"
	"encoding/json"
	"fmt"
	"net/http"
	"net/netip"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"

	crawlv1alpha1 "github.com/egress-proxies/egress-proxies-operator/api/v1alpha1"
	"github.com/egress-proxies/egress-proxies-operator/internal/testing/kubelab"
	"github.com/egress-proxies/egress-proxies-operator/internal/testing/modroot"
	"github.com/egress-proxies/egress-proxies-operator/internal/testing/poll"
	"github.com/egress-proxies/egress-proxies-operator/internal/testing/pvelab"
)

// The simulated Proxmox VE cluster's entry, as a user with a Proxmox
// cluster beside the node writes it (docs/proxmox.md): the token and CA
// from the Secret proxmox-token, mounted where the shipped Deployment
// mounts it. %[1]s is the test's target (allowed, as in providersYAML),
// %[2]s the API's URL, %[3]d and %[4]d the VMID range: as wide as the
// guests' /29, so that each VM has an address of its own (pvesim's
// guestNetwork).
const proxmoxEntryYAML = `  - name: lab
    type: proxmox
    zones: [rack-a]
    machineTypes:
        small: {cores: 1, memoryMiB: 512}
    images: [` + pvelab.Image + `]
    egressPolicy: {allowCIDRs: [%[1]s/32]}
    proxmox:
      apiURL: %[2]s
      tokenFile: /etc/proxy-operator/proxmox/token
      caFile: /etc/proxy-operator/proxmox/ca.pem
      zones: {rack-a: {nodes: [pve1]}}
      images: {` + pvelab.Image + `: {templateVMID: 9000}}
      isoStorage: seeds
      vmidRange: {min: %[3]d, max: %[4]d}
`

// simSpeed makes the simulator's tasks and boots 20 times faster than a
// real host's (F26), so that a VM is Ready in seconds rather than minutes.
const simSpeed = "20"

// simulator is the Proxmox VE simulator (cmd/pvesim) running on the node's
// network, as a Proxmox cluster beside a node would be: its API at the
// node's address, its guests, which run the forward proxy their seed
// configures, at addresses of the node-local range (kubelab.NodeLocal),
// which the pods and the host reach.
type simulator struct {
	apiURL     string
	token, ca  string // the files make proxmox-token-secret reads
	guests     netip.Prefix
	client     *http.Client
	tokenValue string
	log        string
}

// vmidMin is the entry's first VMID: a multiple of the guests' range size,
// so that VMID vmidMin+i has the range's address i.
const vmidMin = 100000

// startSimulator builds cmd/pvesim and runs it in the node's network
// namespace until the test ends.
func startSimulator(t *testing.T, c *kubelab.Cluster) *simulator {
	t.Helper()
	ctx := t.Context()
	root, err := modroot.Find()
	if err != nil {
		t.Fatal(err)
	}
	dir := t.TempDir()
	bin := filepath.Join(dir, "pvesim")
	build := exec.CommandContext(ctx, "go", "build", "-o", bin, "./cmd/pvesim")
	build.Dir = root
	if out, err := build.CombinedOutput(); err != nil {
		t.Fatalf("go build ./cmd/pvesim: %v\n%s", err, out)
	}
	s := &simulator{
		apiURL: "https://" + netip.AddrPortFrom(c.NodeIP, 8006).String(),
		token:  filepath.Join(dir, "token"), ca: filepath.Join(dir, "ca.pem"),
		guests: c.NodeLocal, log: filepath.Join(dir, "pvesim.log"),
	}
	if vmidMin%(1<<(32-s.guests.Bits())) != 0 {
		t.Fatalf("vmidMin %d is not a multiple of the size of %s", vmidMin, s.guests)
	}
	cfg, addrs := filepath.Join(dir, "cluster.yaml"), filepath.Join(dir, "addresses.json")
	if err := os.WriteFile(cfg, pvelab.ClusterYAML(1), 0o600); err != nil {
		t.Fatal(err)
	}
	logFile, err := os.Create(s.log)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = logFile.Close() })
	cmd := c.InNode(ctx, bin, "--config", cfg, "--listen", netip.AddrPortFrom(c.NodeIP, 8006).String(), "--admin", "",
		"--speed", simSpeed, "--ca-out", s.ca, "--token-out", s.token, "--addr-out", addrs,
		"--guest-network", s.guests.String(), "--guest-allow", netip.PrefixFrom(c.HostIP, 32).String())
	cmd.Stdout, cmd.Stderr = logFile, logFile
	// SIGTERM first: the simulator stops its guests and removes its
	// upload directory.
	cmd.Cancel = func() error { return cmd.Process.Signal(syscall.SIGTERM) }
	cmd.WaitDelay = 30 * time.Second
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	exited := make(chan error, 1)
	go func() { exited <- cmd.Wait() }()
	t.Cleanup(func() {
		// Ended by the test's context: its exit status matters only to
		// a failed test's reader.
		err := <-exited
		if t.Failed() {
			b, _ := os.ReadFile(s.log)
			t.Logf("pvesim ended (%v); its log:\n%s", err, b)
		}
	})
	poll.Until(t, time.Minute, func() (bool, string) {
		select {
		case err := <-exited:
			exited <- err
			b, _ := os.ReadFile(s.log)
			t.Fatalf("pvesim exited: %v\n%s", err, b)
		default:
		}
		_, err := os.Stat(addrs)
		return err == nil, fmt.Sprintf("no %s yet", addrs)
	})
	caPEM, err := os.ReadFile(s.ca)
	if err != nil {
		t.Fatal(err)
	}
	pool := x509.NewCertPool()
	if !pool.AppendCertsFromPEM(caPEM) {
		t.Fatal("pvesim's CA file holds no certificate")
	}
	tok, err := os.ReadFile(s.token)
	if err != nil {
		t.Fatal(err)
	}
	s.tokenValue = strings.TrimSpace(string(tok))
	s.client = &http.Client{Timeout: 30 * time.Second, Transport: &http.Transport{TLSClientConfig: &tls.Config{RootCAs: pool, MinVersion: tls.VersionTLS12}}}
	return s
}

// entry is the simulator's providers configuration entry.
func (s *simulator) entry(tg netip.Addr) string {
	return fmt.Sprintf(proxmoxEntryYAML, tg, s.apiURL, vmidMin, vmidMin+(1<<(32-s.guests.Bits()))-1)
}

// clones lists the VMs on the simulator that are not templates, through its
// API with the operator's token, as an administrator would look.
func (s *simulator) clones(ctx context.Context) ([]string, error) {
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, s.apiURL+"/api2/json/cluster/resources?type=vm", http.NoBody)
	if err != nil {
		return nil, err
	}
	req.Header.Set("Authorization", "PVEAPIToken="+s.tokenValue)
	resp, err := s.client.Do(req)
	if err != nil {
		return nil, err
	}
	defer func() { _ = resp.Body.Close() }()
	var body struct {
		Data []struct {
			VMID     int    `json:"vmid"`
			Name     string `json:"name"`
			Template int    `json:"template"`
		} `json:"data"`
	}
	if resp.StatusCode != http.StatusOK {
		return nil, fmt.Errorf("GET /cluster/resources: %s", resp.Status)
	}
	if err := json.NewDecoder(resp.Body).Decode(&body); err != nil {
		return nil, err
	}
	var out []string
	for _, vm := range body.Data {
		if vm.Template == 0 {
			out = append(out, fmt.Sprintf("%d %s", vm.VMID, vm.Name))
		}
	}
	return out, nil
}

// proxmoxTokenSecret creates the Secret proxmox-token the way
// docs/proxmox.md tells users: make proxmox-token-secret.
func (s *simulator) proxmoxTokenSecret(t *testing.T, c *kubelab.Cluster) {
	t.Helper()
	if err := kubelab.Make(t.Context(), "proxmox-token-secret", "PROXMOX_TOKEN_FILE="+s.token, "PROXMOX_CA_FILE="+s.ca,
		"KUBECTL="+filepath.Join(c.Bin, "kubectl"), "KUBECONFIG="+c.Kubeconfig); err != nil {
		t.Fatal(err)
	}
}

// proxmoxFromInside is a Proxy of the simulator's entry: Ready, serving
// from the host as every Proxy of the tier does, and then from a pod in the
// served namespace, as a crawler in the cluster would: PROXY_URL from the
// Proxy's Secret (key url), requests that leave from the VM's own address.
// Deleted, it leaves no VM behind.
func proxmoxFromInside(t *testing.T, c *kubelab.Cluster, cl client.Client, sim *simulator, tg target) {
	ctx := t.Context()
	p := proxy("vm", "lab", 3128)
	p.Spec.Zone, p.Spec.MachineType, p.Spec.Image = "rack-a", "small", pvelab.Image
	got := serves(t, cl, p, tg)
	addr, err := netip.ParseAddr(got.Status.Address)
	if err != nil || !sim.guests.Contains(addr) {
		t.Fatalf("the Proxy's address is %q, want one of the guests' %s", got.Status.Address, sim.guests)
	}

	const runs = 3
	logs := crawl(t, c, cl, crawlJob{name: "crawler", secret: got.Status.CredentialsSecretName, args: []string{"-url", tg.url, "-n", strconv.Itoa(runs)}})
	// The target names the address each request came from: the VM's own.
	if n := egressAddresses(logs)[addr.String()]; n != runs {
		t.Errorf("%d of %d requests from the pod got 200 from %s:\n%s", n, runs, addr, logs)
	}
	if pw := secretPassword(t, cl, got); strings.Contains(logs, pw) {
		t.Error("the crawler's log holds the proxy's password")
	}
	t.Logf("a pod crawled through VM %s:\n%s", addr, logs)

	if err := cl.Delete(ctx, got); err != nil {
		t.Fatal(err)
	}
	poll.Until(t, goneTimeout, func() (bool, string) {
		vms, err := sim.clones(ctx)
		if err != nil {
			return false, err.Error()
		}
		return len(vms) == 0, fmt.Sprintf("VMs left on the simulator: %v", vms)
	})
}

// secretPassword is the password of a Proxy's credentials Secret.
func secretPassword(t *testing.T, cl client.Client, p *crawlv1alpha1.Proxy) string {
	t.Helper()
	sec := &corev1.Secret{}
	if err := cl.Get(t.Context(), client.ObjectKey{Namespace: p.Namespace, Name: p.Status.CredentialsSecretName}, sec); err != nil {
		t.Fatal(err)
	}
	pw := bytes.TrimSpace(sec.Data["password"])
	if len(pw) == 0 {
		t.Fatal("the Proxy's Secret has no password")
	}
	return string(pw)
}

// crawlJob is one run of the crawler image in the served namespace.
type crawlJob struct {
	name string
	// secret is the Secret whose url key the crawler's PROXY_URL is.
	secret string
	args   []string
	// hosts are /etc/hosts entries (hostAliases): the test cluster runs no
	// DNS server, so a Service's name is given its ClusterIP here, as the
	// cluster's DNS would.
	hosts []corev1.HostAlias
}

// crawl runs j as a pod, as a crawler in the cluster would, waits for it to
// succeed and returns its log; the pod is deleted before it returns.
func crawl(t *testing.T, c *kubelab.Cluster, cl client.Client, j crawlJob) string {
	t.Helper()
	ctx := t.Context()
	pod := &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Name: j.name, Namespace: servedNS},
		Spec: corev1.PodSpec{
			RestartPolicy: corev1.RestartPolicyNever,
			HostAliases:   j.hosts,
			Containers: []corev1.Container{{
				Name: "crawler", Image: crawlerImage, ImagePullPolicy: corev1.PullNever,
				Command: append([]string{"/crawler"}, j.args...),
				Env: []corev1.EnvVar{{Name: "PROXY_URL", ValueFrom: &corev1.EnvVarSource{SecretKeyRef: &corev1.SecretKeySelector{
					LocalObjectReference: corev1.LocalObjectReference{Name: j.secret}, Key: "url",
				}}}},
				SecurityContext: &corev1.SecurityContext{
					RunAsNonRoot: ptr.To(true), RunAsUser: ptr.To[int64](65532), ReadOnlyRootFilesystem: ptr.To(true),
					AllowPrivilegeEscalation: ptr.To(false), Capabilities: &corev1.Capabilities{Drop: []corev1.Capability{"ALL"}},
					SeccompProfile: &corev1.SeccompProfile{Type: corev1.SeccompProfileTypeRuntimeDefault},
				},
			}},
		},
	}
	if err := cl.Create(ctx, pod); err != nil {
		t.Fatal(err)
	}
	defer func() {
		if err := cl.Delete(context.Background(), pod); err != nil {
			t.Errorf("deleting the crawler pod %s: %v", j.name, err)
		}
	}()
	poll.Until(t, readyTimeout, func() (bool, string) {
		if err := cl.Get(ctx, client.ObjectKeyFromObject(pod), pod); err != nil {
			return false, err.Error()
		}
		if pod.Status.Phase == corev1.PodFailed {
			logs, _ := c.Kubectl(ctx, "", "-n", servedNS, "logs", j.name)
			t.Fatalf("the crawler pod %s failed:\n%s", j.name, logs)
		}
		return pod.Status.Phase == corev1.PodSucceeded, "pod phase " + string(pod.Status.Phase)
	})
	logs, err := c.Kubectl(ctx, "", "-n", servedNS, "logs", j.name)
	if err != nil {
		t.Fatal(err)
	}
	return logs
}

// egressAddresses counts, in a crawler's log, the answers of 200 from the
// target by the address they came from.
func egressAddresses(logs string) map[string]int {
	out := map[string]int{}
	for _, line := range strings.Split(logs, "\n") {
		if _, from, ok := strings.Cut(line, ": 200 "+targetAnswer); ok {
			out[strings.TrimSpace(from)]++
		}
	}
	return out
}
