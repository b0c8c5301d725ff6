package proxmox

import (
	"context"
	"fmt"
	"maps"
	"slices"
	"strings"
	"time"

	"github.com/go-logr/logr"

	"github.com/egress-proxies/egress-proxies-operator/internal/provider"
)

// Get implements provider.Provider (the Get steps of docs/proxmox-behaviour.md).
// Everything comes cheap: a Get reads one of two shared listings, each read
// at most once per poll interval and shared by every Get that can use it,
// like an informer's cache. The view of the VM's node (its VM list with
// full=1: status, lock, name, uptime and, for a running VM, qmpstatus)
// answers everything at once; the cluster-wide listing answers for every
// node in one call, but shows a paused VM as running (F14), so a VM it
// shows running takes its qmpstatus from a node view up to a pause window
// (PauseViewIntervals poll intervals) old. A Get reads the cheaper one
// (judgedByNodeView): the node's view when it is fresh anyway, when the one
// kept is older than the pause window (a single read then answers the Get),
// and for a VM this process changed within the window (being made, it is
// looked at often); the cluster-wide listing otherwise. So the steady state
// of many Proxies costs one cluster-wide listing per poll interval and one
// node view per node per pause window, whatever the number of VMs, and that
// of a few Proxies one node view per look; a VM stopped or destroyed behind
// the operator's back is seen by every Get from one poll interval after the
// change on, a paused one within the pause window. The mark is read once
// per VMID, and the agent's address is cached while the VM runs without a
// restart (its uptime did not go down), so a Get of a running VM costs no
// call of its own; status/current is read only when no listing can answer.
// A listing read before this process last changed the VM (a start, a stop)
// is never judged from: the VM is Provisioning until a newer one shows it.
func (p *Provider) Get(ctx context.Context, id provider.ID) (provider.Instance, error) {
	node, vmid, name, err := parseID(id)
	if err != nil {
		return provider.Instance{}, err
	}
	notBefore := p.now().Add(-p.poll())
	viewed := p.judgedByNodeView(node, name)
	if viewed && p.ownStatusPays(node, name) {
		st, at, serr := p.ownStatusOf(ctx, node, vmid, name)
		switch {
		case serr == nil:
			v := NodeVM{VMID: vmid, Name: st.Name, Status: st.Status, QMPStatus: st.QMPStatus, Lock: st.Lock, Uptime: st.Uptime}
			return p.judge(ctx, Resource{Type: "qemu", VMID: vmid, Name: st.Name, Node: node, Status: st.Status, Lock: st.Lock, Uptime: st.Uptime}, &v, at, name)
		case ctx.Err() != nil:
			return provider.Instance{}, classify(fmt.Sprintf("reading the status of VM %d", vmid), serr)
		case isMissingVM(serr):
			// Not on its node (F2): a cluster-wide listing no older than
			// the answer tells gone from migrated.
			notBefore = at
		default:
			logr.FromContextOrDiscard(ctx).V(1).Info("the VM's status failed; reading the cluster-wide listing instead", "node", node, "vmid", vmid, "error", serr.Error())
		}
		viewed = false
	}
	if viewed {
		view, at, nerr := p.nodeListing(ctx, node, notBefore)
		if nerr != nil && ctx.Err() != nil {
			return provider.Instance{}, classify("listing vms", nerr)
		}
		if nerr == nil {
			if v, ok := findNodeVM(view, vmid); ok {
				return p.judge(ctx, Resource{Type: "qemu", VMID: vmid, Name: v.Name, Node: node, Status: v.Status, Lock: v.Lock, Uptime: v.Uptime}, &v, at, name)
			}
			if at.Before(p.changedAt(name)) {
				// This process made the VM after the view was read: the next
				// view shows it, and nothing is judged from this one.
				return provider.Instance{ID: id, Name: name, Node: node, State: provider.StateProvisioning}, nil
			}
			// Not on its node: a cluster-wide listing no older than the view
			// tells gone from migrated (or an LXC container at the VMID).
			notBefore = at
		} else {
			logr.FromContextOrDiscard(ctx).V(1).Info("the node listing failed; reading the cluster-wide listing instead", "node", node, "vmid", vmid, "error", nerr.Error())
		}
	}
	list, at, err := p.listing(ctx, notBefore)
	if err != nil {
		return provider.Instance{}, classify("listing vms", err)
	}
	r, ok := find(list, vmid)
	if !ok && at.Before(p.changedAt(name)) {
		// This process made the VM after the listing was read: the next
		// listing shows it, and nothing is judged from this one.
		return provider.Instance{ID: id, Name: name, Node: node, State: provider.StateProvisioning}, nil
	}
	if last := p.listedAt(vmid); !ok && (last.IsZero() || !at.After(last)) {
		// The cached listing may predate the VM: confirm before NotFound.
		// (A listing newer than one that showed the VM does not: it is gone.)
		if list, at, err = p.listing(ctx, p.now()); err != nil {
			return provider.Instance{}, classify("listing vms", err)
		}
		r, ok = find(list, vmid)
	}
	if !ok {
		p.forget(vmid)
		return provider.Instance{}, provider.NewNotFound(fmt.Errorf("VM %d does not exist", vmid))
	}
	return p.judge(ctx, r, nil, at, name)
}

