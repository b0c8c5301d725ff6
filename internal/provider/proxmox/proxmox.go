package proxmox

import (
	"context"
	"errors"
	"fmt"
	"hash/fnv"
	"net/netip"
	"regexp"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/go-logr/logr"

	"github.com/egress-proxies/egress-proxies-operator/internal/config"
	"github.com/egress-proxies/egress-proxies-operator/internal/keyedlock"
	"github.com/egress-proxies/egress-proxies-operator/internal/provider"
)

// Options build a Provider.
type Options struct {
	// Entry is the configured entry; its Block is a *Block.
	Entry *config.Entry
	// Log receives the warning about disabled TLS verification; the zero
	// value discards it. Calls log through the logger of their context.
	Log logr.Logger
	// Now is the clock; nil means time.Now.
	Now func() time.Time
}

// Provider runs proxies as Proxmox VE VMs.
type Provider struct {
	entry  *config.Entry
	block  *Block
	api    *client
	now    func() time.Time
	lo, hi int
	names  keyedlock.Locker

	listMu sync.Mutex
	list   []Resource
	listAt time.Time
	flight *flight
	gen    int // bumped when the cache is invalidated

	mu    sync.Mutex
	marks map[int]markEntry    // by VMID: the mark read from the config
	addrs map[int]addrEntry    // by VMID: the agent's address of a running VM
	tasks map[string]pending   // by name: the task a Create or Delete waits for
	done  map[string]bool      // by name/step: steps finished in this process
	waits map[string]time.Time // by name/what: since when something is waited for
}

// flight is one /cluster/resources read shared by its callers.
type flight struct {
	done    chan struct{}
	started time.Time
	gen     int
	list    []Resource
	err     error
}

type markEntry struct {
	name string // the listed name the mark was read for
	m    mark
	ok   bool
}

type addrEntry struct {
	addr   netip.Addr
	uptime int64
}

type pending struct {
	step string // for the InProgress message
	kind string // seed, clone, resize, start, stop, seed-delete, destroy
	node string
	vmid int
	upid string
	// more are further tasks of the same step (a seed delete on every
	// node); the step is done when all of them are.
	more []taskRef
}

// taskRef is a task on a node.
type taskRef struct {
	node, upid string
}

var (
	_ provider.Provider = (*Provider)(nil)
	_ provider.Checker  = (*Provider)(nil)
)

