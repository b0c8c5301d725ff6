package libvirt

import (
	"context"
	"errors"
	"fmt"
	"net/netip"
	"strings"
	"sync"
	"time"

	"github.com/go-logr/logr"

	"github.com/egress-proxies/egress-proxies-operator/internal/config"
	"github.com/egress-proxies/egress-proxies-operator/internal/ownership"
	"github.com/egress-proxies/egress-proxies-operator/internal/provider"
	"github.com/egress-proxies/egress-proxies-operator/internal/sharedread"
)

// Provider runs proxies as libvirt domains on a set of hosts reached over
// SSH. It serves both kvm2 (libvirt RPC) and kvm (virsh); only its driver
// differs.
type Provider struct {
	ident *ownership.Identity
	// entries are the configuration's entry names (provider.Deps.Entries).
	entries []string
	entry   *config.Entry
	block   *Block
	drv     driver
	now     func() time.Time
	names   provider.Names

	cmu      sync.Mutex
	listings map[string]*sharedread.Read[[]domainInfo] // by host name

	mu      sync.Mutex
	facts   map[string]factsEntry // by host/name: the definition read for a UUID
	addrs   map[string]addrEntry  // by host/name: the address of a running domain
	leases  map[string]leaseEntry // by host: the network's leases
	started map[string]bool       // by name: started by this process
	pools   map[string]poolFacts  // by host: the pool's definition

	shutdowns  map[string]time.Time   // by shutdown/host/name: when Delete asked the guest to power off
	released   map[string]string      // by host/name: the domain UUID whose consumed seed is gone
	ejects     map[string]ejectRetry  // by host/name: an eject the guest's locked tray held, and when to try again
	sweeps     map[string]time.Time   // by host: the last sweep of orphaned seeds
	leaseLocks map[string]*sync.Mutex // by host: one leases read at a time
	// unverified are, by host, the domains the latest listing saw with
	// this installation's mark and a signature that does not verify.
	unverified map[string][]provider.Instance
}

type factsEntry struct {
	uuid string
	f    domainFacts
}

type addrEntry struct {
	uuid string
	id   int
	addr netip.Addr
}

type leaseEntry struct {
	at     time.Time
	leases []lease
}

var (
	_ provider.Provider = (*Provider)(nil)
	_ provider.Checker  = (*Provider)(nil)

	_ provider.UnverifiedLister = (*Provider)(nil)
)

// New builds the provider of an entry, whose Block is a *Block and whose
// Type is TypeKVM2 or TypeKVM. It contacts nothing. d.Log receives the
// warning about disabled host key verification; d.Ownership is required.
func New(e *config.Entry, d provider.Deps) (*Provider, error) {
	b, err := provider.BlockOf[Block]("libvirt provider", e, d)
	if err != nil {
		return nil, err
	}
	var drv driver
	switch e.Type {
	case TypeKVM2:
		drv = newRPCDriver(b)
	case TypeKVM:
		drv = newShellDriver(b)
	default:
		return nil, fmt.Errorf("libvirt provider %q: type %q is neither %s nor %s", e.Name, e.Type, TypeKVM2, TypeKVM)
	}
	if b.InsecureIgnoreHostKey {
		d.Log.Info("WARNING: SSH host key verification is disabled (insecureIgnoreHostKey): anyone on the path to the hosts can impersonate them and receive the proxies' credentials; give knownHostsFile instead",
			"provider", e.Name)
	}
	return &Provider{
		ident: d.Ownership, entries: d.Entries, entry: e, block: b, drv: drv, now: d.Clock(),
		listings: map[string]*sharedread.Read[[]domainInfo]{},
		facts:    map[string]factsEntry{}, addrs: map[string]addrEntry{}, leases: map[string]leaseEntry{},
		started: map[string]bool{}, pools: map[string]poolFacts{}, shutdowns: map[string]time.Time{}, leaseLocks: map[string]*sync.Mutex{},
		released: map[string]string{}, sweeps: map[string]time.Time{}, ejects: map[string]ejectRetry{},
	}, nil
}

// Close ends the SSH connections (and with them their keepalives).
func (p *Provider) Close() { p.drv.close() }

// Calls returns the number of libvirt round trips made so far, for the
// benchmark.
func (p *Provider) Calls() uint64 { return p.drv.calls() }

// ID returns the instance ID of a domain: "host/name".
func ID(host, name string) provider.ID { return provider.ID(host + "/" + name) }

func (p *Provider) parseID(id provider.ID) (Host, string, error) {
	host, name, ok := strings.Cut(string(id), "/")
	if !ok || host == "" || name == "" || strings.Contains(name, "/") {
		return Host{}, "", provider.NewPermanent(fmt.Errorf("instance id %q is not host/domain", id), "the instance id was not made by the libvirt provider")
	}
	h, ok := p.block.Host(host)
	if !ok {
		return Host{}, "", provider.NewPermanent(fmt.Errorf("instance id %q names host %s, which is not in the entry", id, host),
			"put the host back into the entry, or delete the domain by hand and clear the Proxy's instance id")
	}
	return h, name, nil
}

