package proxmox

import (
	"context"
	"errors"
	"fmt"
	"net/netip"
	"regexp"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/go-logr/logr"

	"github.com/egress-proxies/egress-proxies-operator/internal/config"
	"github.com/egress-proxies/egress-proxies-operator/internal/ownership"
	"github.com/egress-proxies/egress-proxies-operator/internal/provider"
	"github.com/egress-proxies/egress-proxies-operator/internal/sharedread"
)

// Provider runs proxies as Proxmox VE VMs.
type Provider struct {
	ident *ownership.Identity
	// entries are the configuration's entry names (provider.Deps.Entries).
	entries []string
	entry   *config.Entry
	block   *Block
	api     *client
	now     func() time.Time
	lo, hi  int
	names   provider.Names

	// The shared reads: the cluster-wide listing and, by node, the node
	// listings (views), each serving every Get that can use it for a poll
	// interval, a view also giving the qmpstatus of the node's running VMs
	// for a pause window (Get). listMu guards the maps.
	vms     *sharedread.Read[[]Resource]
	listMu  sync.Mutex
	nodeVMs map[string]*sharedread.Read[[]NodeVM]
	// nodeTasks are, by node, the task lists that tell the tasks of every
	// Create and Delete in flight on the node how they are doing.
	nodeTasks map[string]*sharedread.Read[[]TaskEntry]

	mu    sync.Mutex
	marks map[int]markEntry // by VMID: the mark read from the config
	// unverified are the VMs the latest ListByTag saw with this
	// installation's mark and a signature that fails.
	unverified []provider.Instance
	addrs      map[int]addrEntry  // by VMID: the agent's address of a running VM
	tasks      map[string]pending // by name: the task a Create or Delete waits for
	// taskEnds are, by UPID, the exit statuses of tasks in flight that a
	// node's task list showed ended: an end is final, so it serves every
	// later look, and the next list need not reach back to the task.
	taskEnds map[string]string
	done     map[string]bool      // by name/step: steps finished in this process
	waits    map[string]time.Time // by name/what: since when something is waited for

	// creating holds, by name, the VMs this process cloned and whose Create
	// has not returned their ID yet. Until the clone ends such a VM is
	// listed without a name (F8) and, until the config write, without the
	// tag: ListByTag reports them from here, so that a Proxy deleted in
	// the middle of its create still finds its VM.
	creating map[string]creatingVM
	// claims is, by VMID, the name of the Create of this process that
	// chose the VMID for its clone, from the choice until that Create is
	// over (clearName) or its clone was not sent. Another Create of this
	// process skips a claimed VMID: its unnamed VM (F8) is known not to be
	// this one's, and two Creates never race for one VMID (F4).
	claims map[int]string
	// seeds is, by VMID, what is known of the VM's seed.
	seeds map[int]seedState
	// changed is, by name, when this process last changed the instance or
	// saw a task of it end: a listing older than that does not show it.
	changed map[string]time.Time
	// started is when the provider was built: a listing from before may
	// not show what an earlier process did.
	started time.Time
	// listed is, by VMID, when the newest listing that showed it was read.
	listed map[int]time.Time
	// nodeSizes is, by node, how many VMs its newest listing showed (its
	// view, or its part of the cluster-wide listing): what a view of the
	// node costs the host (ownStatusPays).
	nodeSizes map[string]int
	// makingLooks is, by node, when Gets looked at VMs this process
	// changed within the pause window (being made), oldest first and no
	// older than the window: the looks a view of the node would serve
	// (ownStatusPays).
	makingLooks map[string][]time.Time
	// ownStatus is, by VMID, the status/current a Get of a VM being made
	// read instead of its node's view, kept for a poll interval as a view
	// is.
	ownStatus map[int]statusEntry
	// templates caches template configs for a poll interval, by VMID.
	templates map[int]templateConfig
}

// creatingVM is a VM this process cloned for a Create still in progress.
type creatingVM struct {
	node      string // where the VM is (the clone's target)
	vmid      int
	ownerUID  string
	createdAt time.Time // as written in its mark
	mark      mark      // the mark the clone wrote
}

// templateConfig is a template's config and when it was read.
type templateConfig struct {
	cfg map[string]any
	at  time.Time
}

