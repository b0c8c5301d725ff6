package proxmox

import (
	"context"
	"errors"
	"fmt"
	"net/url"
	"slices"
	"strconv"
	"strings"

	"github.com/egress-proxies/egress-proxies-operator/internal/config"
	"github.com/egress-proxies/egress-proxies-operator/internal/nocloud"
	"github.com/egress-proxies/egress-proxies-operator/internal/provider"
)

// Steps of Create and Delete, as the InProgress messages name them.
const (
	kindClone      = "clone"
	kindSeed       = "seed"
	kindConfig     = "config"
	kindResize     = "resize"
	kindStart      = "start"
	kindStop       = "stop"
	kindUploads    = "uploads"
	kindSeedDelete = "seed-delete"
	kindDestroy    = "destroy"
	kindDuplicate  = "duplicate"
)

// Lock names of the listing and the config (F7, F8, F24).
const (
	lockClone     = "clone"
	lockSuspended = "suspended"
)

// plan is what a Request resolves to in the entry's configuration.
type plan struct {
	req      provider.Request
	node     string
	template int
	mt       config.MachineType
}

func (p *Provider) planFor(req provider.Request) (plan, error) {
	img, mt, err := provider.Catalogued(p.entry, p.block.Images, req, "template", "add the image's templateVMID to the proxmox block")
	if err != nil {
		return plan{}, err
	}
	z, ok := p.block.Zones[req.Zone]
	if !ok || len(z.Nodes) == 0 {
		return plan{}, provider.NewPermanent(fmt.Errorf("zone %q has no nodes", req.Zone), "add the zone's nodes to the proxmox block")
	}
	node := z.Nodes[provider.InstanceHash(req.OwnerUID, req.Name)%uint64(len(z.Nodes))]
	return plan{req: req, node: node, template: img.TemplateVMID, mt: mt}, nil
}

// Create implements provider.Provider. Each call does the next step of
// clone, seed upload, config write, resize and start, judged from what the
// API shows (plus the task this process started), and returns InProgress
// while a task runs.
func (p *Provider) Create(ctx context.Context, req provider.Request) (provider.ID, error) {
	id, err := p.create(ctx, req)
	return id, vanishedMidway(err)
}

// vanishedMidway turns the NotFound of a step on a VM that was destroyed
// while it was being made (F2: someone deleted it, or a garbage collector
// that does not know its Proxy) into a Transient error: Create never
// reports NotFound (provider.Provider), and the next call, which judges
// from a new listing (unlessInProgress), makes another VM.
func vanishedMidway(err error) error {
	var pe *provider.Error
	if !provider.IsNotFound(err) || !errors.As(err, &pe) {
		return err
	}
	return provider.NewTransient(fmt.Errorf("the VM was destroyed while it was being made; the next attempt makes another: %w", pe.Err))
}

func (p *Provider) create(ctx context.Context, req provider.Request) (provider.ID, error) {
	// Create steps 1 to 3 (docs/proxmox-behaviour.md): plan, then serialise on the name.
	pl, unlock, err := provider.Begin(ctx, &p.names, req, p.planFor)
	if err != nil {
		return "", err
	}
	defer unlock()
	if err := p.checkPending(ctx, req.Name); err != nil {
		return "", err
	}
	if r, ok := p.cloned(req.Name); ok {
		// This process cloned the VM and saw the clone end: the next steps
		// need no listing (the VM is ours, and where it is, is known).
		id, err := p.advance(ctx, pl, r, false)
		return id, p.unlessInProgress(req.Name, err)
	}
	// Create step 4 (docs/proxmox-behaviour.md): a listing newer than
	// anything this process did or saw for the name, shared (F8).
	list, _, err := p.listing(ctx, p.freshness(req.Name))
	if err != nil {
		return "", classify("listing vms", err)
	}
	mine, err := p.ours(ctx, list, req)
	if err != nil {
		return "", err
	}
	switch len(mine) {
	case 0:
		return "", p.allocate(ctx, list, pl)
	case 1:
		id, err := p.advance(ctx, pl, mine[0], true)
		return id, p.unlessInProgress(req.Name, err)
	default:
		return "", p.dedupe(ctx, req.Name, mine)
	}
}

