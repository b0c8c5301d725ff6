package libvirt

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	"time"

	"github.com/go-logr/logr"
	"libvirt.org/go/libvirtxml"
)

// seedDrive is the target of the seed's CD-ROM drive.
const seedDrive = "hdc"

// ejectedCDROMXML is the seed drive without media: what the domain keeps
// once the guest has consumed its seed.
func ejectedCDROMXML(dev string) (string, error) {
	d := libvirtxml.DomainDisk{
		Device:   "cdrom",
		Driver:   &libvirtxml.DomainDiskDriver{Name: "qemu", Type: "raw"},
		Target:   &libvirtxml.DomainDiskTarget{Dev: dev, Bus: "ide"},
		ReadOnly: &libvirtxml.DomainDiskReadOnly{},
	}
	out, err := d.Marshal()
	if err != nil {
		return "", fmt.Errorf("encoding the empty CD-ROM drive: %w", err)
	}
	return out, nil
}

// releaseSeed takes the seed away from a domain whose guest has consumed it,
// so that the proxy's credentials do not stay on the host's storage: the
// drive is emptied (live and in the definition), then the seed volume is
// deleted. It is called by Get once the domain has an address: cloud-init
// reads its NoCloud seed in its local stage, before the network is
// configured, so a DHCP lease or an answering guest agent means the seed has
// been read.
//
// Every step is decided from what the host shows (a restarted operator
// resumes), and each domain run is released once per process: after that,
// Get makes no call for it. A failure is logged and retried at the next Get;
// it never makes a running proxy look unhealthy.
//
// A guest that holds its CD-ROM tray locked can leave the medium in place
// even after a forced eject (QEMU then only asks the guest to open the
// tray). So the eject is confirmed from the live definition, and the volume
// is deleted only once the drive is empty; while it is not, the eject is
// tried again at later Gets with a backoff (ejectBackoff), never by waiting
// in the call: a Get holds a worker.
func (p *Provider) releaseSeed(ctx context.Context, h Host, d domainInfo, f domainFacts) {
	key := h.Name + "/" + d.Name
	now := p.now()
	p.mu.Lock()
	done := d.UUID != "" && p.released[key] == d.UUID
	retry, held := p.ejects[key]
	p.mu.Unlock()
	if done || (held && retry.uuid == d.UUID && now.Before(retry.next)) {
		return
	}
	log := logr.FromContextOrDiscard(ctx)
	vol := p.seedVolume(d.Name)
	if slices.Contains(f.Volumes, vol) {
		if err := p.drv.ejectMedia(ctx, h, d.Name, seedDrive); err != nil {
			log.Info("emptying the seed drive failed; retrying at the next poll", "host", h.Name, "domain", d.Name, "error", err.Error())
			return
		}
		// The definition changed: read it again next time.
		p.mu.Lock()
		delete(p.facts, key)
		p.mu.Unlock()
		attached, err := p.seedAttached(ctx, h, d.Name, vol)
		if err != nil {
			log.Info("reading the domain after emptying its seed drive failed; retrying at the next poll", "host", h.Name, "domain", d.Name, "error", err.Error())
			return
		}
		if attached {
			attempts := 1
			if held && retry.uuid == d.UUID {
				attempts = retry.attempts + 1
			}
			wait := ejectBackoff(p.poll(), attempts)
			p.mu.Lock()
			p.ejects[key] = ejectRetry{uuid: d.UUID, attempts: attempts, next: now.Add(wait)}
			p.mu.Unlock()
			log.Info("the seed is still in the drive after a forced eject (the guest holds the tray locked); trying again later",
				"host", h.Name, "domain", d.Name, "attempts", attempts, "next", wait.String())
			return
		}
		p.mu.Lock()
		delete(p.ejects, key)
		p.mu.Unlock()
	}
	err := p.drv.deleteVolume(ctx, h, p.block.Pool, vol)
	if err != nil && !errors.Is(err, errNoVolume) {
		log.Info("deleting the consumed seed failed; retrying at the next poll", "host", h.Name, "domain", d.Name, "volume", vol, "error", err.Error())
		return
	}
	if err == nil {
		log.V(1).Info("deleted the consumed seed", "host", h.Name, "domain", d.Name, "volume", vol)
	}
	if d.UUID != "" {
		p.mu.Lock()
		p.released[key] = d.UUID
		p.mu.Unlock()
	}
}