type markEntry struct {
	name string // the listed name the mark was read for
	m    mark
	ok   bool
	// bad: a whole mark of this installation whose signature fails, the
	// sign of a lost or replaced key (provider.UnverifiedLister).
	bad bool
}

type addrEntry struct {
	addr   netip.Addr
	uptime int64
}

type pending struct {
	step string // for the InProgress message
	kind string // seed, clone, resize, start, stop, uploads, seed-delete, destroy
	node string
	vmid int
	upid string
	// more are further tasks of the same step (a seed delete on every
	// node); the step is done when all of them are.
	more []taskRef
	// vmGone: a seed delete of a Delete that found the VM gone, which is
	// done once these tasks are.
	vmGone bool
	// at is when the task was recorded, after its call returned; seen is
	// when the read that last showed it running started: the next look
	// needs a newer one.
	at, seen time.Time
}

// taskRef is a task on a node.
type taskRef struct {
	node, upid string
}

var (
	_ provider.Provider = (*Provider)(nil)
	_ provider.Checker  = (*Provider)(nil)
)

// New builds the provider of an entry, whose Block is a *Block. It
// contacts nothing. d.Log receives the warning about disabled TLS
// verification; d.Ownership is required.
func New(e *config.Entry, d provider.Deps) (*Provider, error) {
	b, err := provider.BlockOf[Block]("proxmox provider", e, d)
	if err != nil {
		return nil, err
	}
	if b.InsecureSkipTLSVerify {
		d.Log.Info("TLS verification of the Proxmox API is disabled (insecureSkipTLSVerify); give caFile instead", "provider", e.Name)
	}
	lo, hi := b.VMIDs()
	p := &Provider{
		ident: d.Ownership, entries: d.Entries, entry: e, block: b, now: d.Clock(), lo: lo, hi: hi,
		api:     newClient(b.APIURL, b.TokenFile, b.CAFile, b.InsecureSkipTLSVerify),
		nodeVMs: map[string]*sharedread.Read[[]NodeVM]{},
		marks:   map[int]markEntry{}, addrs: map[int]addrEntry{},
		tasks: map[string]pending{}, done: map[string]bool{}, waits: map[string]time.Time{},
		taskEnds: map[string]string{}, nodeTasks: map[string]*sharedread.Read[[]TaskEntry]{},
		creating: map[string]creatingVM{}, claims: map[int]string{}, seeds: map[int]seedState{},
		changed: map[string]time.Time{}, templates: map[int]templateConfig{}, listed: map[int]time.Time{},
		nodeSizes: map[string]int{}, makingLooks: map[string][]time.Time{}, ownStatus: map[int]statusEntry{},
	}
	p.started = p.now()
	p.vms = sharedread.New(func(ctx context.Context) ([]Resource, error) {
		list, err := p.api.resources(ctx)
		if err == nil {
			p.noteClusterSizes(list)
		}
		return list, err
	}, sharedread.Options{Now: p.now})
	return p, nil
}

// ID returns the instance ID of a VM: "node/vmid/name". The name is the
// instance name the VM was created with: it names the VM's seed, so that a
// Delete finds the seed even when the VM is gone and the process that made
// it has restarted, and it tells a VM that took over the VMID from ours.
func ID(node string, vmid int, name string) provider.ID {
	return provider.ID(node + "/" + strconv.Itoa(vmid) + "/" + name)
}

// instanceName is the shape of the names Create is asked for: a DNS label,
// so that it is safe in a file name and a URL path.
var instanceName = regexp.MustCompile(`^[a-z0-9]([a-z0-9-]{0,61}[a-z0-9])?$`)

func parseID(id provider.ID) (node string, vmid int, name string, err error) {
	parts := strings.Split(string(id), "/")
	if len(parts) == 3 {
		node, name = parts[0], parts[2]
		vmid, err = strconv.Atoi(parts[1])
	}
	if len(parts) != 3 || node == "" || err != nil || vmid <= 0 || !instanceName.MatchString(name) {
		return "", 0, "", provider.NewPermanent(fmt.Errorf("instance id %q is not node/vmid/name", id), "the instance id was not made by the proxmox provider")
	}
	return node, vmid, name, nil
}

// parseVMID is parseID without the node, for Delete: it takes the VM's node
// from the listing, where the VM is now, not from the ID.
func parseVMID(id provider.ID) (vmid int, name string, err error) {
	_, vmid, name, err = parseID(id)
	return vmid, name, err
}

