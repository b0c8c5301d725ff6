package proxmox

import (
	"fmt"
	"net/http"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"

	"github.com/egress-proxies/egress-proxies-operator/internal/nocloud"
	"github.com/egress-proxies/egress-proxies-operator/internal/provider"
)

// createUntil calls Create until it answers InProgress with a message that
// holds step, and fails the test if Create finishes first.
func (h *harness) createUntil(p *Provider, req provider.Request, step string) {
	h.t.Helper()
	h.eventually("create "+req.Name+" reaching "+step, func() bool {
		id, err := p.Create(h.ctx, req)
		switch {
		case err == nil:
			h.t.Fatalf("create returned %s before reaching %q", id, step)
		case !provider.IsInProgress(err):
			h.t.Fatalf("create: %v", err)
		}
		return strings.Contains(err.Error(), step)
	})
}

// finalizerDelete does what the Proxy reconciler does for a Proxy deleted
// before its instance ID reached the status: it deletes every instance
// ListByTag reports for the owner, each until Delete returns nil, and then
// lets go (the finalizer is released).
func (h *harness) finalizerDelete(p *Provider, ownerUID string) {
	h.t.Helper()
	for _, id := range h.instancesOf(p, ownerUID) {
		h.deleteAll(p, id)
	}
}

// instancesOf are the IDs ListByTag reports for an owner.
func (h *harness) instancesOf(p *Provider, ownerUID string) []provider.ID {
	h.t.Helper()
	insts, err := p.ListByTag(h.ctx)
	if err != nil {
		h.t.Fatalf("ListByTag: %v", err)
	}
	var ids []provider.ID
	for _, in := range insts {
		if in.OwnerUID == ownerUID {
			ids = append(ids, in.ID)
		}
	}
	return ids
}

// gcPass does what a garbage collection pass does once the grace period is
// over: it deletes every listed instance whose owner is not alive.
func (h *harness) gcPass(p *Provider, alive ...string) {
	h.t.Helper()
	insts, err := p.ListByTag(h.ctx)
	if err != nil {
		h.t.Fatalf("ListByTag: %v", err)
	}
	for _, in := range insts {
		if !strings.Contains(strings.Join(alive, ","), in.OwnerUID) {
			h.deleteAll(p, in.ID)
		}
	}
}

// settle waits until no VM is locked or nameless: every clone has ended.
func (h *harness) settle() {
	h.t.Helper()
	h.eventually("every clone ended", func() bool {
		for _, v := range h.sim.VMs() {
			if v.Lock != "" || v.Name == "" {
				return false
			}
		}
		return true
	})
}

// leftovers lists what is left of an instance on the simulator: VMs with
// its name and its seed on any node.
func (h *harness) leftovers(name string) []string {
	var out []string
	for _, v := range h.vmsNamed(name) {
		out = append(out, "VM "+v.Name)
	}
	for _, v := range h.sim.Volumes("iso") {
		if strings.Contains(v.VolID, name) {
			out = append(out, "volume "+v.VolID+" on "+v.Node)
		}
	}
	return out
}

// TestDeleteDuringCreateLeavesNothing (#12 item 5): a Proxy deleted at any
// step of its create, before its instance ID was recorded, leaves neither
// VM nor seed once the finalizer let go and a garbage collection pass ran.
// The clone's VM is listed without a name while the clone runs (F8) and
// without the tag until the config write (F9), so neither the finalizer's
// ListByTag nor garbage collection found it when they went by the tag
// alone; the delete itself waits for the task the create started (F3: the
// start queues behind the clone's lock).
func TestDeleteDuringCreateLeavesNothing(t *testing.T) {
	for _, tc := range []struct {
		name string
		// step is the InProgress message of the create step the delete
		// arrives at.
		step string
		// restart: the operator restarts between the create and the delete,
		// so only what the API shows is known.
		restart bool
	}{
		{name: "while cloning", step: "cloning"},
		{name: "while uploading the seed", step: "uploading the seed"},
		{name: "while starting", step: "starting"},
		{name: "while cloning, across a restart: garbage collection finds the untagged VM", step: "cloning", restart: true},
		{name: "while uploading, across a restart", step: "uploading the seed", restart: true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			h := newHarnessYAML(t, "timings: {clone: 300s, upload: 300s, start: 300s}\n", nil)
			p := h.provider()
			req := h.request("uid-doomed", "proxy-doomed0000000001")
			h.createUntil(p, req, tc.step)
			if tc.restart {
				p = h.provider()
			}
			h.finalizerDelete(p, req.OwnerUID)
			h.settle()
			h.gcPass(p)
			h.settle()
			if diff := cmp.Diff([]string(nil), h.leftovers(req.Name)); diff != "" {
				t.Errorf("left after the delete and a GC pass (-want +got):\n%s", diff)
			}
		})
	}
}

