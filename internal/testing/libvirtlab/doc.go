// Package libvirtlab runs a real, private libvirt host for tests: a libvirtd
// (with its virtlogd) and an sshd, inside a network namespace and a mount
// namespace of the test process's own, with a `dir` storage pool in a
// temporary directory and an isolated libvirt network with DHCP on a
// documentation range. The libvirt providers (kvm2 over libvirt's RPC
// protocol tunnelled through SSH, kvm over virsh run through SSH) are
// proven against it; nothing of libvirt is mocked.
//
// # Namespaces
//
// A test package that uses the lab calls Main from its TestMain. Main
// re-executes the test binary under `unshare --net --mount --propagation
// private`, so that the whole test process, and every daemon it starts,
// share one new network namespace and one private mount namespace:
//
//   - the test dials the lab's sshd on loopback and the guests on their lab
//     addresses directly, and nothing it or a guest does can reach the
//     machine's own network (the namespace has no route out);
//   - the lab bind-mounts temporary directories over /run/libvirt,
//     /var/lib/libvirt, /var/log/libvirt, /var/cache/libvirt and /etc/libvirt,
//     so its libvirtd has its own configuration, sockets and state, at the
//     paths a real host uses (a provider's default socket path works), and
//     neither the machine's libvirtd nor another test process is touched.
//
// One lab runs at a time in a test process (they share the mount points);
// Start waits until the previous lab's cleanup has run.
//
// # Users
//
// The lab's SSH user is root. The lab needs root anyway (namespaces, bridges,
// bind mounts, a system libvirtd), and a root login over a key that exists
// only for the lab, on a loopback address of a namespace nothing else can
// reach, costs nothing; docs/libvirt-testworld.md says what a real host
// should use instead (a user in the libvirt group).
//
// # Guests
//
// Domains run under TCG (domain type "qemu"): CI machines have no hardware
// virtualisation. With Options.GuestImage the lab imports the real guest
// image that hack/libvirt/build-guest-image.sh builds (Debian 12 with
// cloud-init, tinyproxy and the QEMU guest agent) into its pool, and names
// the kernel and initrd that boot it directly.
//
// The machine needs the packages hack/libvirt/install-packages.sh installs
// (`make libvirt-world`). Without root, unshare or those packages the lab
// fails the test with a message saying what is missing: it never skips,
// except in -short mode.
package libvirtlab
