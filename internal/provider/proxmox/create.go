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
	kindResize     = "resize"
	kindStart      = "start"
	kindStop       = "stop"
	kindSeedDelete = "seed-delete"
	kindDestroy    = "destroy"
	kindDuplicate  = "duplicate"
)

const lockSuspended = "suspended"

// seedFile is the seed's file name on the ISO storage.
func seedFile(name string) string { return name + "-seed.iso" }

func (p *Provider) seedVolid(name string) string {
	return p.block.ISOStorage + ":iso/" + seedFile(name)
}

// plan is what a Request resolves to in the entry's configuration.
type plan struct {
	req      provider.Request
	node     string
	template int
	mt       config.MachineType
}

func (p *Provider) planFor(req provider.Request) (plan, error) {
	if req.Name == "" {
		// Create step 1 (docs/proxmox-behaviour.md): an empty name would match nameless mid-clone entries.
		return plan{}, provider.NewPermanent(errors.New("the request has no instance name"), "report this operator bug")
	}
	if req.OwnerUID == "" {
		return plan{}, provider.NewPermanent(errors.New("the request has no owner uid"), "report this operator bug")
	}
	z, ok := p.block.Zones[req.Zone]
	if !ok || len(z.Nodes) == 0 {
		return plan{}, provider.NewPermanent(fmt.Errorf("zone %q has no nodes", req.Zone), "add the zone's nodes to the proxmox block")
	}
	img, ok := p.block.Images[req.Image]
	if !ok {
		return plan{}, provider.NewPermanent(fmt.Errorf("image %q has no template", req.Image), "add the image's templateVMID to the proxmox block")
	}
	mt, ok := p.entry.MachineTypes[req.MachineType]
	if !ok {
		return plan{}, provider.NewPermanent(fmt.Errorf("machine type %q is not in the catalogue", req.MachineType), "use a machine type of the entry")
	}
	node := z.Nodes[hash64(req.OwnerUID, req.Name)%uint64(len(z.Nodes))]
	return plan{req: req, node: node, template: img.TemplateVMID, mt: mt}, nil
}

// Create implements provider.Provider. Each call does the next step of
// clone, seed upload, config write, resize and start, judged from what the
// API shows (plus the task this process started), and returns InProgress
// while a task runs.
func (p *Provider) Create(ctx context.Context, req provider.Request) (provider.ID, error) {
	pl, err := p.planFor(req)
	if err != nil {
		return "", err
	}
	// Create step 3 (docs/proxmox-behaviour.md): serialise on the name.
	unlock, err := p.names.Lock(ctx, req.Name)
	if err != nil {
		return "", provider.NewTransient(err)
	}
	defer unlock()
	if err := p.checkPending(ctx, req.Name); err != nil {
		return "", err
	}
	// Create step 4 (docs/proxmox-behaviour.md): a fresh listing (F8).
	list, err := p.listing(ctx, p.now())
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
		return p.advance(ctx, pl, mine[0])
	default:
		return "", p.dedupe(ctx, req.Name, mine)
	}
}

