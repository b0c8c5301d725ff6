package proxmox

import (
	"context"
	"errors"
	"fmt"
	"net/url"
	"strings"
	"time"

	"github.com/go-logr/logr"

	"github.com/egress-proxies/egress-proxies-operator/internal/provider"
)

// The seed holds the proxy's password (it is the cloud-init user-data), so
// it stays on the ISO storage only as long as the guest needs it. cloud-init
// reads the NoCloud seed in its first stage, before the network and long
// before the guest agent answers, and caches what it read for later boots
// of the same instance: once the agent reports an address, the provider
// empties the CD-ROM and deletes the seed volume. What a crash or a failed
// delete leaves behind, garbage collection sweeps (Sweep).

// seedSuffix ends every seed's file name.
const seedSuffix = "-seed.iso"

// seedGrace is how old a seed must be before Sweep may delete it. A seed is
// uploaded after its VM is cloned and attached right after the upload, so
// a younger seed may belong to a create in progress.
const seedGrace = 15 * time.Minute

// seedFile is the seed's file name on the ISO storage: the instance name,
// which identifies the instance, a token of it that only this installation
// and entry can make (ownership.Identity.SignedName), and the suffix. The
// name is a DNS label (instanceName) and the token lower-case base32, so
// the file name is safe in a volume ID and a URL.
//
// seedFile and seedNameOf are the one place that says which ISOs are ours:
// seedNameOf checks the token, so that an ISO someone named like a seed,
// or another installation's or entry's seed on a shared storage, is never
// taken for one of ours.
func (p *Provider) seedFile(name string) string {
	return p.ident.SignedName("seed", p.entry.Name, name) + seedSuffix
}

// seedNameOf returns the instance name of a seed's volume ID on the ISO
// storage, and false for any volume that is not a seed of ours.
func (p *Provider) seedNameOf(volid string) (string, bool) {
	file, ok := strings.CutPrefix(volid, p.block.ISOStorage+":iso/")
	if !ok {
		return "", false
	}
	signed, ok := strings.CutSuffix(file, seedSuffix)
	if !ok {
		return "", false
	}
	name, ok := p.ident.NameOfSigned("seed", p.entry.Name, signed)
	if !ok || !instanceName.MatchString(name) {
		return "", false
	}
	return name, true
}

func (p *Provider) seedVolid(name string) string {
	return p.block.ISOStorage + ":iso/" + p.seedFile(name)
}

// seedState is what this process knows of a VM's seed.
type seedState int

const (
	// seedUnknown: not known (treated as attached: removing is idempotent).
	seedUnknown seedState = iota
	// seedAttached: the VM's ide2 holds its seed.
	seedAttached
	// seedDetached: ide2 does not hold it; the volume may still be there
	// (a crash between the detach and the delete: Sweep finds it).
	seedDetached
	// seedRemoving: the detach and delete are under way in a Get.
	seedRemoving
	// seedRemoved: detached, and the delete of the volume was accepted.
	seedRemoved
)

func (p *Provider) seedOf(vmid int) seedState {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.seeds[vmid]
}

func (p *Provider) setSeed(vmid int, st seedState) {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.seeds[vmid] = st
}

// noteSeedConfig records what a config read says of the seed of the VM
// named name: attached, or not (which, for a VM this process removed the
// seed of, stays "removed").
func (p *Provider) noteSeedConfig(vmid int, name string, cfg map[string]any) {
	attached := name != "" && strings.HasPrefix(cfgStr(cfg, "ide2"), p.seedVolid(name)+",")
	p.mu.Lock()
	defer p.mu.Unlock()
	switch cur := p.seeds[vmid]; {
	case attached:
		p.seeds[vmid] = seedAttached
	case cur != seedRemoved && cur != seedRemoving:
		p.seeds[vmid] = seedDetached
	}
}

