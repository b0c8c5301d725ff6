package libvirt

import (
	"context"
	"errors"
	"fmt"
	"net/netip"
	"strings"
	"sync"

	"github.com/go-logr/logr"

	"github.com/egress-proxies/egress-proxies-operator/internal/provider"
)

// Get implements provider.Provider. It reads the host's shared listing (one
// round trip per host per poll interval for all instances), the definition
// once per domain, and the address only until it is known for the domain's
// current run (the run's id changes when the domain restarts).
func (p *Provider) Get(ctx context.Context, id provider.ID) (provider.Instance, error) {
	h, name, err := p.parseID(id)
	if err != nil {
		return provider.Instance{}, err
	}
	list, err := p.cachedListing(ctx, h)
	if err != nil {
		return provider.Instance{}, classify("listing domains of host "+h.Name, err)
	}
	d, ok := find(list, name)
	if !ok {
		// The cached listing may predate the domain: confirm before NotFound.
		if list, err = p.listing(ctx, h, p.now()); err != nil {
			return provider.Instance{}, classify("listing domains of host "+h.Name, err)
		}
		if d, ok = find(list, name); !ok {
			p.forget(h.Name, name)
			return provider.Instance{}, provider.NewNotFound(fmt.Errorf("domain %s does not exist on host %s", name, h.Name))
		}
	}
	f, err := p.factsOf(ctx, h, d)
	if errors.Is(err, errNoDomain) {
		p.invalidate(h.Name)
		return provider.Instance{}, provider.NewTransient(fmt.Errorf("domain %s on host %s was listed but is gone: undefined meanwhile?", name, h.Name))
	}
	if err != nil {
		return provider.Instance{}, classify(fmt.Sprintf("reading domain %s on host %s", name, h.Name), err)
	}
	if !f.Marked {
		return provider.Instance{}, provider.NewNotFound(fmt.Errorf("domain %s on host %s does not carry the operator's mark", name, h.Name))
	}
	inst := instance(h, d, f)
	switch d.State {
	case stateRunning, stateBlocked:
	case stateShutoff, stateCrashed, statePaused, statePMSuspended:
		p.dropAddr(h.Name, name)
		inst.State = provider.StateStopped
		return inst, nil
	case stateNone, stateShutdown:
		inst.State = provider.StateProvisioning
		return inst, nil
	}
	key := h.Name + "/" + name
	p.mu.Lock()
	a, cached := p.addrs[key]
	p.mu.Unlock()
	if cached && a.uuid == d.UUID && a.id == d.ID {
		p.releaseSeed(ctx, h, d, f)
		inst.State, inst.Address = provider.StateRunning, a.addr
		return inst, nil
	}
	addr, err := p.address(ctx, h, name, f)
	if err != nil {
		return provider.Instance{}, err
	}
	if !addr.IsValid() {
		logr.FromContextOrDiscard(ctx).V(1).Info("no address yet", "host", h.Name, "domain", name, "source", p.block.Addresses())
		inst.State = provider.StateProvisioning
		return inst, nil
	}
	p.mu.Lock()
	p.addrs[key] = addrEntry{uuid: d.UUID, id: d.ID, addr: addr}
	p.mu.Unlock()
	// An address means the guest has read its seed (see releaseSeed).
	p.releaseSeed(ctx, h, d, f)
	inst.State, inst.Address = provider.StateRunning, addr
	return inst, nil
}

func (p *Provider) dropAddr(host, name string) {
	p.mu.Lock()
	defer p.mu.Unlock()
	delete(p.addrs, host+"/"+name)
}

// address reads a running domain's address from the source the entry
// configures; an invalid address means none yet.
func (p *Provider) address(ctx context.Context, h Host, name string, f domainFacts) (netip.Addr, error) {
	if p.block.Addresses() == AddressSourceAgent {
		ifaces, err := p.drv.agentInterfaces(ctx, h, name)
		if errors.Is(err, errNoAgent) || errors.Is(err, errNoDomain) {
			return netip.Addr{}, nil // not up yet
		}
		if err != nil {
			return netip.Addr{}, classify(fmt.Sprintf("asking the guest agent of domain %s on host %s", name, h.Name), err)
		}
		return agentAddress(ifaces, f.MAC), nil
	}
	leases, err := p.networkLeases(ctx, h)
	if err != nil {
		return netip.Addr{}, classify(fmt.Sprintf("reading the leases of network %s on host %s", p.block.Network, h.Name), err)
	}
	for _, l := range leases {
		if l.MAC == f.MAC && l.Addr.Is4() {
			return l.Addr, nil
		}
	}
	return netip.Addr{}, nil
}

