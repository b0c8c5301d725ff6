package proxmox

import (
	"fmt"
	"maps"
	"net/url"
	"slices"
	"strings"
	"testing"

	"github.com/egress-proxies/egress-proxies-operator/internal/provider"
	"github.com/egress-proxies/egress-proxies-operator/internal/provider/providertest"
	"github.com/egress-proxies/egress-proxies-operator/internal/pvesim"
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

// AddForeign clones the template as someone else would: unmarked, or with
// the tag but no mark in the description (the forged form the mark format
// allows: the tag alone proves nothing).
func (c *contractHarness) AddForeign(t *testing.T, kind providertest.Foreign, name string) (provider.ID, bool) {
	c.foreign++
	vmid := 150000 + c.foreign
	c.h.foreignClone(vmid, name)
	if kind == providertest.Forged {
		cl := newClient(c.h.block.APIURL, c.h.block.TokenFile, c.h.block.CAFile, false)
		if err := cl.setConfig(c.h.ctx, "pve1", vmid, url.Values{"tags": {Tag}, "description": {markHeader + "\n" + markName + name + "\n"}}); err != nil {
			t.Fatal(err)
		}
	}
	return ID("pve1", vmid, name), true
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