// ours returns the listed QEMU VMs named req.Name whose mark carries
// req.OwnerUID. A VM with our name but without our mark is Permanent: never
// adopted, never touched.
func (p *Provider) ours(ctx context.Context, list []Resource, req provider.Request) ([]Resource, error) {
	var out []Resource
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
			return nil, provider.NewPermanent(
				fmt.Errorf("VM %d on %s is named %s but does not carry this proxy's mark", r.VMID, r.Node, req.Name),
				"rename or remove that VM; the operator never adopts a VM it did not create")
		}
		out = append(out, r)
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
		r, taken := byID[vmid]
		if !taken {
			return p.clone(ctx, list, pl, vmid)
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
	cfg, err := p.api.vmConfig(ctx, t.Node, t.VMID)
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

func (p *Provider) clone(ctx context.Context, list []Resource, pl plan, vmid int) error {
	tnode, err := p.checkTemplate(ctx, list, pl)
	if err != nil {
		return err
	}
	m := mark{OwnerUID: pl.req.OwnerUID, Name: pl.req.Name, Owner: pl.req.Owner.String(), CreatedAt: p.now()}
	form := url.Values{
		"newid":       {strconv.Itoa(vmid)},
		"name":        {pl.req.Name},
		"full":        {"1"},
		"description": {m.description()},
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
	step := fmt.Sprintf("cloning template %d to VM %d", pl.template, vmid)
	p.setPending(pl.req.Name, pending{step: step, kind: kindClone, node: tnode, vmid: vmid, upid: upid})
	return provider.NewInProgress(step, p.poll())
}

// advance does the next step on our VM (create steps 7 to 11 (docs/proxmox-behaviour.md)).
func (p *Provider) advance(ctx context.Context, pl plan, r Resource) (provider.ID, error) {
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
	cfg, err := p.api.vmConfig(ctx, r.Node, r.VMID)
	if err != nil {
		return "", classify(fmt.Sprintf("reading the config of VM %d", r.VMID), err)
	}
	if l := cfgStr(cfg, "lock"); l != "" {
		return "", provider.NewInProgress(fmt.Sprintf("waiting for the %s lock of VM %d", l, r.VMID), p.poll())
	}
	if !strings.HasPrefix(cfgStr(cfg, "ide2"), p.seedVolid(name)+",") {
		if !p.isDone(name, kindSeed) {
			present, err := p.seedPresent(ctx, pl, r.Node)
			if err != nil {
				return "", err
			}
			if !present {
				return "", p.uploadSeed(ctx, pl, r)
			}
		}
		form, err := p.configForm(pl, cfg)
		if err != nil {
			return "", err
		}
		if err := p.api.setConfig(ctx, r.Node, r.VMID, form); err != nil {
			return "", classify(fmt.Sprintf("writing the config of VM %d", r.VMID), err)
		}
		p.invalidateListing() // the tags changed
	}
	if pl.mt.DiskGiB > 0 {
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
	}
	st, err := p.api.status(ctx, r.Node, r.VMID)
	if err != nil {
		return "", classify(fmt.Sprintf("reading the status of VM %d", r.VMID), err)
	}
	switch {
	case st.Status == "running" && st.QMPStatus == "running":
		p.clearName(name)
		return id, nil
	case st.Status == "running" && st.QMPStatus == "prelaunch":
		if p.waitedSince(name+"/running") > p.block.RunningBudget() {
			return "", provider.NewTransient(fmt.Errorf("VM %d has not left prelaunch within the running budget", r.VMID))
		}
		return "", provider.NewInProgress(fmt.Sprintf("VM %d is starting", r.VMID), p.poll())
	case st.Status == "running":
		return "", provider.NewTransient(fmt.Errorf("VM %d is %s, not running", r.VMID, st.QMPStatus))
	}
	if p.isDone(name, kindStart) {
		// Create step 11 (docs/proxmox-behaviour.md): stopped after the start.
		p.mu.Lock()
		delete(p.done, name+"/"+kindStart)
		p.mu.Unlock()
		return "", provider.NewTransient(fmt.Errorf("VM %d stopped after it was started", r.VMID))
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

// seedPresent reports whether a complete seed (its exact size) is on the ISO
// storage already, so that a restarted operator does not upload it again.
func (p *Provider) seedPresent(ctx context.Context, pl plan, node string) (bool, error) {
	vols, err := p.api.storageContent(ctx, node, p.block.ISOStorage, "iso")
	if err != nil {
		return false, classify(fmt.Sprintf("listing ISO storage %s on %s", p.block.ISOStorage, node), err)
	}
	want := p.seedVolid(pl.req.Name)
	size := nocloud.Size(p.seedFor(pl.req))
	for _, v := range vols {
		if v.VolID == want && v.Size == size {
			return true, nil
		}
	}
	return false, nil
}

// uploadSeed uploads the NoCloud seed (create step 8 (docs/proxmox-behaviour.md); F12: overwrites).
func (p *Provider) uploadSeed(ctx context.Context, pl plan, r Resource) error {
	upid, err := p.api.upload(ctx, r.Node, p.block.ISOStorage, seedFile(pl.req.Name), p.seedFor(pl.req))
	if err != nil {
		return classify(fmt.Sprintf("uploading %s to %s on %s", seedFile(pl.req.Name), p.block.ISOStorage, r.Node), err)
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