// TestCreateMakesAnotherVMWhenOursIsDestroyedMidway: a VM destroyed behind
// the provider's back between its clone and its config write (by an
// administrator, or by the garbage collector of an operator that does not
// know its Proxy) makes the config write answer F2's missing-VM error. Create
// reports that as Transient, never NotFound (the provider contract: the
// operator retries a Transient create), and the next calls make one new VM.
// It was NotFound, and a caller that stops on errors other than Transient
// and InProgress gave up (CI run of 2026-12-06,
// TestTwoInstallationsOnOneClusterNeverCollectEachOther).
func TestCreateMakesAnotherVMWhenOursIsDestroyedMidway(t *testing.T) {
	h := newHarness(t, nil)
	p := h.provider()
	req := h.request("uid-midway", "proxy-midway000000000001")
	h.createUntil(p, req, "uploading the seed")
	vms := h.vmsNamed(req.Name)
	if len(vms) != 1 {
		t.Fatalf("VMs named %s after the clone: %v, want one", req.Name, vms)
	}
	h.destroyBehindOurBack(vms[0].Node, vms[0].VMID)

	var err error
	h.eventually("create after the destroy answers something other than InProgress", func() bool {
		_, err = p.Create(h.ctx, req)
		return !provider.IsInProgress(err)
	})
	if !provider.IsTransient(err) || !strings.Contains(fmt.Sprint(err), "destroyed while it was being made") {
		t.Fatalf("create of a VM destroyed midway: %v (class %s), want a Transient error that says the VM was destroyed", err, provider.ClassOf(err))
	}
	id := h.create(p, req)
	h.running(p, id)
	if got := h.vmsNamed(req.Name); len(got) != 1 {
		t.Errorf("VMs named %s after the second create: %v, want one", req.Name, got)
	}
}

// TestListByTagFindsAnUntaggedVMOfOurs: a VM of ours stopped between the
// clone and the config write carries the mark but not the tag; ListByTag
// reports it, and never a foreign VM in the VMID range (F10: the mark is in
// the description).
func TestListByTagFindsAnUntaggedVMOfOurs(t *testing.T) {
	h := newHarnessYAML(t, "timings: {upload: 300s}\n", nil)
	p := h.provider()
	req := h.request("uid-untagged", "proxy-untagged00000001")
	h.createUntil(p, req, "uploading the seed")
	lo, _ := h.block.VMIDs()
	h.foreignClone(lo, "someone-else")
	p = h.provider() // a restarted operator: nothing known but the API
	insts, err := p.ListByTag(h.ctx)
	if err != nil {
		t.Fatal(err)
	}
	var got []string
	for _, in := range insts {
		got = append(got, in.Name+" "+in.OwnerUID)
	}
	if diff := cmp.Diff([]string{req.Name + " " + req.OwnerUID}, got); diff != "" {
		t.Errorf("ListByTag (-want +got):\n%s", diff)
	}
}

// seedVolumes lists the seed volumes of name on the simulator, any node.
func (h *harness) seedVolumes(name string) []string {
	var out []string
	for _, v := range h.sim.Volumes("iso") {
		if v.VolID == h.block.ISOStorage+":iso/"+h.seedFile(name) {
			out = append(out, v.VolID+" on "+v.Node)
		}
	}
	return out
}

