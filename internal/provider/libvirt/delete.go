package libvirt

import (
	"context"
	"errors"
	"fmt"
	"slices"

	"github.com/go-logr/logr"

	"github.com/egress-proxies/egress-proxies-operator/internal/provider"
)

// Delete implements provider.Provider: destroy, delete the disk and the
// seed, undefine (with NVRAM and managed save), one step per call,
// InProgress between steps. The domain is undefined last, so that a
// restarted operator still finds its volumes through it. A domain at the
// name without the operator's mark is left alone, and the instance counts as
// gone.
func (p *Provider) Delete(ctx context.Context, id provider.ID) error {
	h, name, unlock, err := provider.BeginDelete(ctx, &p.names, id, p.parseID)
	if err != nil {
		return err
	}
	defer unlock()
	list, err := p.listing(ctx, h, p.now())
	if err != nil {
		return classify("listing domains of host "+h.Name, err)
	}
	d, ok := find(list, name)
	if !ok {
		p.forget(h.Name, name)
		return nil
	}
	f, err := p.factsOf(ctx, h, d)
	if errors.Is(err, errNoDomain) {
		p.forget(h.Name, name)
		return nil
	}
	if err != nil {
		return classify(fmt.Sprintf("reading domain %s on host %s", name, h.Name), err)
	}
	if !f.Marked {
		// The Proxy's own domain is gone and another took its name: it is
		// left alone, and the Proxy's instance counts as gone.
		logr.FromContextOrDiscard(ctx).Info("leaving alone a domain without the operator's mark at the instance's name", "host", h.Name, "domain", name)
		p.forget(h.Name, name)
		return nil
	}
	gone, err := p.removeStep(ctx, h, d, f)
	if err != nil {
		return err
	}
	if !gone {
		return provider.NewInProgress(fmt.Sprintf("removing domain %s on host %s", name, h.Name), p.poll())
	}
	return nil
}

// removeStep does the next step of removing a marked domain and reports
// whether it is gone. Only the volumes with the instance's own names are
// deleted, so a disk an administrator attached stays.
func (p *Provider) removeStep(ctx context.Context, h Host, d domainInfo, f domainFacts) (bool, error) {
	name := d.Name
	if d.State == stateRunning || d.State == stateBlocked || d.State == stateShutdown {
		// A guest that powers off cleanly releases its DHCP lease; one that
		// does not within the budget is destroyed.
		key := "shutdown/" + h.Name + "/" + name
		p.mu.Lock()
		since, asked := p.shutdowns[key]
		if !asked {
			p.shutdowns[key] = p.now()
		}
		p.mu.Unlock()
		if !asked && p.block.ShutdownBudget() > 0 {
			err := p.drv.shutdownDomain(ctx, h, name)
			if err != nil && !errors.Is(err, errNoDomain) && !isNotRunning(err) {
				return false, classify(fmt.Sprintf("shutting down domain %s on host %s", name, h.Name), err)
			}
			p.invalidate(h.Name)
			return false, nil
		}
		if asked && p.now().Sub(since) < p.block.ShutdownBudget() {
			p.invalidate(h.Name)
			return false, nil
		}
	}
	if d.State.active() {
		err := p.drv.destroyDomain(ctx, h, name)
		if err != nil && !errors.Is(err, errNoDomain) && !isNotRunning(err) {
			return false, classify(fmt.Sprintf("destroying domain %s on host %s", name, h.Name), err)
		}
		p.dropAddr(h.Name, name)
		p.invalidate(h.Name)
		return false, nil
	}
	seed := p.seedVolume(name)
	for _, vol := range []string{diskVolume(name), seed} {
		// The seed goes by its name even when the drive no longer names it:
		// an operator that stopped between emptying the drive and deleting
		// the seed (releaseSeed) left it behind.
		if !slices.Contains(f.Volumes, vol) && vol != seed {
			continue
		}
		err := p.drv.deleteVolume(ctx, h, p.block.Pool, vol)
		if errors.Is(err, errNoVolume) || errors.Is(err, errNoPool) {
			continue
		}
		if err != nil {
			return false, classify(fmt.Sprintf("deleting volume %s on host %s", vol, h.Name), err)
		}
		return false, nil
	}
	err := p.drv.undefineDomain(ctx, h, name)
	if err != nil && !errors.Is(err, errNoDomain) {
		return false, classify(fmt.Sprintf("undefining domain %s on host %s", name, h.Name), err)
	}
	p.forget(h.Name, name)
	p.mu.Lock()
	delete(p.started, "seeded/"+name)
	delete(p.shutdowns, "shutdown/"+h.Name+"/"+name)
	delete(p.released, h.Name+"/"+name)
	p.mu.Unlock()
	p.invalidate(h.Name)
	return true, nil
}

// isNotRunning reports libvirt's refusal to destroy a domain that stopped
// since the listing.
func isNotRunning(err error) bool {
	return err != nil && containsFold(err.Error(), "domain is not running")
}
