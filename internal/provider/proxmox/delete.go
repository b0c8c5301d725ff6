package proxmox

import (
	"context"
	"fmt"
	"slices"
	"strconv"

	"github.com/go-logr/logr"

	"github.com/egress-proxies/egress-proxies-operator/internal/provider"
)

// Delete implements provider.Provider (the Delete steps of docs/proxmox-behaviour.md): stop, delete the
// seed, destroy with purge, one task per call, InProgress while it runs.
//
// The instance is gone, and Delete succeeds, when the VMID holds no VM any
// more or holds something that is not this instance: a container, a VM
// without the operator's mark, or another instance's VM. Such a VM is never
// touched. In each of these cases the instance's seed is deleted on every
// configured node (the node of a VM that is gone is unknown); the seed's
// name comes from the ID, so a process that never saw the VM does it too.
func (p *Provider) Delete(ctx context.Context, id provider.ID) error {
	vmid, name, unlock, err := provider.BeginDelete(ctx, &p.names, id, parseVMID)
	if err != nil {
		return err
	}
	defer unlock()
	p.mu.Lock()
	t, hadTask := p.tasks[name]
	p.mu.Unlock()
	if err := p.checkPending(ctx, name); err != nil {
		return err
	}
	if hadTask && p.isDone(name, t.kind) && t.vmid == vmid {
		// A step of this Delete ended OK: this process judged the VM ours
		// when it started it, so the next step needs no listing.
		switch t.kind {
		case kindDestroy:
			p.finishDelete(ctx, name, vmid, true)
			return nil
		case kindSeedDelete:
			if t.vmGone {
				p.finishDelete(ctx, name, vmid, false)
				return nil
			}
			return p.destroy(ctx, name, t.node, vmid)
		case kindStop:
			return p.removeStopped(ctx, name, t.node, vmid)
		}
	}
	list, at, err := p.listing(ctx, p.freshness(name))
	if err != nil {
		return classify("listing vms", err)
	}
	if r, ok := find(list, vmid); ok && r.Status == "unknown" && r.Lock == "" && at.Before(p.now()) {
		// A node down, as a shared listing saw it: look again before
		// failing, it may be back.
		if list, _, err = p.listing(ctx, p.now()); err != nil {
			return classify("listing vms", err)
		}
	}
	r, ok := find(list, vmid)
	if !ok {
		return p.gone(ctx, name, vmid, "no VM has the VMID any more")
	}
	if r.Type != "qemu" {
		return p.gone(ctx, name, vmid, "the VMID holds a "+r.Type+", left alone")
	}
	if r.Lock == lockClone {
		// Deleted during its create: the clone must end before the VM can
		// be judged and destroyed (F8: a VM being cloned has no name yet).
		return provider.NewInProgress(fmt.Sprintf("waiting for the clone of VM %d to end", vmid), p.poll())
	}
	if r.Status == "unknown" || (r.Lock != "" && r.Lock != lockSuspended) {
		return provider.NewTransient(fmt.Errorf("VM %d is listed with status %q and lock %q: a task in progress, or node %s unreachable", vmid, r.Status, r.Lock, r.Node))
	}
	m, mok, err := p.markOf(ctx, r)
	if isMissingVM(err) {
		return p.gone(ctx, name, vmid, "no VM has the VMID any more")
	}
	if err != nil {
		return classify(fmt.Sprintf("reading the config of VM %d", vmid), err)
	}
	if !mok || m.Name != name {
		return p.gone(ctx, name, vmid, "the VMID holds a VM that is not this instance's, left alone")
	}
	node := r.Node
	if r.Status == "running" {
		// Also for paused VMs (F25); a hibernated one needs no stop (F24).
		upid, err := p.api.stop(ctx, node, vmid)
		if isMissingVM(err) {
			return p.gone(ctx, name, vmid, "no VM has the VMID any more")
		}
		if err != nil {
			return classify(fmt.Sprintf("stopping VM %d", vmid), err)
		}
		p.dropAddr(vmid)
		return p.inProgress(name, kindStop, node, vmid, upid, fmt.Sprintf("stopping VM %d", vmid))
	}
	return p.removeStopped(ctx, name, node, vmid)
}

// removeStopped deletes the seed of our stopped VM, then destroys the VM.
func (p *Provider) removeStopped(ctx context.Context, name, node string, vmid int) error {
	if !p.isDone(name, kindSeedDelete) {
		if err := p.awaitUploads(ctx, name, vmid, node); err != nil {
			return err
		}
		// The seed goes before the VM, so a failed delete is retried, not
		// leaked. It goes even when a Get removed it after boot: that Get
		// did not wait for its delete task, which may have failed, and once
		// the VM is gone only the sweep (after its grace) would find the
		// seed. Deleting a missing volume succeeds (F13).
		upid, err := p.api.deleteVolume(ctx, node, p.block.ISOStorage, p.seedVolid(name))
		if err != nil {
			return p.seedDeleteError(err, node, name)
		}
		return p.inProgress(name, kindSeedDelete, node, vmid, upid, "deleting the seed of VM "+strconv.Itoa(vmid))
	}
	return p.destroy(ctx, name, node, vmid)
}

