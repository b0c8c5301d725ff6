package libvirtlab

import (
	"bufio"
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"net"
	"net/netip"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/egress-proxies/egress-proxies-operator/internal/testing/poll"
)

// Options says what a lab holds besides its daemons, pool and network.
type Options struct {
	// GuestImage imports the real guest image (built, or taken from the
	// cache, by hack/libvirt/build-guest-image.sh) into the pool and fills
	// the Lab's guest fields. The first build takes about a minute.
	GuestImage bool
}

// Lab is a running private libvirt host. Its fields are fixed for its life;
// its methods may be called from any goroutine.
type Lab struct {
	// SSHAddr is host:port of the lab's sshd, on loopback.
	SSHAddr string
	// SSHUser is the user the key logs in as (root; see the package doc).
	SSHUser string
	// PrivateKeyFile holds the authorised client key (ed25519, OpenSSH format).
	PrivateKeyFile string
	// KnownHostsFile holds one known_hosts line for SSHAddr with the lab's
	// host key; HostPublicKey is that key in authorized_keys form.
	KnownHostsFile string
	HostPublicKey  string
	// SocketPath is the private libvirtd's read-write socket as the sshd's
	// user sees it: the system default path, bind-mounted.
	SocketPath string
	// URI is the libvirt URI Virsh uses.
	URI string

	// Pool is the name of a started, persistent `dir` storage pool whose
	// directory is PoolPath.
	Pool     string
	PoolPath string
	// Network is the name of a started, persistent isolated libvirt network
	// (no forwarding, no DNS) on Bridge, with the host's address
	// NetworkHost in NetworkCIDR and a DHCP range DHCPStart-DHCPEnd.
	Network     string
	Bridge      string
	NetworkCIDR netip.Prefix
	NetworkHost netip.Addr
	DHCPStart   netip.Addr
	DHCPEnd     netip.Addr

	// With Options.GuestImage: BaseImageVolume is the guest image's volume
	// (qcow2) in Pool; Kernel, Initrd and KernelCmdline boot it directly
	// (libvirt's <os><kernel>/<initrd>/<cmdline>); GuestImageDir is the
	// image's cache directory.
	BaseImageVolume string
	Kernel          string
	Initrd          string
	KernelCmdline   string
	GuestImageDir   string

	// Dir is the lab's temporary directory; SerialDir is where domains
	// should write their serial console (<serial type='file'>) so that
	// SerialLog finds it.
	Dir       string
	SerialDir string

	t        testing.TB
	mu       sync.Mutex
	virtlogd *daemon
	libvirtd *daemon
	sshd     *daemon
	mounts   []string
}

// labMu lets one lab at a time use the mount points of the test process.
var labMu sync.Mutex

// Network plan: the documentation range TEST-NET-2, inside the namespace.
var (
	labCIDR      = netip.MustParsePrefix("198.51.100.0/24")
	labHost      = netip.MustParseAddr("198.51.100.1")
	labDHCPStart = netip.MustParseAddr("198.51.100.100")
	labDHCPEnd   = netip.MustParseAddr("198.51.100.254")
)

// The directories a system libvirtd uses, each replaced by a directory of
// the lab's own.
var libvirtDirs = []string{"/etc/libvirt", "/run/libvirt", "/var/lib/libvirt", "/var/log/libvirt", "/var/cache/libvirt"}