// TestSeedIsRemovedOnceTheGuestIsUp (#12 item 6): once the agent reports an
// address the guest has read its seed (cloud-init reads it before the
// network and the agent, and caches it), so the CD-ROM is emptied and the
// seed, which holds the proxy password, deleted. Delete then has no seed to
// delete, and a restarted operator does not remove it again.
func TestSeedIsRemovedOnceTheGuestIsUp(t *testing.T) {
	h := newHarness(t, nil)
	p := h.provider()
	req := h.request("uid-consumed", "proxy-consumed00000001")
	id := h.create(p, req)
	_, vmid, _, _ := parseID(id)
	if len(h.seedVolumes(req.Name)) == 0 {
		t.Fatal("no seed before the guest is up: the test cannot tell removal from absence")
	}
	h.running(p, id)
	h.eventually("the seed deleted", func() bool { return len(h.seedVolumes(req.Name)) == 0 })
	cfg, _ := h.sim.VMConfig(vmid)
	if diff := cmp.Diff("none,media=cdrom", cfg["ide2"]); diff != "" {
		t.Errorf("ide2 after Ready (-want +got):\n%s", diff)
	}
	// The guest keeps serving: it read its seed at boot.
	if _, ok := h.runner.Addresses()[vmid]; !ok {
		t.Error("the guest stopped serving when its seed went")
	}

	// A restarted operator reads the config once (for the mark), sees the
	// empty CD-ROM and removes nothing.
	restarted := h.provider()
	h.sim.ResetCounters()
	for range 2 {
		if _, err := restarted.Get(h.ctx, id); err != nil {
			t.Fatal(err)
		}
	}
	for call, n := range h.sim.Counters() {
		if strings.HasPrefix(call, "PUT ") || strings.HasPrefix(call, "DELETE ") {
			t.Errorf("a restarted operator's Get called %s %d times", call, n)
		}
	}
	h.deleteAll(p, id)
}

// TestDeleteRemovesASeedWhoseRemovalAfterBootFailed: the Get that removes
// the seed once the guest is up does not wait for the delete task; when that
// task fails, the seed (with the proxy's password) must still go with the
// VM's Delete, not wait for the sweep's grace. Found by the chaos run.
func TestDeleteRemovesASeedWhoseRemovalAfterBootFailed(t *testing.T) {
	h := newHarness(t, nil)
	p := h.provider()
	req := h.request("uid-seed-task-fails", "proxy-seedfail00000001")
	id := h.create(p, req)
	h.sim.FailTasks("imgdel", "storage is busy", 1)
	h.running(p, id)
	_, vmid, _, _ := parseID(id)
	h.eventually("the CD-ROM emptied", func() bool {
		cfg, _ := h.sim.VMConfig(vmid)
		return cfg["ide2"] == "none,media=cdrom"
	})
	h.eventually("the seed's delete sent after boot", func() bool {
		for _, c := range h.sim.Mutations() {
			if c.Method == http.MethodDelete && strings.Contains(c.Route, "/content/") {
				return true
			}
		}
		return false
	})
	if len(h.seedVolumes(req.Name)) == 0 {
		t.Fatal("the seed went although its delete task failed: the test cannot show that Delete removes it")
	}
	h.deleteAll(p, id)
	if left := h.seedVolumes(req.Name); len(left) != 0 {
		t.Errorf("Delete left the seed whose removal after boot failed: %v", left)
	}
}

// uploadISO puts an ISO named file on the seed storage of pve1, as a crash
// or a person would leave it.
func (h *harness) uploadISO(file string) {
	h.t.Helper()
	c := newClient(h.block.APIURL, h.block.TokenFile, h.block.CAFile, false)
	upid, err := c.upload(h.ctx, "pve1", h.block.ISOStorage, file, nocloud.Seed{UserData: []byte("#cloud-config\n"), MetaData: nocloud.MetaData("x", "x")})
	if err != nil {
		h.t.Fatal(err)
	}
	h.waitTask(c, "pve1", upid)
}

// isoFiles lists the ISO file names on the seed storage, any node.
func (h *harness) isoFiles() []string {
	var out []string
	for _, v := range h.sim.Volumes("iso") {
		out = append(out, strings.TrimPrefix(v.VolID, h.block.ISOStorage+":iso/"))
	}
	slices.Sort(out)
	return out
}