// ours returns the listed QEMU VMs named req.Name whose mark carries
// req.OwnerUID. A VM with our name but without our mark (unsigned, forged,
// copied or another installation's) is never adopted nor touched: when it
// is the only one of that name, Create stops with a Permanent error, since
// someone took the name; next to the proxy's own VM, it is ignored, so that
// a copy of our mark on a VM of that name neither stops nor duplicates ours.
func (p *Provider) ours(ctx context.Context, list []Resource, req provider.Request) ([]Resource, error) {
	var out []Resource
	var foreign []Resource
	for _, r := range list {
		if r.Type != "qemu" || r.Name != req.Name || r.Template == 1 {
			continue
		}
		m, ok, err := p.markOf(ctx, r)
		if isMissingVM(err) {
			continue // destroyed since the listing
		}
		if err != nil {
			return nil, classify(fmt.Sprintf("reading the config of VM %d", r.VMID), err)
		}
		if !ok || m.OwnerUID != req.OwnerUID {
			foreign = append(foreign, r)
			continue
		}
		out = append(out, r)
	}
	if len(out) == 0 && len(foreign) > 0 {
		r := foreign[0]
		return nil, provider.NewPermanent(
			fmt.Errorf("VM %d on %s is named %s but does not carry this proxy's mark", r.VMID, r.Node, req.Name),
			"rename or remove that VM; the operator never adopts a VM it did not create")
	}
	return out, nil
}

// dedupe keeps one of several VMs of ours with the same name: a running one
// (the one a caller may have recorded), else the lowest VMID, and destroys
// the others one step per call.
func (p *Provider) dedupe(ctx context.Context, name string, mine []Resource) error {
	slices.SortFunc(mine, func(a, b Resource) int {
		ar, br := a.Status == "running", b.Status == "running"
		if ar != br {
			if ar {
				return -1
			}
			return 1
		}
		return a.VMID - b.VMID
	})
	for _, r := range mine[1:] {
		if r.Lock != "" {
			return provider.NewInProgress(fmt.Sprintf("waiting for the %s lock of duplicate VM %d", r.Lock, r.VMID), p.poll())
		}
		var upid string
		var err error
		what := "destroying"
		if r.Status == "running" {
			what = "stopping"
			upid, err = p.api.stop(ctx, r.Node, r.VMID)
		} else {
			upid, err = p.api.destroy(ctx, r.Node, r.VMID)
		}
		if isMissingVM(err) {
			continue
		}
		if err != nil {
			return classify(fmt.Sprintf("%s duplicate VM %d", what, r.VMID), err)
		}
		p.forget(r.VMID)
		step := fmt.Sprintf("%s duplicate VM %d (keeping VM %d)", what, r.VMID, mine[0].VMID)
		p.setPending(name, pending{step: step, kind: kindDuplicate, node: r.Node, vmid: r.VMID, upid: upid})
		return provider.NewInProgress(step, p.poll())
	}
	return provider.NewInProgress("duplicates removed", p.poll())
}

// allocate probes VMIDs from the instance's own and clones onto the first
// free one (create steps 5 to 7 (docs/proxmox-behaviour.md)).
func (p *Provider) allocate(ctx context.Context, list []Resource, pl plan) error {
	byID := make(map[int]Resource, len(list))
	for _, r := range list {
		byID[r.VMID] = r
	}
	size := p.hi - p.lo + 1
	first := p.vmidFor(pl.req.OwnerUID, pl.req.Name)
	for i := range size {
		vmid := p.lo + (first-p.lo+i)%size
		if p.claimedByAnother(vmid, pl.req.Name) {
			continue // another Create of this process clones onto it
		}
		r, taken := byID[vmid]
		if !taken {
			if !p.claim(vmid, pl.req.Name) {
				continue // claimed since the check above
			}
			err := p.clone(ctx, list, pl, vmid)
			p.keepClaimIfSent(vmid, pl.req.Name)
			return err
		}
		if r.Type != "qemu" {
			continue // a container holds it
		}
		// F8: check the lock before the name.
		if r.Lock == lockSuspended {
			m, ok, err := p.markOf(ctx, r)
			if err != nil {
				return classify(fmt.Sprintf("reading the config of VM %d", vmid), err)
			}
			if ok && m.OwnerUID == pl.req.OwnerUID && m.Name == pl.req.Name {
				return provider.NewPermanent(fmt.Errorf("VM %d of this proxy is hibernated", vmid), "resume or destroy the VM")
			}
			continue
		}
		if r.Lock != "" || r.Name == "" {
			key := pl.req.Name + "/probe/" + strconv.Itoa(vmid)
			if p.waitedSince(key) > p.block.CloneBudget() {
				return provider.NewTransient(fmt.Errorf("VM %d has been locked (%s) longer than the clone budget", vmid, r.Lock))
			}
			return provider.NewInProgress(fmt.Sprintf("waiting for VM %d (lock %s) to tell whether it is this proxy's", vmid, r.Lock), p.poll())
		}
		// Named: someone else's (ours would have been found by name).
	}
	return provider.NewTransient(fmt.Errorf("no free VMID in %d-%d", p.lo, p.hi))
}