// Start brings up a private libvirt host for one test (or for a TestMain
// through a testing.TB of its own) and registers its teardown with
// t.Cleanup: every daemon, domain and dnsmasq it started is killed and its
// directories are removed, whether the test passed or not. The package's
// TestMain must call Main. In -short mode Start skips the test.
func Start(t testing.TB, opts Options) *Lab {
	t.Helper()
	if testing.Short() {
		t.Skip("libvirtlab: a real libvirt host is not started in -short mode")
	}
	if !InNamespace() {
		t.Fatal("libvirtlab: the test process is not in the lab's namespaces; call libvirtlab.Main(m) from the package's TestMain")
	}
	for _, bin := range []string{"libvirtd", "virtlogd", "virsh", "qemu-system-x86_64", "qemu-img", "/usr/sbin/sshd", "ssh-keygen", "dnsmasq", "ip"} {
		if _, err := exec.LookPath(bin); err != nil {
			t.Fatalf("libvirtlab: %s is missing; run hack/libvirt/install-packages.sh (make libvirt-world)", bin)
		}
	}
	labMu.Lock()
	dir, err := os.MkdirTemp("", "libvirtlab-")
	if err != nil {
		labMu.Unlock()
		t.Fatalf("libvirtlab: %v", err)
	}
	id := randomHex(3)
	l := &Lab{
		t:           t,
		Dir:         dir,
		SerialDir:   filepath.Join(dir, "serial"),
		SSHUser:     "root",
		SocketPath:  "/run/libvirt/libvirt-sock",
		URI:         "qemu:///system",
		Pool:        "lab-pool-" + id,
		PoolPath:    filepath.Join(dir, "pool"),
		Network:     "lab-net-" + id,
		Bridge:      "labbr" + id,
		NetworkCIDR: labCIDR,
		NetworkHost: labHost,
		DHCPStart:   labDHCPStart,
		DHCPEnd:     labDHCPEnd,
	}
	t.Cleanup(func() {
		defer labMu.Unlock()
		l.teardown()
	})
	began := time.Now()
	if err := l.start(opts); err != nil {
		t.Fatalf("libvirtlab: %v", err)
	}
	t.Logf("libvirtlab: lab up in %s (ssh %s, pool %s, network %s on %s)", time.Since(began).Round(time.Millisecond), l.SSHAddr, l.Pool, l.Network, l.NetworkCIDR)
	return l
}

func (l *Lab) start(opts Options) error {
	for _, d := range []string{l.SerialDir, l.PoolPath, filepath.Join(l.Dir, "ssh"), filepath.Join(l.Dir, "log")} {
		if err := os.MkdirAll(d, 0o700); err != nil {
			return err
		}
	}
	if err := l.mountLibvirtDirs(); err != nil {
		return err
	}
	if err := l.writeLibvirtConfig(); err != nil {
		return err
	}
	if err := l.writeSSHConfig(); err != nil {
		return err
	}
	if err := l.privateHome(); err != nil {
		return err
	}
	// Their pid files default to /run/virtlogd.pid and /run/libvirtd.pid,
	// outside the private directories: two labs would lock each other out.
	l.virtlogd = &daemon{name: "virtlogd", argv: []string{"virtlogd", "--pid-file", "/run/libvirt/virtlogd.pid"}, logPath: filepath.Join(l.Dir, "log", "virtlogd.stderr")}
	l.libvirtd = &daemon{name: "libvirtd", argv: []string{"libvirtd", "--config", "/etc/libvirt/libvirtd.conf", "--pid-file", "/run/libvirt/libvirtd.pid"}, logPath: filepath.Join(l.Dir, "log", "libvirtd.stderr")}
	l.sshd = &daemon{name: "sshd", argv: []string{"/usr/sbin/sshd", "-D", "-e", "-f", filepath.Join(l.Dir, "ssh", "sshd_config")}, logPath: filepath.Join(l.Dir, "log", "sshd.log")}
	if err := l.startLibvirt(); err != nil {
		return err
	}
	if err := l.sshd.start(); err != nil {
		return err
	}
	if err := l.waitSSHD(); err != nil {
		return err
	}
	if err := l.definePoolAndNetwork(); err != nil {
		return err
	}
	if opts.GuestImage {
		if err := l.importGuestImage(); err != nil {
			return err
		}
	}
	return nil
}

