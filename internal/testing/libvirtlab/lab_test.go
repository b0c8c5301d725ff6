package libvirtlab

import (
	"context"
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/egress-proxies/egress-proxies-operator/internal/testing/poll"
)

func TestMain(m *testing.M) { Main(m) }

// noOSDomainXML is a TCG domain with an empty disk: it runs (BIOS, no boot
// device) without an operating system, enough for lifecycle tests.
func noOSDomainXML(name, disk, serial string) string {
	return fmt.Sprintf(`<domain type='qemu'>
  <name>%s</name>
  <memory unit='MiB'>64</memory>
  <vcpu>1</vcpu>
  <os><type arch='x86_64' machine='pc'>hvm</type></os>
  <devices>
    <disk type='file' device='disk'>
      <driver name='qemu' type='qcow2'/>
      <source file='%s'/>
      <target dev='vda' bus='virtio'/>
    </disk>
    <serial type='file'><source path='%s'/><target port='0'/></serial>
  </devices>
</domain>`, name, disk, serial)
}

func mustVirsh(t *testing.T, l *Lab, args ...string) string {
	t.Helper()
	out, err := l.Virsh(args...)
	if err != nil {
		t.Fatal(err)
	}
	return out
}

// sshCmd runs a command on the lab's "host" through its sshd, with host key
// checking against the lab's known_hosts.
func sshCmd(ctx context.Context, l *Lab, extra ...string) *exec.Cmd {
	host, port, _ := net.SplitHostPort(l.SSHAddr)
	args := []string{"-F", "/dev/null", "-i", l.PrivateKeyFile, "-p", port,
		"-o", "UserKnownHostsFile=" + l.KnownHostsFile, "-o", "StrictHostKeyChecking=yes",
		"-o", "BatchMode=yes", "-o", "ConnectTimeout=5"}
	args = append(args, extra...)
	_ = host
	return exec.CommandContext(ctx, "ssh", args...)
}