// claimedByAnother reports whether another Create of this process claimed
// vmid (claims). A VMID derived from the UID collides with another
// Create's about five times in 1000 creates over the default range;
// without the claims the later Create waited a poll interval or more, once
// per look, for the other's clone to end and name its VM (F8), or lost the
// race for the VMID (F4) and waited a poll interval. The claims only spare
// those waits: what keeps two VMs off one VMID is still F4, and what tells
// whose a VM is, its name and mark.
func (p *Provider) claimedByAnother(vmid int, name string) bool {
	p.mu.Lock()
	defer p.mu.Unlock()
	other, ok := p.claims[vmid]
	return ok && other != name
}

// claim reserves vmid for name's clone, unless another Create of this
// process holds it.
func (p *Provider) claim(vmid int, name string) bool {
	p.mu.Lock()
	defer p.mu.Unlock()
	if other, ok := p.claims[vmid]; ok && other != name {
		return false
	}
	p.claims[vmid] = name
	return true
}

// keepClaimIfSent keeps name's claim of vmid only when the clone onto it
// was sent (the Create records it in creating); clearName drops it then.
func (p *Provider) keepClaimIfSent(vmid int, name string) {
	p.mu.Lock()
	defer p.mu.Unlock()
	if c, ok := p.creating[name]; ok && c.vmid == vmid {
		return
	}
	if p.claims[vmid] == name {
		delete(p.claims, vmid)
	}
}

// checkTemplate refuses an unsuitable template before cloning (create step 5 (docs/proxmox-behaviour.md)).
func (p *Provider) checkTemplate(ctx context.Context, list []Resource, pl plan) (string, error) {
	action := fmt.Sprintf("fix template %d or the image's templateVMID (see docs/proxmox.md)", pl.template)
	t, ok := find(list, pl.template)
	if !ok || t.Type != "qemu" {
		return "", provider.NewPermanent(fmt.Errorf("template %d does not exist", pl.template), action)
	}
	if t.Template != 1 {
		return "", provider.NewPermanent(fmt.Errorf("VM %d is not a template", pl.template), action)
	}
	cfg, err := p.templateConfig(ctx, t)
	if err != nil {
		return "", classify(fmt.Sprintf("reading template %d", pl.template), err)
	}
	for k := range cfg {
		if strings.Contains(cfgStr(cfg, k), "cloudinit") {
			// F19: its drive would shadow the NoCloud seed.
			return "", provider.NewPermanent(fmt.Errorf("template %d has a cloud-init drive on %s", pl.template, k), action)
		}
	}
	if (p.block.Bridge != "" || p.block.VLANTag != 0) && cfgStr(cfg, "net0") == "" {
		return "", provider.NewPermanent(fmt.Errorf("template %d has no net0 for the bridge or VLAN override", pl.template), action)
	}
	if pl.mt.DiskGiB > 0 {
		if _, _, ok := bootDisk(cfg); !ok {
			return "", provider.NewPermanent(fmt.Errorf("template %d has no boot disk with a readable size", pl.template), action)
		}
	}
	return t.Node, nil
}