// mountLibvirtDirs bind-mounts a fresh directory over each system libvirt
// directory, in the test process's private mount namespace.
func (l *Lab) mountLibvirtDirs() error {
	for _, target := range libvirtDirs {
		src := filepath.Join(l.Dir, "fs", strings.ReplaceAll(strings.TrimPrefix(target, "/"), "/", "-"))
		// World-searchable like the system directories they replace:
		// dnsmasq runs as libvirt-dnsmasq and must reach its files.
		if err := os.MkdirAll(src, 0o755); err != nil { //nolint:gosec // G301: see above.
			return err
		}
		if err := os.MkdirAll(target, 0o755); err != nil { //nolint:gosec // G301: a system directory's usual mode.
			return err
		}
		if err := syscall.Mount(src, target, "", syscall.MS_BIND, ""); err != nil {
			return fmt.Errorf("bind-mounting %s over %s: %w", src, target, err)
		}
		l.mounts = append(l.mounts, target)
	}
	for _, d := range []string{"/etc/libvirt/qemu/networks", "/etc/libvirt/storage", "/var/lib/libvirt/images", "/var/log/libvirt/qemu"} {
		if err := os.MkdirAll(d, 0o755); err != nil { //nolint:gosec // G301: the system directories' usual mode.
			return err
		}
	}
	return l.shareCapabilitiesCache()
}

// capsCacheDir is where labs keep libvirt's cache of QEMU's capabilities.
func capsCacheDir() (string, error) {
	base := os.Getenv("XDG_CACHE_HOME")
	if base == "" {
		home, err := os.UserHomeDir()
		if err != nil {
			return "", err
		}
		base = filepath.Join(home, ".cache")
	}
	return filepath.Join(base, "egress-proxies-operator", "libvirt-qemu-capabilities"), nil
}

// shareCapabilitiesCache bind-mounts one directory, kept across labs, over
// libvirt's cache of QEMU's capabilities: probing qemu-system-x86_64 and
// qemu-system-i386 is most of a libvirtd start (about 9 s of 10 here).
// libvirt checks each entry against the binary, its own version and the
// host's kernel and microcode before using it, and replaces a file by
// renaming a complete new one over it, so labs in parallel may share it.
func (l *Lab) shareCapabilitiesCache() error {
	dir, err := capsCacheDir()
	if err != nil {
		return err
	}
	target := "/var/cache/libvirt/qemu/capabilities"
	for _, d := range []string{dir, target} {
		if err := os.MkdirAll(d, 0o755); err != nil { //nolint:gosec // G301: like libvirt's own cache directory.
			return err
		}
	}
	if err := syscall.Mount(dir, target, "", syscall.MS_BIND, ""); err != nil {
		return fmt.Errorf("bind-mounting the capabilities cache: %w", err)
	}
	l.mounts = append(l.mounts, target)
	return nil
}

// The lab's libvirt configuration. qemu runs as root without a security
// driver: the lab's images live in temporary directories that neither
// apparmor profiles nor a qemu user could read, and the lab has nothing to
// confine. No cgroups: the cgroup tree is the machine's, not the lab's, and
// libvirt names a domain's cgroup after its id and name, so two labs with a
// domain of the same name would share (and tear down) one cgroup. Unix
// socket access without authentication: only root (in the lab's mount
// namespace) can reach the socket.
const (
	libvirtdConf = `unix_sock_group = "root"
unix_sock_ro_perms = "0770"
unix_sock_rw_perms = "0770"
auth_unix_ro = "none"
auth_unix_rw = "none"
log_outputs = "3:file:/var/log/libvirt/libvirtd.log"
`
	qemuConf = `user = "root"
group = "root"
dynamic_ownership = 0
remember_owner = 0
security_driver = "none"
namespaces = [ ]
cgroup_controllers = [ ]
`
	virtlogdConf = `log_outputs = "3:file:/var/log/libvirt/virtlogd.log"
`
)

func (l *Lab) writeLibvirtConfig() error {
	for name, content := range map[string]string{
		"/etc/libvirt/libvirtd.conf": libvirtdConf,
		"/etc/libvirt/qemu.conf":     qemuConf,
		"/etc/libvirt/virtlogd.conf": virtlogdConf,
	} {
		if err := os.WriteFile(name, []byte(content), 0o600); err != nil {
			return err
		}
	}
	return nil
}

