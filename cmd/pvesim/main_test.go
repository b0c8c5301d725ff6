package main

import (
	"bytes"
	"context"
	"encoding/json"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/egress-proxies/egress-proxies-operator/internal/testing/logbuf"
	"github.com/egress-proxies/egress-proxies-operator/internal/testing/poll"
	"github.com/egress-proxies/egress-proxies-operator/internal/testing/pvesim"
)

// TestExampleConfig: the shipped example is a valid 3-node cluster.
func TestExampleConfig(t *testing.T) {
	cfg, err := pvesim.LoadConfig("example.yaml")
	if err != nil {
		t.Fatal(err)
	}
	if len(cfg.Nodes) != 3 || len(cfg.Tokens) == 0 {
		t.Errorf("example has %d nodes and %d tokens", len(cfg.Nodes), len(cfg.Tokens))
	}
}

// TestRunWritesFilesAndStops: run serves on loopback, writes the CA and
// token files, and returns when its context ends.
func TestRunWritesFilesAndStops(t *testing.T) {
	dir := t.TempDir()
	ca, tok := filepath.Join(dir, "ca.pem"), filepath.Join(dir, "token")
	ctx, cancel := context.WithCancel(context.Background())
	out := &logbuf.Buffer{}
	done := make(chan error, 1)
	go func() {
		done <- run(ctx, []string{"--config", "example.yaml", "--listen", "127.0.0.1:0", "--admin", "127.0.0.1:0", "--ca-out", ca, "--token-out", tok}, out)
	}()
	poll.Until(t, 10*time.Second, func() (bool, string) {
		select {
		case err := <-done:
			t.Fatalf("run ended early: %v\n%s", err, out.String())
		default:
		}
		return strings.Contains(out.String(), "admin at"), "run did not start:\n" + out.String()
	})
	if b, err := os.ReadFile(ca); err != nil || !bytes.Contains(b, []byte("BEGIN CERTIFICATE")) {
		t.Errorf("CA file: %v %q", err, b)
	}
	if b, err := os.ReadFile(tok); err != nil || !strings.HasPrefix(string(b), "proxmox-provider@pve!operator=") {
		t.Errorf("token file: %v", err)
	}
	cancel()
	if err := <-done; err != nil {
		t.Errorf("run: %v", err)
	}
}

// TestRunWritesAddresses: with ports chosen by the kernel, --addr-out tells
// a parent process where the API and the admin API are, and both answer
// there (the benchmark runs the simulator as a child process this way).
func TestRunWritesAddresses(t *testing.T) {
	addrFile := filepath.Join(t.TempDir(), "addr.json")
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	out := &logbuf.Buffer{}
	done := make(chan error, 1)
	go func() {
		done <- run(ctx, []string{"--config", "example.yaml", "--listen", "127.0.0.1:0", "--admin", "127.0.0.1:0",
			"--tls=false", "--guests=false", "--addr-out", addrFile}, out)
	}()
	var a Addresses
	poll.Until(t, 10*time.Second, func() (bool, string) {
		select {
		case err := <-done:
			t.Fatalf("run ended early: %v\n%s", err, out.String())
		default:
		}
		b, err := os.ReadFile(addrFile)
		if err != nil {
			return false, err.Error()
		}
		if err := json.Unmarshal(b, &a); err != nil {
			t.Fatalf("%s: %v (%q)", addrFile, err, b)
		}
		return true, ""
	})
	get := func(u string) int {
		req, err := http.NewRequestWithContext(ctx, http.MethodGet, u, nil)
		if err != nil {
			t.Fatal(err)
		}
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatalf("GET %s: %v", u, err)
		}
		_ = resp.Body.Close()
		return resp.StatusCode
	}
	// Unauthenticated: 401 from the API proves it is the simulator.
	if code := get(a.API + "/api2/json/version"); code != http.StatusUnauthorized {
		t.Errorf("GET %s/api2/json/version: %d, want 401", a.API, code)
	}
	if code := get(a.Admin + "/admin/bytes"); code != http.StatusOK {
		t.Errorf("GET %s/admin/bytes: %d, want 200", a.Admin, code)
	}
	cancel()
	if err := <-done; err != nil {
		t.Errorf("run: %v", err)
	}
}

// TestRunRefusesNonLoopback: the listen address must be loopback.
func TestRunRefusesNonLoopback(t *testing.T) {
	for _, addr := range []string{"0.0.0.0:8006", ":8006"} {
		err := run(context.Background(), []string{"--config", "example.yaml", "--listen", addr}, &logbuf.Buffer{})
		if err == nil || !strings.Contains(err.Error(), "loopback") {
			t.Errorf("--listen %s: %v", addr, err)
		}
	}
}
