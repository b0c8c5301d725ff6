package main

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"net"
	"net/http"
	"net/netip"
	"os"
	"os/exec"
	"os/signal"
	"path/filepath"
	"runtime/pprof"
	"slices"
	"strings"
	"syscall"
	"time"

	"github.com/go-logr/logr"
	"github.com/prometheus/client_golang/prometheus"

	"github.com/egress-proxies/egress-proxies-operator/hack/internal/procfs"
	"github.com/egress-proxies/egress-proxies-operator/internal/egress"
	"github.com/egress-proxies/egress-proxies-operator/internal/forwardproxy"
)

// The credentials every proxy of the bench checks (basic auth on).
const (
	benchUser = "bench"
	benchPass = "bench-pw-1"
)

// childEnv, when set in the environment, makes this program (or the test
// binary) run our forward proxy on the address it names instead of the
// bench: the proxy then has a process of its own, whose CPU and memory are
// measured like tinyproxy's and squid's.
const childEnv = "BENCHPROXY_CHILD_LISTEN"

// childProfileEnv names the directory where the child writes its profiles.
const childProfileEnv = "BENCHPROXY_CHILD_PROFILE"

// runChild serves our forward proxy on addr until the process is
// terminated, configured as a proxy pod runs it (basic auth, default
// limits), with the egress policy widened to loopback, where the bench's
// origin listens. With a profile directory, it records a CPU profile from
// start to end and writes it, with the allocation profile, when it is
// terminated.
func runChild(addr, profileDir string) error {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	if profileDir != "" {
		stopProfile, err := startProfile(profileDir)
		if err != nil {
			return err
		}
		defer func() {
			if err := stopProfile(); err != nil {
				fmt.Fprintln(os.Stderr, "benchproxy child: profile:", err)
			}
		}()
	}
	if upstream := os.Getenv(childUpstreamEnv); upstream != "" {
		return runGatewayChild(ctx, addr, upstream)
	}
	metrics, err := forwardproxy.NewMetrics(prometheus.NewRegistry())
	if err != nil {
		return err
	}
	p, err := forwardproxy.New(forwardproxy.Config{
		Username: benchUser, Password: benchPass,
		Egress: egress.Policy{
			AllowCIDRs:   []netip.Prefix{netip.MustParsePrefix("127.0.0.0/8")},
			ConnectPorts: []egress.PortRange{{From: 1, To: 65535}},
		},
		// Metrics on, as in a proxy pod.
		Metrics: metrics,
		Log:     logr.Discard(),
	})
	if err != nil {
		return err
	}
	return serve(ctx, addr, p)
}

// serve serves h on addr until ctx ends.
func serve(ctx context.Context, addr string, h http.Handler) error {
	ln, err := forwardproxy.Listen(ctx, addr)
	if err != nil {
		return err
	}
	return forwardproxy.ServeWith(ctx, ln, h, forwardproxy.ServeOptions{})
}

// startProfile starts the CPU profile into dir/cpu.pprof; the function it
// returns stops it and writes the allocation profile to dir/allocs.pprof.
func startProfile(dir string) (func() error, error) {
	if err := os.MkdirAll(dir, 0o750); err != nil { //nolint:gosec // G703: the directory the bench was given on its command line.
		return nil, err
	}
	cpu, err := os.Create(filepath.Join(dir, "cpu.pprof")) //nolint:gosec // G304: the directory the bench was given.
	if err != nil {
		return nil, err
	}
	if err := pprof.StartCPUProfile(cpu); err != nil {
		_ = cpu.Close()
		return nil, err
	}
	return func() error {
		pprof.StopCPUProfile()
		errs := []error{cpu.Close()}
		allocs, err := os.Create(filepath.Join(dir, "allocs.pprof")) //nolint:gosec // G304: the directory the bench was given.
		if err != nil {
			return errors.Join(append(errs, err)...)
		}
		errs = append(errs, pprof.Lookup("allocs").WriteTo(allocs, 0), allocs.Close())
		return errors.Join(errs...)
	}, nil
}

// proxyProc is one proxy under test, running in its own process.
type proxyProc struct {
	name    string
	addr    string
	cmd     *exec.Cmd
	dir     string
	stopped bool
}

// pids returns the process and its children (squid's helpers): memory and
// CPU are summed over them.
func (p *proxyProc) pids() []int {
	root := p.cmd.Process.Pid
	return append([]int{root}, slices.Sorted(maps.Keys(procfs.Children(root)))...)
}

// cpuSeconds is the CPU time (user and system) the proxy's processes used,
// and the system part of it.
func (p *proxyProc) cpuSeconds() (total, system float64) {
	for _, pid := range p.pids() {
		if st, err := procfs.ReadStat(pid); err == nil {
			total += st.CPUSeconds()
			system += st.SystemSeconds()
		}
	}
	return total, system
}

