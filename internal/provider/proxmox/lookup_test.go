package proxmox

import (
	"testing"

	"github.com/google/go-cmp/cmp"
)

// TestCreateOfANewNameSharesAListingSinceTheFirstCreate (create step 4):
// the name lookup of a name this process has done nothing for is served
// by any cluster-wide listing read since the process was first asked to
// create, however old by the poll interval (F8: only a listing finds a VM
// by its name), so that a create phase reads one listing instead of one
// per poll interval. A VM this process forgot since, and a VMID someone
// took since, make the next lookup read a new one (F4: the clone answers
// for the VMID).
func TestCreateOfANewNameSharesAListingSinceTheFirstCreate(t *testing.T) {
	const all = "GET /cluster/resources"
	h, p, pass := clockedProvider(t)
	listings := func() int64 { return h.sim.Counters()[all] }

	first := h.create(p, h.request("uid-lookup-a", "proxy-lookupa00000001"))
	pass(2 * viewPoll)
	h.sim.ResetCounters()
	h.create(p, h.request("uid-lookup-b", "proxy-lookupb00000001"))
	if diff := cmp.Diff(int64(0), listings()); diff != "" {
		t.Errorf("listings read by a create two poll intervals after the first (-want +got): the listing read since the first create serves a new name:\n%s", diff)
	}

	h.deleteAll(p, first)
	pass(2 * viewPoll)
	h.sim.ResetCounters()
	h.create(p, h.request("uid-lookup-c", "proxy-lookupc00000001"))
	if diff := cmp.Diff(int64(1), listings()); diff != "" {
		t.Errorf("listings read by a create after this process destroyed a VM (-want +got): the kept listing may show it still:\n%s", diff)
	}

	req := h.request("uid-lookup-d", "proxy-lookupd00000001")
	candidate := p.vmidFor(req.OwnerUID, req.Name)
	h.foreignClone(candidate, "someone-elses")
	h.sim.ResetCounters()
	id := h.create(p, req)
	_, vmid, _, _ := parseID(id)
	if vmid == candidate {
		t.Errorf("created at VMID %d, which someone else took after the listing was read", vmid)
	}
	if diff := cmp.Diff(int64(1), listings()); diff != "" {
		t.Errorf("listings read by a create whose first VMID was taken since the kept listing (-want +got): F4 makes the next call read a new one:\n%s", diff)
	}
	if got := h.vmsNamed("someone-elses"); len(got) != 1 || got[0].VMID != candidate {
		t.Errorf("the other VM = %+v, want it untouched at %d", got, candidate)
	}
}
