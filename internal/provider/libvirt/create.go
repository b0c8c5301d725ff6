package libvirt

import (
	"context"
	"errors"
	"fmt"
	"path"
	"slices"
	"strings"

	"github.com/egress-proxies/egress-proxies-operator/internal/config"
	"github.com/egress-proxies/egress-proxies-operator/internal/nocloud"
	"github.com/egress-proxies/egress-proxies-operator/internal/provider"
)

// plan is what a Request resolves to in the entry's configuration.
type plan struct {
	req   provider.Request
	hosts []Host
	image Image
	mt    config.MachineType
}

func (p *Provider) planFor(req provider.Request) (plan, error) {
	img, mt, err := provider.Catalogued(p.entry, p.block.Images, req, "base volume", "add the image's volume to the entry")
	if err != nil {
		return plan{}, err
	}
	if strings.ContainsAny(req.Name, "/\\\x00 \t\n") {
		return plan{}, provider.NewPermanent(fmt.Errorf("instance name %q cannot name a domain", req.Name), "report this operator bug")
	}
	hosts := p.block.HostsIn(req.Zone)
	if len(hosts) == 0 {
		return plan{}, provider.NewPermanent(fmt.Errorf("zone %q has no hosts", req.Zone), "add a host of the zone to the entry")
	}
	return plan{req: req, hosts: hosts, image: img, mt: mt}, nil
}

// found is a domain of the request's name on one host.
type found struct {
	host Host
	dom  domainInfo
	f    domainFacts
}

// Create implements provider.Provider. Each call lists the zone's hosts
// afresh, finds the proxy's domain by name and mark, and does the next step
// of: define (with the mark), disk, seed, start. It returns InProgress
// after each step and the ID once the domain runs.
func (p *Provider) Create(ctx context.Context, req provider.Request) (provider.ID, error) {
	pl, unlock, err := provider.Begin(ctx, &p.names, req, p.planFor)
	if err != nil {
		return "", err
	}
	defer unlock()

	type listed struct {
		list []domainInfo
		err  error
	}
	now := p.now()
	lists := eachHost(pl.hosts, func(h Host) listed {
		l, err := p.listing(ctx, h, now)
		return listed{l, err}
	})
	var mine []found
	var down []string
	var downErr error
	for i, h := range pl.hosts {
		if lists[i].err != nil {
			down = append(down, h.Name)
			downErr = errors.Join(downErr, lists[i].err)
			continue
		}
		d, ok := find(lists[i].list, req.Name)
		if !ok {
			continue
		}
		f, err := p.factsOf(ctx, h, d)
		if errors.Is(err, errNoDomain) {
			continue // undefined since the listing
		}
		if err != nil {
			return "", classify(fmt.Sprintf("reading domain %s on host %s", d.Name, h.Name), err)
		}
		if !f.Marked || f.Mark.OwnerUID != req.OwnerUID {
			return "", provider.NewPermanent(
				fmt.Errorf("domain %s on host %s does not carry this proxy's mark", req.Name, h.Name),
				"rename or remove that domain; the operator never adopts a domain it did not create")
		}
		mine = append(mine, found{host: h, dom: d, f: f})
	}
	switch {
	case len(mine) == 1:
		return p.advance(ctx, pl, mine[0])
	case len(mine) > 1:
		return "", p.dedupe(ctx, mine)
	case len(down) > 0:
		// The proxy's domain may be on a host that does not answer: creating
		// another would duplicate it.
		return "", classify(fmt.Sprintf("host %s of zone %s cannot be listed, so it cannot be ruled out that it holds this proxy's domain", strings.Join(down, ", "), req.Zone), downErr)
	}
	return "", p.define(ctx, pl, lists2(lists, func(l listed) []domainInfo { return l.list }))
}

func lists2[T, U any](in []T, fn func(T) U) []U {
	out := make([]U, len(in))
	for i, v := range in {
		out[i] = fn(v)
	}
	return out
}

