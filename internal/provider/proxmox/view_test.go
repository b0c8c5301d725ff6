package proxmox

import (
	"fmt"
	"net/http"
	"net/url"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"

	"github.com/egress-proxies/egress-proxies-operator/internal/provider"
	"github.com/egress-proxies/egress-proxies-operator/internal/testing/pvesim"
)

// viewPoll is the poll interval of the listing tests: far longer than a test
// runs, so that only the test's clock (moved by pass) ages a listing.
const viewPoll = time.Hour

// clockedProvider builds a provider on the harness's entry (with viewPoll
// as its poll interval) whose clock runs ahead of the wall clock by what
// the returned pass has added.
func clockedProvider(t *testing.T) (*harness, *Provider, func(time.Duration)) {
	t.Helper()
	h := newHarness(t, func(b *Block) { b.Budgets.PollInterval = durationPtr(viewPoll) })
	var offset atomic.Int64
	p, err := New(h.entry, provider.Deps{Ownership: testIdentity, Now: func() time.Time { return time.Now().Add(time.Duration(offset.Load())) }})
	if err != nil {
		t.Fatal(err)
	}
	return h, p, func(d time.Duration) { offset.Add(int64(d)) }
}

// runningOnClock is harness.running for a clocked provider: each look comes
// a poll interval after the previous one, so that it reads a new listing.
func (h *harness) runningOnClock(p *Provider, pass func(time.Duration), id provider.ID) provider.Instance {
	h.t.Helper()
	var inst provider.Instance
	h.eventually("running "+string(id), func() bool {
		pass(2 * viewPoll)
		got, err := p.Get(h.ctx, id)
		if err != nil && !provider.IsTransient(err) {
			h.t.Fatalf("get: %v", err)
		}
		inst = got
		return err == nil && got.State == provider.StateRunning && got.Address.IsValid()
	})
	return inst
}

// vmTask runs a power task on a VM through the API, behind the provider's
// back, and waits for it.
func (h *harness) vmTask(node string, vmid int, path string) {
	h.t.Helper()
	c := newClient(h.block.APIURL, h.block.TokenFile, h.block.CAFile, false)
	upid, err := c.task(h.ctx, call{name: "test", method: http.MethodPost, path: vmPath(node, vmid) + path, node: node, vmid: vmid, form: url.Values{}})
	if err != nil {
		h.t.Fatal(err)
	}
	h.waitTask(c, node, upid)
}

// pastThePauseWindow moves the clock past the pause window, so that the
// VMs made so far are in the steady state (not changed by this process
// within the window) and the next Get of a running VM reads its node's
// listing anew.
func pastThePauseWindow(pass func(time.Duration)) { pass((PauseViewIntervals + 1) * viewPoll) }