// startLibvirt starts virtlogd, then libvirtd (which needs virtlogd's
// socket to start a domain), and waits until libvirtd answers.
func (l *Lab) startLibvirt() error {
	if err := l.virtlogd.start(); err != nil {
		return err
	}
	if err := l.waitFor("virtlogd's socket", func() error {
		if err := l.virtlogd.exited(); err != nil {
			return err
		}
		_, err := os.Stat("/run/libvirt/virtlogd-sock")
		return err
	}); err != nil {
		return err
	}
	if err := l.libvirtd.start(); err != nil {
		return err
	}
	return l.waitLibvirtd()
}

func (l *Lab) waitLibvirtd() error {
	return l.waitFor("libvirtd to answer", func() error {
		if err := l.libvirtd.exited(); err != nil {
			return err
		}
		// A cheap dial first; virsh only once the socket listens.
		ctx, cancel := context.WithTimeout(context.Background(), time.Second)
		defer cancel()
		c, err := (&net.Dialer{}).DialContext(ctx, "unix", l.SocketPath)
		if err != nil {
			return err
		}
		_ = c.Close()
		_, err = l.Virsh("version")
		return err
	})
}

func (l *Lab) writeSSHConfig() error {
	sshDir := filepath.Join(l.Dir, "ssh")
	hostKey := filepath.Join(sshDir, "host_ed25519")
	clientKey := filepath.Join(sshDir, "client_ed25519")
	for _, k := range []string{hostKey, clientKey} {
		if err := run("ssh-keygen", "-q", "-t", "ed25519", "-N", "", "-C", "libvirtlab", "-f", k); err != nil {
			return err
		}
	}
	hostPub, err := readFile(hostKey + ".pub")
	if err != nil {
		return err
	}
	clientPub, err := readFile(clientKey + ".pub")
	if err != nil {
		return err
	}
	port, err := freePort()
	if err != nil {
		return err
	}
	l.SSHAddr = net.JoinHostPort("127.0.0.1", strconv.Itoa(port))
	l.PrivateKeyFile = clientKey
	fields := strings.Fields(string(hostPub))
	if len(fields) < 2 {
		return fmt.Errorf("unexpected host public key %q", hostPub)
	}
	l.HostPublicKey = fields[0] + " " + fields[1]
	l.KnownHostsFile = filepath.Join(sshDir, "known_hosts")
	if err := os.WriteFile(l.KnownHostsFile, []byte(fmt.Sprintf("[127.0.0.1]:%d %s\n", port, l.HostPublicKey)), 0o600); err != nil {
		return err
	}
	authorized := filepath.Join(sshDir, "authorized_keys")
	if err := os.WriteFile(authorized, clientPub, 0o600); err != nil {
		return err
	}
	// Debian's sshd refuses to start without its privilege separation
	// directory, which only its own service unit creates.
	if err := os.MkdirAll("/run/sshd", 0o755); err != nil { //nolint:gosec // G301: the mode Debian's unit gives it.
		return err
	}
	// Only the lab's key, no PAM, no passwords; stream-local forwarding so
	// that kvm2 can tunnel to the libvirt socket (OpenSSH 9.2 denies a
	// stream-local open when AllowTcpForwarding is "no", hence "local").
	// StrictModes is off because the key files live under the
	// world-writable temporary directory.
	conf := fmt.Sprintf(`Port %d
ListenAddress 127.0.0.1
HostKey %s
PidFile %s
AuthorizedKeysFile %s
AllowUsers root
PermitRootLogin prohibit-password
PubkeyAuthentication yes
PasswordAuthentication no
KbdInteractiveAuthentication no
UsePAM no
StrictModes no
AllowStreamLocalForwarding yes
AllowTcpForwarding local
X11Forwarding no
PrintMotd no
LogLevel VERBOSE
Subsystem sftp internal-sftp
`, port, hostKey, filepath.Join(sshDir, "sshd.pid"), authorized)
	return os.WriteFile(filepath.Join(sshDir, "sshd_config"), []byte(conf), 0o600)
}