// PauseViewIntervals is the pause window in poll intervals: how old a
// node's view may be when a running VM's qmpstatus is taken from it (F14)
// in the steady state. One minute at the default poll interval: a paused
// VM is Stopped within it (its proxy fails its probes meanwhile), and the
// node views of a large steady state, whose answer costs the node a query
// per running VM, are twelve times fewer than one per node per poll
// interval.
const PauseViewIntervals = 12

// pauseWindow is when the pause window began.
func (p *Provider) pauseWindow() time.Time {
	return p.now().Add(-PauseViewIntervals * p.poll())
}

// judgedByNodeView says whether a Get of the VM name on node reads its
// node's view rather than the cluster-wide listing: when the view is fresh
// for the poll interval (read or being read: no call), when the newest one
// is older than the pause window (one read then answers all of the Get,
// where the cluster-wide listing would need a node view too), and when this
// process changed the VM within the window (a VM being made is looked at
// every poll interval, and its node's view shows its start as soon as any
// listing can).
func (p *Provider) judgedByNodeView(node, name string) bool {
	at, ok := p.nodeRead(node).Newest()
	window := p.pauseWindow()
	return !ok || at.Before(window) || !at.Before(p.now().Add(-p.poll())) || p.changedAt(name).After(window)
}

// requestWeight is what one API request costs a Proxmox host, counted in
// VMs of a node's view: the host answers a view by querying the QEMU
// monitor of each running VM it lists (qemu-server's vmstatus), and a
// status/current by querying one VM's, after the same request handling
// (TLS, the token's privileges, a pveproxy worker). An estimate, not a
// measurement (docs/proxmox-behaviour.md, Get step 1): it only decides how
// few Gets a view must serve before it pays.
const requestWeight = 10

// ownStatusPays says whether a Get of a VM (instance name) on node that
// judgedByNodeView sent to the node's view reads the VM's own
// status/current instead. It does for a VM this process changed within
// the pause window (being made) when no view of the poll interval is at
// hand (the view would be a read of its own) and the Gets of VMs being made
// on the node are too few for a view of all the node's VMs to pay. A view
// serves the looks of one poll interval: with L such looks per interval
// (this one included, counted over the pause window), reading each VM's
// status costs the host about 11·L per interval (requestWeight + 1 VM's
// queries each), views (requestWeight + n)·min(L, 1) for the node's n VMs
// (with less than a look per interval, a view is read for nearly every
// look). The status reads are chosen only when they cost at most half the
// views, a margin for what the estimate cannot tell (requestWeight is a
// guess, looks come unevenly). So the few creates of a pool replacing its
// aged proxies on a large node read a VM each, and many creates at once, or
// a node of a few VMs, share a view as before. It records the look either
// way.
func (p *Provider) ownStatusPays(node, name string) bool {
	now := p.now()
	window := p.pauseWindow()
	if !p.changedAt(name).After(window) {
		return false
	}
	p.mu.Lock()
	looks := p.makingLooks[node]
	i := 0
	for i < len(looks) && looks[i].Before(window) {
		i++
	}
	looks = append(looks[i:], now)
	p.makingLooks[node] = looks
	perInterval := float64(len(looks)) / PauseViewIntervals
	n, known := p.nodeSizes[node]
	p.mu.Unlock()
	if at, ok := p.nodeRead(node).Newest(); ok && !at.Before(now.Add(-p.poll())) {
		return false
	}
	if !known {
		return true
	}
	statusCost := 2 * perInterval * (requestWeight + 1)
	viewCost := float64(requestWeight+n) * min(perInterval, 1)
	return statusCost < viewCost
}

