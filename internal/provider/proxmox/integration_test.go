//go:build integration

package proxmox

import (
	"context"
	"errors"
	"os"
	"regexp"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/egress-proxies/egress-proxies-operator/internal/cloudinit"
	"github.com/egress-proxies/egress-proxies-operator/internal/config"
	"github.com/egress-proxies/egress-proxies-operator/internal/provider"
)

// The real-host tests: `make test-integration-proxmox` runs them (build tag
// integration, -run TestProxmox). They need a Proxmox VE host and skip
// without PROXMOX_TEST_URL; docs/testing.md lists the variables and
// docs/proxmox.md how to clean up after PROXMOX_TEST_KEEP.

// realHost is the environment of the real-host tests.
type realHost struct {
	url, tokenFile, caFile, node, isoStorage string
	template, vlanTag                        int
	keep, acceptLoopback                     bool
}

// realHostFromEnv reads the PROXMOX_TEST_* variables, skipping the test
// without PROXMOX_TEST_URL and failing it when a companion is missing.
func realHostFromEnv(t *testing.T) realHost {
	t.Helper()
	if os.Getenv("PROXMOX_TEST_URL") == "" {
		t.Skip("set PROXMOX_TEST_URL, PROXMOX_TEST_TOKEN_FILE, PROXMOX_TEST_CA_FILE, PROXMOX_TEST_NODE, " +
			"PROXMOX_TEST_TEMPLATE_VMID and PROXMOX_TEST_ISO_STORAGE (optional: PROXMOX_TEST_VLAN_TAG, PROXMOX_TEST_KEEP) " +
			"to run against a Proxmox VE host (docs/testing.md)")
	}
	need := func(name string) string {
		v := os.Getenv(name)
		if v == "" {
			t.Fatalf("%s is required with PROXMOX_TEST_URL", name)
		}
		return v
	}
	number := func(name string, v string) int {
		n, err := strconv.Atoi(v)
		if err != nil {
			t.Fatalf("%s=%q: want a number", name, v)
		}
		return n
	}
	h := realHost{
		url: need("PROXMOX_TEST_URL"), tokenFile: need("PROXMOX_TEST_TOKEN_FILE"), caFile: need("PROXMOX_TEST_CA_FILE"),
		node: need("PROXMOX_TEST_NODE"), isoStorage: need("PROXMOX_TEST_ISO_STORAGE"),
		template: number("PROXMOX_TEST_TEMPLATE_VMID", need("PROXMOX_TEST_TEMPLATE_VMID")),
		keep:     os.Getenv("PROXMOX_TEST_KEEP") != "",
		// Only for a run against cmd/pvesim, whose guest agents report
		// loopback addresses.
		acceptLoopback: os.Getenv("PROXMOX_TEST_ACCEPT_LOOPBACK") == "1",
	}
	if v := os.Getenv("PROXMOX_TEST_VLAN_TAG"); v != "" {
		h.vlanTag = number("PROXMOX_TEST_VLAN_TAG", v)
	}
	return h
}

// provider builds the provider of a one-node entry on the host.
func (h realHost) provider(t *testing.T) *Provider {
	t.Helper()
	block := &Block{
		APIURL: h.url, TokenFile: h.tokenFile, CAFile: h.caFile,
		Zones:      map[string]Zone{"test": {Nodes: []string{h.node}}},
		Images:     map[string]Image{"test": {TemplateVMID: h.template}},
		ISOStorage: h.isoStorage, VLANTag: h.vlanTag, AcceptLoopbackAddresses: h.acceptLoopback,
	}
	entry := &config.Entry{Name: "integration", Type: TypeName, Zones: []string{"test"}, Images: []string{"test"},
		MachineTypes: map[string]config.MachineType{"small": {Name: "small", Cores: 1, MemoryMiB: 512}}, Block: block}
	p, err := New(entry, provider.Deps{Ownership: testIdentity})
	if err != nil {
		t.Fatal(err)
	}
	return p
}