// privateHome gives the SSH user a home directory of the lab's own, by
// bind-mounting over /etc/passwd a copy in which root's home is the lab's.
// Otherwise the sessions' shells would run the machine's /root dotfiles,
// which may print, take time or race between concurrent sessions (one such
// made a session's output carry an error from a shell hook).
func (l *Lab) privateHome() error {
	home := filepath.Join(l.Dir, "home")
	if err := os.MkdirAll(home, 0o700); err != nil {
		return err
	}
	b, err := readFile("/etc/passwd")
	if err != nil {
		return err
	}
	lines := strings.Split(string(b), "\n")
	found := false
	for i, line := range lines {
		f := strings.Split(line, ":")
		if len(f) == 7 && f[0] == l.SSHUser {
			f[5] = home
			lines[i] = strings.Join(f, ":")
			found = true
		}
	}
	if !found {
		return fmt.Errorf("no %s in /etc/passwd", l.SSHUser)
	}
	passwd := filepath.Join(l.Dir, "passwd")
	if err := os.WriteFile(passwd, []byte(strings.Join(lines, "\n")), 0o644); err != nil { //nolint:gosec // G306: /etc/passwd is world-readable.
		return err
	}
	if err := syscall.Mount(passwd, "/etc/passwd", "", syscall.MS_BIND, ""); err != nil {
		return fmt.Errorf("bind-mounting the lab's passwd: %w", err)
	}
	l.mounts = append(l.mounts, "/etc/passwd")
	return nil
}

func (l *Lab) waitSSHD() error {
	return l.waitFor("sshd to greet", func() error {
		if err := l.sshd.exited(); err != nil {
			return err
		}
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		c, err := (&net.Dialer{}).DialContext(ctx, "tcp", l.SSHAddr)
		if err != nil {
			return err
		}
		defer func() { _ = c.Close() }()
		_ = c.SetReadDeadline(time.Now().Add(5 * time.Second))
		line, err := bufio.NewReader(c).ReadString('\n')
		if err != nil {
			return err
		}
		if !strings.HasPrefix(line, "SSH-2.0-") {
			return fmt.Errorf("unexpected greeting %q", line)
		}
		return nil
	})
}

func (l *Lab) definePoolAndNetwork() error {
	poolXML := fmt.Sprintf(`<pool type='dir'><name>%s</name><target><path>%s</path></target></pool>`, l.Pool, l.PoolPath)
	// No <forward>: isolated. No DNS: nothing to forward to, and a guest
	// without a resolver fails fast instead of waiting on timeouts.
	netXML := fmt.Sprintf(`<network>
  <name>%s</name>
  <bridge name='%s' stp='off' delay='0'/>
  <dns enable='no'/>
  <ip address='%s' prefix='%d'>
    <dhcp><range start='%s' end='%s'/></dhcp>
  </ip>
</network>`, l.Network, l.Bridge, l.NetworkHost, l.NetworkCIDR.Bits(), l.DHCPStart, l.DHCPEnd)
	poolFile := filepath.Join(l.Dir, "pool.xml")
	netFile := filepath.Join(l.Dir, "network.xml")
	if err := os.WriteFile(poolFile, []byte(poolXML), 0o600); err != nil {
		return err
	}
	if err := os.WriteFile(netFile, []byte(netXML), 0o600); err != nil {
		return err
	}
	for _, args := range [][]string{
		{"pool-define", poolFile}, {"pool-start", l.Pool},
		{"net-define", netFile}, {"net-start", l.Network},
	} {
		if _, err := l.Virsh(args...); err != nil {
			return err
		}
	}
	return nil
}

// Virsh runs virsh against the lab's libvirtd and returns its standard
// output; the error carries its standard error. For test assertions.
func (l *Lab) Virsh(args ...string) (string, error) {
	ctx, cancel := context.WithTimeout(context.Background(), poll.Paced(2*time.Minute))
	defer cancel()
	cmd := command(ctx, "virsh", append([]string{"-q", "-c", l.URI}, args...)...)
	var stderr strings.Builder
	cmd.Stderr = &stderr
	out, err := cmd.Output()
	if err != nil {
		return string(out), fmt.Errorf("virsh %s: %w: %s", strings.Join(args, " "), err, strings.TrimSpace(stderr.String()))
	}
	return string(out), nil
}