// pick places a new domain on the zone's host with the fewest domains of
// this operator (the first in configuration order on a tie).
func (p *Provider) pick(ctx context.Context, hosts []Host, lists [][]domainInfo) (Host, error) {
	best, bestN := -1, 0
	for i, h := range hosts {
		n := 0
		for _, d := range lists[i] {
			f, err := p.factsOf(ctx, h, d)
			if errors.Is(err, errNoDomain) {
				continue
			}
			if err != nil {
				return Host{}, classify(fmt.Sprintf("reading domain %s on host %s", d.Name, h.Name), err)
			}
			if f.Marked {
				n++
			}
		}
		if best < 0 || n < bestN {
			best, bestN = i, n
		}
	}
	return hosts[best], nil
}

// define checks the image and defines the domain with its mark: from then
// on the domain anchors the disk and seed, so that a restarted operator
// finds them through it.
func (p *Provider) define(ctx context.Context, pl plan, lists [][]domainInfo) error {
	h, err := p.pick(ctx, pl.hosts, lists)
	if err != nil {
		return err
	}
	if _, err := p.baseVolume(ctx, h, pl); err != nil {
		return err
	}
	spec := domainSpec{
		Name:       pl.req.Name,
		Mark:       newMark(p.ident, p.entry.Name, h.Name, pl.req.OwnerUID, pl.req.Name, pl.req.Owner.String(), p.now()),
		Seed:       p.seedVolume(pl.req.Name),
		DomainType: p.block.Type(),
		Machine:    p.block.MachineType(),
		Cores:      pl.mt.Cores,
		MemoryMiB:  pl.mt.MemoryMiB,
		Pool:       p.block.Pool,
		MAC:        macFor(pl.req.OwnerUID, pl.req.Name),
		Network:    p.block.Network,
		Bridge:     p.block.Bridge,
		VLANTag:    p.block.VLANTag,
		Image:      pl.image,
		Agent:      p.block.GuestAgent() || p.block.Addresses() == AddressSourceAgent,
	}
	if p.block.SerialLogDir != "" {
		spec.SerialLog = path.Join(p.block.SerialLogDir, pl.req.Name+".log")
	}
	doc, err := domainXML(spec)
	if err != nil {
		return provider.NewPermanent(err, "report this operator bug")
	}
	if err := p.drv.defineDomain(ctx, h, doc); err != nil {
		return classifyDefine(fmt.Sprintf("defining domain %s on host %s", pl.req.Name, h.Name), err)
	}
	p.invalidate(h.Name)
	return provider.NewInProgress(fmt.Sprintf("defined domain %s on host %s", pl.req.Name, h.Name), p.poll())
}

// classifyDefine treats libvirt's refusal of a definition as Permanent (the
// configuration is at fault) and everything else by the usual rules.
func classifyDefine(what string, err error) error {
	var he *HostError
	if errors.As(err, &he) || errors.Is(err, context.Canceled) || errors.Is(err, context.DeadlineExceeded) {
		return classify(what, err)
	}
	return provider.NewPermanent(fmt.Errorf("%s: %w", what, err), "fix the entry (domainType, machine, network or bridge) so that libvirt accepts the domain; see docs/libvirt.md")
}

// baseVolume reads the image's base volume; a missing one is Permanent.
func (p *Provider) baseVolume(ctx context.Context, h Host, pl plan) (volumeFacts, error) {
	doc, err := p.drv.volumeXML(ctx, h, p.block.Pool, pl.image.Volume)
	if errors.Is(err, errNoVolume) {
		return volumeFacts{}, provider.NewPermanent(
			fmt.Errorf("image %s: base volume %s is not in pool %s on host %s: %w", pl.req.Image, pl.image.Volume, p.block.Pool, h.Name, err),
			"upload the image's volume into the pool on every host of the zone (virsh vol-upload), or fix images in the entry")
	}
	if err != nil {
		return volumeFacts{}, classify(fmt.Sprintf("reading base volume %s on host %s", pl.image.Volume, h.Name), err)
	}
	v, err := parseVolume(doc)
	if err != nil {
		return volumeFacts{}, provider.NewTransient(err)
	}
	return v, nil
}