// listing returns /cluster/resources?type=vm read at or after notBefore,
// and when that read started. One read is shared by every caller that wants
// it (Get, ListByTag, Check, Create and Delete), so that the Gets of the
// steady state and the creates and deletes in flight cost one call per poll
// interval for all instances of the entry.
func (p *Provider) listing(ctx context.Context, notBefore time.Time) ([]Resource, time.Time, error) {
	return p.vms.Get(ctx, notBefore)
}

// freshness is how new a listing Create and Delete of name need: started
// after anything this process did or saw for the name, after the process
// started (an earlier process may have acted just before), and at most a
// poll interval ago. Any listing that new serves, so that the creates and
// deletes in flight share their listings.
func (p *Provider) freshness(name string) time.Time {
	t := p.now().Add(-p.poll())
	p.mu.Lock()
	defer p.mu.Unlock()
	for _, u := range []time.Time{p.started, p.changed[name]} {
		if u.After(t) {
			t = u
		}
	}
	return t
}

// markDone records that a step of name is done in this process.
func (p *Provider) markDone(name, kind string) {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.done[name+"/"+kind] = true
	p.changed[name] = p.now()
}

// nodeListing returns /nodes/{node}/qemu?full=1 read at or after notBefore,
// shared like the cluster-wide listing: the node's view, which Get takes a
// running VM's qmpstatus from (with full=1 each running VM carries it, and
// the cluster-wide listing lacks it, F14).
func (p *Provider) nodeListing(ctx context.Context, node string, notBefore time.Time) ([]NodeVM, time.Time, error) {
	return p.nodeRead(node).Get(ctx, notBefore)
}

// nodeRead is the shared read of a node's listing.
func (p *Provider) nodeRead(node string) *sharedread.Read[[]NodeVM] {
	p.listMu.Lock()
	defer p.listMu.Unlock()
	s, ok := p.nodeVMs[node]
	if !ok {
		s = sharedread.New(func(ctx context.Context) ([]NodeVM, error) {
			list, err := p.api.nodeVMs(ctx, node)
			if err == nil {
				p.mu.Lock()
				p.nodeSizes[node] = len(list)
				p.mu.Unlock()
			}
			return list, err
		}, sharedread.Options{Now: p.now})
		p.nodeVMs[node] = s
	}
	return s
}

// cachedListing is the listing at most one poll interval old.
func (p *Provider) cachedListing(ctx context.Context) ([]Resource, time.Time, error) {
	return p.listing(ctx, p.now().Add(-p.block.PollInterval()))
}

func find(list []Resource, vmid int) (Resource, bool) {
	for _, r := range list {
		if r.VMID == vmid {
			return r, true
		}
	}
	return Resource{}, false
}

// markOf returns the mark of a listed QEMU VM, read from its config once per
// VMID and name; ok is true only for a mark of this installation whose
// signature verifies for this VM (its VMID and name) and entry.
func (p *Provider) markOf(ctx context.Context, r Resource) (mark, bool, error) {
	p.mu.Lock()
	e, ok := p.marks[r.VMID]
	p.mu.Unlock()
	if ok && e.name == r.Name && r.Name != "" {
		return e.m, e.ok, nil
	}
	cfg, err := p.api.vmConfig(ctx, r.Node, r.VMID)
	if err != nil {
		return mark{}, false, err
	}
	m, mok := parseMark(cfgStr(cfg, "description"))
	name := cfgStr(cfg, "name")
	p.noteSeedConfig(r.VMID, name, cfg)
	if mok && m.Name != name {
		mok = false // a mark copied onto another VM is not this VM's mark
	}
	bad := false
	if mok {
		if err := p.ident.VerifyStamp(m, p.entry.Name, vmidPlace(r.VMID)); err != nil {
			bad = errors.Is(err, ownership.ErrBadSignature) && !p.ident.SignedForAnother(m, p.entries, vmidPlace(r.VMID))
			// Unsigned, forged, copied from another VM, or another
			// installation's: foreign, never touched.
			logr.FromContextOrDiscard(ctx).V(1).Info("a VM's mark is not this installation's; leaving it alone",
				"vmid", r.VMID, "node", r.Node, "reason", err.Error())
			mok = false
		}
	}
	if name != "" && cfgStr(cfg, "lock") == "" {
		p.mu.Lock()
		p.marks[r.VMID] = markEntry{name: name, m: m, ok: mok, bad: bad}
		p.mu.Unlock()
	}
	return m, mok, nil
}