// TestListingServesEveryGetWithinThePollInterval: within one poll
// interval, every Get of the steady state, concurrent or one after the
// other, of different VMs or of the same one, is served by one read: the
// node's view when the one kept is older than the pause window (it answers
// everything), the cluster-wide listing otherwise, with the qmpstatus
// (F14) from the view of the window. Not a listing per Get, not a status
// read. That is what makes the steady state cost one listing per poll
// interval (and one view per node per pause window) whatever the number of
// Proxies.
func TestListingServesEveryGetWithinThePollInterval(t *testing.T) {
	const vms = 3
	h, p, pass := clockedProvider(t)
	ids := make([]provider.ID, vms)
	addrs := map[provider.ID]string{}
	for i := range vms {
		ids[i] = h.create(p, h.request("uid-view-"+strconv.Itoa(i), fmt.Sprintf("proxy-view%012d", i)))
	}
	for _, id := range ids {
		addrs[id] = h.runningOnClock(p, pass, id).Address.String()
	}
	pastThePauseWindow(pass)
	listing := map[string]int64{"GET /cluster/resources": 1}
	view := map[string]int64{"GET /nodes/{node}/qemu": 1}
	for _, tc := range []struct {
		name, reason string
		pass         time.Duration // before the Gets
		concurrent   bool
		rounds       int // Gets of each VM
		want         map[string]int64
	}{
		{"past the pause window", "the node's view is older than the window: the first Get reads it, which answers everything, and the others find it kept", 0, false, 1, view},
		{"a new poll interval, each VM once", "the first Get reads the cluster-wide listing, and the node's view of the window still gives the qmpstatus", 2 * viewPoll, false, 1, listing},
		{"a new poll interval, each VM five times", "a Get of a VM already judged from the listing is served by it too (no read per Get of the same VM)", 2 * viewPoll, false, 5, listing},
		{"a new poll interval, each VM four times at once", "Gets that overlap share the one read in flight, the later ones find it kept", 2 * viewPoll, true, 4, listing},
		{"past the pause window again, at once", "overlapping Gets share the node's read in flight", (PauseViewIntervals + 1) * viewPoll, true, 4, view},
	} {
		t.Run(tc.name, func(t *testing.T) {
			pass(tc.pass)
			h.sim.ResetCounters()
			get := func(id provider.ID) string {
				inst, err := p.Get(h.ctx, id)
				if err != nil {
					return err.Error()
				}
				return fmt.Sprintf("%s %s", inst.State, inst.Address)
			}
			var mu sync.Mutex
			got := map[provider.ID][]string{}
			var wg sync.WaitGroup
			for range tc.rounds {
				for _, id := range ids {
					if !tc.concurrent {
						got[id] = append(got[id], get(id))
						continue
					}
					wg.Go(func() {
						s := get(id)
						mu.Lock()
						got[id] = append(got[id], s)
						mu.Unlock()
					})
				}
			}
			wg.Wait()
			want := map[provider.ID][]string{}
			for _, id := range ids {
				for range tc.rounds {
					want[id] = append(want[id], string(provider.StateRunning)+" "+addrs[id])
				}
			}
			if diff := cmp.Diff(want, got); diff != "" {
				t.Errorf("Gets (-want +got):\n%s", diff)
			}
			if diff := cmp.Diff(tc.want, h.sim.Counters()); diff != "" {
				t.Errorf("calls of %d Gets of %d VMs in one poll interval (-want +got) (%s):\n%s", tc.rounds*vms, vms, tc.reason, diff)
			}
		})
	}

	// A node listing that fails is not kept: that Get reads the
	// cluster-wide listing, then the node again for the qmpstatus (F14),
	// and the others share that second read.
	t.Run("failed node listing", func(t *testing.T) {
		pastThePauseWindow(pass)
		h.sim.ResetCounters()
		h.sim.FailNext(http.MethodGet, "/nodes/{node}/qemu", 1, http.StatusInternalServerError, "node listing broken")
		for _, id := range ids {
			if inst, err := p.Get(h.ctx, id); err != nil || inst.State != provider.StateRunning {
				t.Errorf("Get %s after a failed node listing = %+v, %v; want Running", id, inst, err)
			}
		}
		want := map[string]int64{"GET /cluster/resources": 1, "GET /nodes/{node}/qemu": 2}
		if diff := cmp.Diff(want, h.sim.Counters()); diff != "" {
			t.Errorf("calls after a failed node listing (-want +got):\n%s", diff)
		}
	})
}

// TestGetNoticesAChangeBehindTheOperatorsBack: a VM stopped or destroyed
// by someone else is reported so by every Get from one poll interval after
// the change on (the cluster-wide listing shows it), and a paused one from
// one pause window after the pause on (only its node's listing shows it,
// F14); until then the listings kept from before the change serve the Gets
// that come sooner, with no call of their own.
func TestGetNoticesAChangeBehindTheOperatorsBack(t *testing.T) {
	h, p, pass := clockedProvider(t)
	for i, tc := range []struct {
		name, reason string
		change       func(node string, vmid int)
		within       time.Duration // after the change
		want         string
	}{
		{"stopped", "F14: a stopped VM is listed stopped", func(node string, vmid int) { h.vmTask(node, vmid, "/status/stop") },
			viewPoll, string(provider.StateStopped)},
		{"destroyed", "F2: gone from the cluster-wide listing", func(node string, vmid int) { h.destroyBehindOurBack(node, vmid) },
			viewPoll, "NotFound"},
		{"paused", "F14: a paused VM is listed running, with qmpstatus paused in its node's listing (full=1)", func(node string, vmid int) { h.vmTask(node, vmid, "/status/suspend") },
			PauseViewIntervals * viewPoll, string(provider.StateStopped)},
	} {
		t.Run(tc.name, func(t *testing.T) {
			id := h.create(p, h.request("uid-back-"+strconv.Itoa(i), fmt.Sprintf("proxy-back%012d", i)))
			node, vmid, _, _ := parseID(id)
			ready := h.runningOnClock(p, pass, id)
			pastThePauseWindow(pass)
			h.runningOnClock(p, pass, id) // both listings read, and kept
			state := func() string {
				t.Helper()
				inst, err := p.Get(h.ctx, id)
				switch {
				case provider.IsNotFound(err):
					return "NotFound"
				case err != nil:
					t.Fatalf("Get: %v", err)
				}
				return string(inst.State)
			}
			tc.change(node, vmid)
			changedAt := p.now()
			h.sim.ResetCounters()
			pass(viewPoll / 2)
			if got := state(); got != string(provider.StateRunning) {
				t.Errorf("within the poll interval: %s, want Running from the kept listings (%s)", got, ready.Address)
			}
			if diff := cmp.Diff(map[string]int64{}, h.sim.Counters()); diff != "" {
				t.Errorf("calls of a Get within the poll interval (-want +got):\n%s", diff)
			}
			pass(changedAt.Add(tc.within).Sub(p.now()))
			if got := state(); got != tc.want {
				t.Errorf("%s after the change: %s, want %s (%s)", tc.within, got, tc.want, tc.reason)
			}
		})
	}
}