// rssKiB is the resident memory of the proxy's processes.
func (p *proxyProc) rssKiB() int64 {
	var total int64
	for _, pid := range p.pids() {
		if m, err := procfs.ReadMemory(pid); err == nil {
			total += int64(m.RSS >> 10)
		}
	}
	return total
}

// stop ends the proxy: ours is asked to stop (it writes its profiles
// then) and killed if it does not within stopGrace; the others are killed.
func (p *proxyProc) stop() {
	if p.stopped {
		return
	}
	p.stopped = true
	if p.cmd.Process != nil {
		if (p.name != "ours" && p.name != nameGateway) || p.cmd.Process.Signal(syscall.SIGTERM) != nil {
			_ = p.cmd.Process.Kill()
		}
		exited := make(chan struct{})
		go func() {
			defer close(exited)
			_ = p.cmd.Wait()
		}()
		grace := time.NewTimer(stopGrace)
		defer grace.Stop()
		select {
		case <-exited:
		case <-grace.C:
			_ = p.cmd.Process.Kill()
			<-exited
		}
	}
	if p.dir != "" {
		_ = os.RemoveAll(p.dir)
	}
}

// stopGrace is how long our proxy may take to stop and write its profiles.
const stopGrace = 10 * time.Second

// freePort returns a loopback address that is free now.
func freePort(ctx context.Context) (string, error) {
	ln, err := (&net.ListenConfig{}).Listen(ctx, "tcp", "127.0.0.1:0")
	if err != nil {
		return "", err
	}
	defer func() { _ = ln.Close() }()
	return ln.Addr().String(), nil
}

// startProxy starts the named proxy on a free loopback port and waits until
// it accepts connections. The gateway and proxy-chain chain to upstream,
// our forward proxy's address; proxy-chain runs from pcDir.
func startProxy(ctx context.Context, name, profileDir, upstream, pcDir string) (*proxyProc, error) {
	addr, err := freePort(ctx)
	if err != nil {
		return nil, err
	}
	_, port, _ := net.SplitHostPort(addr)
	p := &proxyProc{name: name, addr: addr}
	switch name {
	case "ours":
		self, err := os.Executable()
		if err != nil {
			return nil, err
		}
		p.cmd = exec.CommandContext(ctx, self) //nolint:gosec // G204: this very program, re-executed.
		p.cmd.Env = append(os.Environ(), childEnv+"="+addr, childProfileEnv+"="+profileDir)
	case nameGateway:
		self, err := os.Executable()
		if err != nil {
			return nil, err
		}
		p.cmd = exec.CommandContext(ctx, self) //nolint:gosec // G204: this very program, re-executed.
		if profileDir != "" {
			profileDir = filepath.Join(profileDir, nameGateway)
		}
		p.cmd.Env = append(os.Environ(), childEnv+"="+addr, childUpstreamEnv+"="+upstream, childProfileEnv+"="+profileDir)
	case nameProxyChain:
		p.cmd = proxyChainCommand(ctx, pcDir, addr, upstream)
	case "tinyproxy":
		if p.dir, err = os.MkdirTemp("", "benchproxy-tinyproxy-"); err != nil {
			return nil, err
		}
		conf := "Port " + port + "\nListen 127.0.0.1\nTimeout 600\nMaxClients 4096\nLogLevel Critical\n" +
			"DisableViaHeader Yes\nBasicAuth " + benchUser + " " + benchPass + "\n"
		if os.Geteuid() == 0 {
			conf = "User tinyproxy\nGroup tinyproxy\n" + conf
		}
		path := filepath.Join(p.dir, "tinyproxy.conf")
		if err := os.WriteFile(path, []byte(conf), 0o600); err != nil {
			return nil, err
		}
		// -d: in the foreground, not as a daemon; its own file, never
		// the system's configuration or service.
		p.cmd = exec.CommandContext(ctx, "tinyproxy", "-d", "-c", path) //nolint:gosec // G204: a fixed program with the bench's own file.
	case "squid":
		if p.dir, err = squidDir(port); err != nil {
			return nil, err
		}
		// -N: no daemon; its own configuration, cache and pid files.
		p.cmd = exec.CommandContext(ctx, "squid", "-N", "-f", filepath.Join(p.dir, "squid.conf")) //nolint:gosec // G204: a fixed program with the bench's own file.
	default:
		return nil, fmt.Errorf("unknown proxy %q", name)
	}
	p.cmd.Stdout, p.cmd.Stderr = nil, nil
	if err := p.cmd.Start(); err != nil {
		p.stop()
		return nil, fmt.Errorf("starting %s: %w", name, err)
	}
	if err := waitListening(ctx, addr); err != nil {
		p.stop()
		return nil, fmt.Errorf("%s did not listen on %s: %w", name, addr, err)
	}
	return p, nil
}