// templateConfig reads a template's config, at most once per poll interval
// for all the creates that clone it.
func (p *Provider) templateConfig(ctx context.Context, t Resource) (map[string]any, error) {
	p.mu.Lock()
	c, ok := p.templates[t.VMID]
	p.mu.Unlock()
	if ok && !c.at.Before(p.now().Add(-p.poll())) {
		return c.cfg, nil
	}
	at := p.now()
	cfg, err := p.api.vmConfig(ctx, t.Node, t.VMID)
	if err != nil {
		return nil, err
	}
	p.mu.Lock()
	p.templates[t.VMID] = templateConfig{cfg: cfg, at: at}
	p.mu.Unlock()
	return cfg, nil
}

func (p *Provider) clone(ctx context.Context, list []Resource, pl plan, vmid int) error {
	tnode, err := p.checkTemplate(ctx, list, pl)
	if err != nil {
		return err
	}
	// The mark holds whole seconds (RFC 3339), and this process remembers it
	// as written; newMark signs it with the VMID.
	m := newMark(p.ident, p.entry.Name, vmid, pl.req.OwnerUID, pl.req.Name, pl.req.Owner.String(), p.now())
	form := url.Values{
		"newid":       {strconv.Itoa(vmid)},
		"name":        {pl.req.Name},
		"full":        {"1"},
		"description": {description(m)},
	}
	if pl.node != tnode {
		form.Set("target", pl.node)
	}
	if p.block.TargetStorage != "" {
		form.Set("storage", p.block.TargetStorage)
	}
	upid, err := p.api.clone(ctx, tnode, pl.template, form)
	if isVMIDTaken(err) {
		// F4: a racing clone took it; the next call judges the VMID.
		return provider.NewInProgress(fmt.Sprintf("VMID %d was taken meanwhile", vmid), p.poll())
	}
	if err != nil {
		return classify(fmt.Sprintf("cloning template %d to VM %d on %s", pl.template, vmid, pl.node), err)
	}
	p.mu.Lock()
	p.creating[pl.req.Name] = creatingVM{node: pl.node, vmid: vmid, ownerUID: pl.req.OwnerUID, createdAt: m.CreatedAt, mark: m}
	p.mu.Unlock()
	step := fmt.Sprintf("cloning template %d to VM %d", pl.template, vmid)
	p.setPending(pl.req.Name, pending{step: step, kind: kindClone, node: tnode, vmid: vmid, upid: upid})
	return provider.NewInProgress(step, p.poll())
}

// cloned returns the VM this process cloned for name once it saw the clone
// task end OK, and remembers its mark (the one the clone wrote, F10), so
// that nothing has to be read to go on.
func (p *Provider) cloned(name string) (Resource, bool) {
	p.mu.Lock()
	defer p.mu.Unlock()
	c, ok := p.creating[name]
	if !ok || !p.done[name+"/"+kindClone] {
		return Resource{}, false
	}
	if _, known := p.marks[c.vmid]; !known {
		p.marks[c.vmid] = markEntry{name: name, m: c.mark, ok: true}
	}
	return Resource{Node: c.node, VMID: c.vmid, Name: name, Type: "qemu", Status: "stopped"}, true
}

// unlessInProgress makes the next Create of name judge from a new listing
// after any outcome other than InProgress: what this process knew may be
// wrong (the VM was destroyed behind its back, a lock appeared).
func (p *Provider) unlessInProgress(name string, err error) error {
	if err != nil && !provider.IsInProgress(err) {
		p.mu.Lock()
		delete(p.done, name+"/"+kindClone)
		p.changed[name] = p.now()
		p.mu.Unlock()
	}
	return err
}