// networkLeases returns the host network's leases, read at most once per
// poll interval for all domains waiting for an address.
func (p *Provider) networkLeases(ctx context.Context, h Host) ([]lease, error) {
	p.mu.Lock()
	mu, ok := p.leaseLocks[h.Name]
	if !ok {
		mu = &sync.Mutex{}
		p.leaseLocks[h.Name] = mu
	}
	p.mu.Unlock()
	mu.Lock()
	defer mu.Unlock()
	p.mu.Lock()
	e, cached := p.leases[h.Name]
	p.mu.Unlock()
	if cached && p.now().Sub(e.at) < p.poll() {
		return e.leases, nil
	}
	ls, err := p.drv.leases(ctx, h, p.block.Network)
	if err != nil {
		return nil, err
	}
	p.mu.Lock()
	p.leases[h.Name] = leaseEntry{at: p.now(), leases: ls}
	p.mu.Unlock()
	return ls, nil
}

// agentAddress picks the first usable IPv4 address of the interface with
// the domain's MAC, or of any non-loopback interface.
func agentAddress(ifaces []guestInterface, mac string) netip.Addr {
	pickFrom := func(match func(guestInterface) bool) netip.Addr {
		for _, i := range ifaces {
			if !match(i) {
				continue
			}
			for _, a := range i.Addrs {
				if a.Is4() && !a.IsLoopback() && !a.IsLinkLocalUnicast() && !a.IsUnspecified() {
					return a
				}
			}
		}
		return netip.Addr{}
	}
	if a := pickFrom(func(i guestInterface) bool { return mac != "" && strings.EqualFold(i.MAC, mac) }); a.IsValid() {
		return a
	}
	return pickFrom(func(i guestInterface) bool { return i.Name != "lo" })
}

// ListByTag implements provider.Provider: the marked domains of every host,
// each host listed at most once per poll interval. A host that cannot be
// listed fails the whole call (an error class garbage collection skips on),
// since its domains cannot be told apart from none.
func (p *Provider) ListByTag(ctx context.Context) ([]provider.Instance, error) {
	type result struct {
		out []provider.Instance
		err error
	}
	res := eachHost(p.block.Hosts, func(h Host) result {
		out, err := p.listHost(ctx, h)
		return result{out, err}
	})
	var out []provider.Instance
	var errs []error
	for _, r := range res {
		out = append(out, r.out...)
		if r.err != nil {
			errs = append(errs, r.err)
		}
	}
	if len(errs) > 0 {
		return nil, classify("listing domains", errors.Join(errs...))
	}
	return out, nil
}

func (p *Provider) listHost(ctx context.Context, h Host) ([]provider.Instance, error) {
	list, err := p.cachedListing(ctx, h)
	if err != nil {
		return nil, err
	}
	// Garbage collection lists through here: orphaned seeds go with it.
	p.sweepSeeds(ctx, h)
	log := logr.FromContextOrDiscard(ctx)
	var out, unverified []provider.Instance
	defer func() {
		p.mu.Lock()
		defer p.mu.Unlock()
		if p.unverified == nil {
			p.unverified = map[string][]provider.Instance{}
		}
		p.unverified[h.Name] = unverified
	}()
	for _, d := range list {
		f, err := p.factsOf(ctx, h, d)
		if errors.Is(err, errNoDomain) {
			continue
		}
		if err != nil {
			if ctx.Err() != nil {
				return nil, ctx.Err()
			}
			var he *HostError
			if errors.As(err, &he) {
				return nil, err
			}
			log.Info("skipping a domain whose definition cannot be read", "host", h.Name, "domain", d.Name, "error", err.Error())
			continue
		}
		if !f.Marked {
			if f.BadSignature {
				unverified = append(unverified, provider.Instance{ID: ID(h.Name, d.Name), Name: d.Name, Node: h.Name})
			}
			continue
		}
		inst := instance(h, d, f)
		switch d.State {
		case stateRunning, stateBlocked:
			inst.State = provider.StateRunning
			p.mu.Lock()
			if a, ok := p.addrs[h.Name+"/"+d.Name]; ok && a.uuid == d.UUID && a.id == d.ID {
				inst.Address = a.addr
			}
			p.mu.Unlock()
		case stateShutoff, stateCrashed, statePaused, statePMSuspended:
			inst.State = provider.StateStopped
		case stateNone, stateShutdown:
			inst.State = provider.StateProvisioning
		}
		out = append(out, inst)
	}
	return out, nil
}
