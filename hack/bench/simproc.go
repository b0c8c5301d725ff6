package main

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"syscall"
	"time"

	"github.com/egress-proxies/egress-proxies-operator/internal/testing/pvelab"
	"github.com/egress-proxies/egress-proxies-operator/internal/testing/pvesim"
)

// buildPvesim builds cmd/pvesim into dir with the go command that runs the
// bench.
func buildPvesim(ctx context.Context, root, dir string) (string, error) {
	bin := filepath.Join(dir, "pvesim")
	cmd := exec.CommandContext(ctx, "go", "build", "-o", bin, "./cmd/pvesim") //nolint:gosec // G204: the go command on a path of the bench's own.
	cmd.Dir = root
	cmd.Stdout, cmd.Stderr = os.Stderr, os.Stderr
	if err := cmd.Run(); err != nil {
		return "", fmt.Errorf("building cmd/pvesim: %w", err)
	}
	return bin, nil
}

// simProcess is cmd/pvesim running as a child process on loopback, so that
// its CPU and memory are not the operator's. The bench reads its counters
// through the admin API.
type simProcess struct {
	cmd     *exec.Cmd
	cancel  context.CancelFunc
	done    chan error
	api     string // HTTPS base URL
	admin   string // admin base URL
	ca, tok string // files the operator's provider reads
	hc      *http.Client
}

// startSim starts the simulated cluster of pvelab (three nodes, one
// template, the provider's token) at the given speed, guests off.
func startSim(ctx context.Context, bin, dir string, speed float64) (*simProcess, error) {
	cfgFile, addrFile := filepath.Join(dir, "cluster.yaml"), filepath.Join(dir, "addr.json")
	if err := os.WriteFile(cfgFile, pvelab.ClusterYAML(3), 0o600); err != nil {
		return nil, fmt.Errorf("writing the cluster: %w", err)
	}
	s := &simProcess{ca: filepath.Join(dir, "ca.pem"), tok: filepath.Join(dir, "token"), done: make(chan error, 1),
		hc: &http.Client{Timeout: time.Minute}}
	// Its own context: stop ends it with SIGTERM (it then removes its
	// upload directory), SIGKILL 10 s later.
	pctx, cancel := context.WithCancel(context.WithoutCancel(ctx))
	s.cancel = cancel
	s.cmd = exec.CommandContext(pctx, bin, "--config", cfgFile, "--listen", "127.0.0.1:0", "--admin", "127.0.0.1:0", //nolint:gosec // G204: our own build of cmd/pvesim.
		"--speed", strconv.FormatFloat(speed, 'g', -1, 64), "--guests=false",
		"--ca-out", s.ca, "--token-out", s.tok, "--addr-out", addrFile)
	s.cmd.Cancel = func() error { return s.cmd.Process.Signal(syscall.SIGTERM) }
	s.cmd.WaitDelay = 10 * time.Second
	s.cmd.Stdout, s.cmd.Stderr = io.Discard, os.Stderr
	if err := s.cmd.Start(); err != nil {
		cancel()
		return nil, fmt.Errorf("starting pvesim: %w", err)
	}
	go func() { s.done <- s.cmd.Wait() }()
	err := waitFor(ctx, 30*time.Second, func() (bool, string, error) {
		select {
		case err := <-s.done:
			s.done <- err
			return false, "", fmt.Errorf("pvesim exited: %w", err)
		default:
		}
		b, err := os.ReadFile(addrFile) //nolint:gosec // G304: the bench's own temporary file.
		if err != nil {
			return false, "waiting for pvesim's addresses", nil
		}
		var a struct{ API, Admin string }
		if err := json.Unmarshal(b, &a); err != nil {
			return false, "", fmt.Errorf("pvesim's addresses: %w", err)
		}
		s.api, s.admin = a.API, a.Admin
		return true, "", nil
	})
	if err != nil {
		s.stop()
		return nil, err
	}
	return s, nil
}

// The methods below treat a nil *simProcess as no simulator (the
// kubernetes provider's runs): no calls, no VMs, no process.

// pid is the simulator's process id, 0 for none.
func (s *simProcess) pid() int {
	if s == nil {
		return 0
	}
	return s.cmd.Process.Pid
}

// stop ends the simulator and waits for it.
func (s *simProcess) stop() {
	s.cancel()
	if err := <-s.done; err != nil && !isSignalExit(err) {
		fmt.Fprintln(os.Stderr, "pvesim:", err)
	}
}

// adminGet decodes the answer of an admin GET into v.
func (s *simProcess) adminGet(ctx context.Context, path string, v any) error {
	return getJSON(ctx, s.hc, s.admin+path, "pvesim admin "+path, v)
}

// counters returns the simulator's call counts and response bytes by call.
func (s *simProcess) counters(ctx context.Context) (calls, bytes map[string]int64, err error) {
	if s == nil {
		return map[string]int64{}, map[string]int64{}, nil
	}
	if err := s.adminGet(ctx, "/admin/counters", &calls); err != nil {
		return nil, nil, err
	}
	if err := s.adminGet(ctx, "/admin/bytes", &bytes); err != nil {
		return nil, nil, err
	}
	return calls, bytes, nil
}

// reset sets the simulator's counters and byte counts to zero.
func (s *simProcess) reset(ctx context.Context) error {
	if s == nil {
		return nil
	}
	req, err := http.NewRequestWithContext(ctx, http.MethodDelete, s.admin+"/admin/counters", nil)
	if err != nil {
		return fmt.Errorf("pvesim admin reset: %w", err)
	}
	resp, err := s.hc.Do(req)
	if err != nil {
		return fmt.Errorf("pvesim admin reset: %w", err)
	}
	_ = resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		return errors.New("pvesim admin reset: " + resp.Status)
	}
	return nil
}

// clones counts the VMs that are not templates.
func (s *simProcess) clones(ctx context.Context) (int, error) {
	if s == nil {
		return 0, nil
	}
	var vms []pvesim.VMInfo
	if err := s.adminGet(ctx, "/admin/vms", &vms); err != nil {
		return 0, err
	}
	n := 0
	for _, vm := range vms {
		if !vm.Template {
			n++
		}
	}
	return n, nil
}