// advance does the next step on our VM (create steps 7 to 11
// (docs/proxmox-behaviour.md)). listed says r comes from a listing; else it
// is what this process knows of the VM it cloned. Each step runs once in
// this process (done flags); after a restart the config read that yields
// the mark also says whether the seed is attached, so nothing is done twice
// that shows.
func (p *Provider) advance(ctx context.Context, pl plan, r Resource, listed bool) (provider.ID, error) {
	name := pl.req.Name
	id := ID(r.Node, r.VMID, name)
	if r.Lock == lockSuspended {
		return "", provider.NewPermanent(fmt.Errorf("VM %d of this proxy is hibernated", r.VMID), "resume or destroy the VM")
	}
	if r.Lock != "" {
		if p.waitedSince(name+"/lock") > p.block.CloneBudget() {
			return "", provider.NewTransient(fmt.Errorf("VM %d has been locked (%s) longer than the clone budget", r.VMID, r.Lock))
		}
		return "", provider.NewInProgress(fmt.Sprintf("waiting for the %s lock of VM %d", r.Lock, r.VMID), p.poll())
	}
	if listed && r.Status == "running" {
		// Adopted running (its create went this far before a restart).
		p.clearName(name)
		return id, nil
	}
	var cfg map[string]any
	readConfig := func() error {
		if cfg != nil {
			return nil
		}
		var err error
		if cfg, err = p.api.vmConfig(ctx, r.Node, r.VMID); err != nil {
			return classify(fmt.Sprintf("reading the config of VM %d", r.VMID), err)
		}
		return nil
	}
	if !p.isDone(name, kindConfig) && p.seedOf(r.VMID) != seedAttached {
		if !p.isDone(name, kindSeed) {
			// F12: an upload overwrites, so a seed left by an earlier
			// process is simply replaced.
			return "", p.uploadSeed(ctx, pl, r)
		}
		if p.block.Bridge != "" || p.block.VLANTag != 0 {
			if err := readConfig(); err != nil {
				return "", err
			}
		}
		form, err := p.configForm(pl, cfg)
		if err != nil {
			return "", err
		}
		if err := p.api.setConfig(ctx, r.Node, r.VMID, form); err != nil {
			if ae, ok := apiErr(err); ok && reLocked.MatchString(ae.Message) {
				// F7: the clone's lock can outlast its task briefly.
				return "", provider.NewInProgress(fmt.Sprintf("waiting for the lock of VM %d: %s", r.VMID, ae.Message), p.poll())
			}
			return "", classify(fmt.Sprintf("writing the config of VM %d", r.VMID), err)
		}
		p.setSeed(r.VMID, seedAttached)
		p.markDone(name, kindConfig)
	}
	if pl.mt.DiskGiB > 0 && !p.isDone(name, kindResize) {
		if err := readConfig(); err != nil {
			return "", err
		}
		slot, size, ok := bootDisk(cfg)
		if !ok {
			return "", provider.NewPermanent(fmt.Errorf("VM %d has no boot disk with a readable size", r.VMID), "fix the template")
		}
		want := int64(pl.mt.DiskGiB) << 30
		if size < want {
			// F19/F20: only when larger; a resize is a task.
			upid, err := p.api.resize(ctx, r.Node, r.VMID, slot, strconv.Itoa(pl.mt.DiskGiB)+"G")
			if err != nil {
				return "", classify(fmt.Sprintf("resizing %s of VM %d", slot, r.VMID), err)
			}
			step := fmt.Sprintf("resizing %s of VM %d to %d GiB", slot, r.VMID, pl.mt.DiskGiB)
			p.setPending(name, pending{step: step, kind: kindResize, node: r.Node, vmid: r.VMID, upid: upid})
			return "", provider.NewInProgress(step, p.poll())
		}
		p.markDone(name, kindResize)
	}
	if p.isDone(name, kindStart) {
		// Create step 11 (docs/proxmox-behaviour.md): the start task ended
		// OK, so the VM runs; Get reports it Provisioning until the agent
		// answers, and Stopped should it stop again.
		p.clearName(name)
		return id, nil
	}
	upid, err := p.api.start(ctx, r.Node, r.VMID)
	if err != nil {
		return "", classify(fmt.Sprintf("starting VM %d", r.VMID), err)
	}
	step := fmt.Sprintf("starting VM %d", r.VMID)
	p.setPending(name, pending{step: step, kind: kindStart, node: r.Node, vmid: r.VMID, upid: upid})
	return "", provider.NewInProgress(step, p.poll())
}

// seedFor builds the NoCloud seed of a request.
func (p *Provider) seedFor(req provider.Request) nocloud.Seed {
	return nocloud.InstanceSeed(req.Name, req.UserData.Bytes(), p.block.GuestAgent())
}