// statusEntry is a VM's status/current and when its read began.
type statusEntry struct {
	st VMStatus
	at time.Time
}

// ownStatusOf returns the VM's status/current read within the poll
// interval and after this process last changed the VM (the one kept, or a
// new read), and when its read began.
func (p *Provider) ownStatusOf(ctx context.Context, node string, vmid int, name string) (VMStatus, time.Time, error) {
	now := p.now()
	notBefore := now.Add(-p.poll())
	if c := p.changedAt(name); c.After(notBefore) {
		notBefore = c
	}
	p.mu.Lock()
	e, ok := p.ownStatus[vmid]
	p.mu.Unlock()
	if ok && !e.at.Before(notBefore) {
		return e.st, e.at, nil
	}
	st, err := p.api.status(ctx, node, vmid)
	if err != nil {
		return VMStatus{}, now, err
	}
	p.mu.Lock()
	defer p.mu.Unlock()
	for id, old := range p.ownStatus {
		if old.at.Before(now.Add(-p.poll())) {
			delete(p.ownStatus, id)
		}
	}
	p.ownStatus[vmid] = statusEntry{st: st, at: now}
	return st, now, nil
}

// noteClusterSizes records how many QEMU VMs the cluster-wide listing
// shows on each node.
func (p *Provider) noteClusterSizes(list []Resource) {
	sizes := map[string]int{}
	for _, n := range p.block.Nodes() {
		sizes[n] = 0
	}
	for _, r := range list {
		if r.Type == "qemu" {
			sizes[r.Node]++
		}
	}
	p.mu.Lock()
	defer p.mu.Unlock()
	maps.Copy(p.nodeSizes, sizes)
}