// TestGetIsNotJudgedFromListingsOlderThanTheOperatorsOwnWrite: after this
// process started, stopped or created a VM, a Get is never judged from a
// listing read before that write, however fresh it is by the poll
// interval: it says Provisioning until a newer listing shows the VM. Judged
// from the old listings, a VM this process just started would be Stopped
// (and replaced), a VM it is deleting would be Running.
func TestGetIsNotJudgedFromListingsOlderThanTheOperatorsOwnWrite(t *testing.T) {
	h, p, pass := clockedProvider(t)
	other := h.create(p, h.request("uid-own-other", "proxy-ownother0000001"))
	h.runningOnClock(p, pass, other)
	// readView starts a new poll interval with a look at other, and with
	// every node's view read in it.
	readView := func() {
		t.Helper()
		pass(2 * viewPoll)
		if _, err := p.Get(h.ctx, other); err != nil {
			t.Fatal(err)
		}
		for _, node := range p.block.Nodes() {
			if _, _, err := p.nodeListing(h.ctx, node, p.now().Add(-viewPoll)); err != nil {
				t.Fatal(err)
			}
		}
	}
	for _, tc := range []struct {
		name, reason string
		// write does the operator's own write, with the listings
		// read before it, and returns the VM's ID.
		write func() provider.ID
		calls map[string]int64 // of the Get after the write; nil: not counted
	}{
		{"own start", "the listing (read after the config write, before the start) shows the VM stopped", func() provider.ID {
			req := h.request("uid-own-start", "proxy-ownstart0000001")
			var id provider.ID
			h.eventually("create "+req.Name, func() bool {
				got, err := p.Create(h.ctx, req)
				switch {
				case err == nil:
					id = got
					return true
				case !provider.IsInProgress(err):
					t.Fatalf("create: %v", err)
				case !strings.HasPrefix(err.Error(), "starting VM"):
					readView() // the last one before the start task
				}
				return false
			})
			return id
		}, map[string]int64{}},
		{"own create", "the listing (read before the clone) does not show the VM at all", func() provider.ID {
			readView()
			return h.create(p, h.request("uid-own-create", "proxy-owncreate000001"))
		}, map[string]int64{}},
		{"own stop", "the node's listing (read before Delete's stop) shows the VM running", func() provider.ID {
			id := h.create(p, h.request("uid-own-stop", "proxy-ownstop00000001"))
			h.runningOnClock(p, pass, id)
			node, _, _, _ := parseID(id)
			if _, _, err := p.nodeListing(h.ctx, node, p.now()); err != nil {
				t.Fatal(err)
			}
			if err := p.Delete(h.ctx, id); !provider.IsInProgress(err) || !strings.HasPrefix(err.Error(), "stopping VM") {
				t.Fatalf("Delete = %v, want InProgress stopping the VM", err)
			}
			return id
		}, nil},
	} {
		t.Run(tc.name, func(t *testing.T) {
			id := tc.write()
			h.sim.ResetCounters()
			inst, err := p.Get(h.ctx, id)
			if err != nil || inst.State != provider.StateProvisioning {
				t.Errorf("Get right after the write = %+v, %v; want Provisioning (%s)", inst, err, tc.reason)
			}
			if diff := cmp.Diff(tc.calls, h.sim.Counters()); tc.calls != nil && diff != "" {
				t.Errorf("calls of the Get right after the write (-want +got):\n%s", diff)
			}
		})
	}
}