// uploadSeed uploads the NoCloud seed (create step 8 (docs/proxmox-behaviour.md); F12: overwrites).
func (p *Provider) uploadSeed(ctx context.Context, pl plan, r Resource) error {
	upid, err := p.api.upload(ctx, r.Node, p.block.ISOStorage, p.seedFile(pl.req.Name), p.seedFor(pl.req))
	if err != nil {
		return classify(fmt.Sprintf("uploading %s to %s on %s", p.seedFile(pl.req.Name), p.block.ISOStorage, r.Node), err)
	}
	step := fmt.Sprintf("uploading the seed of VM %d", r.VMID)
	p.setPending(pl.req.Name, pending{step: step, kind: kindSeed, node: r.Node, vmid: r.VMID, upid: upid})
	return provider.NewInProgress(step, p.poll())
}

// configForm is the config write of create step 9 (docs/proxmox-behaviour.md).
func (p *Provider) configForm(pl plan, cfg map[string]any) (url.Values, error) {
	form := url.Values{
		"ide2":   {p.seedVolid(pl.req.Name) + ",media=cdrom"},
		"cores":  {strconv.Itoa(pl.mt.Cores)},
		"memory": {strconv.Itoa(pl.mt.MemoryMiB)},
		"agent":  {"1"},
		// A planned reboot of the node starts the VM again, instead of
		// leaving it stopped for the operator to replace (#12 item 8).
		"onboot": {"1"},
		"tags":   {Tag},
	}
	if p.block.Bridge != "" || p.block.VLANTag != 0 {
		net0 := cfgStr(cfg, "net0")
		if net0 == "" {
			return nil, provider.NewPermanent(errors.New("the VM has no net0 for the bridge or VLAN override"), "give the template a network device")
		}
		form.Set("net0", rewriteNet0(net0, p.block.Bridge, p.block.VLANTag))
	}
	return form, nil
}

// rewriteNet0 replaces or appends bridge= and tag= in place, keeping the MAC.
func rewriteNet0(net0, bridge string, vlan int) string {
	parts := strings.Split(net0, ",")
	setOpt := func(key, val string) {
		for i, part := range parts {
			if strings.HasPrefix(part, key+"=") {
				parts[i] = key + "=" + val
				return
			}
		}
		parts = append(parts, key+"="+val)
	}
	if bridge != "" {
		setOpt("bridge", bridge)
	}
	if vlan != 0 {
		setOpt("tag", strconv.Itoa(vlan))
	}
	return strings.Join(parts, ",")
}

// bootDisk returns the first non-CD-ROM entry of the boot order (F19: ide2
// is appended to it) and its size in bytes.
func bootDisk(cfg map[string]any) (string, int64, bool) {
	var order []string
	for opt := range strings.SplitSeq(cfgStr(cfg, "boot"), ",") {
		if v, ok := strings.CutPrefix(opt, "order="); ok {
			order = strings.Split(v, ";")
		}
	}
	if len(order) == 0 {
		order = []string{"scsi0", "virtio0", "sata0", "ide0"}
	}
	for _, slot := range order {
		v := cfgStr(cfg, slot)
		if v == "" || strings.Contains(v, "media=cdrom") {
			continue
		}
		for opt := range strings.SplitSeq(v, ",") {
			if s, ok := strings.CutPrefix(opt, "size="); ok {
				n, ok := parseSize(s)
				return slot, n, ok
			}
		}
		return slot, 0, false
	}
	return "", 0, false
}

// parseSize reads a Proxmox size (3G, 512M, 1T, bytes).
func parseSize(s string) (int64, bool) {
	if s == "" {
		return 0, false
	}
	mult := int64(1)
	switch s[len(s)-1] {
	case 'K', 'k':
		mult = 1 << 10
	case 'M', 'm':
		mult = 1 << 20
	case 'G', 'g':
		mult = 1 << 30
	case 'T', 't':
		mult = 1 << 40
	}
	if mult != 1 {
		s = s[:len(s)-1]
	}
	f, err := strconv.ParseFloat(s, 64)
	if err != nil || f < 0 {
		return 0, false
	}
	return int64(f * float64(mult)), true
}
