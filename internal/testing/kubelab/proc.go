package kubelab

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
)

// proc is one process the world started; it runs until the world's
// teardown kills it (or it exits on its own, which waits notice).
type proc struct {
	name string
	log  string
	cmd  *exec.Cmd
	done chan struct{}
}

// command is the one place the world builds a command: its own binaries and
// tools, with arguments it builds itself.
func command(ctx context.Context, name string, args ...string) *exec.Cmd {
	return exec.CommandContext(ctx, name, args...) //nolint:gosec // G204: the world's own programs and arguments.
}

func run(ctx context.Context, name string, args ...string) error {
	out, err := command(ctx, name, args...).CombinedOutput()
	if err != nil {
		return fmt.Errorf("%s %s: %w: %s", name, strings.Join(args, " "), err, strings.TrimSpace(string(out)))
	}
	return nil
}

// start runs argv with its output in <dir>/log/<name>.log, in a process
// group of its own (a terminal's ^C reaches the test, which tears down in
// order) and killed with the test process if that dies first. It outlives
// ctx (only its values are kept): a world's processes run until its
// teardown, which runs after the test's context has ended.
func start(ctx context.Context, dir, name string, argv ...string) (*proc, error) {
	logPath := filepath.Join(dir, "log", name+".log")
	f, err := os.OpenFile(logPath, os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o600) //nolint:gosec // G304: the world's own log.
	if err != nil {
		return nil, err
	}
	cmd := command(context.WithoutCancel(ctx), argv[0], argv[1:]...)
	cmd.Stdout, cmd.Stderr = f, f
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true, Pdeathsig: syscall.SIGKILL}
	if err := cmd.Start(); err != nil {
		_ = f.Close()
		return nil, fmt.Errorf("starting %s: %w", name, err)
	}
	p := &proc{name: name, log: logPath, cmd: cmd, done: make(chan struct{})}
	go func() {
		_ = cmd.Wait()
		_ = f.Close()
		close(p.done)
	}()
	return p, nil
}

// exited returns an error when the process has ended.
func (p *proc) exited() error {
	select {
	case <-p.done:
		return fmt.Errorf("%s exited (%s); its last lines:\n%s", p.name, p.cmd.ProcessState, tail(p.log, 30))
	default:
		return nil
	}
}

// inWorld is argv run in the world's network namespace and mount namespace,
// both those of the holder process.
func (c *Cluster) inWorld(argv ...string) []string {
	return append([]string{"nsenter", "--target", strconv.Itoa(c.holder.cmd.Process.Pid), "--net", "--mount", "--"}, argv...)
}

// tail returns the last n lines of a file, or why it could not be read.
func tail(path string, n int) string {
	b, err := os.ReadFile(path) //nolint:gosec // G304: the world's own logs.
	if err != nil {
		return err.Error()
	}
	lines := strings.Split(strings.TrimRight(string(b), "\n"), "\n")
	if len(lines) > n {
		lines = lines[len(lines)-n:]
	}
	return strings.Join(lines, "\n")
}