// hostListing returns the shared listing of host h.
func (p *Provider) hostListing(h Host) *sharedread.Read[[]domainInfo] {
	p.cmu.Lock()
	defer p.cmu.Unlock()
	r, ok := p.listings[h.Name]
	if !ok {
		r = sharedread.New(func(ctx context.Context) ([]domainInfo, error) {
			l, err := p.drv.listDomains(ctx, h)
			if l == nil && err == nil {
				l = []domainInfo{}
			}
			return l, err
		}, sharedread.Options{
			Now: p.now,
			// The listing outlives a caller whose context ends: others wait
			// for it. It is bounded by the dial timeout and the connection's
			// keepalive.
			Bound: p.block.DialTimeout() + p.block.KeepaliveInterval()*2,
		})
		p.listings[h.Name] = r
	}
	return r
}

// listing returns the host's domains as listed at or after notBefore. One
// listing is shared by every caller that wants it, so that Get costs at
// most one round trip per host per poll interval for all instances.
func (p *Provider) listing(ctx context.Context, h Host, notBefore time.Time) ([]domainInfo, error) {
	l, _, err := p.hostListing(h).Get(ctx, notBefore)
	if err != nil && ctx.Err() != nil {
		return nil, fmt.Errorf("listing domains of host %s: %w", h.Name, err)
	}
	return l, err
}

// invalidate drops a host's cached listing after a change this process made.
func (p *Provider) invalidate(host string) {
	p.cmu.Lock()
	r := p.listings[host]
	p.cmu.Unlock()
	if r != nil { // no listing yet: none kept, none in flight
		r.Invalidate()
	}
}

func (p *Provider) cachedListing(ctx context.Context, h Host) ([]domainInfo, error) {
	return p.listing(ctx, h, p.now().Add(-p.block.PollInterval()))
}

func find(list []domainInfo, name string) (domainInfo, bool) {
	for _, d := range list {
		if d.Name == name {
			return d, true
		}
	}
	return domainInfo{}, false
}

// factsOf returns what a listed domain's definition says, read once per
// domain UUID (the mark and the MAC do not change). Marked is true only for
// a mark of this installation whose signature verifies for this host,
// entry and domain: an unsigned, forged, copied or other installation's
// mark is foreign.
func (p *Provider) factsOf(ctx context.Context, h Host, d domainInfo) (domainFacts, error) {
	key := h.Name + "/" + d.Name
	p.mu.Lock()
	e, ok := p.facts[key]
	p.mu.Unlock()
	if ok && e.uuid == d.UUID && d.UUID != "" {
		return e.f, nil
	}
	doc, err := p.drv.domainXML(ctx, h, d.Name)
	if err != nil {
		return domainFacts{}, err
	}
	f, err := parseDomain(doc, p.block.Pool)
	if err != nil {
		return domainFacts{}, err
	}
	if f.Marked {
		if err := p.ident.VerifyStamp(f.Mark, p.entry.Name, hostPlace(h.Name)); err != nil {
			logr.FromContextOrDiscard(ctx).V(1).Info("a domain's mark is not this installation's; leaving it alone",
				"host", h.Name, "domain", d.Name, "reason", err.Error())
			f.Marked = false
			f.BadSignature = errors.Is(err, ownership.ErrBadSignature) && !p.ident.SignedForAnother(f.Mark, p.entries, hostPlace(h.Name))
		}
	}
	if d.UUID != "" {
		p.mu.Lock()
		p.facts[key] = factsEntry{uuid: d.UUID, f: f}
		p.mu.Unlock()
	}
	return f, nil
}

func (p *Provider) forget(host, name string) {
	key := host + "/" + name
	p.mu.Lock()
	defer p.mu.Unlock()
	delete(p.facts, key)
	delete(p.addrs, key)
	delete(p.released, key)
	delete(p.ejects, key)
	delete(p.started, name)
}

func (p *Provider) poll() time.Duration { return p.block.PollInterval() }

// instance builds the provider.Instance of a marked domain.
func instance(h Host, d domainInfo, f domainFacts) provider.Instance {
	return provider.Instance{ID: ID(h.Name, d.Name), Name: f.Mark.Name, OwnerUID: f.Mark.OwnerUID, Node: h.Name, CreatedAt: f.Mark.CreatedAt}
}

// eachHost runs fn on every given host concurrently and returns the
// results in host order.
func eachHost[T any](hosts []Host, fn func(h Host) T) []T {
	out := make([]T, len(hosts))
	var wg sync.WaitGroup
	for i, h := range hosts {
		wg.Go(func() { out[i] = fn(h) })
	}
	wg.Wait()
	return out
}

// Unverified implements provider.UnverifiedLister, from the latest listing
// of every host, in host order.
func (p *Provider) Unverified() []provider.Instance {
	p.mu.Lock()
	defer p.mu.Unlock()
	var out []provider.Instance
	for _, h := range p.block.Hosts {
		out = append(out, p.unverified[h.Name]...)
	}
	return out
}
