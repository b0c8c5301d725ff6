package libvirtlab

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/egress-proxies/egress-proxies-operator/internal/testing/poll"
)

// daemon is one foreground daemon process the lab owns.
type daemon struct {
	name    string
	argv    []string
	logPath string

	cmd  *exec.Cmd
	done chan struct{} // closed when the process has exited
	// paused is set between pause and resume.
	paused bool
}

func (d *daemon) start() error {
	if d.running() {
		return nil
	}
	log, err := os.OpenFile(d.logPath, os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o600)
	if err != nil {
		return err
	}
	// Stopped by signals (stop), not by a context: the lab decides when.
	cmd := command(context.Background(), d.argv[0], d.argv[1:]...)
	cmd.Stdout, cmd.Stderr = log, log
	// Its own process group, so that a terminal's ^C reaches the test, which
	// then tears the lab down in order. Killed with the test process when
	// that dies without its cleanup (a `go test -timeout` panic).
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true, Pdeathsig: syscall.SIGKILL}
	if err := cmd.Start(); err != nil {
		_ = log.Close()
		return fmt.Errorf("starting %s: %w", d.name, err)
	}
	done := make(chan struct{})
	// Ends when the process exits; stop makes sure it does.
	go func() {
		_ = cmd.Wait()
		_ = log.Close()
		close(done)
	}()
	d.cmd, d.done = cmd, done
	return nil
}

// exitError says that a daemon the lab started has exited: waiting for it
// is pointless.
type exitError struct{ name string }

func (e *exitError) Error() string { return e.name + " exited" }

// exited returns an *exitError when the daemon was started and has exited.
func (d *daemon) exited() error {
	if d.done != nil && !d.running() {
		return &exitError{name: d.name}
	}
	return nil
}

func (d *daemon) running() bool {
	if d.done == nil {
		return false
	}
	select {
	case <-d.done:
		return false
	default:
		return true
	}
}

// pause stops the daemon with SIGSTOP: it keeps its sockets, which accept
// connections the kernel queues, and answers nothing, as a hung daemon
// does. resume lets it go on with SIGCONT.
func (d *daemon) pause() error {
	if !d.running() {
		return fmt.Errorf("%s is not running", d.name)
	}
	if err := d.cmd.Process.Signal(syscall.SIGSTOP); err != nil {
		return fmt.Errorf("stopping %s with SIGSTOP: %w", d.name, err)
	}
	d.paused = true
	return nil
}

func (d *daemon) resume() {
	if d.paused && d.running() {
		_ = d.cmd.Process.Signal(syscall.SIGCONT)
	}
	d.paused = false
}

// stop sends SIGTERM, and SIGKILL after ten seconds (on a quiet machine;
// the wait follows the machine's pace). A paused daemon is resumed first,
// so that it can handle the SIGTERM. With children, it
// first kills the processes the daemon forked (sshd's per-connection
// processes, which put themselves in sessions of their own), so that open
// connections end too.
func (d *daemon) stop(t testing.TB, children bool) {
	if !d.running() {
		return
	}
	pid := d.cmd.Process.Pid
	if children {
		for _, c := range descendants(pid) {
			_ = syscall.Kill(c, syscall.SIGKILL)
		}
	}
	d.resume()
	_ = d.cmd.Process.Signal(syscall.SIGTERM)
	timer := time.NewTimer(poll.Paced(10 * time.Second))
	defer timer.Stop()
	select {
	case <-d.done:
	case <-timer.C:
		t.Logf("libvirtlab: %s did not stop on SIGTERM; killing it", d.name)
		_ = d.cmd.Process.Kill()
		<-d.done
	}
}

// descendants lists the processes below pid, read from /proc.
func descendants(pid int) []int {
	parent := map[int]int{}
	entries, err := os.ReadDir("/proc")
	if err != nil {
		return nil
	}
	for _, e := range entries {
		p, err := strconv.Atoi(e.Name())
		if err != nil {
			continue
		}
		b, err := readFile("/proc/" + e.Name() + "/stat")
		if err != nil {
			continue
		}
		// The command name is in parentheses and may hold spaces; the
		// parent's pid is the second field after it.
		s := string(b)
		i := strings.LastIndexByte(s, ')')
		if i < 0 {
			continue
		}
		f := strings.Fields(s[i+1:])
		if len(f) < 2 {
			continue
		}
		if pp, err := strconv.Atoi(f[1]); err == nil {
			parent[p] = pp
		}
	}
	var out []int
	var walk func(int)
	walk = func(p int) {
		for c, pp := range parent {
			if pp == p {
				out = append(out, c)
				walk(c)
			}
		}
	}
	walk(pid)
	return out
}