// TestProxmox_lifecycle: Create, Get until Running with an address, the mark
// read back (its creation time is the instance's, F11), ListByTag lists
// it, Delete, the seed is gone (F13), a second Delete succeeds. With
// PROXMOX_TEST_KEEP the VM is left for inspection after the checks.
func TestProxmox_lifecycle(t *testing.T) {
	h := realHostFromEnv(t)
	p := h.provider(t)
	ud, err := cloudinit.Render(cloudinit.Proxy{Port: 3128, Username: "integration", Password: "integration-test-only"})
	if err != nil {
		t.Fatal(err)
	}
	req := provider.Request{
		OwnerUID: "00000000-0000-4000-8000-000000000001", Owner: provider.ObjectRef{Namespace: "integration", Name: "test"},
		Name: "proxy-integration-test", Zone: "test", MachineType: "small", Image: "test", UserData: provider.NewSensitive(ud),
	}
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Minute)
	defer cancel()

	id := untilDone(ctx, t, "create", func() (provider.ID, error) { return p.Create(ctx, req) })
	node, vmid, name, err := parseID(id)
	if err != nil || node != h.node || name != req.Name {
		t.Fatalf("Create returned %q (%v), want %s/<vmid>/%s", id, err, h.node, req.Name)
	}
	deleted := false
	t.Cleanup(func() {
		if deleted {
			return
		}
		if h.keep {
			t.Logf("PROXMOX_TEST_KEEP: VM %d on %s and seed %s are kept; docs/proxmox.md says how to remove them", vmid, node, p.seedVolid(name))
			return
		}
		dctx, dcancel := context.WithTimeout(context.Background(), 5*time.Minute)
		defer dcancel()
		untilDone(dctx, t, "delete (cleanup)", func() (provider.ID, error) { return "", p.Delete(dctx, id) })
	})

	var inst provider.Instance
	untilDone(ctx, t, "running with an address", func() (provider.ID, error) {
		in, err := p.Get(ctx, id)
		switch {
		case err != nil:
			return "", err
		case in.State != provider.StateRunning || !in.Address.IsValid():
			return "", provider.NewInProgress("waiting for the guest agent's address", 5*time.Second)
		}
		inst = in
		return in.ID, nil
	})
	t.Logf("VM %d runs on %s at %s", vmid, inst.Node, inst.Address)
	if inst.ID != id || inst.Name != req.Name || inst.OwnerUID != req.OwnerUID || inst.Node != node {
		t.Errorf("Get = %+v, want ID %s, name %s, owner %s, node %s", inst, id, req.Name, req.OwnerUID, node)
	}

	cfg, err := p.api.vmConfig(ctx, node, vmid)
	if err != nil {
		t.Fatal(err)
	}
	m, ok := parseMark(cfgStr(cfg, "description"))
	switch {
	case !ok || m.Name != req.Name || m.OwnerUID != req.OwnerUID:
		t.Errorf("mark %+v read back from %q, want name %s and owner %s", m, cfgStr(cfg, "description"), req.Name, req.OwnerUID)
	case m.CreatedAt.IsZero() || !m.CreatedAt.Equal(inst.CreatedAt):
		t.Errorf("mark creation time %s, instance's %s: want them equal and set (F11)", m.CreatedAt, inst.CreatedAt)
	}
	if !hasTag(cfgStr(cfg, "tags")) {
		t.Errorf("tags %q lack %s (F9)", cfgStr(cfg, "tags"), Tag)
	}
	if h.vlanTag != 0 {
		net0 := cfgStr(cfg, "net0")
		if !strings.Contains(","+net0+",", ",tag="+strconv.Itoa(h.vlanTag)+",") || !regexp.MustCompile(`=([0-9A-Fa-f]{2}:){5}[0-9A-Fa-f]{2}`).MatchString(net0) {
			t.Errorf("net0 %q: want tag=%d and its MAC kept", net0, h.vlanTag)
		}
	}

	list, err := p.ListByTag(ctx)
	if err != nil {
		t.Fatal(err)
	}
	listed := false
	for _, in := range list {
		listed = listed || (in.ID == id && in.OwnerUID == req.OwnerUID && in.CreatedAt.Equal(inst.CreatedAt))
	}
	if !listed {
		t.Errorf("ListByTag = %+v, want it to list %s", list, id)
	}

	if h.keep {
		return
	}
	untilDone(ctx, t, "delete", func() (provider.ID, error) { return "", p.Delete(ctx, id) })
	deleted = true
	vols, err := p.api.storageContent(ctx, node, h.isoStorage, "iso")
	if err != nil {
		t.Fatal(err)
	}
	for _, v := range vols {
		if v.VolID == p.seedVolid(name) {
			t.Errorf("seed %s left on %s (F13)", v.VolID, node)
		}
	}
	if _, err := p.Get(ctx, id); !provider.IsNotFound(err) {
		t.Errorf("Get after Delete = %v, want NotFound", err)
	}
	if err := p.Delete(ctx, id); err != nil {
		t.Errorf("second Delete = %v, want success", err)
	}
}

// TestProxmoxCheck_realHost: the Checker's verdict on the host: reachable,
// node online, ISO storage active, template present, and no secret in it.
func TestProxmoxCheck_realHost(t *testing.T) {
	h := realHostFromEnv(t)
	p := h.provider(t)
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	verdicts := p.Check(ctx)
	if len(verdicts) != 1 {
		t.Fatalf("Check = %+v, want one verdict for node %s", verdicts, h.node)
	}
	v := verdicts[0]
	t.Logf("verdict: %+v", v)
	if v.Target != h.node || !v.Healthy || v.Reason != ReasonReachable || v.Latency <= 0 {
		t.Errorf("verdict %+v, want node %s healthy (%s) with its latency", v, h.node, ReasonReachable)
	}
	tok, err := os.ReadFile(h.tokenFile)
	if err != nil {
		t.Fatal(err)
	}
	if _, secret, ok := strings.Cut(strings.TrimSpace(string(tok)), "="); ok && strings.Contains(v.Message, secret) {
		t.Error("the verdict holds the token secret")
	}
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