// badMark says whether the mark last read for vmid, under the listed name,
// is this installation's with a signature that fails.
func (p *Provider) badMark(vmid int, name string) bool {
	p.mu.Lock()
	defer p.mu.Unlock()
	e, ok := p.marks[vmid]
	return ok && e.bad && e.name == name
}

// Unverified implements provider.UnverifiedLister, from the latest
// ListByTag: no call of its own.
func (p *Provider) Unverified() []provider.Instance {
	p.mu.Lock()
	defer p.mu.Unlock()
	return append([]provider.Instance(nil), p.unverified...)
}

func (p *Provider) forget(vmid int) {
	p.mu.Lock()
	defer p.mu.Unlock()
	delete(p.marks, vmid)
	delete(p.addrs, vmid)
	delete(p.seeds, vmid)
	delete(p.listed, vmid)
	delete(p.ownStatus, vmid)
}

// cfgStr reads a config value as a string (numbers decode as float64).
func cfgStr(cfg map[string]any, key string) string {
	switch v := cfg[key].(type) {
	case string:
		return v
	case float64:
		return strconv.FormatFloat(v, 'f', -1, 64)
	case nil:
		return ""
	default:
		return fmt.Sprint(v)
	}
}

// vmidFor is the first VMID probed for an instance.
func (p *Provider) vmidFor(ownerUID, name string) int {
	size := uint64(p.hi - p.lo + 1)                               //nolint:gosec // G115: hi > lo, validated.
	return p.lo + int(provider.InstanceHash(ownerUID, name)%size) //nolint:gosec // G115: below size.
}

func (p *Provider) poll() time.Duration { return p.block.PollInterval() }

// waitedSince records the first time key was waited for and returns how long ago.
func (p *Provider) waitedSince(key string) time.Duration {
	p.mu.Lock()
	defer p.mu.Unlock()
	t, ok := p.waits[key]
	if !ok {
		p.waits[key] = p.now()
		return 0
	}
	return p.now().Sub(t)
}

func (p *Provider) clearName(name string) {
	p.mu.Lock()
	defer p.mu.Unlock()
	if t, ok := p.tasks[name]; ok {
		p.dropTask(name, t)
	}
	delete(p.creating, name)
	for vmid, n := range p.claims {
		if n == name {
			delete(p.claims, vmid)
		}
	}
	for k := range p.done {
		if strings.HasPrefix(k, name+"/") {
			delete(p.done, k)
		}
	}
	for k := range p.waits {
		if strings.HasPrefix(k, name+"/") {
			delete(p.waits, k)
		}
	}
}

func (p *Provider) isDone(name, kind string) bool {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.done[name+"/"+kind]
}

// setPending records the task a step of name started. The shared listings
// are not dropped: the next step of name asks for a listing newer than the
// task's end (changed), and everyone else's listings stay shared.
func (p *Provider) setPending(name string, t pending) {
	p.mu.Lock()
	t.at = p.now()
	p.tasks[name] = t
	p.changed[name] = t.at
	p.mu.Unlock()
}

// taskSkew is how far a node's clock may be behind ours: a task whose
// UPID does not give its start time is listed from when it was recorded
// less this.
const taskSkew = time.Minute

// taskListOverlap is how much earlier than the oldest task still running
// a node's task list starts: the start times are whole seconds.
const taskListOverlap = time.Second

