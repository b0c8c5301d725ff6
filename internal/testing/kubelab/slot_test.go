package kubelab

import (
	"net/netip"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/egress-proxies/egress-proxies-operator/internal/testing/poll"
)

// TestSlotsNeverCollide checks what lets two worlds run at once and keeps
// the host's routes where the network rule allows them.
func TestSlotsNeverCollide(t *testing.T) {
	hostSide := netip.MustParsePrefix("198.51.100.0/24")
	registries := netip.MustParsePrefix("203.0.113.0/24")
	seenNames := map[string]int{}
	seenAddrs := map[netip.Addr]int{}
	var routed []netip.Prefix
	for n := range slots {
		s := newSlot(n)
		// Per kind: a namespace and a cgroup may share a name.
		for _, name := range []string{"netns " + s.netns, "link " + s.hostVeth, "link " + s.nodeVeth, "link " + s.bridge, "cgroup " + s.cgroup, "dir " + s.dir} {
			if prev, ok := seenNames[name]; ok {
				t.Errorf("slot %d reuses %q of slot %d: two worlds would share it", n, name, prev)
			}
			seenNames[name] = n
		}
		for _, ifname := range []string{s.hostVeth, s.nodeVeth, s.bridge} {
			if len(ifname) > 15 {
				t.Errorf("slot %d: interface name %q is longer than the kernel's 15 bytes", n, ifname)
			}
		}
		// Everything the host routes to is in 198.51.100.0/24, and never in
		// the range through which the machine reaches its registries.
		for _, a := range []netip.Addr{s.hostIP, s.nodeIP, s.podGateway()} {
			if !hostSide.Contains(a) || registries.Contains(a) {
				t.Errorf("slot %d: address %s outside 198.51.100.0/24", n, a)
			}
			if prev, ok := seenAddrs[a]; ok {
				t.Errorf("slot %d: address %s of slot %d", n, a, prev)
			}
			seenAddrs[a] = n
		}
		for _, r := range []struct {
			name string
			p    netip.Prefix
		}{{"pod range", s.podCIDR}, {"node-local range", s.nodeLocal}} {
			if !hostSide.Contains(r.p.Addr()) || r.p.Bits() < 24 || r.p.Contains(s.nodeIP) || r.p.Contains(s.hostIP) {
				t.Errorf("slot %d: %s %s must be inside 198.51.100.0/24 and apart from the veth's %s and %s", n, r.name, r.p, s.hostIP, s.nodeIP)
			}
			for _, p := range routed {
				if p.Overlaps(r.p) {
					t.Errorf("slot %d: %s %s overlaps %s, routed already", n, r.name, r.p, p)
				}
			}
			routed = append(routed, r.p)
		}
	}
	if svc := netip.MustParsePrefix(serviceCIDR); !registries.Contains(svc.Addr()) {
		t.Errorf("the Service range %s moved: it must stay inside the namespace only (doc and network rule)", svc)
	}
}

// TestTakeSlotSkipsHeldOnes takes slots the way two test processes would.
func TestTakeSlotSkipsHeldOnes(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Skip("the slots' locks live in /run, writable by root")
	}
	a, err := takeSlot(t.Context(), 0)
	if err != nil {
		t.Fatal(err)
	}
	defer a.release()
	b, err := takeSlot(t.Context(), 0)
	if err != nil {
		t.Fatal(err)
	}
	defer b.release()
	if a.n == b.n {
		t.Fatalf("two holders of slot %d", a.n)
	}
	if !othersRunning(a.n) {
		t.Errorf("slot %d held, but othersRunning(%d) says none", b.n, a.n)
	}
	// A released slot (a process that died) is free again.
	n := b.n
	b.release()
	f, err := flock(slotLockPath(n), false)
	if err != nil {
		t.Fatalf("slot %d still locked after release: %v", n, err)
	}
	_ = f.Close()
}