// advance does the next step on the proxy's domain.
func (p *Provider) advance(ctx context.Context, pl plan, fd found) (provider.ID, error) {
	h, d, name := fd.host, fd.dom, pl.req.Name
	id := ID(h.Name, name)
	switch d.State {
	case stateRunning, stateBlocked:
		p.mu.Lock()
		delete(p.started, name)
		p.mu.Unlock()
		return id, nil
	case statePaused:
		return "", provider.NewPermanent(fmt.Errorf("domain %s on host %s is paused", name, h.Name),
			fmt.Sprintf("resume it (virsh resume %s) or destroy it (virsh destroy %s) so the operator replaces it", name, name))
	case statePMSuspended:
		return "", provider.NewPermanent(fmt.Errorf("domain %s on host %s is suspended by its guest (pmsuspended)", name, h.Name),
			fmt.Sprintf("wake it (virsh dompmwakeup %s) or destroy it (virsh destroy %s) so the operator replaces it", name, name))
	case stateShutdown, stateCrashed:
		return "", provider.NewTransient(fmt.Errorf("domain %s on host %s is %s", name, h.Name, d.State))
	case stateNone, stateShutoff:
	}
	// Shut off: stage the disk and the seed, then start.
	if done, err := p.stageDisk(ctx, pl, h); err != nil || !done {
		return "", err
	}
	// A drive without the seed means the guest ran and consumed it
	// (releaseSeed): its configuration is on its disk, and a new seed would
	// only put the credentials back on the host's storage.
	if slices.Contains(fd.f.Volumes, p.seedVolume(name)) {
		if done, err := p.stageSeed(ctx, pl, h); err != nil || !done {
			return "", err
		}
	}
	p.mu.Lock()
	wasStarted := p.started[name]
	delete(p.started, name)
	p.mu.Unlock()
	if wasStarted {
		return "", provider.NewTransient(fmt.Errorf("domain %s on host %s stopped after it was started (see its serial log)", name, h.Name))
	}
	if err := p.drv.startDomain(ctx, h, name); err != nil {
		return "", classify(fmt.Sprintf("starting domain %s on host %s", name, h.Name), err)
	}
	p.mu.Lock()
	p.started[name] = true
	p.mu.Unlock()
	p.invalidate(h.Name)
	return "", provider.NewInProgress(fmt.Sprintf("started domain %s on host %s", name, h.Name), p.poll())
}

// stageDisk creates the domain's disk when it is missing: a qcow2 overlay
// backed by the image's base volume, or a full copy.
func (p *Provider) stageDisk(ctx context.Context, pl plan, h Host) (bool, error) {
	vol := diskVolume(pl.req.Name)
	_, err := p.drv.volumeXML(ctx, h, p.block.Pool, vol)
	if err == nil {
		return true, nil
	}
	if !errors.Is(err, errNoVolume) {
		return false, classify(fmt.Sprintf("reading volume %s on host %s", vol, h.Name), err)
	}
	base, err := p.baseVolume(ctx, h, pl)
	if err != nil {
		return false, err
	}
	capacity := uint64(pl.mt.DiskGiB) << 30 //nolint:gosec // G115: validated non-negative.
	if p.block.FullCopy {
		doc, err := copyXML(vol, base, capacity)
		if err == nil {
			err = p.drv.cloneVolume(ctx, h, p.block.Pool, doc, pl.image.Volume)
		}
		if err != nil {
			return false, staging(fmt.Sprintf("copying %s to %s on host %s", pl.image.Volume, vol, h.Name), err)
		}
		return false, provider.NewInProgress("copied the disk of domain "+pl.req.Name, p.poll())
	}
	doc, err := overlayXML(vol, base, capacity)
	if err == nil {
		err = p.drv.createVolume(ctx, h, p.block.Pool, doc)
	}
	if err != nil {
		return false, staging(fmt.Sprintf("creating overlay %s of %s on host %s", vol, pl.image.Volume, h.Name), err)
	}
	return false, provider.NewInProgress("created the disk of domain "+pl.req.Name, p.poll())
}