// TestGetOfVMsBeingMadeReadsTheCheaperSource: a Get of a VM this process is
// making, with no view of its node at hand for the poll interval, reads
// the VM's own status/current while the looks at VMs being made on the
// node are too few for a view of all the node's VMs to pay
// (ownStatusPays), and the node's view otherwise; a status read is kept
// for the poll interval, as a view is. So the few creates of a pool
// replacing its aged proxies on a large node do not make the host query
// every VM of the node every poll interval.
func TestGetOfVMsBeingMadeReadsTheCheaperSource(t *testing.T) {
	const (
		statusCalls = "GET /nodes/{node}/qemu/{vmid}/status/current"
		viewCalls   = "GET /nodes/{node}/qemu"
		listing     = "GET /cluster/resources"
	)
	for _, tc := range []struct {
		name, reason string
		foreign      int // someone else's VMs on the node, besides its two templates
		making       int // VMs this process is making
		warm         int // looks at each within the pause window before the measured ones
		want         map[string]int64
	}{
		{"one VM on a large node", "2 looks in the window, 1/6 per interval: status reads cost 2·11/6, views (10+43)/6; the second look finds the status kept",
			40, 1, 1, map[string]int64{statusCalls: 1}},
		{"two VMs on a large node", "at most 4 looks in the window: each VM's status is read once",
			40, 2, 1, map[string]int64{statusCalls: 2}},
		{"four VMs on a busy large node", "33 looks in the window, 2.75 per interval: status reads would cost 2·2.75·11 = 60.5 against a view of 46 VMs (56): one view serves all looks",
			40, 4, 8, map[string]int64{viewCalls: 1}},
		{"one VM on a small node", "the node has its two templates and the VM: a status read costs (2·11) more than half a view (13), and the call count is the same",
			0, 1, 1, map[string]int64{viewCalls: 1}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			h, p, pass := clockedProvider(t)
			h.addTheirs(tc.foreign)
			var ids []provider.ID
			for i := range tc.making {
				ids = append(ids, h.create(p, h.request(fmt.Sprintf("uid-made-%d", i), fmt.Sprintf("proxy-made%012d", i))))
			}
			look := func(rounds int) {
				t.Helper()
				for range rounds {
					for _, id := range ids {
						if inst, err := p.Get(h.ctx, id); (err != nil && !provider.IsTransient(err)) || inst.State == provider.StateStopped {
							t.Fatalf("Get %s = %+v, %v; want a VM being made", id, inst, err)
						}
					}
				}
			}
			// The warm looks also read each mark once, and the node's size
			// comes from a cluster-wide listing; then a new poll interval,
			// within the pause window.
			look(tc.warm)
			pass(2 * viewPoll)
			if _, _, err := p.listing(h.ctx, p.now()); err != nil {
				t.Fatal(err)
			}
			h.sim.ResetCounters()
			look(2)
			// Only the reads that judge a VM: the VMs boot meanwhile (the
			// simulator's clock runs fast), so an agent read or the seed's
			// removal may come too.
			reads := map[string]int64{}
			for k, n := range h.sim.Counters() {
				if k == statusCalls || k == viewCalls || k == listing {
					reads[k] = n
				}
			}
			if diff := cmp.Diff(tc.want, reads); diff != "" {
				t.Errorf("calls of 2 looks at each of %d VMs being made in one poll interval (-want +got) (%s):\n%s", tc.making, tc.reason, diff)
			}
		})
	}

	// Past the pause window a VM is no longer being made: its Gets read the
	// node's view as before, whatever the node's size.
	t.Run("past the pause window", func(t *testing.T) {
		h, p, pass := clockedProvider(t)
		h.addTheirs(40)
		id := h.create(p, h.request("uid-made-past", "proxy-madepast0000001"))
		h.runningOnClock(p, pass, id)
		pastThePauseWindow(pass)
		h.sim.ResetCounters()
		if inst, err := p.Get(h.ctx, id); err != nil || inst.State != provider.StateRunning {
			t.Errorf("Get = %+v, %v; want Running", inst, err)
		}
		if diff := cmp.Diff(map[string]int64{viewCalls: 1}, h.sim.Counters()); diff != "" {
			t.Errorf("calls of a Get past the pause window (-want +got):\n%s", diff)
		}
	})

	// A VM destroyed behind the operator's back answers its status with
	// F2: the cluster-wide listing then tells gone from migrated.
	t.Run("destroyed while being made", func(t *testing.T) {
		h, p, pass := clockedProvider(t)
		h.addTheirs(40)
		id := h.create(p, h.request("uid-made-gone", "proxy-madegone0000001"))
		node, vmid, _, _ := parseID(id)
		h.destroyBehindOurBack(node, vmid)
		pass(2 * viewPoll)
		h.sim.ResetCounters()
		if _, err := p.Get(h.ctx, id); !provider.IsNotFound(err) {
			t.Errorf("Get of a destroyed VM = %v, want NotFound", err)
		}
		// Two listings: no listing showed the VM yet, so the NotFound is
		// confirmed by a second, as on every path (Get step 1).
		if diff := cmp.Diff(map[string]int64{statusCalls: 1, listing: 2}, h.sim.Counters()); diff != "" {
			t.Errorf("calls (-want +got):\n%s", diff)
		}
	})
}

// addTheirs places n stopped VMs of someone else's on pve1, beside its two
// templates: a node whose view costs the host more than one VM's status.
func (h *harness) addTheirs(n int) {
	h.t.Helper()
	for i := range n {
		if err := h.sim.AddVM(pvesim.TemplateConfig{VMID: 9200 + i, Node: "pve1", Name: fmt.Sprintf("theirs-%d", i), Template: new(false)}); err != nil {
			h.t.Fatal(err)
		}
	}
}