// InNetns returns a command run in the lab's network namespace, e.g. curl
// through a guest's proxy. The test process itself is in that namespace
// (see Main), so this is exec.CommandContext; the name keeps the intent
// visible at the call site.
func (l *Lab) InNetns(ctx context.Context, name string, args ...string) *exec.Cmd {
	return command(ctx, name, args...)
}

// StopSSHD stops the lab's sshd and ends every connection it accepted, the
// way a host that went down would.
func (l *Lab) StopSSHD() {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.sshd.stop(l.t, true)
}

// StartSSHD starts the sshd again on the same address and keys, and waits
// until it greets.
func (l *Lab) StartSSHD() {
	l.mu.Lock()
	defer l.mu.Unlock()
	if err := l.sshd.start(); err != nil {
		l.t.Fatalf("libvirtlab: %v", err)
	}
	if err := l.waitSSHD(); err != nil {
		l.t.Fatalf("libvirtlab: %v", err)
	}
}

// StopLibvirtd stops libvirtd (not virtlogd); running domains and the
// network's dnsmasq go on, as on a real host whose daemon is restarted.
func (l *Lab) StopLibvirtd() {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.libvirtd.stop(l.t, false)
}

// StartLibvirtd starts libvirtd again and waits until it answers.
func (l *Lab) StartLibvirtd() {
	l.mu.Lock()
	defer l.mu.Unlock()
	if err := l.libvirtd.start(); err != nil {
		l.t.Fatalf("libvirtlab: %v", err)
	}
	if err := l.waitLibvirtd(); err != nil {
		l.t.Fatalf("libvirtlab: %v", err)
	}
}

// PauseLibvirtd stops libvirtd with SIGSTOP, as a daemon that hangs: its
// socket still accepts connections (the kernel queues them), the lab's sshd
// still answers, its keepalives included, and no libvirt call gets an
// answer. Running domains and dnsmasq go on. ResumeLibvirtd lets it go on;
// the lab's teardown resumes it too, so a test that fails while it is
// paused leaves nothing stopped. Register ResumeLibvirtd with t.Cleanup
// when the test itself needs the daemon back after a failure.
func (l *Lab) PauseLibvirtd() {
	l.mu.Lock()
	defer l.mu.Unlock()
	if err := l.libvirtd.pause(); err != nil {
		l.t.Fatalf("libvirtlab: %v", err)
	}
}

// ResumeLibvirtd sends SIGCONT to a libvirtd PauseLibvirtd stopped and
// waits until it answers; it does nothing when libvirtd is not paused.
func (l *Lab) ResumeLibvirtd() {
	l.mu.Lock()
	defer l.mu.Unlock()
	if !l.libvirtd.paused {
		return
	}
	l.libvirtd.resume()
	if err := l.waitLibvirtd(); err != nil {
		l.t.Errorf("libvirtlab: %v", err)
	}
}

// waitFor polls check (with the tests' one polling helper) until it
// succeeds, for at most what a minute is on a quiet machine (the wait
// follows the machine's pace). A daemon that exited ends the wait at once.
func (l *Lab) waitFor(what string, check func() error) error {
	var exited error
	err := poll.WaitPaced(context.Background(), time.Minute, func() (bool, string) {
		err := check()
		var exit *exitError
		if errors.As(err, &exit) {
			exited = err
			return true, ""
		}
		if err != nil {
			return false, err.Error()
		}
		return true, ""
	})
	if exited != nil {
		err = exited
	}
	if err != nil {
		return fmt.Errorf("waiting for %s: %w: %s", what, err, l.daemonLogs())
	}
	return nil
}