// judge is Get of a listed VM: r from a listing read at at, and nv its
// entry in its node's view when r comes from there (nil when r comes from
// the cluster-wide listing).
func (p *Provider) judge(ctx context.Context, r Resource, nv *NodeVM, at time.Time, name string) (provider.Instance, error) {
	vmid := r.VMID
	p.noteListed(vmid, at)
	if r.Type != "qemu" {
		return provider.Instance{}, provider.NewNotFound(fmt.Errorf("VMID %d is a %s, not a VM of this operator", vmid, r.Type))
	}
	if r.Status == "unknown" || (r.Lock != "" && r.Lock != lockSuspended) {
		// F8: both look the same in the listing.
		return provider.Instance{}, provider.NewTransient(fmt.Errorf(
			"VM %d is listed with status %q and lock %q: a clone (or another task) in progress, or node %s unreachable", vmid, r.Status, r.Lock, r.Node))
	}
	m, mok, err := p.markOf(ctx, r)
	if isMissingVM(err) {
		// F2 after a listing that showed it: gone since, or a stale listing.
		if list, _, lerr := p.listing(ctx, p.now()); lerr == nil {
			if _, still := find(list, vmid); !still {
				p.forget(vmid)
				return provider.Instance{}, provider.NewNotFound(fmt.Errorf("VM %d does not exist", vmid))
			}
		}
		return provider.Instance{}, provider.NewTransient(fmt.Errorf("VM %d is listed but its config is missing: deleted meanwhile?", vmid))
	}
	if err != nil {
		return provider.Instance{}, classify(fmt.Sprintf("reading the config of VM %d", vmid), err)
	}
	if !mok {
		return provider.Instance{}, provider.NewNotFound(fmt.Errorf("VM %d does not carry the operator's mark", vmid))
	}
	if m.Name != name {
		// Another of the operator's VMs took the VMID after ours went.
		return provider.Instance{}, provider.NewNotFound(fmt.Errorf("VM %d is %s now, not %s", vmid, m.Name, name))
	}
	inst := provider.Instance{ID: ID(r.Node, vmid, name), Name: m.Name, OwnerUID: m.OwnerUID, Node: r.Node, CreatedAt: m.CreatedAt}
	if r.Lock == lockSuspended {
		// F24: hibernated is stopped.
		p.dropAddr(vmid)
		inst.State = provider.StateStopped
		return inst, nil
	}
	since := p.changedAt(name)
	if at.Before(since) && r.Status != "running" {
		// This process started the VM after the listing was read (Create
		// returns once the start task ended): not stopped, starting.
		inst.State = provider.StateProvisioning
		return inst, nil
	}
	var st VMStatus
	var known bool
	if nv != nil {
		st, known, err = p.listedState(ctx, *nv, r, at, since)
	} else {
		st, known, err = p.runState(ctx, r, at, since)
	}
	if err != nil {
		return provider.Instance{}, transientUnlessPermanent(classify(fmt.Sprintf("reading the status of VM %d", vmid), err))
	}
	if !known {
		inst.State = provider.StateProvisioning
		return inst, nil
	}
	switch {
	case st.Status == "stopped" || st.QMPStatus == "stopped" || st.QMPStatus == "paused":
		// F14: paused shows as running in the listing.
		p.dropAddr(vmid)
		inst.State = provider.StateStopped
		return inst, nil
	case st.QMPStatus == "prelaunch":
		p.dropAddr(vmid)
		inst.State = provider.StateProvisioning
		return inst, nil
	}
	p.mu.Lock()
	a, cached := p.addrs[vmid]
	p.mu.Unlock()
	if cached && st.Uptime >= a.uptime {
		p.consumeSeed(ctx, r, name)
		inst.State, inst.Address = provider.StateRunning, a.addr
		return inst, nil
	}
	p.dropAddr(vmid)
	if p.block.GuestAgent() && st.Uptime < agentInstallSeconds {
		// The agent is a package cloud-init installs in its last stage
		// (F21, F26: about 47 s after the start); asking earlier is wasted.
		// The look that asks first comes when it is due, not up to a poll
		// interval later.
		inst.State = provider.StateProvisioning
		inst.RecheckAfter = time.Duration(agentInstallSeconds-st.Uptime) * time.Second
		return inst, nil
	}
	ifaces, err := p.api.agentInterfaces(ctx, r.Node, vmid)
	if err != nil {
		ae, isAPI := apiErr(err)
		switch {
		case isAPI && ae.Message == msgAgentNotRunning:
			inst.State = provider.StateProvisioning
			inst.RecheckAfter = agentRecheck
			return inst, nil
		case isAPI && ae.Message == msgAgentNotConfigured:
			// Replace it rather than wait forever.
			inst.State = provider.StateStopped
			return inst, nil
		case isAPI && reNotRunVM.MatchString(ae.Message):
			return provider.Instance{}, provider.NewTransient(fmt.Errorf("reading the guest agent of VM %d: %w", vmid, err))
		}
		return provider.Instance{}, transientUnlessPermanent(classify(fmt.Sprintf("reading the guest agent of VM %d", vmid), err))
	}
	addr := firstAddress(ifaces, p.block.AcceptLoopbackAddresses)
	if !addr.IsValid() {
		logr.FromContextOrDiscard(ctx).V(1).Info("the guest agent reports no usable IPv4 address yet", "vmid", vmid)
		inst.State = provider.StateProvisioning
		inst.RecheckAfter = agentRecheck
		return inst, nil
	}
	p.mu.Lock()
	p.addrs[vmid] = addrEntry{addr: addr, uptime: st.Uptime}
	p.mu.Unlock()
	// The guest is up: cloud-init read the seed long ago.
	p.consumeSeed(ctx, r, name)
	inst.State, inst.Address = provider.StateRunning, addr
	return inst, nil
}