// TestProcSummary reads what a "would not die" error says of a process.
func TestProcSummary(t *testing.T) {
	got := procSummary(os.Getpid())
	// A test binary runs several threads. The state is its main thread's,
	// which sleeps while another thread runs this test (seen on a loaded
	// CI machine): running or sleeping, never anything else.
	if !regexp.MustCompile(`^\(kubelab\.test\) state [RS], ([2-9]|[1-9][0-9]+) threads$`).MatchString(got) {
		t.Errorf("procSummary(self) = %q, want (kubelab.test) state R or S, N threads with N > 1", got)
	}
	if got := procSummary(1 << 30); got != "(gone)" {
		t.Errorf("procSummary(a pid that cannot exist) = %q, want (gone)", got)
	}
}

// TestSweepKillsAFrozenProcess leaves a process of the world frozen, as a
// runc killed between its freeze and its thaw leaves a container: the
// sweep must still end it (killAll).
func TestSweepKillsAFrozenProcess(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Skip("needs root: cgroups and the slots' locks")
	}
	s, err := takeSlot(t.Context(), 0)
	if err != nil {
		t.Fatal(err)
	}
	defer s.release()
	if err := makeCgroups(s.cgroup); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = removeCgroups(s.cgroup) })
	cmd := exec.Command("sleep", "600")
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = cmd.Process.Kill() })
	pid := strconv.Itoa(cmd.Process.Pid)
	var freezer string
	for _, root := range cgroupRoots(s.cgroup) {
		if err := os.WriteFile(filepath.Join(root, "cgroup.procs"), []byte(pid), 0o644); err != nil {
			t.Fatalf("joining %s: %v", root, err)
		}
		for _, f := range []string{"freezer.state", "cgroup.freeze"} {
			if _, err := os.Stat(filepath.Join(root, f)); err == nil {
				freezer = filepath.Join(root, f)
			}
		}
	}
	if freezer == "" {
		t.Skip("no cgroup freezer on this machine")
	}
	frozen := map[bool]string{true: "FROZEN", false: "1"}[filepath.Base(freezer) == "freezer.state"]
	if err := os.WriteFile(freezer, []byte(frozen), 0o644); err != nil {
		t.Fatal(err)
	}
	poll.UntilPaced(t, 10*time.Second, func() (bool, string) {
		b, _ := os.ReadFile(freezer)
		st := strings.TrimSpace(string(b))
		if filepath.Base(freezer) == "cgroup.freeze" {
			b, _ = os.ReadFile(filepath.Join(filepath.Dir(freezer), "cgroup.events"))
			st = string(b)
			return strings.Contains(st, "frozen 1"), "cgroup.events: " + st
		}
		return st == "FROZEN", freezer + ": " + st
	})
	if err := s.sweep(t.Logf); err != nil {
		t.Fatalf("sweep: %v", err)
	}
	// Reaped here, its parent: only a dead process is reaped.
	reaped := make(chan error, 1)
	go func() { reaped <- cmd.Wait() }()
	if err := poll.Receive(t, poll.Paced(10*time.Second), "the frozen process to be reaped", reaped); err == nil {
		t.Error("sleep 600 exited cleanly: it was not killed")
	}
	if left := cgroupPIDs(s.cgroup); len(left) > 0 {
		t.Errorf("processes %v still in the slot's cgroups", left)
	}
}

// TestRestoreSysctlsRefusesForeignKeys keeps the saved file from writing
// anything but the kubelet's settings back.
func TestRestoreSysctlsRefusesForeignKeys(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Skip("needs root")
	}
	dir := t.TempDir()
	old := savedSysctls
	savedSysctls = filepath.Join(dir, "saved")
	t.Cleanup(func() { savedSysctls = old })
	if err := os.WriteFile(savedSysctls, []byte("net/ipv4/ip_forward=1\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	err := restoreSysctlsLocked()
	if err == nil || !strings.Contains(err.Error(), "unexpected line") {
		t.Errorf("err = %v, want a refusal", err)
	}
	var st syscall.Stat_t
	if syscall.Stat(savedSysctls, &st) != nil {
		t.Error("the refused file was removed")
	}
}
