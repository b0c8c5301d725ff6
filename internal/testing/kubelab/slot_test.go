package kubelab

import (
	"net/netip"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
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

func TestAlive(t *testing.T) {
	if !alive(os.Getpid()) {
		t.Error("this process is not alive")
	}
	if alive(1 << 30) {
		t.Error("a pid that cannot exist is alive")
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