// consumeSeed removes the seed of a VM whose guest is up (its agent reports
// an address, so cloud-init has long read the seed): it empties the CD-ROM
// (ide2=none, which a running VM takes at once; removing the drive would
// wait for the next boot) and deletes the volume, without waiting for the
// delete task. It runs once per VM: a failed detach is logged and retried at the
// next Get; a delete that fails, or a delete task that fails, leaves a seed
// that Sweep finds.
// It never fails the Get.
func (p *Provider) consumeSeed(ctx context.Context, r Resource, name string) {
	p.mu.Lock()
	st := p.seeds[r.VMID]
	if st != seedUnknown && st != seedAttached {
		// Detached already: a volume left by a crash between the two
		// calls is Sweep's, which lists the storage once for every VM.
		p.mu.Unlock()
		return
	}
	p.seeds[r.VMID] = seedRemoving
	p.mu.Unlock()
	log := logr.FromContextOrDiscard(ctx)
	if err := p.api.setConfig(ctx, r.Node, r.VMID, url.Values{"ide2": {"none,media=cdrom"}}); err != nil {
		p.setSeed(r.VMID, st)
		log.Info("emptying the CD-ROM of the seed failed; retrying at the next Get", "vmid", r.VMID, "node", r.Node, "error", err.Error())
		return
	}
	if _, err := p.api.deleteVolume(ctx, r.Node, p.block.ISOStorage, p.seedVolid(name)); err != nil {
		p.setSeed(r.VMID, seedDetached)
		log.Info("deleting the seed failed; garbage collection sweeps it", "vmid", r.VMID, "node", r.Node, "volid", p.seedVolid(name), "error", err.Error())
		return
	}
	p.setSeed(r.VMID, seedRemoved)
	log.Info("proxmox seed removed", "vmid", r.VMID, "name", name, "volid", p.seedVolid(name))
}

// Sweep implements provider.Sweeper: it deletes the seeds of ours (by
// name, seedNameOf) on the ISO storage of every configured node that no VM
// needs: the seed of an instance that no listed VM carries (its VM was
// destroyed, and an upload landed after the delete, or the seed delete
// failed), and the seed of a running VM of ours whose CD-ROM no longer
// holds it (the guest consumed it, and the delete after the detach did not
// happen). Seeds younger than seedGrace, and those of a Create in progress
// in this process, are left alone. ISOs that are not seeds of ours are never
// touched. It starts the delete tasks and does not wait for them; it
// returns how many it started.
func (p *Provider) Sweep(ctx context.Context) (int, error) {
	list, _, err := p.listing(ctx, p.now())
	if err != nil {
		return 0, classify("listing vms", err)
	}
	byName := map[string][]Resource{}
	for _, r := range list {
		if r.Type == "qemu" && r.Name != "" && r.Template != 1 {
			byName[r.Name] = append(byName[r.Name], r)
		}
	}
	log := logr.FromContextOrDiscard(ctx)
	swept := 0
	var errs []error
	for _, node := range p.block.Nodes() {
		vols, err := p.api.storageContent(ctx, node, p.block.ISOStorage, "iso")
		if err != nil {
			errs = append(errs, classify(fmt.Sprintf("listing ISO storage %s on %s", p.block.ISOStorage, node), err))
			continue
		}
		for _, v := range vols {
			name, ok := p.seedNameOf(v.VolID)
			if !ok || p.now().Sub(time.Unix(v.CTime, 0)) < seedGrace {
				continue
			}
			why, leftover := p.seedLeftover(ctx, name, byName[name])
			if !leftover {
				continue
			}
			if _, err := p.api.deleteVolume(ctx, node, p.block.ISOStorage, v.VolID); err != nil {
				errs = append(errs, p.seedDeleteError(err, node, name))
				continue
			}
			swept++
			log.Info("proxmox seed swept", "node", node, "volid", v.VolID, "why", why)
		}
	}
	return swept, errors.Join(errs...)
}

// seedLeftover says whether the seed of name is left over, given the
// listed VMs with that name, and why.
func (p *Provider) seedLeftover(ctx context.Context, name string, vms []Resource) (string, bool) {
	p.mu.Lock()
	_, creating := p.creating[name]
	p.mu.Unlock()
	if creating {
		return "", false
	}
	if len(vms) == 0 {
		return "no VM carries the instance", true
	}
	for _, r := range vms {
		if r.Status != "running" || r.Lock != "" {
			return "", false
		}
		m, ok, err := p.markOf(ctx, r)
		if err != nil || !ok || m.Name != name {
			// Someone else's VM with our name: not ours to judge.
			return "", false
		}
		if st := p.seedOf(r.VMID); st != seedDetached && st != seedRemoved {
			return "", false
		}
	}
	return "its running VM no longer holds it", true
}

var _ provider.Sweeper = (*Provider)(nil)