// TestSweepRemovesOnlyLeftoverSeedsOfOurs (#12 item 6): garbage
// collection's sweep deletes the seeds of ours that no VM needs (the VM is
// gone, or runs with an empty CD-ROM: the delete after the detach never
// happened), once they are older than the grace period, and nothing else:
// not a seed whose VM still holds it, not a foreign ISO, not a young seed,
// not an ISO named like a seed without this installation's and entry's
// token in its name.
func TestSweepRemovesOnlyLeftoverSeedsOfOurs(t *testing.T) {
	h := newHarness(t, nil)
	p := h.provider()
	// A running VM whose seed was consumed, and then put back as a crash
	// between the detach and the delete would have left it.
	consumed := h.request("uid-consumed", "proxy-consumed00000001")
	h.running(p, h.create(p, consumed))
	h.eventually("the seed consumed", func() bool { return len(h.seedVolumes(consumed.Name)) == 0 })
	h.uploadISO(h.seedFile(consumed.Name))
	// A running VM that still holds its seed (no Get saw its address yet).
	holding := h.request("uid-holding", "proxy-holding000000001")
	h.create(p, holding)
	// The seed of a VM that is gone; a foreign ISO; ISOs named like a seed
	// of a VM that is gone but without our token, with a made-up one, and
	// with another entry's (two entries that share the storage).
	h.uploadISO(h.seedFile("proxy-orphan0000000001"))
	h.uploadISO("debian-13-netinst.iso")
	h.uploadISO("Not_Ours-seed.iso")
	unsigned, forged := "proxy-orphan0000000002-seed.iso", "proxy-orphan0000000003-abcdefghijklmnop-seed.iso"
	neighbours := testIdentity.SignedName("seed", "other-"+h.entry.Name, "proxy-orphan0000000004") + seedSuffix
	for _, f := range []string{unsigned, forged, neighbours} {
		h.uploadISO(f)
	}
	before := h.isoFiles()

	// Within the grace period nothing goes: a young seed may belong to a
	// create in progress.
	sweeper := h.provider() // garbage collection after a restart: only the API is known
	if n, err := sweeper.Sweep(h.ctx); err != nil || n != 0 {
		t.Errorf("Sweep within the grace period = %d, %v; want 0, nil", n, err)
	}
	if diff := cmp.Diff(before, h.isoFiles()); diff != "" {
		t.Errorf("ISOs after a sweep within the grace period (-want +got):\n%s", diff)
	}

	late, err := New(h.entry, provider.Deps{Ownership: testIdentity, Now: func() time.Time { return time.Now().Add(seedGrace + time.Minute) }})
	if err != nil {
		t.Fatal(err)
	}
	n, err := late.Sweep(h.ctx)
	if err != nil || n != 2 {
		t.Errorf("Sweep = %d, %v; want 2, nil", n, err)
	}
	h.eventually("the swept seeds deleted", func() bool { return len(h.isoFiles()) == len(before)-2 })
	want := []string{"Not_Ours-seed.iso", "debian-13-netinst.iso", h.seedFile(holding.Name), unsigned, forged, neighbours}
	slices.Sort(want)
	if diff := cmp.Diff(want, h.isoFiles()); diff != "" {
		t.Errorf("ISOs after the sweep (-want +got):\n%s", diff)
	}
}

// TestLifecycleCallsOfItsOwn (#14 item 1): the calls a lifecycle makes for
// itself, apart from the shared listings and the task-status polls (both
// depend on pace): one clone, one upload, one config write, one start, the
// seed's removal once the guest is up (a config write and a volume delete),
// then one stop, the seed's delete again (idempotent, F13) and one destroy; the only config read is the template's,
// and neither the VM's status nor the ISO storage is read.
func TestLifecycleCallsOfItsOwn(t *testing.T) {
	h := newHarness(t, nil)
	p := h.provider()
	req := h.request("uid-calls", "proxy-calls00000000001")
	h.sim.ResetCounters()
	id := h.create(p, req)
	h.running(p, id)
	h.eventually("the seed consumed", func() bool { return len(h.seedVolumes(req.Name)) == 0 })
	h.deleteAll(p, id)
	got := map[string]int64{}
	for call, n := range h.sim.Counters() {
		switch call {
		case "GET /cluster/resources", "GET /nodes/{node}/qemu", "GET /nodes/{node}/tasks", "GET /nodes/{node}/tasks/{upid}/status",
			"GET /nodes/{node}/qemu/{vmid}/agent/network-get-interfaces":
		default:
			got[call] = n
		}
	}
	want := map[string]int64{
		"GET /nodes/{node}/qemu/{vmid}/config":                    1, // the template's
		"POST /nodes/{node}/qemu/{vmid}/clone":                    1,
		"POST /nodes/{node}/storage/{storage}/upload":             1,
		"PUT /nodes/{node}/qemu/{vmid}/config":                    2, // the config, then the empty CD-ROM
		"POST /nodes/{node}/qemu/{vmid}/status/start":             1,
		"DELETE /nodes/{node}/storage/{storage}/content/{volume}": 2, // when the guest is up, and again on delete (its task was not followed)
		"POST /nodes/{node}/qemu/{vmid}/status/stop":              1,
		"DELETE /nodes/{node}/qemu/{vmid}":                        1,
	}
	if diff := cmp.Diff(want, got); diff != "" {
		t.Errorf("calls of one lifecycle, shared listings and task polls aside (-want +got):\n%s", diff)
	}
}