// taskState is the state of a task this process started at or before at:
// from an earlier task list that showed it ended; from its node's task
// list, read at most once per poll interval and shared by the tasks of all
// the instances in flight on the node, after at; or, when the list does not
// have it (longer than the list) or cannot be read, from the task's own
// status.
func (p *Provider) taskState(ctx context.Context, ref taskRef, at time.Time) (TaskStatus, time.Time, error) {
	p.mu.Lock()
	exit, ended := p.taskEnds[ref.upid]
	p.mu.Unlock()
	if ended {
		return TaskStatus{Status: "stopped", ExitStatus: exit}, p.now(), nil
	}
	p.listMu.Lock()
	s, ok := p.nodeTasks[ref.node]
	if !ok {
		node := ref.node
		s = sharedread.New(func(ctx context.Context) ([]TaskEntry, error) {
			return p.readTasks(ctx, node)
		}, sharedread.Options{Now: p.now})
		p.nodeTasks[ref.node] = s
	}
	p.listMu.Unlock()
	notBefore := p.now().Add(-p.poll())
	if at.After(notBefore) {
		notBefore = at
	}
	list, listed, err := s.Get(ctx, notBefore)
	if err == nil {
		for _, e := range list {
			if e.UPID == ref.upid {
				if e.Status == "" {
					return TaskStatus{Status: "running"}, listed, nil
				}
				return TaskStatus{Status: "stopped", ExitStatus: e.Status}, listed, nil
			}
		}
	} else if ctx.Err() != nil {
		return TaskStatus{}, time.Time{}, err
	}
	read := p.now()
	st, err := p.api.taskStatus(ctx, ref.node, ref.upid)
	return st, read, err
}

// untilNextListing is how long a step whose task was still running in a
// task list read at read waits before it looks again: until a relook
// interval after that read, and a little more so that the list is then
// stale, not a whole interval from now. One read seconds ago for another
// instance's step gives the rest of it, so that a task that ended
// meanwhile is seen at the next list rather than the one after.
func (p *Provider) untilNextListing(read time.Time) time.Duration {
	d := read.Add(p.relook() + p.poll()/20).Sub(p.now())
	return min(max(d, p.poll()/10), p.relook()+p.poll()/20)
}

// relook is how often a node's task list may be read again while a task
// that a list showed running is waited for: a fifth of the poll interval.
// A step's first look at its task comes a poll interval after it started
// the task, which is about what a clone, an upload or a start takes (F26);
// only a task still running then is looked at sooner. Waiting a whole poll
// interval for those cost a create up to one interval per step: with 1000
// creates in flight at random phases, 12 s more to the instance's ID for
// half of them and 23 s for the last (docs/performance.md). One list per
// node serves every step waiting there, so a relook every second adds a
// few lists per node while creates run, not calls per proxy.
func (p *Provider) relook() time.Duration { return p.poll() / 5 }

// dropTask forgets the task t that name waited for, and the ends lists
// showed of its tasks. p.mu must be held.
func (p *Provider) dropTask(name string, t pending) {
	delete(p.tasks, name)
	delete(p.taskEnds, t.upid)
	for _, ref := range t.more {
		delete(p.taskEnds, ref.upid)
	}
}

// readTasks reads node's task list from the start of the oldest task in
// flight there that no list showed ended yet, and records the ends of the
// tasks in flight it shows. So a list reaches back only as far as the
// longest task still running, not to every task since the first of a
// create phase: its size follows the tasks in flight, not the fleet.
func (p *Provider) readTasks(ctx context.Context, node string) ([]TaskEntry, error) {
	list, err := p.api.tasks(ctx, node, p.taskListSince(node))
	if err != nil {
		return nil, err
	}
	p.mu.Lock()
	defer p.mu.Unlock()
	inFlight := p.tasksInFlight()
	for _, e := range list {
		if e.Status != "" && inFlight[e.UPID] {
			p.taskEnds[e.UPID] = e.Status
		}
	}
	// Ends of tasks no longer waited for go: the map stays as small as the
	// tasks in flight.
	for upid := range p.taskEnds {
		if !inFlight[upid] {
			delete(p.taskEnds, upid)
		}
	}
	return list, nil
}

// tasksInFlight are the UPIDs of the tasks a Create or Delete waits for.
// p.mu must be held.
func (p *Provider) tasksInFlight() map[string]bool {
	out := make(map[string]bool, len(p.tasks))
	for _, t := range p.tasks {
		out[t.upid] = true
		for _, ref := range t.more {
			out[ref.upid] = true
		}
	}
	return out
}

