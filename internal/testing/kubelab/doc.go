// Package kubelab runs a real single-node Kubernetes cluster for tests, the
// way internal/testing/libvirtlab runs a real libvirt host: etcd,
// kube-apiserver, kube-controller-manager, kube-scheduler, kube-proxy, a
// kubelet and containerd with the bridge CNI plugin, all real, built from Go
// module sources (hack/cluster/setup.sh, one `go build` beside envtest's
// kube-apiserver) and Debian packages (hack/cluster/install-packages.sh).
// Nothing plays the kubelet: pods really run.
//
// # Network
//
// Everything runs in a network namespace of the world's own, entered with
// nsenter (never `ip netns exec`, whose private mount namespace would hide
// the kubelet's volume mounts from containerd). The machine reaches its
// package registries through 203.0.113.0/24, so the host side gets routes
// only inside 198.51.100.0/24: each world takes one of eight slots, a /27 of
// 198.51.100.0/24, with a veth pair (host end .1, node end .2 of the /27)
// and one host route to the pods' /28 (.16/28) through the node. The Service
// range 203.0.113.128/25 exists only inside the namespace (kube-proxy's
// rules), which has no default route: nothing leaves it but to the host end.
//
// # Mounts and files
//
// The daemons share one private mount namespace, held by a pause process,
// in which directories of the world's own are bind-mounted over the paths
// the kubelet and containerd write whatever their settings
// (/var/lib/kubelet, /var/log/containers, /var/log/pods,
// /usr/libexec/kubernetes, /var/lib/cni, /run/containerd, /run/netns): the
// machine's files are never written, two worlds never share one, and every
// mount goes away with the namespace's last process.
//
// # Two worlds, and killed ones
//
// A slot is held through an flock(2) on /run/egress-kubelab/slot-<n>.lock for
// the world's life; the kernel releases it when the process dies, however
// it dies. A world that takes a slot first sweeps whatever a killed world
// left in it (processes in its namespace or cgroups, the namespace, the
// host veth, the cgroups, the work directory), so a killed test never breaks
// the next run. The kubelet changes three global sysctls
// (vm.overcommit_memory, kernel.panic, kernel.panic_on_oops): the first
// world saves them, the last one restores them.
//
// # Cost
//
// The binaries' first build takes 20 to 40 minutes on two busy cores; then
// a world is up in about 15 to 60 seconds and down in a few.
//
// Start needs root on Linux; without it the caller's test skips, except
// under CI=true, where it fails (a CI machine must run the tier).
package kubelab