// When the guest agent is asked for the address of a booting VM whose seed
// installs it (installGuestAgent). F26 saw it answer 47 to 50 s after the
// start. The first question comes a little before (a faster host answers
// sooner), and then every agentRecheck while the agent is not up: an
// address is seen at most that late, for one or two more agent reads per
// create than a question per poll interval would cost (docs/performance.md).
const (
	agentInstallSeconds = 44
	agentRecheck        = 2 * time.Second
)

// listedAt is when the newest listing that showed the VM was read.
func (p *Provider) listedAt(vmid int) time.Time {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.listed[vmid]
}

// noteListed records that a listing read at at showed the VM.
func (p *Provider) noteListed(vmid int, at time.Time) {
	p.mu.Lock()
	defer p.mu.Unlock()
	if at.After(p.listed[vmid]) {
		p.listed[vmid] = at
	}
}

// changedAt is when this process last changed the instance name or saw a
// task of it end.
func (p *Provider) changedAt(name string) time.Time {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.changed[name]
}

// runState is the run state of a VM the cluster-wide listing showed (read
// at listed); known is false when the node's view that would answer is
// older than since (a start by this process it cannot show yet). For a VM
// listed running it is the qmpstatus of the VM's entry in its node's view
// (full=1, F14), read at most once per pause window for all VMs of the node
// (once per poll interval while this process changed the VM within the
// window), with the uptime of the cluster-wide listing; a view newer than
// the cluster-wide listing that shows the VM stopped answers too.
// status/current is read instead when the view does not show the VM
// running with a qmpstatus (it predates a start or a migration behind the
// operator's back) and when it fails, and for a VM the cluster-wide listing
// does not show running.
func (p *Provider) runState(ctx context.Context, r Resource, listed, since time.Time) (VMStatus, bool, error) {
	if r.Status == "running" {
		notBefore := p.pauseWindow()
		if since.After(notBefore) {
			// Changed by this process within the window (a create, a
			// start): the node listing of the poll interval, as for
			// everything else, so that its start is seen as soon as a
			// listing can show it.
			notBefore = p.now().Add(-p.poll())
		}
		list, at, err := p.nodeListing(ctx, r.Node, notBefore)
		switch {
		case err == nil && at.Before(since):
			return VMStatus{}, false, nil
		case err == nil:
			if v, ok := findNodeVM(list, r.VMID); ok {
				switch {
				case v.Status == "running" && v.QMPStatus != "":
					return VMStatus{Status: v.Status, QMPStatus: v.QMPStatus, Uptime: r.Uptime, Lock: r.Lock}, true, nil
				case v.Status == "stopped" && !at.Before(listed):
					// Stopped since the cluster listing was read (a Delete
					// stopping it): the newer node listing says so.
					return VMStatus{Status: v.Status, QMPStatus: v.Status}, true, nil
				}
			}
		case ctx.Err() != nil:
			return VMStatus{}, false, err
		default:
			logr.FromContextOrDiscard(ctx).V(1).Info("the node listing failed; reading the status of the VM instead", "node", r.Node, "vmid", r.VMID, "error", err.Error())
		}
	}
	st, err := p.api.status(ctx, r.Node, r.VMID)
	return st, err == nil, err
}

// listedState is the run state of a VM found in its node's view (v, read
// at at): its status and qmpstatus there, unless the view is older than
// since (known is false: a start or stop by this process that the view
// cannot show yet; the next view will). status/current is read only for a
// running entry without a qmpstatus, which a listing with full=1 does not
// give.
func (p *Provider) listedState(ctx context.Context, v NodeVM, r Resource, at, since time.Time) (VMStatus, bool, error) {
	switch {
	case at.Before(since):
		return VMStatus{}, false, nil
	case v.Status == "running" && v.QMPStatus != "":
		return VMStatus{Status: v.Status, QMPStatus: v.QMPStatus, Uptime: v.Uptime, Lock: v.Lock}, true, nil
	case v.Status == "stopped":
		return VMStatus{Status: v.Status, QMPStatus: v.Status}, true, nil
	}
	st, err := p.api.status(ctx, r.Node, r.VMID)
	return st, err == nil, err
}

