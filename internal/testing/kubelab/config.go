package kubelab

import (
	"fmt"
	"os"
	"path/filepath"
)

// serviceCIDR is the Service range: it exists only inside the world's
// network namespace (kube-proxy's rules there), never as a route on the host.
const serviceCIDR = "203.0.113.128/25"

// serviceIP is the kubernetes Service's address, the range's first.
const serviceIP = "203.0.113.129"

// PauseImage is the sandbox image the world imports (make pause-image).
const PauseImage = "egress-proxies-pause:dev"

// The world's own directories, under its work directory, that are
// bind-mounted over the paths the kubelet and containerd write whatever
// their settings (see the package doc).
var privatePaths = map[string]string{
	"/var/lib/kubelet":        "fs/var-lib-kubelet",
	"/var/log/containers":     "fs/var-log-containers",
	"/var/log/pods":           "fs/var-log-pods",
	"/usr/libexec/kubernetes": "fs/usr-libexec-kubernetes",
	"/var/lib/cni":            "fs/var-lib-cni",
	"/run/containerd":         "fs/run-containerd",
	"/run/netns":              "fs/run-netns",
	"/var/lib/containerd":     "fs/var-lib-containerd",
	"/opt/containerd":         "fs/opt-containerd",
}

func (c *Cluster) containerdSocket() string {
	return filepath.Join(c.Dir, "containerd", "containerd.sock")
}

func (c *Cluster) writeConfigs() error {
	files := map[string]string{
		"containerd/config.toml": fmt.Sprintf(`version = 2
root = %[1]q
state = %[2]q
disabled_plugins = ["io.containerd.snapshotter.v1.btrfs", "io.containerd.snapshotter.v1.zfs", "io.containerd.snapshotter.v1.devmapper", "io.containerd.snapshotter.v1.aufs"]

[grpc]
  address = %[3]q

[ttrpc]
  address = "%[3]s.ttrpc"

[plugins."io.containerd.grpc.v1.cri"]
  sandbox_image = "docker.io/library/%[4]s"
  # The machine lacks CAP_SYS_RESOURCE: runc may not lower oom_score_adj.
  restrict_oom_score_adj = true
  [plugins."io.containerd.grpc.v1.cri".containerd]
    snapshotter = "overlayfs"
    default_runtime_name = "runc"
    [plugins."io.containerd.grpc.v1.cri".containerd.runtimes.runc]
      runtime_type = "io.containerd.runc.v2"
      [plugins."io.containerd.grpc.v1.cri".containerd.runtimes.runc.options]
        SystemdCgroup = false
  [plugins."io.containerd.grpc.v1.cri".cni]
    bin_dir = "/usr/lib/cni"
    conf_dir = %[5]q
`, filepath.Join(c.Dir, "containerd", "root"), filepath.Join(c.Dir, "containerd", "state"), c.containerdSocket(), PauseImage, filepath.Join(c.Dir, "cni", "net.d")),

		// A pod's default route is the bridge (isDefaultGateway): Service
		// addresses reach kube-proxy's rules in the node's namespace that
		// way, and that namespace has no default route, so nothing leaves.
		"cni/net.d/10-kubelab.conflist": fmt.Sprintf(`{
  "cniVersion": "1.0.0",
  "name": "kubelab-%[1]d",
  "plugins": [
    {
      "type": "bridge",
      "bridge": %[2]q,
      "isGateway": true,
      "isDefaultGateway": true,
      "ipMasq": false,
      "hairpinMode": true,
      "ipam": {
        "type": "host-local",
        "ranges": [[{"subnet": %[3]q, "gateway": %[4]q}]],
        "dataDir": %[5]q
      }
    },
    {"type": "portmap", "capabilities": {"portMappings": true}}
  ]
}
`, c.slot.n, c.slot.bridge, c.PodCIDR.String(), c.slot.podGateway().String(), filepath.Join(c.Dir, "cni", "ipam")),

		// No DNS in the world: pods get a resolver file that names none.
		"resolv.conf": "options ndots:1\n",

		"kubelet/config.yaml": fmt.Sprintf(`apiVersion: kubelet.config.k8s.io/v1beta1
kind: KubeletConfiguration
failCgroupV1: false
cgroupDriver: cgroupfs
cgroupRoot: /%[1]s
address: %[2]s
readOnlyPort: 0
authentication:
  anonymous: {enabled: false}
  webhook: {enabled: true}
  x509: {clientCAFile: %[3]q}
authorization:
  mode: Webhook
resolvConf: %[4]q
podLogsDir: %[5]q
volumePluginDir: %[6]q
failSwapOn: false
clusterDomain: cluster.local
maxPods: 16
serializeImagePulls: false
imageGCHighThresholdPercent: 100
imageGCLowThresholdPercent: 99
evictionHard:
  memory.available: "50Mi"
  nodefs.available: "1%%"
  nodefs.inodesFree: "1%%"
  imagefs.available: "1%%"
containerRuntimeEndpoint: unix://%[7]s
`, c.slot.cgroup, c.NodeIP, c.pki.path("ca.crt"), filepath.Join(c.Dir, "resolv.conf"), filepath.Join(c.Dir, "pod-logs"), filepath.Join(c.Dir, "volume-plugins"), c.containerdSocket()),

		"kube-proxy/config.yaml": fmt.Sprintf(`apiVersion: kubeproxy.config.k8s.io/v1alpha1
kind: KubeProxyConfiguration
mode: iptables
clientConnection:
  kubeconfig: %[1]q
hostnameOverride: %[2]s
clusterCIDR: %[3]s
bindAddress: %[4]s
healthzBindAddress: 127.0.0.1:10256
metricsBindAddress: 127.0.0.1:10249
# 0: leave the machine's conntrack table size and timeouts alone.
conntrack:
  maxPerCore: 0
  tcpEstablishedTimeout: 0s
  tcpCloseWaitTimeout: 0s
# The machine lacks CAP_SYS_RESOURCE: no lowering of oom_score_adj.
oomScoreAdj: 0
`, c.pki.path("kube-proxy.kubeconfig"), c.NodeName, c.PodCIDR, c.NodeIP),
	}
	for name, content := range files {
		p := filepath.Join(c.Dir, name)
		if err := os.MkdirAll(filepath.Dir(p), 0o700); err != nil {
			return err
		}
		if err := os.WriteFile(p, []byte(content), 0o600); err != nil {
			return err
		}
	}
	// resolv.conf is read by every pod's sandbox setup: not only root.
	return os.Chmod(filepath.Join(c.Dir, "resolv.conf"), 0o644) //nolint:gosec // G302: no secret in it.
}
