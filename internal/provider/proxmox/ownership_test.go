package proxmox

import (
	"testing"

	"github.com/google/go-cmp/cmp"

	"github.com/egress-proxies/egress-proxies-operator/internal/provider"
)

// TestListByTagStaysInsideTheEntrysRangeAndNodes: a VM of this installation
// and entry, validly signed, is listed (and so collected) only while it is
// inside the entry's VMID range and on one of its nodes: another entry's or
// installation's range on the same cluster is not this entry's ground.
func TestListByTagStaysInsideTheEntrysRangeAndNodes(t *testing.T) {
	h := newHarness(t, nil)
	id := h.create(h.provider(), h.request("uid-range", "range-1"))
	_, vmid, _, err := parseID(id)
	if err != nil {
		t.Fatal(err)
	}
	for _, c := range []struct {
		name, reason string
		mod          func(b *Block)
		want         []provider.ID
	}{
		{"the entry that made it", "its own VM, in range, on its node", func(*Block) {}, []provider.ID{id}},
		{"a range below its VMID", "the VMID is outside the range", func(b *Block) { b.VMIDRange = &VMIDRange{Min: 100, Max: vmid - 1} }, nil},
		{"a range above its VMID", "the VMID is outside the range", func(b *Block) { b.VMIDRange = &VMIDRange{Min: vmid + 1, Max: vmid + 1000} }, nil},
		{"another node only", "its node is not the entry's", func(b *Block) { b.Zones = map[string]Zone{"zone-a": {Nodes: []string{"pve2"}}} }, nil},
	} {
		t.Run(c.name, func(t *testing.T) {
			b := *h.block
			c.mod(&b)
			e := *h.entry
			e.Block = &b
			p, err := New(&e, provider.Deps{Ownership: testIdentity})
			if err != nil {
				t.Fatal(err)
			}
			list, err := p.ListByTag(h.ctx)
			if err != nil {
				t.Fatal(err)
			}
			var got []provider.ID
			for _, in := range list {
				got = append(got, in.ID)
			}
			if diff := cmp.Diff(c.want, got); diff != "" {
				t.Errorf("%s: listed (-want +got):\n%s", c.reason, diff)
			}
		})
	}
}