func findNodeVM(list []NodeVM, vmid int) (NodeVM, bool) {
	for _, v := range list {
		if v.VMID == vmid {
			return v, true
		}
	}
	return NodeVM{}, false
}

func (p *Provider) dropAddr(vmid int) {
	p.mu.Lock()
	defer p.mu.Unlock()
	delete(p.addrs, vmid)
}

// transientUnlessPermanent keeps Get from ever saying NotFound past the
// listing (get step 4, docs/proxmox-behaviour.md).
func transientUnlessPermanent(err error) error {
	if provider.IsNotFound(err) {
		return provider.NewTransient(err)
	}
	return err
}

// ListByTag implements provider.Provider: every VM of ours, in any state,
// each confirmed by its mark. That is the tagged QEMU entries of the listing
// (F9), and also the named but untagged ones: a VM
// whose Create stopped between the clone and the config write (the tag
// comes with the config) carries the mark but not the tag, and the
// finalizer and garbage collection must find it. VMs this process is still
// cloning, listed without a name (F8), come from its own record. A VM whose
// config cannot be read is skipped and logged. Only VMs inside the entry's
// VMID range and on its nodes are considered, and only a mark of this
// installation whose signature verifies for the VM confirms one.
func (p *Provider) ListByTag(ctx context.Context) ([]provider.Instance, error) {
	list, _, err := p.cachedListing(ctx)
	if err != nil {
		return nil, classify("listing vms", err)
	}
	log := logr.FromContextOrDiscard(ctx)
	var out, unverified []provider.Instance
	listed := map[string]bool{}
	nodes := p.block.Nodes()
	for _, r := range list {
		if r.Type != "qemu" || r.Template == 1 {
			continue
		}
		if !hasTag(r.Tags) && (r.Name == "" || r.VMID < p.lo || r.VMID > p.hi) {
			continue
		}
		if r.VMID < p.lo || r.VMID > p.hi || !slices.Contains(nodes, r.Node) {
			// Outside the entry's VMIDs and nodes: not the entry's, whatever
			// its mark says (another entry's or installation's range).
			continue
		}
		m, ok, err := p.markOf(ctx, r)
		if err != nil {
			if ctx.Err() != nil {
				return nil, classify("listing vms", ctx.Err())
			}
			log.Info("skipping a candidate VM whose config cannot be read", "vmid", r.VMID, "node", r.Node, "error", err.Error())
			continue
		}
		if !ok {
			if p.badMark(r.VMID, r.Name) {
				unverified = append(unverified, provider.Instance{ID: ID(r.Node, r.VMID, r.Name), Name: r.Name, Node: r.Node})
			}
			continue
		}
		listed[m.Name] = true
		inst := provider.Instance{ID: ID(r.Node, r.VMID, m.Name), Name: m.Name, OwnerUID: m.OwnerUID, Node: r.Node, CreatedAt: m.CreatedAt}
		switch {
		case r.Status == "running" && r.Lock == "":
			inst.State = provider.StateRunning
			p.mu.Lock()
			if a, ok := p.addrs[r.VMID]; ok {
				inst.Address = a.addr
			}
			p.mu.Unlock()
		case r.Status == "stopped" || r.Lock == lockSuspended:
			inst.State = provider.StateStopped
		default:
			inst.State = provider.StateProvisioning
		}
		out = append(out, inst)
	}
	p.mu.Lock()
	p.unverified = unverified
	for name, c := range p.creating {
		if !listed[name] {
			out = append(out, provider.Instance{ID: ID(c.node, c.vmid, name), Name: name, OwnerUID: c.ownerUID,
				Node: c.node, CreatedAt: c.createdAt, State: provider.StateProvisioning})
		}
	}
	p.mu.Unlock()
	slices.SortFunc(out, func(a, b provider.Instance) int { return strings.Compare(string(a.ID), string(b.ID)) })
	return out, nil
}
