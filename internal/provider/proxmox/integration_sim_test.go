package proxmox

import (
	"bytes"
	"context"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/egress-proxies/egress-proxies-operator/internal/testing/modroot"
	"github.com/egress-proxies/egress-proxies-operator/internal/testing/pvesim"
)

// TestMakeTestIntegrationProxmox runs `make test-integration-proxmox`, the
// real-host tests, exactly as an administrator does, with PROXMOX_TEST_URL
// pointing at the simulator (cmd/pvesim's example cluster): both tests run
// and pass. Without PROXMOX_TEST_URL, both skip cleanly.
func TestMakeTestIntegrationProxmox(t *testing.T) {
	if testing.Short() {
		t.Skip("builds and runs the package again with -tags=integration -race: not in -short")
	}
	makeBin, err := exec.LookPath("make")
	if err != nil {
		t.Fatalf("make is needed: %v", err)
	}
	root, err := modroot.Find()
	if err != nil {
		t.Fatal(err)
	}

	cfg, err := pvesim.LoadConfig(filepath.Join(root, "cmd", "pvesim", "example.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	cfg.Speed = 500 // the real host's minute of boot in a tenth of a second
	sim, err := pvesim.New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = sim.Close() })
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Minute)
	defer cancel()
	url, err := sim.Serve(ctx, pvesim.ServeOptions{Addr: "127.0.0.1:0", TLS: true})
	if err != nil {
		t.Fatal(err)
	}
	dir := t.TempDir()
	tokenFile, caFile := filepath.Join(dir, "token"), filepath.Join(dir, "ca.pem")
	tk := cfg.Tokens[0]
	if err := os.WriteFile(tokenFile, []byte(tk.ID+"="+tk.Secret+"\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(caFile, sim.CACertPEM(), 0o600); err != nil {
		t.Fatal(err)
	}

	run := func(env ...string) string {
		t.Helper()
		cmd := exec.CommandContext(ctx, makeBin, "--no-print-directory", "test-integration-proxmox")
		cmd.Dir = root
		// The caller's environment without its own PROXMOX_TEST_* (a
		// developer's real host must not be used here).
		for _, kv := range os.Environ() {
			if !strings.HasPrefix(kv, "PROXMOX_TEST_") {
				cmd.Env = append(cmd.Env, kv)
			}
		}
		cmd.Env = append(cmd.Env, env...)
		var out bytes.Buffer
		cmd.Stdout, cmd.Stderr = &out, &out
		if err := cmd.Run(); err != nil {
			t.Fatalf("make test-integration-proxmox %v: %v\n%s", env, err, out.String())
		}
		return out.String()
	}

	out := run("PROXMOX_TEST_URL="+url, "PROXMOX_TEST_TOKEN_FILE="+tokenFile, "PROXMOX_TEST_CA_FILE="+caFile,
		"PROXMOX_TEST_NODE=pve1", "PROXMOX_TEST_TEMPLATE_VMID=9000", "PROXMOX_TEST_ISO_STORAGE=seeds",
		"PROXMOX_TEST_VLAN_TAG=4", "PROXMOX_TEST_ACCEPT_LOOPBACK=1")
	for _, want := range []string{"--- PASS: TestProxmox_lifecycle", "--- PASS: TestProxmoxCheck_realHost"} {
		if !strings.Contains(out, want) {
			t.Errorf("against the simulator, the output lacks %q:\n%s", want, out)
		}
	}
	if strings.Contains(out, tk.Secret) {
		t.Error("the run printed the token secret")
	}
	// Nothing is left on the simulator.
	for _, v := range sim.VMs() {
		if v.Name == "proxy-integration-test" {
			t.Errorf("VM left: %+v", v)
		}
	}

	out = run()
	for _, want := range []string{"--- SKIP: TestProxmox_lifecycle", "--- SKIP: TestProxmoxCheck_realHost", "set PROXMOX_TEST_URL"} {
		if !strings.Contains(out, want) {
			t.Errorf("without PROXMOX_TEST_URL, the output lacks %q:\n%s", want, out)
		}
	}
}