// taskListSince is where node's next task list starts (Unix seconds, the
// node's clock): the start time in the UPID (F16) of the oldest task in
// flight on node whose end no list showed, less taskListOverlap; for a
// UPID without a start time, when the task was recorded less taskSkew.
// Without such a task, now less taskSkew.
func (p *Provider) taskListSince(node string) int64 {
	p.mu.Lock()
	defer p.mu.Unlock()
	since, found := int64(0), false
	for _, t := range p.tasks {
		for _, ref := range append([]taskRef{{node: t.node, upid: t.upid}}, t.more...) {
			if ref.node != node {
				continue
			}
			if _, ended := p.taskEnds[ref.upid]; ended {
				continue
			}
			start, ok := upidStart(ref.upid)
			if ok {
				start -= int64(taskListOverlap / time.Second)
			} else {
				start = t.at.Add(-taskSkew).Unix()
			}
			if !found || start < since {
				since, found = start, true
			}
		}
	}
	if !found {
		return p.now().Add(-taskSkew).Unix()
	}
	return since
}

// upidStart returns the start time in a UPID (F16:
// UPID:<node>:<pid>:<pstart>:<starttime hex 8>:<type>:<id>:<user>!<tokenid>:).
func upidStart(upid string) (int64, bool) {
	parts := strings.Split(upid, ":")
	if len(parts) < 9 || parts[0] != "UPID" {
		return 0, false
	}
	start, err := strconv.ParseInt(parts[4], 16, 64)
	if err != nil || start <= 0 {
		return 0, false
	}
	return start, true
}

// upidUser returns the user!tokenid a UPID names (F16), empty for
// another shape.
func upidUser(upid string) string {
	parts := strings.Split(upid, ":")
	if len(parts) < 9 || parts[0] != "UPID" {
		return ""
	}
	return parts[7]
}

// checkPending looks at the task recorded for name. It returns nil when
// there is none or it ended OK (the step is then recorded as done), an
// InProgress error while it runs and a Transient one when it failed.
func (p *Provider) checkPending(ctx context.Context, name string) error {
	p.mu.Lock()
	t, ok := p.tasks[name]
	p.mu.Unlock()
	if !ok {
		return nil
	}
	for _, ref := range append([]taskRef{{node: t.node, upid: t.upid}}, t.more...) {
		after := t.at
		if t.seen.After(after) {
			after = t.seen.Add(time.Nanosecond)
		}
		st, read, err := p.taskState(ctx, ref, after)
		if err != nil {
			var ae *APIError
			if errors.As(err, &ae) && ae.Status < 595 {
				// The task is unknown (the node restarted?): forget it and
				// judge from what the API shows.
				p.mu.Lock()
				p.dropTask(name, t)
				p.mu.Unlock()
				return nil
			}
			return classify("reading the status of the "+t.kind+" task", err)
		}
		if !st.Done() {
			p.mu.Lock()
			if cur, ok := p.tasks[name]; ok && cur.upid == t.upid {
				cur.seen = read
				p.tasks[name] = cur
			}
			p.mu.Unlock()
			return provider.NewInProgress(t.step, p.untilNextListing(read))
		}
		if !st.OK() && t.kind != kindUploads {
			// (An upload waited for has ended either way.)
			p.mu.Lock()
			p.dropTask(name, t)
			p.mu.Unlock()
			logr.FromContextOrDiscard(ctx).Info("proxmox task failed", "task", t.kind, "node", ref.node, "vmid", t.vmid, "upid", ref.upid, "exitstatus", st.ExitStatus)
			return provider.NewTransient(fmt.Errorf("%s task on node %s failed: %s", t.kind, ref.node, st.ExitStatus))
		}
	}
	p.mu.Lock()
	p.dropTask(name, t)
	p.done[name+"/"+t.kind] = true
	p.changed[name] = p.now()
	p.mu.Unlock()
	return nil
}

// firstAddress picks the first global IPv4 address of a non-loopback
// interface (F21), or a loopback one when the block accepts them.
func firstAddress(ifaces []AgentInterface, acceptLoopback bool) netip.Addr {
	for _, iface := range ifaces {
		if iface.Name == "lo" {
			continue
		}
		for _, ip := range iface.IPAddresses {
			a, err := netip.ParseAddr(ip.Address)
			if err != nil || ip.Type != "ipv4" || !a.Is4() {
				continue
			}
			if a.IsGlobalUnicast() || a.IsPrivate() || (acceptLoopback && a.IsLoopback()) {
				if a.IsLinkLocalUnicast() {
					continue
				}
				return a
			}
		}
	}
	return netip.Addr{}
}