// New builds the provider of an entry. It contacts nothing.
func New(o Options) (*Provider, error) {
	if o.Entry == nil {
		return nil, errors.New("proxmox provider: no entry")
	}
	b, ok := o.Entry.Block.(*Block)
	if !ok || b == nil {
		return nil, fmt.Errorf("proxmox provider %q: block is %T, want *Block", o.Entry.Name, o.Entry.Block)
	}
	if b.InsecureSkipTLSVerify {
		o.Log.Info("TLS verification of the Proxmox API is disabled (insecureSkipTLSVerify); give caFile instead", "provider", o.Entry.Name)
	}
	now := o.Now
	if now == nil {
		now = time.Now
	}
	lo, hi := b.VMIDs()
	return &Provider{
		entry: o.Entry, block: b, now: now, lo: lo, hi: hi,
		api:   newClient(b.APIURL, b.TokenFile, b.CAFile, b.InsecureSkipTLSVerify),
		marks: map[int]markEntry{}, addrs: map[int]addrEntry{},
		tasks: map[string]pending{}, done: map[string]bool{}, waits: map[string]time.Time{},
	}, nil
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

// listing returns /cluster/resources?type=vm read at or after notBefore. One
// read is shared by every caller that wants it (Get, ListByTag, Check and
// Create), so that Get costs at most one call per poll interval for all
// instances of the entry.
func (p *Provider) listing(ctx context.Context, notBefore time.Time) ([]Resource, error) {
	p.listMu.Lock()
	if p.list != nil && !p.listAt.Before(notBefore) {
		l := p.list
		p.listMu.Unlock()
		return l, nil
	}
	f := p.flight
	if f == nil || f.started.Before(notBefore) {
		f = &flight{done: make(chan struct{}), started: p.now(), gen: p.gen}
		p.flight = f
		// The read outlives a caller whose context ends: others wait for it.
		fctx := context.WithoutCancel(ctx)
		go func() {
			l, err := p.api.resources(fctx)
			p.listMu.Lock()
			if err == nil && f.gen == p.gen && (p.list == nil || !f.started.Before(p.listAt)) {
				p.list, p.listAt = l, f.started
			}
			if p.flight == f {
				p.flight = nil
			}
			f.list, f.err = l, err
			p.listMu.Unlock()
			close(f.done)
		}()
	}
	p.listMu.Unlock()
	select {
	case <-f.done:
		return f.list, f.err
	case <-ctx.Done():
		return nil, fmt.Errorf("listing vms: %w", ctx.Err())
	}
}

// invalidateListing drops the cached listing after a change this process made.
func (p *Provider) invalidateListing() {
	p.listMu.Lock()
	defer p.listMu.Unlock()
	p.list, p.listAt = nil, time.Time{}
	p.gen++
}

// cachedListing is the listing at most one poll interval old.
func (p *Provider) cachedListing(ctx context.Context) ([]Resource, error) {
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
// VMID and name.
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
	if mok && m.Name != name {
		mok = false // a mark copied onto another VM is not this VM's mark
	}
	if name != "" && cfgStr(cfg, "lock") == "" {
		p.mu.Lock()
		p.marks[r.VMID] = markEntry{name: name, m: m, ok: mok}
		p.mu.Unlock()
	}
	return m, mok, nil
}

func (p *Provider) forget(vmid int) {
	p.mu.Lock()
	defer p.mu.Unlock()
	delete(p.marks, vmid)
	delete(p.addrs, vmid)
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

// hash64 hashes the parts of an identity.
func hash64(parts ...string) uint64 {
	h := fnv.New64a()
	for _, s := range parts {
		_, _ = h.Write([]byte(s))
		_, _ = h.Write([]byte{0})
	}
	return h.Sum64()
}

// vmidFor is the first VMID probed for an instance.
func (p *Provider) vmidFor(ownerUID, name string) int {
	size := uint64(p.hi - p.lo + 1)                //nolint:gosec // G115: hi > lo, validated.
	return p.lo + int(hash64(ownerUID, name)%size) //nolint:gosec // G115: below size.
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
	delete(p.tasks, name)
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

func (p *Provider) setPending(name string, t pending) {
	p.mu.Lock()
	p.tasks[name] = t
	p.mu.Unlock()
	// The task changes what the listing shows.
	p.invalidateListing()
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
		st, err := p.api.taskStatus(ctx, ref.node, ref.upid)
		if err != nil {
			var ae *APIError
			if errors.As(err, &ae) && ae.Status < 595 {
				// The task is unknown (the node restarted?): forget it and
				// judge from what the API shows.
				p.mu.Lock()
				delete(p.tasks, name)
				p.mu.Unlock()
				return nil
			}
			return classify("reading the status of the "+t.kind+" task", err)
		}
		if !st.Done() {
			return provider.NewInProgress(t.step, p.poll())
		}
		if !st.OK() {
			p.mu.Lock()
			delete(p.tasks, name)
			p.mu.Unlock()
			logr.FromContextOrDiscard(ctx).Info("proxmox task failed", "task", t.kind, "node", ref.node, "vmid", t.vmid, "upid", ref.upid, "exitstatus", st.ExitStatus)
			return provider.NewTransient(fmt.Errorf("%s task on node %s failed: %s", t.kind, ref.node, st.ExitStatus))
		}
	}
	p.mu.Lock()
	delete(p.tasks, name)
	p.done[name+"/"+t.kind] = true
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
