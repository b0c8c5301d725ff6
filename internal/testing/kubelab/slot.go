package kubelab

import (
	"context"
	"errors"
	"fmt"
	"net/netip"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/egress-proxies/egress-proxies-operator/internal/testing/poll"
)

// stateDir holds the slots' locks and the saved sysctls: on /run, so that a
// reboot forgets them with the worlds they belonged to.
const stateDir = "/run/egress-kubelab"

// slots is how many worlds may run at once: eight /27 of 198.51.100.0/24.
const slots = 8

// slot is one world's names and addresses, all derived from its number so
// that a later world can find (and sweep) what a killed one left.
type slot struct {
	n    int
	lock *os.File

	netns     string       // ip netns name
	hostVeth  string       // host end, in the machine's namespace
	nodeVeth  string       // node end, in the world's namespace
	bridge    string       // the CNI bridge, in the world's namespace
	cgroup    string       // the kubelet's cgroupRoot, in every v1 hierarchy
	hostIP    netip.Addr   // host end of the veth
	nodeIP    netip.Addr   // node end: the node's InternalIP and the API server
	podCIDR   netip.Prefix // the pods' /28, routed from the host through nodeIP
	nodeLocal netip.Prefix // a /29 on the node's loopback, routed from the host through nodeIP
	dir       string       // the work directory
}

func newSlot(n int) slot {
	base := 32 * n
	// base+i < 256: n < slots (8) and i < 32, so base+i <= 7*32+31 = 255.
	addr := func(i int) netip.Addr { return netip.AddrFrom4([4]byte{198, 51, 100, byte(base + i)}) } //nolint:gosec // G115: bounded by 255, see above.
	return slot{
		n:         n,
		netns:     fmt.Sprintf("epo-kubelab-%d", n),
		hostVeth:  fmt.Sprintf("ekl%dh", n),
		nodeVeth:  fmt.Sprintf("ekl%dn", n),
		bridge:    fmt.Sprintf("ekl%dbr", n),
		cgroup:    fmt.Sprintf("epo-kubelab-%d", n),
		hostIP:    addr(1),
		nodeIP:    addr(2),
		podCIDR:   netip.PrefixFrom(addr(16), 28),
		nodeLocal: netip.PrefixFrom(addr(8), 29),
		dir:       filepath.Join(os.TempDir(), fmt.Sprintf("egress-kubelab-%d", n)),
	}
}

// podGateway is the bridge's address, the first of the pods' /28.
func (s slot) podGateway() netip.Addr { return s.podCIDR.Addr().Next() }

// flock takes an exclusive lock on path, without waiting when wait is false.
func flock(path string, wait bool) (*os.File, error) {
	f, err := os.OpenFile(path, os.O_CREATE|os.O_RDWR, 0o600) //nolint:gosec // G304: the world's own lock files.
	if err != nil {
		return nil, err
	}
	how := syscall.LOCK_EX
	if !wait {
		how |= syscall.LOCK_NB
	}
	if err := syscall.Flock(int(f.Fd()), how); err != nil {
		_ = f.Close()
		return nil, err
	}
	return f, nil
}

func slotLockPath(n int) string { return filepath.Join(stateDir, "slot-"+strconv.Itoa(n)+".lock") }

// takeSlot locks the first free slot, waiting (up to wait) for one when all
// eight are taken.
func takeSlot(ctx context.Context, wait time.Duration) (slot, error) {
	if err := os.MkdirAll(stateDir, 0o700); err != nil {
		return slot{}, err
	}
	var got slot
	var lockErr error
	err := poll.Wait(ctx, wait, func() (bool, string) {
		for n := range slots {
			f, err := flock(slotLockPath(n), false)
			if errors.Is(err, syscall.EWOULDBLOCK) {
				continue
			}
			if err != nil {
				lockErr = fmt.Errorf("locking slot %d: %w", n, err)
				return true, ""
			}
			got = newSlot(n)
			got.lock = f
			return true, ""
		}
		return false, fmt.Sprintf("all %d test cluster slots are taken", slots)
	})
	if err != nil {
		return slot{}, err
	}
	return got, lockErr
}

// othersRunning reports whether a slot other than mine is held.
func othersRunning(mine int) bool {
	for n := range slots {
		if n == mine {
			continue
		}
		f, err := flock(slotLockPath(n), false)
		if err != nil {
			return true
		}
		_ = f.Close()
	}
	return false
}

// release drops the slot's lock: from here on another world may take it.
func (s *slot) release() {
	if s.lock != nil {
		_ = s.lock.Close()
		s.lock = nil
	}
}