// destroy destroys our stopped VM with its disks.
func (p *Provider) destroy(ctx context.Context, name, node string, vmid int) error {
	upid, err := p.api.destroy(ctx, node, vmid)
	if isMissingVM(err) {
		return p.gone(ctx, name, vmid, "no VM has the VMID any more")
	}
	if err != nil {
		return classify(fmt.Sprintf("destroying VM %d", vmid), err)
	}
	return p.inProgress(name, kindDestroy, node, vmid, upid, fmt.Sprintf("destroying VM %d", vmid))
}

// awaitUploads waits, before the seed of name is deleted, for the uploads
// (imgcopy tasks) of this token running on nodes. An upload lands its ISO
// when its task ends, seconds after the call, and a volume delete ends
// sooner (F12, F13, F26): a delete sent meanwhile finds no volume, ends OK,
// and the seed lands after it, with nothing left to lead to it. This Delete
// may not know of the upload: its answer was lost, a failed status read
// dropped its task, or another process sent it before a restart. The task
// (F12) names no volume, so every upload of ours running on the nodes is
// waited for, once per Delete; none of this instance starts after the look,
// since its Create is serialised on the name and no longer called. It
// returns InProgress while it waits, nil once it has.
func (p *Provider) awaitUploads(ctx context.Context, name string, vmid int, nodes ...string) error {
	if p.isDone(name, kindUploads) {
		return nil
	}
	user, err := p.api.tokenUser()
	if err != nil {
		return classify("reading the token", err)
	}
	var refs []taskRef
	for _, node := range nodes {
		list, err := p.api.activeTasks(ctx, node, "imgcopy")
		if err != nil {
			return classify("listing the uploads running on "+node, err)
		}
		for _, e := range list {
			if e.Status == "" && upidUser(e.UPID) == user {
				refs = append(refs, taskRef{node: node, upid: e.UPID})
			}
		}
	}
	if len(refs) == 0 {
		return nil
	}
	step := fmt.Sprintf("waiting for %d seed upload(s) to end before deleting the seed of %s", len(refs), name)
	p.setPending(name, pending{step: step, kind: kindUploads, node: refs[0].node, vmid: vmid, upid: refs[0].upid, more: refs[1:]})
	return provider.NewInProgress(step, p.poll())
}

func (p *Provider) inProgress(name, kind, node string, vmid int, upid, step string) error {
	p.setPending(name, pending{step: step, kind: kind, node: node, vmid: vmid, upid: upid})
	return provider.NewInProgress(step, p.poll())
}

func (p *Provider) seedDeleteError(err error, node, name string) error {
	if ae, ok := apiErr(err); ok && ae.Status == 403 {
		// F13: deleting a volume needs Datastore.Allocate.
		return provider.NewPermanent(fmt.Errorf("deleting seed %s on %s: %w", p.seedFile(name), node, err),
			fmt.Sprintf("grant the token Datastore.Allocate on /storage/%s (a storage dedicated to seeds)", p.block.ISOStorage))
	}
	return classify(fmt.Sprintf("deleting seed %s on %s", p.seedFile(name), node), err)
}

// gone finishes the Delete of an instance whose VM is no longer at its VMID.
// Its seed may be left on any configured node (the VM's node is unknown, and
// it may have been cloned elsewhere before a change of placement): every
// node's ISO storage is looked at, and the seed deleted where it is, which
// returns InProgress until those delete tasks ended. Delete succeeds once
// the seed is on no node, so a second Delete succeeds at once.
func (p *Provider) gone(ctx context.Context, name string, vmid int, why string) error {
	if err := p.awaitUploads(ctx, name, vmid, p.block.Nodes()...); err != nil {
		return err
	}
	volid := p.seedVolid(name)
	var refs []taskRef
	for _, node := range p.block.Nodes() {
		vols, err := p.api.storageContent(ctx, node, p.block.ISOStorage, "iso")
		if err != nil {
			return classify(fmt.Sprintf("listing ISO storage %s on %s", p.block.ISOStorage, node), err)
		}
		if !slices.ContainsFunc(vols, func(v Volume) bool { return v.VolID == volid }) {
			continue
		}
		upid, err := p.api.deleteVolume(ctx, node, p.block.ISOStorage, volid)
		if err != nil {
			return p.seedDeleteError(err, node, name)
		}
		refs = append(refs, taskRef{node: node, upid: upid})
	}
	if len(refs) == 0 {
		p.finishDelete(ctx, name, vmid, false)
		return nil
	}
	step := fmt.Sprintf("deleting the seed of %s (%s)", name, why)
	p.setPending(name, pending{step: step, kind: kindSeedDelete, node: refs[0].node, vmid: vmid, upid: refs[0].upid, more: refs[1:], vmGone: true})
	return provider.NewInProgress(step, p.poll())
}

// finishDelete forgets what this process knew of the instance and logs the
// outcome: destroyed says whether this Delete destroyed the VM.
func (p *Provider) finishDelete(ctx context.Context, name string, vmid int, destroyed bool) {
	p.clearName(name)
	p.forget(vmid)
	p.mu.Lock()
	delete(p.changed, name)
	p.mu.Unlock()
	logr.FromContextOrDiscard(ctx).Info("proxmox vm deleted", "vmid", vmid, "name", name, "destroyed", destroyed)
}
