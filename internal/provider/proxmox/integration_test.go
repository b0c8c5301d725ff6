package proxmox

import (
	"context"
	"errors"
	"os"
	"strconv"
	"testing"
	"time"

	"github.com/egress-proxies/egress-proxies-operator/internal/cloudinit"
	"github.com/egress-proxies/egress-proxies-operator/internal/config"
	"github.com/egress-proxies/egress-proxies-operator/internal/provider"
)

// TestRealHostLifecycle runs one whole lifecycle against a real Proxmox VE
// host: create until the VM runs with an address from its guest agent, then
// delete until nothing is left. It needs a host, so it runs only when
// PROXMOX_TEST_URL and its companions are set (docs/testing.md); CI never
// sets them. It creates one VM named proxy-integration-test and removes it.
func TestRealHostLifecycle(t *testing.T) {
	apiURL := os.Getenv("PROXMOX_TEST_URL")
	if apiURL == "" {
		t.Skip("set PROXMOX_TEST_URL, PROXMOX_TEST_TOKEN_FILE, PROXMOX_TEST_NODE, PROXMOX_TEST_TEMPLATE_VMID, " +
			"PROXMOX_TEST_ISO_STORAGE and PROXMOX_TEST_CA_FILE (or PROXMOX_TEST_INSECURE=1) to run against a real host")
	}
	need := func(name string) string {
		v := os.Getenv(name)
		if v == "" {
			t.Fatalf("%s is required with PROXMOX_TEST_URL", name)
		}
		return v
	}
	template, err := strconv.Atoi(need("PROXMOX_TEST_TEMPLATE_VMID"))
	if err != nil {
		t.Fatalf("PROXMOX_TEST_TEMPLATE_VMID: %v", err)
	}
	block := &Block{
		APIURL: apiURL, TokenFile: need("PROXMOX_TEST_TOKEN_FILE"),
		CAFile: os.Getenv("PROXMOX_TEST_CA_FILE"), InsecureSkipTLSVerify: os.Getenv("PROXMOX_TEST_INSECURE") == "1",
		Zones:      map[string]Zone{"test": {Nodes: []string{need("PROXMOX_TEST_NODE")}}},
		Images:     map[string]Image{"test": {TemplateVMID: template}},
		ISOStorage: need("PROXMOX_TEST_ISO_STORAGE"), TargetStorage: os.Getenv("PROXMOX_TEST_TARGET_STORAGE"),
		// Only for a dry run of this test against cmd/pvesim, whose agents
		// report loopback addresses.
		AcceptLoopbackAddresses: os.Getenv("PROXMOX_TEST_ACCEPT_LOOPBACK") == "1",
	}
	entry := &config.Entry{Name: "integration", Type: TypeName, Zones: []string{"test"}, Images: []string{"test"},
		MachineTypes: []config.MachineType{{Name: "small", CPUs: 1, MemoryMiB: 512}}, Block: block}
	p, err := New(Options{Entry: entry})
	if err != nil {
		t.Fatal(err)
	}
	ud, err := cloudinit.Render(cloudinit.Proxy{Port: 3128, Username: "integration", Password: "integration-test-only"})
	if err != nil {
		t.Fatal(err)
	}
	req := provider.Request{
		OwnerUID: "00000000-0000-4000-8000-000000000001", Owner: provider.ObjectRef{Namespace: "integration", Name: "test"},
		Name: "proxy-integration-test", Zone: "test", MachineType: "small", Image: "test", UserData: provider.NewSensitive(ud),
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Minute)
	defer cancel()
	id := untilDone(ctx, t, "create", func() (provider.ID, error) { return p.Create(ctx, req) })
	t.Cleanup(func() {
		dctx, dcancel := context.WithTimeout(context.Background(), 5*time.Minute)
		defer dcancel()
		untilDone(dctx, t, "delete", func() (provider.ID, error) { return "", p.Delete(dctx, id) })
	})
	untilDone(ctx, t, "address", func() (provider.ID, error) {
		in, err := p.Get(ctx, id)
		switch {
		case err != nil:
			return "", err
		case in.State != provider.StateRunning || !in.Address.IsValid():
			return "", provider.NewInProgress("waiting for the guest agent's address", 5*time.Second)
		}
		t.Logf("VM %s runs on %s at %s", in.ID, in.Node, in.Address)
		return in.ID, nil
	})
}

// untilDone repeats fn while it answers InProgress or a Transient error.
func untilDone(ctx context.Context, t *testing.T, what string, fn func() (provider.ID, error)) provider.ID {
	t.Helper()
	for {
		id, err := fn()
		switch {
		case err == nil:
			return id
		case provider.IsPermanent(err) || errors.Is(err, context.DeadlineExceeded):
			t.Fatalf("%s: %v", what, err)
		}
		wait := provider.RetryAfterOf(err)
		if wait <= 0 {
			wait = 2 * time.Second
		}
		timer := time.NewTimer(wait)
		select {
		case <-ctx.Done():
			timer.Stop()
			t.Fatalf("%s: %v (last: %v)", what, ctx.Err(), err)
		case <-timer.C:
		}
	}
}