// sweep removes whatever a world of this slot left: it runs before a world
// starts (a killed one's leftovers) and as the last step of its teardown.
// Each step goes on when the previous one failed; the errors are joined.
// It takes no context: cleanup runs to its end, also in a teardown that
// runs after the test's context has ended.
func (s slot) sweep(logf func(string, ...any)) error {
	ctx := context.Background()
	var errs []error
	if err := s.killAll(ctx); err != nil {
		errs = append(errs, err)
	}
	if _, err := os.Stat("/run/netns/" + s.netns); err == nil {
		if err := run(ctx, "ip", "netns", "del", s.netns); err != nil {
			errs = append(errs, err)
		}
	}
	// The host end normally goes with the namespace (its peer); the route
	// with the interface.
	// The kernel removes the peer after `ip netns del` returns, so the
	// interface may go between the look and the delete: only one that is
	// still there after a failed delete is an error.
	if _, err := os.Stat("/sys/class/net/" + s.hostVeth); err == nil {
		if err := run(ctx, "ip", "link", "del", s.hostVeth); err != nil {
			if _, still := os.Stat("/sys/class/net/" + s.hostVeth); still == nil {
				errs = append(errs, err)
			}
		}
	}
	if err := removeCgroups(s.cgroup); err != nil {
		errs = append(errs, err)
	}
	if err := os.RemoveAll(s.dir); err != nil {
		// A mount of a killed world's namespace that outlived it (it
		// should not, see the package doc): detach it and try again.
		unmountUnder(s.dir, logf)
		if err := os.RemoveAll(s.dir); err != nil {
			errs = append(errs, err)
		}
	}
	return errors.Join(errs...)
}

// netnsPIDs lists the processes in the named network namespace.
func netnsPIDs(name string) []int {
	var want syscall.Stat_t
	if err := syscall.Stat("/run/netns/"+name, &want); err != nil {
		return nil
	}
	var out []int
	for _, pid := range allPIDs() {
		var st syscall.Stat_t
		if err := syscall.Stat("/proc/"+strconv.Itoa(pid)+"/ns/net", &st); err != nil {
			continue
		}
		if st.Ino == want.Ino && st.Dev == want.Dev {
			out = append(out, pid)
		}
	}
	return out
}

func allPIDs() []int {
	entries, err := os.ReadDir("/proc")
	if err != nil {
		return nil
	}
	var out []int
	for _, e := range entries {
		if pid, err := strconv.Atoi(e.Name()); err == nil {
			out = append(out, pid)
		}
	}
	return out
}

// killAll kills the slot's processes until none is left. The pods'
// processes are in the slot's cgroups, the daemons and the containerd shims
// in its network namespace. It waits on those listings, not on the
// processes' states: a killed multi-threaded process stays listed, its
// leader already a zombie, until its last thread has exited, and a process
// may fork while we look. Each round also thaws the slot's cgroups: runc
// freezes a container's cgroup (cgroup v1) while it signals or updates it,
// and a frozen process that was sent SIGKILL sleeps on, killed but
// uninterruptible, until someone thaws it; a runc killed by this very sweep
// between its freeze and its thaw leaves it so.
func (s slot) killAll(ctx context.Context) error {
	return poll.WaitPaced(ctx, 30*time.Second, func() (bool, string) {
		pids := s.pids()
		if len(pids) == 0 {
			return true, ""
		}
		for _, pid := range pids {
			if pid > 1 && pid != os.Getpid() {
				_ = syscall.Kill(pid, syscall.SIGKILL)
			}
		}
		thawCgroups(s.cgroup)
		return false, fmt.Sprintf("processes of slot %d would not die: %s", s.n, describeProcs(pids))
	})
}

// pids lists the slot's processes: in its cgroups or its network namespace.
func (s slot) pids() []int {
	pids := cgroupPIDs(s.cgroup)
	for _, pid := range netnsPIDs(s.netns) {
		if !slices.Contains(pids, pid) {
			pids = append(pids, pid)
		}
	}
	return pids
}

// describeProcs names each process with its command, its state and its
// thread count, for an error that says what survived and why (D: killed
// but frozen or in the kernel; Z with threads: still exiting).
func describeProcs(pids []int) string {
	out := make([]string, 0, len(pids))
	for _, pid := range pids {
		out = append(out, strconv.Itoa(pid)+" "+procSummary(pid))
	}
	return strings.Join(out, ", ")
}

// procSummary is "(comm) state S, N threads" from /proc/<pid>/stat, or
// "(gone)" once the process has been reaped.
func procSummary(pid int) string {
	b, err := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/stat")
	if err != nil {
		return "(gone)"
	}
	// pid (comm) state ppid ... num_threads is the 20th field; comm may
	// hold spaces and parentheses, so the fields after it are counted from
	// the last ')'.
	s := string(b)
	i := strings.LastIndexByte(s, ')')
	j := strings.IndexByte(s, '(')
	if i < 0 || j < 0 || j > i {
		return "(unreadable)"
	}
	rest := strings.Fields(s[i+1:])
	if len(rest) < 18 {
		return s[j : i+1]
	}
	return fmt.Sprintf("%s state %s, %s threads", s[j:i+1], rest[0], rest[17])
}

// unmountUnder detaches every mount point below dir in the machine's mount
// namespace, deepest first.
func unmountUnder(dir string, logf func(string, ...any)) {
	b, err := os.ReadFile("/proc/self/mountinfo")
	if err != nil {
		return
	}
	var points []string
	for _, line := range strings.Split(string(b), "\n") {
		f := strings.Fields(line)
		if len(f) > 4 && (f[4] == dir || strings.HasPrefix(f[4], dir+"/")) {
			points = append(points, f[4])
		}
	}
	for i := len(points) - 1; i >= 0; i-- {
		if err := syscall.Unmount(points[i], syscall.MNT_DETACH); err != nil {
			logf("kubelab: unmounting %s: %v", points[i], err)
		}
	}
}