// staging classifies a failure to put a disk or seed in place: Transient
// (space, a busy pool) unless the pool itself is missing.
func staging(what string, err error) error {
	if errors.Is(err, errNoPool) {
		return classify(what, err)
	}
	return provider.NewTransient(fmt.Errorf("%s: %w", what, err))
}

// seedFor builds the NoCloud seed of a request.
func (p *Provider) seedFor(req provider.Request) nocloud.Seed {
	return nocloud.InstanceSeed(req.Name, req.UserData.Bytes(), p.block.GuestAgent())
}

// stageSeed puts the NoCloud seed into its volume: created at its exact
// size, then written. A seed volume this process did not write (it may be
// a crashed upload's) is written again before the first start.
func (p *Provider) stageSeed(ctx context.Context, pl plan, h Host) (bool, error) {
	name := pl.req.Name
	vol := p.seedVolume(name)
	seed := p.seedFor(pl.req)
	size := uint64(nocloud.Size(seed)) //nolint:gosec // G115: a size is positive.
	key := "seeded/" + name
	p.mu.Lock()
	seeded := p.started[key]
	p.mu.Unlock()
	if seeded {
		return true, nil
	}
	doc, err := p.drv.volumeXML(ctx, h, p.block.Pool, vol)
	switch {
	case errors.Is(err, errNoVolume):
		x, err := rawXML(vol, size)
		if err == nil {
			err = p.drv.createVolume(ctx, h, p.block.Pool, x)
		}
		if err != nil {
			return false, staging(fmt.Sprintf("creating seed volume %s on host %s", vol, h.Name), err)
		}
		return false, provider.NewInProgress("created the seed volume of domain "+name, p.poll())
	case err != nil:
		return false, staging(fmt.Sprintf("reading seed volume %s on host %s", vol, h.Name), err)
	}
	v, err := parseVolume(doc)
	if err != nil {
		return false, provider.NewTransient(err)
	}
	if v.Capacity != size {
		// A seed of another size (other credentials): make it anew.
		if err := p.drv.deleteVolume(ctx, h, p.block.Pool, vol); err != nil && !errors.Is(err, errNoVolume) {
			return false, staging(fmt.Sprintf("deleting stale seed volume %s on host %s", vol, h.Name), err)
		}
		return false, provider.NewInProgress("replacing the seed volume of domain "+name, p.poll())
	}
	var buf strings.Builder
	if _, err := nocloud.Write(&buf, seed); err != nil {
		return false, provider.NewTransient(fmt.Errorf("building the seed of domain %s: %w", name, err))
	}
	if err := p.drv.uploadVolume(ctx, h, p.block.Pool, vol, []byte(buf.String())); err != nil {
		return false, staging(fmt.Sprintf("uploading seed volume %s on host %s", vol, h.Name), err)
	}
	p.mu.Lock()
	p.started[key] = true
	p.mu.Unlock()
	return false, provider.NewInProgress("uploaded the seed of domain "+name, p.poll())
}

// dedupe keeps one of several domains of the proxy on different hosts (a
// running one, else the first in host order) and removes the others one
// step per call.
func (p *Provider) dedupe(ctx context.Context, mine []found) error {
	slices.SortStableFunc(mine, func(a, b found) int {
		ar, br := a.dom.State.active(), b.dom.State.active()
		switch {
		case ar == br:
			return 0
		case ar:
			return -1
		}
		return 1
	})
	for _, fd := range mine[1:] {
		gone, err := p.removeStep(ctx, fd.host, fd.dom, fd.f)
		if err != nil {
			return err
		}
		if !gone {
			return provider.NewInProgress(fmt.Sprintf("removing duplicate domain %s on host %s (keeping the one on %s)", fd.dom.Name, fd.host.Name, mine[0].host.Name), p.poll())
		}
	}
	return provider.NewInProgress("duplicates removed", p.poll())
}