// squidDir writes squid's configuration: memory only, no logs but its
// cache.log, basic auth through a helper that knows one user, CONNECT to
// any port (the origin's), on 127.0.0.1:port.
func squidDir(port string) (string, error) {
	dir, err := os.MkdirTemp("", "benchproxy-squid-")
	if err != nil {
		return "", err
	}
	// squid, started as root, runs as its own user, which must write here.
	if err := os.Chmod(dir, 0o777); err != nil { //nolint:gosec // G302: a scratch directory of a bench on loopback.
		return "", err
	}
	helper := filepath.Join(dir, "auth.sh")
	script := "#!/bin/sh\nwhile read -r u p; do if [ \"$u\" = " + benchUser + " ] && [ \"$p\" = " + benchPass + " ]; then echo OK; else echo ERR; fi; done\n"
	if err := os.WriteFile(helper, []byte(script), 0o755); err != nil { //nolint:gosec // G306: the helper must be executable by squid's user.
		return "", err
	}
	conf := strings.Join([]string{
		"http_port 127.0.0.1:" + port,
		"pid_filename " + filepath.Join(dir, "squid.pid"),
		"cache_log " + filepath.Join(dir, "cache.log"),
		"access_log none",
		"cache deny all",
		"cache_mem 8 MB",
		"max_filedescriptors 16384",
		"shutdown_lifetime 0 seconds",
		"via off",
		"forwarded_for delete",
		"auth_param basic program " + helper,
		"auth_param basic children 2",
		"auth_param basic credentialsttl 2 hours",
		"acl authed proxy_auth REQUIRED",
		"http_access allow authed",
		"http_access deny all",
		"coredump_dir " + dir,
		"",
	}, "\n")
	if err := os.WriteFile(filepath.Join(dir, "squid.conf"), []byte(conf), 0o644); err != nil { //nolint:gosec // G306: squid's user reads it.
		return "", err
	}
	return dir, nil
}

// waitListening polls addr until it accepts a connection.
func waitListening(ctx context.Context, addr string) error {
	ctx, cancel := context.WithTimeout(ctx, 30*time.Second)
	defer cancel()
	tick := time.NewTicker(50 * time.Millisecond)
	defer tick.Stop()
	var d net.Dialer
	for {
		c, err := d.DialContext(ctx, "tcp", addr)
		if err == nil {
			_ = c.Close()
			return nil
		}
		select {
		case <-ctx.Done():
			return errors.Join(ctx.Err(), err)
		case <-tick.C:
		}
	}
}

// available reports whether the named proxy can run here, and installs
// tinyproxy and squid with apt-get when asked to and they are missing.
func available(ctx context.Context, name string, install bool, log func(string, ...any)) bool {
	if name == "ours" || name == nameGateway {
		return true
	}
	if _, err := exec.LookPath(name); err == nil {
		return true
	}
	if !install {
		return false
	}
	log("%s is not installed; installing tinyproxy and squid with apt-get", name)
	if err := aptInstall(ctx, "tinyproxy", "squid"); err != nil {
		log("going on without %s: %v", name, err)
		return false
	}
	// The packages start their system services; the bench never uses
	// them, and they would hold port 3128 and memory during the runs.
	for _, svc := range []string{"tinyproxy", "squid"} {
		_ = exec.CommandContext(ctx, "service", svc, "stop").Run() //nolint:gosec // G204: one of two fixed service names.
	}
	_, err := exec.LookPath(name)
	return err == nil
}

// aptInstall installs Debian packages, waiting for apt's lock when another
// install holds it.
func aptInstall(ctx context.Context, pkgs ...string) error {
	args := append([]string{"-o", "DPkg::Lock::Timeout=600", "install", "-y", "--no-install-recommends"}, pkgs...)
	cmd := exec.CommandContext(ctx, "apt-get", args...) //nolint:gosec // G204: apt-get with the bench's fixed package names.
	cmd.Env = append(os.Environ(), "DEBIAN_FRONTEND=noninteractive")
	if out, err := cmd.CombinedOutput(); err != nil {
		return fmt.Errorf("apt-get install %s: %w:\n%s", strings.Join(pkgs, " "), err, lastLines(string(out), 5))
	}
	return nil
}

func lastLines(s string, n int) string {
	lines := strings.Split(strings.TrimSpace(s), "\n")
	if len(lines) > n {
		lines = lines[len(lines)-n:]
	}
	return strings.Join(lines, "\n")
}