// roundRobin calls step for every item in turn until each returned true
// once, as the operator's workers interleave the Proxies in flight.
func (h *harness) roundRobin(n int, what string, step func(i int) bool) {
	h.t.Helper()
	finished := make([]bool, n)
	h.eventually(what, func() bool {
		all := true
		for i := range n {
			if !finished[i] {
				finished[i] = step(i)
				all = all && finished[i]
			}
		}
		return all
	})
}

// TestCreatesAndDeletesInFlightShareTheListing (#14 item 1): the creates in
// flight share one cluster listing (any listing newer than what each has
// done serves), and so do the deletes in flight, so the listing bytes a
// lifecycle decodes do not grow with the number of proxies; the template's
// config is read once for all the clones of a poll interval, and their
// tasks are followed in the nodes' task lists (one read serves every task
// in flight on a node). Each create goes on from what it saw of its own
// tasks, without a listing.
func TestCreatesAndDeletesInFlightShareTheListing(t *testing.T) {
	const proxies = 8
	// A poll interval longer than the test: no listing ages out.
	h := newHarness(t, func(b *Block) { b.Budgets.PollInterval = durationPtr(time.Hour) })
	p := h.provider()
	reqs := make([]provider.Request, proxies)
	ids := make([]provider.ID, proxies)
	for i := range reqs {
		reqs[i] = h.request(fmt.Sprintf("uid-shared-%d", i), fmt.Sprintf("proxy-shared%010d", i))
	}
	h.sim.ResetCounters()
	h.roundRobin(proxies, "creates", func(i int) bool {
		id, err := p.Create(h.ctx, reqs[i])
		if err != nil && !provider.IsInProgress(err) {
			t.Fatalf("create: %v", err)
		}
		ids[i] = id
		return err == nil
	})
	c := h.sim.Counters()
	if got := c["GET /cluster/resources"]; got != 1 {
		t.Errorf("%d cluster listings for %d creates in flight, want 1 shared", got, proxies)
	}
	if got := c["GET /nodes/{node}/qemu/{vmid}/config"]; got != 1 {
		t.Errorf("%d config reads for %d clones of one template, want 1", got, proxies)
	}
	// Their tasks are followed in the nodes' task lists, shared too.
	if got := c["GET /nodes/{node}/tasks/{upid}/status"]; got != 0 {
		t.Errorf("%d reads of single tasks' status, want them all answered by the shared task lists (%d reads)", got, c["GET /nodes/{node}/tasks"])
	}
	t.Logf("creates: %d task lists for %d proxies' clones, uploads and starts", c["GET /nodes/{node}/tasks"], proxies)
	h.sim.ResetCounters()
	h.roundRobin(proxies, "deletes", func(i int) bool {
		err := p.Delete(h.ctx, ids[i])
		if err != nil && !provider.IsInProgress(err) {
			t.Fatalf("delete: %v", err)
		}
		return err == nil
	})
	c = h.sim.Counters()
	if got := c["GET /cluster/resources"]; got != 1 {
		t.Errorf("%d cluster listings for %d deletes in flight, want 1 shared", got, proxies)
	}
	if got := c["GET /nodes/{node}/tasks/{upid}/status"]; got != 0 {
		t.Errorf("%d reads of single tasks' status, want them all answered by the shared task lists (%d reads)", got, c["GET /nodes/{node}/tasks"])
	}
	if vms := h.vmsNamed(reqs[0].Name); len(vms) != 0 {
		t.Errorf("VMs left: %+v", vms)
	}
}
