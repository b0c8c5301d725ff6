package kubelab

import (
	"context"
	"net/netip"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

// needRoot skips without root or containerd, except under CI=true, where
// make test has installed the packages (make cluster-packages) as root.
func needRoot(t *testing.T) {
	t.Helper()
	if testing.Short() {
		t.Skip("-short: no namespaces, mounts or daemons")
	}
	why := Supported()
	if why == "" {
		if _, err := exec.LookPath("containerd"); err != nil {
			why = "containerd is missing: run hack/cluster/install-packages.sh (make cluster-packages)"
		}
	}
	if why != "" {
		if os.Getenv("CI") == "true" {
			t.Fatal(why)
		}
		t.Skip(why)
	}
}

// runtimeWorld brings up the part of a world that needs no Kubernetes
// binary: the slot, the network, the mount namespace, the cgroups, the
// certificates, containerd with the pause image imported.
func runtimeWorld(t *testing.T, pause string) *Cluster {
	t.Helper()
	s, err := takeSlot(t.Context(), 10*time.Minute)
	if err != nil {
		t.Fatal(err)
	}
	if err := s.sweep(t.Logf); err != nil {
		s.release()
		t.Fatal(err)
	}
	c := &Cluster{Dir: s.dir, NodeName: "kubelab-test", NodeIP: s.nodeIP, PodCIDR: s.podCIDR, NodeLocal: s.nodeLocal, HostIP: s.hostIP, slot: s, logf: t.Logf}
	t.Cleanup(func() {
		if t.Failed() {
			t.Log(c.Diagnostics(context.Background()))
		}
		if err := c.Stop(); err != nil {
			t.Errorf("teardown: %v", err)
		}
	})
	for _, step := range []func() error{
		func() error { return os.MkdirAll(filepath.Join(c.Dir, "log"), 0o700) },
		func() error { return saveSysctls(s.n) },
		func() error { return c.network(t.Context()) },
		func() error { return c.mountNamespace(t.Context()) },
		func() error { return makeCgroups(s.cgroup) },
		c.certificates,
		c.writeConfigs,
		func() error {
			return c.daemon(t.Context(), "containerd", "containerd", "--config", filepath.Join(c.Dir, "containerd", "config.toml"))
		},
		func() error {
			return c.wait(t.Context(), "containerd to answer", 5*time.Minute, func() error {
				return run(t.Context(), "ctr", "--address", c.containerdSocket(), "version")
			})
		},
		func() error { return c.ImportImage(t.Context(), pause) },
	} {
		if err := step(); err != nil {
			t.Fatal(err)
		}
	}
	return c
}

// leftovers lists what a world of slot s may leave on the machine.
func leftovers(s slot, createdMountPoints []string) []string {
	var left []string
	if _, err := os.Stat("/run/netns/" + s.netns); err == nil {
		left = append(left, "netns "+s.netns)
	}
	if _, err := os.Stat("/sys/class/net/" + s.hostVeth); err == nil {
		left = append(left, "link "+s.hostVeth)
	}
	for _, p := range []netip.Prefix{s.podCIDR, s.nodeLocal} {
		if out, err := exec.CommandContext(context.Background(), "ip", "route", "show", p.String()).Output(); err == nil && strings.TrimSpace(string(out)) != "" {
			left = append(left, "route "+strings.TrimSpace(string(out)))
		}
	}
	for _, d := range cgroupRoots(s.cgroup) {
		if _, err := os.Stat(d); err == nil {
			left = append(left, "cgroup "+d)
		}
	}
	if _, err := os.Stat(s.dir); err == nil {
		left = append(left, "dir "+s.dir)
	}
	if b, err := os.ReadFile("/proc/self/mountinfo"); err == nil && strings.Contains(string(b), s.dir) {
		left = append(left, "a mount under "+s.dir)
	}
	if !othersRunning(s.n) {
		if _, err := os.Stat(savedSysctls); err == nil {
			left = append(left, savedSysctls)
		}
		for _, d := range createdMountPoints {
			if _, err := os.Stat(d); err == nil {
				left = append(left, "mount point "+d)
			}
		}
	}
	if pids := append(cgroupPIDs(s.cgroup), netnsPIDs(s.netns)...); len(pids) > 0 {
		left = append(left, "processes")
	}
	return left
}

func pauseImage(t *testing.T) string {
	t.Helper()
	dir := t.TempDir()
	out := filepath.Join(dir, "pause.tar")
	if err := Make(t.Context(), "pause-image", "PAUSE_TAR="+out, "BIN_DIR="+filepath.Join(dir, "bin")); err != nil {
		t.Fatal(err)
	}
	return out
}

// TestRuntimeWorldLeavesNothing brings up the network, the mount namespace
// and containerd with the pause image as a world does, checks the network
// rule on the host's routes and that the daemons' writes stay private, and
// that the teardown leaves nothing.
func TestRuntimeWorldLeavesNothing(t *testing.T) {
	needRoot(t)
	pause := pauseImage(t)
	var s slot
	var created []string
	t.Run("up", func(t *testing.T) {
		c := runtimeWorld(t, pause)
		s, created = c.slot, c.mountPoints
		out, err := command(t.Context(), "ctr", "--address", c.containerdSocket(), "-n", "k8s.io", "images", "ls", "-q").Output()
		if err != nil || !strings.Contains(string(out), "docker.io/library/"+PauseImage) {
			t.Errorf("the pause image is not in containerd: %q, %v", out, err)
		}
		routes, err := command(t.Context(), "ip", "route", "show", "dev", s.hostVeth).Output()
		if err != nil {
			t.Fatal(err)
		}
		for _, r := range strings.Split(strings.TrimSpace(string(routes)), "\n") {
			if !strings.HasPrefix(r, "198.51.100.") {
				t.Errorf("host route %q outside 198.51.100.0/24", r)
			}
		}
		// Every node-local address is an ordinary local one in the node's
		// namespace: a guest placed at the last one must be reachable
		// (the /29 as one address made it the loopback's broadcast).
		for a := c.NodeLocal.Addr(); c.NodeLocal.Contains(a); a = a.Next() {
			out, err := c.InNode(t.Context(), "ip", "route", "get", a.String()).Output()
			if err != nil || !strings.HasPrefix(string(out), "local "+a.String()+" ") {
				t.Errorf("node-local address %s routes as %q (%v); want local", a, out, err)
			}
		}
		// containerd wrote its shim sockets under /run/containerd: in the
		// world's directory, not on the machine.
		if _, err := os.Stat("/run/containerd/s"); err == nil {
			t.Errorf("/run/containerd/s exists on the machine")
		}
	})
	if left := leftovers(s, created); len(left) > 0 {
		t.Errorf("the teardown left: %v", left)
	}
}

// TestKilledWorldIsSwept kills a world's test process (a child test binary)
// and checks that the next world of the slot sweeps what it left.
func TestKilledWorldIsSwept(t *testing.T) {
	needRoot(t)
	if os.Getenv("KUBELAB_CHILD") == "1" {
		// The child: bring a world up, say so, and wait to be killed.
		runtimeWorld(t, os.Getenv("KUBELAB_PAUSE"))
		if err := os.WriteFile(os.Getenv("KUBELAB_READY"), []byte("up"), 0o600); err != nil {
			t.Fatal(err)
		}
		<-t.Context().Done()
		return
	}
	pause := pauseImage(t)
	self, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	ready := filepath.Join(t.TempDir(), "ready")
	cmd := exec.CommandContext(t.Context(), self, "-test.run", "^TestKilledWorldIsSwept$", "-test.timeout", "20m")
	cmd.Env = append(os.Environ(), "KUBELAB_CHILD=1", "KUBELAB_PAUSE="+pause, "KUBELAB_READY="+ready)
	var out strings.Builder
	cmd.Stdout, cmd.Stderr = &out, &out
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	done := make(chan error, 1)
	go func() { done <- cmd.Wait() }()
	if err := waitFile(t, ready, done); err != nil {
		t.Fatalf("the child world did not come up: %v\n%s", err, out.String())
	}
	// Which slot the child took: the one whose namespace exists and whose
	// lock is held.
	var s slot
	for n := range slots {
		cand := newSlot(n)
		if _, err := os.Stat("/run/netns/" + cand.netns); err == nil {
			if f, err := flock(slotLockPath(n), false); err == nil {
				_ = f.Close()
				continue
			}
			s = cand
			break
		}
	}
	if s.netns == "" {
		t.Fatal("no slot of the child's found")
	}
	_ = cmd.Process.Kill()
	t.Logf("the child world, killed: %v", <-done)
	if left := leftovers(s, nil); len(left) == 0 {
		t.Fatal("the killed world left nothing: the test proves nothing")
	}
	// The kernel released the child's lock; take that very slot and sweep.
	f, err := flock(slotLockPath(s.n), true)
	if err != nil {
		t.Fatal(err)
	}
	s.lock = f
	defer s.release()
	if err := s.sweep(t.Logf); err != nil {
		t.Fatal(err)
	}
	// The sysctls a killed world saved are restored by the next world's
	// saveSysctls, or by the last Stop; do it as Stop would.
	if err := restoreSysctls(s.n); err != nil {
		t.Fatal(err)
	}
	if left := leftovers(s, nil); len(left) > 0 {
		t.Errorf("after the sweep: %v", left)
	}
}

// waitFile waits for path to exist, or for the child to end.
func waitFile(t *testing.T, path string, done <-chan error) error {
	t.Helper()
	tick := time.NewTicker(100 * time.Millisecond)
	defer tick.Stop()
	deadline := time.NewTimer(10 * time.Minute)
	defer deadline.Stop()
	for {
		if _, err := os.Stat(path); err == nil {
			return nil
		}
		select {
		case err := <-done:
			return err
		case <-deadline.C:
			return os.ErrDeadlineExceeded
		case <-tick.C:
		}
	}
}
