package proxmox

import (
	"context"
	"fmt"
	"strconv"

	"github.com/egress-proxies/egress-proxies-operator/internal/provider"
)

// Delete implements provider.Provider (Part 2, Delete): stop, delete the
// seed, destroy with purge, one task per call, InProgress while it runs.
// A VM without the operator's mark is refused and never touched.
func (p *Provider) Delete(ctx context.Context, id provider.ID) error {
	_, vmid, err := parseID(id)
	if err != nil {
		return err
	}
	list, err := p.listing(ctx, p.now())
	if err != nil {
		return classify("listing vms", err)
	}
	r, ok := find(list, vmid)
	if !ok {
		return p.deleteOrphanSeed(ctx, vmid)
	}
	if r.Type != "qemu" {
		return provider.NewPermanent(fmt.Errorf("VMID %d is a %s, not a VM of this operator", vmid, r.Type), "remove the Proxy's instance id; the container is left alone")
	}
	if r.Status == "unknown" || (r.Lock != "" && r.Lock != lockSuspended) {
		return provider.NewTransient(fmt.Errorf("VM %d is listed with status %q and lock %q: a task in progress, or node %s unreachable", vmid, r.Status, r.Lock, r.Node))
	}
	m, mok, err := p.markOf(ctx, r)
	if isMissingVM(err) {
		return p.deleteOrphanSeed(ctx, vmid)
	}
	if err != nil {
		return classify(fmt.Sprintf("reading the config of VM %d", vmid), err)
	}
	if !mok {
		return provider.NewPermanent(fmt.Errorf("VM %d does not carry the operator's mark: refusing to delete it", vmid),
			"the VM is not the operator's; remove it by hand if it should go")
	}
	unlock, err := p.names.Lock(ctx, m.Name)
	if err != nil {
		return provider.NewTransient(err)
	}
	defer unlock()
	p.mu.Lock()
	_, hadTask := p.tasks[m.Name]
	p.mu.Unlock()
	if err := p.checkPending(ctx, m.Name); err != nil {
		return err
	}
	if hadTask {
		// The listing predates the task's end: look again.
		if p.isDone(m.Name, kindDestroy) {
			p.finishDelete(m.Name, vmid)
			return nil
		}
		if list, err = p.listing(ctx, p.now()); err != nil {
			return classify("listing vms", err)
		}
		if r, ok = find(list, vmid); !ok {
			return p.deleteOrphanSeed(ctx, vmid)
		}
	}
	node := r.Node
	if r.Status == "running" {
		// Also for paused VMs (F25); a hibernated one needs no stop (F24).
		upid, err := p.api.stop(ctx, node, vmid)
		if isMissingVM(err) {
			return p.deleteOrphanSeed(ctx, vmid)
		}
		if err != nil {
			return classify(fmt.Sprintf("stopping VM %d", vmid), err)
		}
		p.dropAddr(vmid)
		return p.inProgress(m.Name, kindStop, node, upid, fmt.Sprintf("stopping VM %d", vmid))
	}
	if !p.isDone(m.Name, kindSeedDelete) {
		// The seed goes before the VM, so a failed delete is retried, not leaked.
		upid, err := p.api.deleteVolume(ctx, node, p.block.ISOStorage, p.seedVolid(m.Name))
		if err != nil {
			return p.seedDeleteError(err, node, m.Name)
		}
		return p.inProgress(m.Name, kindSeedDelete, node, upid, "deleting the seed of VM "+strconv.Itoa(vmid))
	}
	upid, err := p.api.destroy(ctx, node, vmid)
	if isMissingVM(err) {
		p.finishDelete(m.Name, vmid)
		return nil
	}
	if err != nil {
		return classify(fmt.Sprintf("destroying VM %d", vmid), err)
	}
	return p.inProgress(m.Name, kindDestroy, node, upid, fmt.Sprintf("destroying VM %d", vmid))
}

func (p *Provider) inProgress(name, kind, node, upid, step string) error {
	p.setPending(name, pending{step: step, kind: kind, node: node, upid: upid})
	return provider.NewInProgress(step, p.poll())
}

func (p *Provider) seedDeleteError(err error, node, name string) error {
	if ae, ok := apiErr(err); ok && ae.Status == 403 {
		// F13: deleting a volume needs Datastore.Allocate.
		return provider.NewPermanent(fmt.Errorf("deleting seed %s on %s: %w", seedFile(name), node, err),
			fmt.Sprintf("grant the token Datastore.Allocate on /storage/%s (a storage dedicated to seeds)", p.block.ISOStorage))
	}
	return classify(fmt.Sprintf("deleting seed %s on %s", seedFile(name), node), err)
}

// deleteOrphanSeed handles a VM that is gone: its seed, when its name is
// known to this process and the seed was not deleted already, is deleted on
// every configured node (the VM's node is unknown).
func (p *Provider) deleteOrphanSeed(ctx context.Context, vmid int) error {
	p.mu.Lock()
	e, known := p.marks[vmid]
	p.mu.Unlock()
	if !known || !e.ok {
		p.forget(vmid)
		return nil
	}
	name := e.m.Name
	if p.isDone(name, kindSeedDelete) {
		p.finishDelete(name, vmid)
		return nil
	}
	for _, node := range p.block.Nodes() {
		if _, err := p.api.deleteVolume(ctx, node, p.block.ISOStorage, p.seedVolid(name)); err != nil {
			return p.seedDeleteError(err, node, name)
		}
	}
	p.finishDelete(name, vmid)
	return nil
}

func (p *Provider) finishDelete(name string, vmid int) {
	p.clearName(name)
	p.forget(vmid)
	p.invalidateListing()
}