// ejectRetry is an eject whose medium stayed in the drive: the domain run
// it was for, how many ejects were tried, and when the next one is due.
type ejectRetry struct {
	uuid     string
	attempts int
	next     time.Time
}

// maxEjectBackoff caps the wait between two ejects of a locked tray: the
// seed holds the proxy's password, so it is never given up on, but the host
// is not asked more than about once a minute per domain.
const maxEjectBackoff = time.Minute

// ejectBackoff is the wait after the n-th eject (n >= 1) that left the
// medium in place: one poll interval, doubling, at most maxEjectBackoff
// (or the poll interval, when that is longer).
func ejectBackoff(poll time.Duration, n int) time.Duration {
	d := poll
	for i := 1; i < n && d < maxEjectBackoff; i++ {
		d *= 2
	}
	return max(min(d, maxEjectBackoff), poll)
}

// seedAttached reads the domain's live definition and reports whether its
// drives still hold the seed volume.
func (p *Provider) seedAttached(ctx context.Context, h Host, name, vol string) (bool, error) {
	doc, err := p.drv.domainXML(ctx, h, name)
	if err != nil {
		return false, err
	}
	f, err := parseDomain(doc, p.block.Pool)
	if err != nil {
		return false, err
	}
	return slices.Contains(f.Volumes, vol), nil
}

// seedSuffix ends the name of every seed volume (seedVolume).
const seedSuffix = "-seed.iso"

// seedVolume is the name of the seed volume of instance name: the name, a
// token of it that only this installation and entry can make
// (ownership.Identity.SignedName), and seedSuffix. The token is what tells
// the operator's seeds from volumes that others named like one, without
// reading them.
func (p *Provider) seedVolume(name string) string {
	return p.ident.SignedName("seed", p.entry.Name, name) + seedSuffix
}

// seedNameOf returns the instance name of a seed volume of this
// installation and entry, and false for any other volume.
func (p *Provider) seedNameOf(vol string) (string, bool) {
	signed, ok := strings.CutSuffix(vol, seedSuffix)
	if !ok {
		return "", false
	}
	return p.ident.NameOfSigned("seed", p.entry.Name, signed)
}

// sweepSeeds deletes the seeds of this operator that no domain owns: left
// by an operator that stopped between emptying a drive and deleting its
// volume, or by a domain undefined by hand. A volume is swept only when its
// name is a seed's of this installation and entry (seedNameOf: the token
// in it verifies) and no domain has the instance name it carries, so that
// a volume someone else keeps in the pool, even one named like a seed, is
// never touched.
//
// The volumes are listed before the domains, and the domains afresh: a
// domain is always defined before its seed is created and undefined after
// it is deleted, so a seed listed while its domain exists is still seen
// with it. At most one sweep per host per poll interval; errors are logged,
// never returned (the sweep is a side task of the garbage collector's
// listing).
func (p *Provider) sweepSeeds(ctx context.Context, h Host) {
	now := p.now()
	p.mu.Lock()
	last, swept := p.sweeps[h.Name]
	if swept && now.Sub(last) < p.poll() {
		p.mu.Unlock()
		return
	}
	p.sweeps[h.Name] = now
	p.mu.Unlock()
	log := logr.FromContextOrDiscard(ctx)
	vols, err := p.drv.listVolumes(ctx, h, p.block.Pool)
	if err != nil {
		log.Info("listing the pool's volumes for orphaned seeds failed", "host", h.Name, "pool", p.block.Pool, "error", err.Error())
		return
	}
	var candidates []string
	for _, v := range vols {
		if name, ok := p.seedNameOf(v); ok {
			candidates = append(candidates, name)
		}
	}
	if len(candidates) == 0 {
		return
	}
	list, err := p.listing(ctx, h, p.now().Add(time.Nanosecond))
	if err != nil {
		log.Info("listing domains for orphaned seeds failed", "host", h.Name, "error", err.Error())
		return
	}
	for _, name := range candidates {
		if _, ok := find(list, name); ok {
			continue
		}
		vol := p.seedVolume(name)
		if err := p.drv.deleteVolume(ctx, h, p.block.Pool, vol); err != nil && !errors.Is(err, errNoVolume) {
			log.Info("deleting an orphaned seed failed", "host", h.Name, "volume", vol, "error", err.Error())
			continue
		}
		log.Info("deleted an orphaned seed (no domain of its name)", "host", h.Name, "volume", vol)
	}
}
