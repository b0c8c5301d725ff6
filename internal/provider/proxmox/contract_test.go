package proxmox

import (
	"fmt"
	"maps"
	"net/url"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/egress-proxies/egress-proxies-operator/internal/ownership"
	"github.com/egress-proxies/egress-proxies-operator/internal/ownership/ownershiptest"
	"github.com/egress-proxies/egress-proxies-operator/internal/provider"
	"github.com/egress-proxies/egress-proxies-operator/internal/provider/providertest"
	"github.com/egress-proxies/egress-proxies-operator/internal/testing/pvesim"
)

// TestContract runs the provider contract suite against the simulator.
func TestContract(t *testing.T) {
	providertest.Run(t, func(t *testing.T) providertest.Harness {
		return &contractHarness{h: newHarness(t, nil)}
	})
}

// contractHarness adapts the package's test harness to the contract suite.
type contractHarness struct {
	h       *harness
	foreign int
}

func (c *contractHarness) Provider(*testing.T) provider.Provider { return c.h.provider() }

func (c *contractHarness) Request(_ *testing.T, uid, name string) provider.Request {
	return c.h.request(uid, name)
}

func (c *contractHarness) Secrets() []string { return []string{sentinelSecret, sentinelPassword} }

func (c *contractHarness) MissingID() provider.ID {
	return ID("pve1", DefaultVMIDMax, "contract-missing")
}

// writes counts the write requests the simulator has answered.
func (c *contractHarness) writes() int64 {
	var n int64
	for call, count := range c.h.sim.Counters() {
		if !strings.HasPrefix(call, "GET ") {
			n += count
		}
	}
	return n
}

// Interrupt point n is "n write requests reached the API": a Provider calls
// Create (which is non-blocking) until then and is dropped, as when the
// operator dies.
func (c *contractHarness) Interrupt(t *testing.T, req provider.Request, n int) bool {
	p := c.h.provider()
	start := c.writes()
	for c.writes()-start < int64(n) {
		_, err := p.Create(c.h.ctx, req)
		switch {
		case err == nil:
			return false
		case !provider.IsInProgress(err):
			t.Fatalf("interrupted create at point %d: %v", n, err)
		}
	}
	return true
}

// SetOutage fails every API call with 503, as a pveproxy that does not
// answer behind a load balancer would.
func (c *contractHarness) SetOutage(_ *testing.T, on bool) {
	if on {
		c.h.sim.AddCallFault(pvesim.CallFault{Status: 503, Message: "Service Unavailable"})
		return
	}
	c.h.sim.ClearFaults()
}

// AddForeign clones the template as someone else would: unmarked; with
// the tag but a partial mark (forged); or with the tag and a whole mark of
// this installation for the VM itself, unsigned or signed with another key:
// what a hypervisor user who can edit descriptions and tags writes.
func (c *contractHarness) AddForeign(t *testing.T, kind providertest.Foreign, name string) (provider.ID, bool) {
	c.foreign++
	vmid := 150000 + c.foreign
	c.h.foreignClone(vmid, name)
	m := mark{Installation: testIdentity.Installation(), OwnerUID: "uid-" + string(kind), Name: name, Owner: "ns/p", CreatedAt: time.Now().UTC().Truncate(time.Second)}
	var desc string
	switch kind {
	case providertest.Unmarked:
		return ID("pve1", vmid, name), true
	case providertest.Forged:
		desc = markHeader + "\n" + markName + name + "\n"
	case providertest.Unsigned:
		desc = description(m)
	case providertest.BadSignature:
		forger, err := ownership.NewIdentity(testIdentity.Installation(), []byte("a forger's key of thirty-two b.."))
		if err != nil {
			t.Fatal(err)
		}
		m = newMark(forger, c.h.entry.Name, vmid, m.OwnerUID, m.Name, m.Owner, m.CreatedAt)
		desc = description(m)
	case providertest.Sibling:
		desc = description(newMark(testIdentity, providertest.SiblingEntry, vmid, m.OwnerUID, m.Name, m.Owner, m.CreatedAt))
	default:
		return "", false
	}
	c.setConfig(t, vmid, url.Values{"tags": {Tag}, "description": {desc}})
	return ID("pve1", vmid, name), true
}

func (c *contractHarness) setConfig(t *testing.T, vmid int, form url.Values) {
	t.Helper()
	cl := newClient(c.h.block.APIURL, c.h.block.TokenFile, c.h.block.CAFile, false)
	if err := cl.setConfig(c.h.ctx, "pve1", vmid, form); err != nil {
		t.Fatal(err)
	}
}

// CopyMark clones the template to another VMID of the entry's range, with
// the same name (Proxmox VE allows it), and copies the description (the
// signed mark) and tags of from onto it.
func (c *contractHarness) CopyMark(t *testing.T, from provider.ID) provider.ID {
	_, src, name, err := parseID(from)
	if err != nil {
		t.Fatal(err)
	}
	cfg, ok := c.h.sim.VMConfig(src)
	if !ok {
		t.Fatalf("no VM %d to copy the mark of", src)
	}
	c.foreign++
	vmid := 150000 + c.foreign
	c.h.foreignClone(vmid, name)
	c.setConfig(t, vmid, url.Values{"tags": {cfg["tags"]}, "description": {cfg["description"]}})
	return ID("pve1", vmid, name)
}

// OtherInstallation is a provider of the same entry for another
// installation, with its own key.
func (c *contractHarness) OtherInstallation(t *testing.T) provider.Provider {
	p, err := New(c.h.entry, provider.Deps{Ownership: ownershiptest.Identity("other-installation")})
	if err != nil {
		t.Fatal(err)
	}
	return p
}

func (c *contractHarness) Snapshot(_ *testing.T, id provider.ID) string {
	_, vmid, _, err := parseID(id)
	if err != nil {
		return ""
	}
	cfg, ok := c.h.sim.VMConfig(vmid)
	if !ok {
		return ""
	}
	var b strings.Builder
	for _, k := range slices.Sorted(maps.Keys(cfg)) {
		fmt.Fprintf(&b, "%s=%s;", k, cfg[k])
	}
	return b.String()
}