// TestLab proves the lab is a working libvirt host: the daemons answer, the
// pool and network exist, a TCG domain starts and is destroyed, the sshd
// admits the lab's key (and checks as the lab's host key), forwards a local
// stream to the libvirt socket the way kvm2 tunnels, StopSSHD and
// StopLibvirtd really stop the daemons while domains go on, and
// PauseLibvirtd hangs libvirtd while its socket and the sshd still answer.
func TestLab(t *testing.T) {
	l := Start(t, Options{})
	ctx, cancel := context.WithTimeout(context.Background(), poll.Paced(5*time.Minute))
	defer cancel()

	if got := mustVirsh(t, l, "pool-info", l.Pool); !strings.Contains(got, "running") {
		t.Errorf("pool %s is not running:\n%s", l.Pool, got)
	}
	if got := mustVirsh(t, l, "net-info", l.Network); !strings.Contains(got, "Active:         yes") {
		t.Errorf("network %s is not active:\n%s", l.Network, got)
	}
	// The bridge carries the host's address in the documentation range, in
	// the test's own network namespace.
	if out, err := exec.Command("ip", "-o", "addr", "show", "dev", l.Bridge).CombinedOutput(); err != nil || !strings.Contains(string(out), l.NetworkHost.String()+"/24") {
		t.Errorf("bridge %s lacks %s/24: %v\n%s", l.Bridge, l.NetworkHost, err, out)
	}

	mustVirsh(t, l, "vol-create-as", l.Pool, "noos.qcow2", "64M", "--format", "qcow2")
	disk := strings.TrimSpace(mustVirsh(t, l, "vol-path", "--pool", l.Pool, "noos.qcow2"))
	xmlFile := filepath.Join(l.Dir, "noos.xml")
	if err := os.WriteFile(xmlFile, []byte(noOSDomainXML("noos", disk, filepath.Join(l.SerialDir, "noos.log"))), 0o644); err != nil {
		t.Fatal(err)
	}
	mustVirsh(t, l, "define", xmlFile)
	mustVirsh(t, l, "start", "noos")
	if got := strings.TrimSpace(mustVirsh(t, l, "domstate", "noos")); got != "running" {
		t.Fatalf("domain state %q, want running\n%s", got, l.SerialLog("noos"))
	}

	// Through the sshd, with the lab's key and strict host key checking.
	// Only stdout counts: a login shell's rc files may write to stderr (a
	// real host's do too), and the providers read stdout alone.
	var stderr strings.Builder
	cmd := sshCmd(ctx, l, l.SSHUser+"@127.0.0.1", "virsh", "-q", "-c", "qemu:///system", "domstate", "noos")
	cmd.Stderr = &stderr
	out, err := cmd.Output()
	if err != nil || strings.TrimSpace(string(out)) != "running" {
		t.Fatalf("virsh over ssh: %v: %s\nstderr: %s", err, out, stderr.String())
	}
	// A forwarded unix stream to the libvirt socket, as kvm2 uses it.
	local := filepath.Join(l.Dir, "fwd.sock")
	fwd := sshCmd(ctx, l, "-N", "-o", "ExitOnForwardFailure=yes", "-L", local+":"+l.SocketPath, l.SSHUser+"@127.0.0.1")
	if err := fwd.Start(); err != nil {
		t.Fatal(err)
	}
	fwdDone := make(chan error, 1)
	go func() { fwdDone <- fwd.Wait() }()
	defer func() { _ = fwd.Process.Kill() }()
	poll.UntilPaced(t, time.Minute, func() (bool, string) {
		_, err := os.Stat(local)
		return err == nil, fmt.Sprintf("the forwarded socket: %v", err)
	})
	out, err = exec.CommandContext(ctx, "virsh", "-q", "-c", "qemu:///system?socket="+local, "domstate", "noos").CombinedOutput()
	if err != nil || strings.TrimSpace(string(out)) != "running" {
		t.Fatalf("virsh through the forwarded socket: %v: %s", err, out)
	}

	// A host key that is not the lab's is refused.
	wrongKnown := filepath.Join(l.Dir, "wrong_known_hosts")
	_, port, _ := net.SplitHostPort(l.SSHAddr)
	if err := os.WriteFile(wrongKnown, []byte("[127.0.0.1]:"+port+" ssh-ed25519 AAAAC3NzaC1lZDI1NTE5AAAAIIxNdYQdT4hZqaF2VHPZ2dxc3oD9z3f9Dq3x6Kq0d0lq\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	out, err = exec.CommandContext(ctx, "ssh", "-F", "/dev/null", "-i", l.PrivateKeyFile, "-p", port,
		"-o", "UserKnownHostsFile="+wrongKnown, "-o", "StrictHostKeyChecking=yes", "-o", "BatchMode=yes",
		l.SSHUser+"@127.0.0.1", "true").CombinedOutput()
	if err == nil || !strings.Contains(string(out), "HOST IDENTIFICATION HAS CHANGED") {
		t.Errorf("ssh with a wrong host key: err %v, output %s; want a refusal naming the changed key", err, out)
	}

	// StopSSHD: no new connection, and the open forward ends.
	l.StopSSHD()
	if c, err := net.DialTimeout("tcp", l.SSHAddr, time.Second); err == nil {
		_ = c.Close()
		t.Errorf("sshd still accepts connections after StopSSHD")
	}
	fwdTimeout := time.NewTimer(poll.Paced(30 * time.Second))
	defer fwdTimeout.Stop()
	select {
	case err := <-fwdDone:
		t.Logf("the forward ended with StopSSHD: %v", err)
	case <-fwdTimeout.C:
		t.Fatalf("the forwarded connection outlived StopSSHD by %s", poll.Paced(30*time.Second))
	}
	l.StartSSHD()
	if out, err := sshCmd(ctx, l, l.SSHUser+"@127.0.0.1", "true").CombinedOutput(); err != nil {
		t.Errorf("ssh after StartSSHD: %v: %s", err, out)
	}

	// StopLibvirtd: the daemon is gone, the domain goes on.
	l.StopLibvirtd()
	if _, err := l.Virsh("version"); err == nil {
		t.Errorf("libvirtd still answers after StopLibvirtd")
	}
	pid, err := os.ReadFile("/run/libvirt/qemu/noos.pid")
	if err != nil {
		t.Fatalf("qemu's pid file: %v", err)
	}
	if _, err := os.Stat("/proc/" + strings.TrimSpace(string(pid))); err != nil {
		t.Errorf("the domain's qemu died with libvirtd: %v", err)
	}
	l.StartLibvirtd()
	if got := strings.TrimSpace(mustVirsh(t, l, "domstate", "noos")); got != "running" {
		t.Errorf("after StartLibvirtd the domain is %q, want running", got)
	}

	// PauseLibvirtd: a hung daemon. Its socket still takes connections and
	// the sshd still answers, but no libvirt call gets an answer; once
	// resumed it answers again, and so does the domain's state.
	l.PauseLibvirtd()
	t.Cleanup(l.ResumeLibvirtd)
	hung, hungCancel := context.WithTimeout(ctx, poll.Paced(3*time.Second))
	out, err = exec.CommandContext(hung, "virsh", "-q", "-c", l.URI, "version").CombinedOutput()
	hungCancel()
	if err == nil || hung.Err() == nil {
		t.Errorf("virsh answered while libvirtd was paused: %v: %s", err, out)
	}
	if c, err := net.DialTimeout("unix", l.SocketPath, poll.Paced(5*time.Second)); err != nil {
		t.Errorf("the paused libvirtd's socket refused a connection: %v", err)
	} else {
		_ = c.Close()
	}
	if out, err := sshCmd(ctx, l, l.SSHUser+"@127.0.0.1", "true").CombinedOutput(); err != nil {
		t.Errorf("ssh while libvirtd was paused: %v: %s", err, out)
	}
	l.ResumeLibvirtd()
	if got := strings.TrimSpace(mustVirsh(t, l, "domstate", "noos")); got != "running" {
		t.Errorf("after ResumeLibvirtd the domain is %q, want running", got)
	}

	mustVirsh(t, l, "destroy", "noos")
	if got := strings.TrimSpace(mustVirsh(t, l, "domstate", "noos")); got != "shut off" {
		t.Errorf("after destroy the domain is %q, want shut off", got)
	}
}