// teardown stops everything the lab started and removes its directories.
func (l *Lab) teardown() {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.t.Failed() {
		l.t.Logf("libvirtlab: daemon logs:\n%s", l.daemonLogs())
	}
	if l.libvirtd != nil {
		// A daemon a failed test left paused answers nothing: the virsh
		// calls below would wait for it.
		l.libvirtd.resume()
	}
	if l.libvirtd != nil && l.libvirtd.running() {
		// Destroying the domains and the network through libvirt stops
		// qemu and dnsmasq in order; the sweep below catches the rest.
		if out, err := l.Virsh("list", "--name"); err == nil {
			for _, name := range strings.Fields(out) {
				_, _ = l.Virsh("destroy", name)
			}
		}
		_, _ = l.Virsh("net-destroy", l.Network)
	}
	for _, d := range []*daemon{l.sshd, l.libvirtd, l.virtlogd} {
		if d != nil {
			d.stop(l.t, d == l.sshd)
		}
	}
	killPIDFiles(l.t, filepath.Join(l.Dir, "fs", "run-libvirt"))
	_ = run("ip", "link", "del", l.Bridge)
	for i := len(l.mounts) - 1; i >= 0; i-- {
		if err := syscall.Unmount(l.mounts[i], syscall.MNT_DETACH); err != nil {
			l.t.Errorf("libvirtlab: unmounting %s: %v", l.mounts[i], err)
		}
	}
	if err := os.RemoveAll(l.Dir); err != nil {
		l.t.Errorf("libvirtlab: removing %s: %v", l.Dir, err)
	}
}

// daemonLogs returns the tails of the daemons' logs, for failure output.
func (l *Lab) daemonLogs() string {
	var b strings.Builder
	for _, f := range []string{
		filepath.Join(l.Dir, "log", "virtlogd.stderr"),
		filepath.Join(l.Dir, "fs", "var-log-libvirt", "virtlogd.log"),
		filepath.Join(l.Dir, "log", "libvirtd.stderr"),
		filepath.Join(l.Dir, "fs", "var-log-libvirt", "libvirtd.log"),
		filepath.Join(l.Dir, "log", "sshd.log"),
	} {
		fmt.Fprintf(&b, "--- %s\n%s\n", f, tail(f, 40))
	}
	return b.String()
}

// tail returns the last n lines of a file, or why it could not be read.
func tail(path string, n int) string {
	b, err := readFile(path)
	if err != nil {
		return err.Error()
	}
	lines := strings.Split(strings.TrimRight(string(b), "\n"), "\n")
	if len(lines) > n {
		lines = lines[len(lines)-n:]
	}
	return strings.Join(lines, "\n")
}

// killPIDFiles kills every process named by a pid file of the lab's
// libvirt run directory (its qemu/ and network/ subdirectories): the qemu
// processes and dnsmasq that libvirtd daemonised, which outlive it.
func killPIDFiles(t testing.TB, runDir string) {
	files, _ := filepath.Glob(filepath.Join(runDir, "*", "*.pid"))
	for _, path := range files {
		b, err := readFile(path)
		if err != nil {
			continue
		}
		pid, err := strconv.Atoi(strings.TrimSpace(string(b)))
		if err != nil || pid <= 1 {
			continue
		}
		// A stale pid file may name a recycled pid: kill only a process
		// in this (the lab's) network namespace that is not this one.
		if pid == os.Getpid() || !sameNetns(pid) {
			continue
		}
		if err := syscall.Kill(pid, syscall.SIGKILL); err == nil {
			t.Logf("libvirtlab: killed pid %d left by %s", pid, path)
		}
	}
}

// sameNetns reports whether pid is in this process's network namespace.
func sameNetns(pid int) bool {
	mine, err := os.Readlink("/proc/self/ns/net")
	if err != nil {
		return false
	}
	theirs, err := os.Readlink("/proc/" + strconv.Itoa(pid) + "/ns/net")
	return err == nil && theirs == mine
}

func freePort() (int, error) {
	ln, err := (&net.ListenConfig{}).Listen(context.Background(), "tcp", "127.0.0.1:0")
	if err != nil {
		return 0, err
	}
	defer func() { _ = ln.Close() }()
	ap, err := netip.ParseAddrPort(ln.Addr().String())
	if err != nil {
		return 0, err
	}
	return int(ap.Port()), nil
}

func randomHex(n int) string {
	b := make([]byte, n)
	_, _ = rand.Read(b)
	return hex.EncodeToString(b)
}
