package pvesim

import (
	"fmt"
	"maps"
	"slices"
	"strconv"
	"strings"
	"time"
)

// intConfigKeys are config keys Proxmox returns as JSON numbers.
var intConfigKeys = map[string]bool{"cores": true, "sockets": true, "template": true, "onboot": true, "vcpus": true, "balloon": true}

// hGetConfig answers GET .../config (F2 when missing). A VM being cloned
// has only its lock (F8: no name yet).
func (s *Sim) hGetConfig(c *call) (any, *apiError) {
	s.mu.Lock()
	defer s.mu.Unlock()
	v, aerr := s.lookupVM(c)
	if aerr != nil {
		return nil, aerr
	}
	out := make(map[string]any, len(v.conf)+1)
	for k, val := range v.conf {
		if intConfigKeys[k] {
			if n, err := strconv.Atoi(val); err == nil {
				out[k] = n
				continue
			}
		}
		out[k] = val
	}
	out["digest"] = v.digest()
	return out, nil
}

// hSetConfigAsync answers POST .../config with a qmconfig task.
func (s *Sim) hSetConfigAsync(c *call) (any, *apiError) { return s.setConfig(c, true) }

// hSetConfigSync answers PUT .../config (synchronous, data null).
func (s *Sim) hSetConfigSync(c *call) (any, *apiError) { return s.setConfig(c, false) }

// configPrivilege is the privilege a config key needs. F17: ide2 as a
// CD-ROM needs VM.Config.CDROM, not VM.Config.Cloudinit.
func configPrivilege(key, value string) string {
	base := key
	if m := reIndexed.FindStringSubmatch(key); m != nil {
		base = m[1]
	}
	switch base {
	case "cores", "sockets", "cpu", "cpulimit", "cpuunits", "vcpus", "affinity", "numa":
		return "VM.Config.CPU"
	case "memory", "balloon", "shares":
		return "VM.Config.Memory"
	case "net":
		return "VM.Config.Network"
	case "ide", "sata", "scsi", "virtio", "efidisk", "tpmstate", "unused":
		if isCDROM(value) {
			return "VM.Config.CDROM"
		}
		return "VM.Config.Disk"
	case "ipconfig", "ciuser", "cipassword", "citype", "ciupgrade", "cicustom", "sshkeys", "nameserver", "searchdomain":
		return "VM.Config.Cloudinit"
	case "machine", "bios", "vga", "scsihw", "ostype", "hostpci", "usb", "serial", "parallel", "audio", "rng", "tablet", "kvm", "acpi", "smbios", "arch":
		return "VM.Config.HWType"
	}
	return "VM.Config.Options"
}

// ignoredConfigParams are config call parameters that are not options.
var ignoredConfigParams = map[string]bool{"node": true, "vmid": true, "digest": true, "delete": true, "skiplock": true, "background_delay": true, "revert": true, "force": true}

// setConfig applies a config write: F7 under a lock, F9 tag folding,
// F19 boot order append for a new drive, MACs for NICs without one.
func (s *Sim) setConfig(c *call, async bool) (any, *apiError) {
	s.mu.Lock()
	defer s.mu.Unlock()
	v, aerr := s.lookupVM(c)
	if aerr != nil {
		return nil, aerr
	}
	if l := v.lock(); l != "" {
		return nil, errLocked(l) // F7
	}
	if d := c.params["digest"]; d != "" && d != v.digest() {
		return nil, errInternal("detected modified configuration - file changed by other user? Try again.")
	}
	keys := make([]string, 0, len(c.params))
	for k := range c.params {
		if !ignoredConfigParams[k] {
			keys = append(keys, k)
		}
	}
	slices.Sort(keys)
	vmPath := "/vms/" + itoa(v.vmid)
	changes := map[string]string{}
	for _, k := range keys {
		val := c.params[k]
		if pr := configPrivilege(k, val); !c.p.has(vmPath, pr) {
			return nil, errPerm(vmPath, pr)
		}
		switch {
		case k == "tags":
			val = foldTags(val) // F9
		case strings.HasPrefix(k, "net") && reIndexed.MatchString(k):
			nv, aerr := s.checkNet(c, v, k, val)
			if aerr != nil {
				return nil, aerr
			}
			val = nv
		case isDiskKey(k):
			if aerr := s.checkDrive(v.node, k, val); aerr != nil {
				return nil, aerr
			}
		}
		changes[k] = val
	}
	var deletes []string
	if d := c.params["delete"]; d != "" {
		for _, k := range strings.FieldsFunc(d, func(r rune) bool { return r == ',' || r == ';' || r == ' ' }) {
			if pr := configPrivilege(k, v.conf[k]); !c.p.has(vmPath, pr) {
				return nil, errPerm(vmPath, pr)
			}
			deletes = append(deletes, k)
		}
	}
	for _, k := range keys {
		_, existed := v.conf[k]
		v.conf[k] = changes[k]
		// F19: a newly set drive is appended to an explicit boot order.
		if isDiskKey(k) && !existed && changes[k] != "none" {
			if order := bootOrder(v.conf["boot"]); order != nil && !slices.Contains(order, k) {
				v.conf["boot"] = "order=" + strings.Join(append(order, k), ";")
			}
		}
	}
	for _, k := range deletes {
		delete(v.conf, k)
	}
	if !async {
		return nil, nil
	}
	t := s.newTask(v.node, "qmconfig", itoa(v.vmid), c.p)
	for _, k := range keys {
		t.logf("update VM %d: -%s %s", v.vmid, k, changes[k])
	}
	s.after(s.timing.ConfigWrite, func() { t.finish("") })
	return t.upid, nil
}

// foldTags applies F9: upper case is folded to lower case, ';' separates.
func foldTags(v string) string {
	var out []string
	for _, t := range strings.Split(v, ";") {
		if t = strings.TrimSpace(t); t != "" {
			out = append(out, strings.ToLower(t))
		}
	}
	return strings.Join(out, ";")
}

// checkNet gives a NIC without MAC one and checks SDN.Use for a VLAN tag
// (F17).
func (s *Sim) checkNet(c *call, v *vm, key, val string) (string, *apiError) {
	first, rest, _ := strings.Cut(val, ",")
	if !strings.Contains(first, "=") && first != "" {
		idx, _ := strconv.Atoi(strings.TrimPrefix(key, "net"))
		first += "=" + macFor(v.vmid, idx)
		val = first
		if rest != "" {
			val += "," + rest
		}
	}
	if tag := driveOption(val, "tag"); tag != "" {
		bridge := driveOption(val, "bridge")
		path := "/sdn/zones/localnetwork/" + bridge + "/" + tag
		if !c.p.has(path, "SDN.Use") {
			return "", errPerm(path, "SDN.Use")
		}
	}
	return val, nil
}

// checkDrive checks the storage and volume a drive names.
func (s *Sim) checkDrive(nodeName, key, val string) *apiError {
	volid := driveVolume(val)
	if volid == "" {
		return nil
	}
	stID, name, _ := strings.Cut(volid, ":")
	st := s.storages[stID]
	if st == nil || !st.availableOn(nodeName) {
		return errInternal(fmt.Sprintf("storage '%s' does not exist", stID))
	}
	if strings.HasPrefix(name, "iso/") {
		if !st.supports("iso") {
			return errInternal(fmt.Sprintf("storage '%s' does not support content-type 'iso'", stID))
		}
		if _, ok := st.vols(nodeName)[volid]; !ok {
			return errInternal(fmt.Sprintf("volume '%s' does not exist", volid))
		}
	}
	_ = key
	return nil
}

// hStatusCurrent answers GET .../status/current (F2, F14).
func (s *Sim) hStatusCurrent(c *call) (any, *apiError) {
	s.mu.Lock()
	defer s.mu.Unlock()
	v, aerr := s.lookupVM(c)
	if aerr != nil {
		return nil, aerr
	}
	cores, _ := strconv.Atoi(v.conf["cores"])
	mem, _ := strconv.ParseInt(v.conf["memory"], 10, 64)
	qmp := v.qmp
	if v.status == statusStopped {
		qmp = statusStopped
	}
	m := map[string]any{
		"vmid": v.vmid, "status": v.status, "qmpstatus": qmp, "uptime": s.uptime(v),
		"cpus": max(cores, 1), "maxmem": mem << 20, "mem": 0, "maxdisk": s.bootDiskSize(v), "disk": 0,
		"cpu": 0, "netin": 0, "netout": 0, "diskread": 0, "diskwrite": 0,
		"ha": map[string]any{"managed": 0},
	}
	if n := v.name(); n != "" {
		m["name"] = n
	}
	if v.agentOn() {
		m["agent"] = 1
	}
	if l := v.lock(); l != "" {
		m["lock"] = l
	}
	if t := v.conf["tags"]; t != "" {
		m["tags"] = t
	}
	if v.template() {
		m["template"] = 1
	}
	if v.isRunning() {
		m["pid"] = 100000 + v.vmid%800000
		m["running-qemu"] = "11.0.0"
		m["running-machine"] = "pc-q35-11.0+pve0"
	}
	return m, nil
}

// hNodeVMs answers GET /nodes/{node}/qemu: the VMs of one node the caller
// may audit (others are left out, not refused), sorted by VMID. Like
// status/current, it shows a paused VM as running; with full=1 a running VM
// also carries its qmpstatus (paused, prelaunch, running) and the QEMU it
// runs, which the cluster-wide listing lacks (F14).
func (s *Sim) hNodeVMs(c *call) (any, *apiError) {
	full := paramTrue(c.params["full"])
	s.mu.Lock()
	defer s.mu.Unlock()
	ids := make([]int, 0, len(s.vms))
	for id, v := range s.vms {
		if v.node == c.node {
			ids = append(ids, id)
		}
	}
	slices.Sort(ids)
	out := make([]map[string]any, 0, len(ids))
	for _, id := range ids {
		if !c.p.has("/vms/"+itoa(id), "VM.Audit") {
			continue
		}
		v := s.vms[id]
		cores, _ := strconv.Atoi(v.conf["cores"])
		mem, _ := strconv.ParseInt(v.conf["memory"], 10, 64)
		m := map[string]any{
			"vmid": id, "status": v.status, "uptime": s.uptime(v),
			"cpus": max(cores, 1), "maxmem": mem << 20, "mem": 0, "maxdisk": s.bootDiskSize(v), "disk": 0,
			"cpu": 0, "netin": 0, "netout": 0, "diskread": 0, "diskwrite": 0,
		}
		if n := v.name(); n != "" {
			m["name"] = n
		}
		if l := v.lock(); l != "" {
			m["lock"] = l
		}
		if t := v.conf["tags"]; t != "" {
			m["tags"] = t
		}
		if v.template() {
			m["template"] = 1
		}
		if v.isRunning() {
			m["pid"] = 100000 + v.vmid%800000
			if full {
				m["qmpstatus"] = v.qmp
				m["running-qemu"] = "11.0.0"
				m["running-machine"] = "pc-q35-11.0+pve0"
			}
		}
		out = append(out, m)
	}
	return out, nil
}

// paramTrue reads a boolean parameter the way PVE does (1, true, yes, on).
func paramTrue(v string) bool {
	switch strings.ToLower(v) {
	case "1", "true", "yes", "on":
		return true
	}
	return false
}

// guestOf describes a VM to the GuestRunner. The caller holds s.mu.
func (s *Sim) guestOf(v *vm) Guest {
	g := Guest{VMID: v.vmid, Node: v.node, Name: v.name(), Address: s.guestAddress(v.vmid), Config: maps.Clone(v.conf)}
	if volid := driveVolume(v.conf["ide2"]); volid != "" {
		stID, _, _ := strings.Cut(volid, ":")
		if st := s.storages[stID]; st != nil {
			if vol := st.vols(v.node)[volid]; vol != nil {
				g.SeedPath = vol.path
			}
		}
	}
	return g
}

// hStart answers POST .../status/start. F3: under a clone lock it is
// accepted and the task waits for the lock; F14: the VM is in prelaunch
// for the start duration.
func (s *Sim) hStart(c *call) (any, *apiError) {
	s.mu.Lock()
	defer s.mu.Unlock()
	v, aerr := s.lookupVM(c)
	if aerr != nil {
		return nil, aerr
	}
	if v.template() {
		return nil, errInternal("you can't start a vm if it's a template")
	}
	l := v.lock()
	if l != "" && l != lockClone && l != lockSuspended {
		return nil, errLocked(l)
	}
	t := s.newTask(v.node, "qmstart", itoa(v.vmid), c.p)
	begin := func() {
		if s.vms[v.vmid] != v {
			t.finish(fmt.Sprintf("Configuration file 'nodes/%s/qemu-server/%d.conf' does not exist", v.node, v.vmid))
			return
		}
		if v.isRunning() {
			t.finish(fmt.Sprintf("VM %d already running", v.vmid))
			return
		}
		if v.lock() == lockSuspended {
			// F24: starting a hibernated VM resumes it from its state volume.
			t.logf("resuming VM %d from saved state", v.vmid)
			s.removeStateVolume(v)
			v.setLock("")
		}
		v.status, v.qmp = statusRunning, qmpPrelaunch
		s.after(s.timing.Start, func() {
			if s.vms[v.vmid] != v {
				t.finish("")
				return
			}
			if t.failed() {
				v.status, v.qmp = statusStopped, statusStopped
				t.finish("")
				return
			}
			v.qmp = statusRunning
			v.started = time.Now()
			v.agentAt = v.started.Add(s.scaled(s.timing.AgentBoot))
			t.finish("")
			g := s.guestOf(v)
			go func() { _ = s.guests.Start(g) }()
		})
	}
	if l == lockClone {
		t.logf("trying to acquire lock...")
		idx := len(t.log) - 1
		v.waiters = append(v.waiters, func() {
			t.log[idx] += " OK"
			begin()
		})
		return t.upid, nil
	}
	begin()
	return t.upid, nil
}

// stopLike serves stop and shutdown: a task after which the VM is stopped.
// F25: a paused VM stops too.
func (s *Sim) stopLike(c *call, typ string, d Duration) (any, *apiError) {
	s.mu.Lock()
	defer s.mu.Unlock()
	v, aerr := s.lookupVM(c)
	if aerr != nil {
		return nil, aerr
	}
	if l := v.lock(); l != "" {
		return nil, errLocked(l)
	}
	t := s.newTask(v.node, typ, itoa(v.vmid), c.p)
	s.after(d, func() {
		if s.vms[v.vmid] == v && !t.failed() && v.isRunning() {
			s.stopVM(v)
		}
		t.finish("")
	})
	return t.upid, nil
}

// stopVM marks a VM stopped and tells the GuestRunner. The caller holds s.mu.
func (s *Sim) stopVM(v *vm) {
	v.status, v.qmp = statusStopped, statusStopped
	v.started, v.agentAt = time.Time{}, time.Time{}
	g := s.guestOf(v)
	go s.guests.Stop(g)
}

// hStop answers POST .../status/stop.
func (s *Sim) hStop(c *call) (any, *apiError) { return s.stopLike(c, "qmstop", s.timing.Stop) }

// hShutdown answers POST .../status/shutdown.
func (s *Sim) hShutdown(c *call) (any, *apiError) {
	return s.stopLike(c, "qmshutdown", s.timing.Shutdown)
}

// hSuspend answers POST .../status/suspend: to RAM (F14: paused) or, with
// todisk=1, hibernation (F24: stopped, lock suspended, a state volume).
func (s *Sim) hSuspend(c *call) (any, *apiError) {
	s.mu.Lock()
	defer s.mu.Unlock()
	v, aerr := s.lookupVM(c)
	if aerr != nil {
		return nil, aerr
	}
	if !v.isRunning() {
		return nil, errInternal(fmt.Sprintf("VM %d not running", v.vmid))
	}
	if l := v.lock(); l != "" {
		return nil, errLocked(l)
	}
	toDisk, _ := parseBool(c.params["todisk"])
	vmPath := "/vms/" + itoa(v.vmid)
	if toDisk && !c.p.has(vmPath, "VM.Config.Disk") {
		return nil, errPerm(vmPath, "VM.Config.Disk")
	}
	stateStorage := c.params["statestorage"]
	if toDisk && stateStorage == "" {
		stateStorage = s.defaultStateStorage(v)
	}
	if toDisk {
		st := s.storages[stateStorage]
		if st == nil || !st.availableOn(v.node) || !st.supports("images") {
			return nil, errInternal(fmt.Sprintf("storage '%s' does not exist", stateStorage))
		}
	}
	t := s.newTask(v.node, "qmsuspend", itoa(v.vmid), c.p)
	d := s.timing.Suspend
	if toDisk {
		d *= 3
	}
	s.after(d, func() {
		if s.vms[v.vmid] != v || t.failed() || !v.isRunning() {
			t.finish("")
			return
		}
		if !toDisk {
			v.qmp = qmpPaused
			t.finish("")
			return
		}
		volid := fmt.Sprintf("%s:vm-%d-state-suspend-%s", stateStorage, v.vmid, time.Now().UTC().Format("2006-01-02"))
		mem, _ := strconv.ParseInt(v.conf["memory"], 10, 64)
		s.storages[stateStorage].vols(v.node)[volid] = &volume{volid: volid, content: "images", format: "raw", size: mem<<20 + 8<<20, vmid: v.vmid, ctime: time.Now().Unix()}
		v.conf["vmstate"] = volid
		v.conf["lock"] = lockSuspended
		s.stopVM(v)
		t.logf("suspend to disk: saved state to %s", volid)
		t.finish("")
	})
	return t.upid, nil
}

// defaultStateStorage picks the storage of the boot disk, else the first
// image storage of the node.
func (s *Sim) defaultStateStorage(v *vm) string {
	for _, slot := range bootOrder(v.conf["boot"]) {
		if volid := driveVolume(v.conf[slot]); volid != "" && !isCDROM(v.conf[slot]) {
			stID, _, _ := strings.Cut(volid, ":")
			return stID
		}
	}
	for _, st := range s.sortedStorages() {
		if st.availableOn(v.node) && st.supports("images") {
			return st.cfg.ID
		}
	}
	return ""
}

// removeStateVolume deletes the hibernation state of a VM.
func (s *Sim) removeStateVolume(v *vm) {
	volid := v.conf["vmstate"]
	if volid == "" {
		return
	}
	stID, _, _ := strings.Cut(volid, ":")
	if st := s.storages[stID]; st != nil {
		delete(st.vols(v.node), volid)
	}
	delete(v.conf, "vmstate")
}

// hResume answers POST .../status/resume.
func (s *Sim) hResume(c *call) (any, *apiError) {
	s.mu.Lock()
	defer s.mu.Unlock()
	v, aerr := s.lookupVM(c)
	if aerr != nil {
		return nil, aerr
	}
	if !v.isRunning() {
		return nil, errInternal(fmt.Sprintf("VM %d not running", v.vmid))
	}
	t := s.newTask(v.node, "qmresume", itoa(v.vmid), c.p)
	s.after(s.timing.Resume, func() {
		if s.vms[v.vmid] == v && !t.failed() && v.qmp == qmpPaused {
			v.qmp = statusRunning
		}
		t.finish("")
	})
	return t.upid, nil
}

// hClone answers POST .../clone: F4 on a taken VMID, F15 on a storage
// without images, then a qmclone task during which the new VM is listed
// nameless with status unknown (F8). The clone copies meta (F11) and keeps
// the description verbatim (F10).
func (s *Sim) hClone(c *call) (any, *apiError) {
	s.mu.Lock()
	defer s.mu.Unlock()
	src, aerr := s.lookupVM(c)
	if aerr != nil {
		return nil, aerr
	}
	newid, _ := strconv.Atoi(c.params["newid"])
	if s.vmidTaken(newid) {
		return nil, errInternal(fmt.Sprintf("unable to create VM %d: config file already exists", newid)) // F4
	}
	target := c.node
	if tn := c.params["target"]; tn != "" {
		if aerr := s.routeToNode(tn); aerr != nil {
			return nil, aerr
		}
		target = tn
	}
	stID := c.params["storage"]
	if stID != "" {
		st := s.storages[stID]
		switch {
		case st == nil:
			return nil, errInternal(fmt.Sprintf("storage '%s' does not exist", stID))
		case !st.supports("images"):
			// F15: refused up front, no VM left.
			return nil, paramError(map[string]string{"storage": fmt.Sprintf("storage '%s' does not support vm images", stID)})
		case !st.availableOn(target):
			return nil, errInternal(fmt.Sprintf("storage '%s' is not available on node '%s'", stID, target))
		}
	}
	if src.cloning {
		return nil, errLocked(lockClone)
	}
	if l := src.lock(); l != "" && !src.template() {
		return nil, errLocked(l)
	}
	nv := &vm{vmid: newid, node: target, status: statusStopped, qmp: statusStopped, cloning: true, conf: map[string]string{"lock": lockClone}}
	nv.agentNever = s.faults.takeAgentNever()
	s.vms[newid] = nv
	t := s.newTask(c.node, "qmclone", itoa(src.vmid), c.p)
	name, hasName := c.params["name"]
	desc, hasDesc := c.params["description"]
	s.after(s.timing.Clone, func() {
		if s.vms[newid] != nv {
			t.finish("")
			return
		}
		if t.failed() {
			delete(s.vms, newid)
			t.finish("")
			nv.setLock("")
			return
		}
		conf := make(map[string]string, len(src.conf))
		for k, val := range src.conf {
			switch {
			case k == "template" || k == "lock" || k == "vmstate":
				continue
			case isDiskKey(k) && driveVolume(val) != "" && !strings.HasPrefix(strings.SplitN(driveVolume(val), ":", 2)[1], "iso/"):
				val = s.cloneDisk(t, src, nv, k, val, stID)
			case strings.HasPrefix(k, "net") && reIndexed.MatchString(k):
				idx, _ := strconv.Atoi(strings.TrimPrefix(k, "net"))
				first, rest, _ := strings.Cut(val, ",")
				model, _, _ := strings.Cut(first, "=")
				val = model + "=" + macFor(newid, idx)
				if rest != "" {
					val += "," + rest
				}
			}
			conf[k] = val
		}
		conf["vmgenid"] = fakeUUID(newid, 1)
		conf["smbios1"] = "uuid=" + fakeUUID(newid, 0)
		conf["name"] = "Copy-of-VM-" + src.name()
		if hasName {
			conf["name"] = name
		}
		if hasDesc {
			conf["description"] = desc // F10: verbatim, newlines included.
		}
		conf["lock"] = lockClone
		nv.conf = conf
		nv.cloning = false
		t.finish("")
		// The clone lock lingers briefly after the task (create step 7, docs/proxmox-behaviour.md).
		s.after(s.timing.CloneLockLinger, func() {
			if s.vms[newid] == nv && nv.lock() == lockClone {
				nv.setLock("")
			}
		})
	})
	return t.upid, nil
}

// cloneDisk creates the new VM's copy of a disk and returns its option.
func (s *Sim) cloneDisk(t *task, src, nv *vm, key, opt, targetStorage string) string {
	volid := driveVolume(opt)
	stID, _, _ := strings.Cut(volid, ":")
	if targetStorage != "" && !isCDROM(opt) {
		stID = targetStorage
	}
	st := s.storages[stID]
	if st == nil {
		return opt
	}
	var newName string
	if isCDROM(opt) {
		newName = fmt.Sprintf("vm-%d-cloudinit", nv.vmid)
	} else {
		n := 0
		for {
			newName = fmt.Sprintf("vm-%d-disk-%d", nv.vmid, n)
			if _, taken := st.vols(nv.node)[stID+":"+newName]; !taken {
				break
			}
			n++
		}
	}
	newVol := stID + ":" + newName
	size, _ := parseSize(driveOption(opt, "size"))
	if isCDROM(opt) {
		size = 4 << 20
	}
	st.vols(nv.node)[newVol] = &volume{volid: newVol, content: "images", format: "raw", size: size, vmid: nv.vmid, ctime: time.Now().Unix()}
	t.logf("create full clone of drive %s (%s)", key, volid)
	t.logf("Logical volume \"%s\" created.", newName)
	_ = src
	_, rest, _ := strings.Cut(opt, ",")
	if rest == "" {
		return newVol
	}
	return newVol + "," + rest
}

// hResize answers PUT .../resize with a qmresize task (F20): the same
// size is an OK no-op, a smaller one fails in the task.
func (s *Sim) hResize(c *call) (any, *apiError) {
	s.mu.Lock()
	defer s.mu.Unlock()
	v, aerr := s.lookupVM(c)
	if aerr != nil {
		return nil, aerr
	}
	if l := v.lock(); l != "" {
		return nil, errLocked(l)
	}
	disk := c.params["disk"]
	opt, ok := v.conf[disk]
	if !ok || isCDROM(opt) {
		return nil, errInternal(fmt.Sprintf("disk '%s' does not exist", disk))
	}
	cur, _ := parseSize(driveOption(opt, "size"))
	sizeParam := c.params["size"]
	want, err := parseSize(strings.TrimPrefix(sizeParam, "+"))
	if err != nil {
		return nil, paramError(map[string]string{"size": "value does not match the regex pattern"})
	}
	if strings.HasPrefix(sizeParam, "+") {
		want += cur
	}
	t := s.newTask(v.node, "qmresize", itoa(v.vmid), c.p)
	s.after(s.timing.Resize, func() {
		if s.vms[v.vmid] != v || t.failed() {
			t.finish("")
			return
		}
		switch {
		case want < cur:
			t.finish("shrinking disks is not supported") // F20
		case want == cur:
			t.finish("")
		default:
			v.conf[disk] = setDriveOption(v.conf[disk], "size", formatSize(want))
			volid := driveVolume(opt)
			stID, _, _ := strings.Cut(volid, ":")
			if st := s.storages[stID]; st != nil {
				if vol := st.vols(v.node)[volid]; vol != nil {
					vol.size = want
				}
			}
			t.logf("  Size of logical volume %s changed from %s to %s.", volid, formatSize(cur), formatSize(want))
			t.finish("")
		}
	})
	return t.upid, nil
}

// hDestroy answers DELETE .../qemu/{vmid}: F2 when missing; a hibernated
// VM (lock suspended) is accepted and its state volume removed (F24).
func (s *Sim) hDestroy(c *call) (any, *apiError) {
	s.mu.Lock()
	defer s.mu.Unlock()
	v, aerr := s.lookupVM(c)
	if aerr != nil {
		return nil, aerr
	}
	if l := v.lock(); l != "" && l != lockSuspended {
		return nil, errLocked(l)
	}
	if v.isRunning() {
		return nil, errInternal(fmt.Sprintf("VM %d is running - destroy failed", v.vmid))
	}
	t := s.newTask(v.node, "qmdestroy", itoa(v.vmid), c.p)
	s.after(s.timing.Destroy, func() {
		if s.vms[v.vmid] != v || t.failed() {
			t.finish("")
			return
		}
		for _, st := range s.storages {
			vols := st.vols(v.node)
			for id, vol := range vols {
				if vol.vmid == v.vmid && vol.content == "images" {
					t.logf("Logical volume \"%s\" successfully removed.", strings.SplitN(id, ":", 2)[1])
					delete(vols, id)
				}
			}
		}
		delete(s.vms, v.vmid)
		t.finish("")
		g := s.guestOf(v)
		go s.guests.Stop(g)
	})
	return t.upid, nil
}

// hAgentNet answers GET .../agent/network-get-interfaces with the three F5
// errors or the F21 answer.
func (s *Sim) hAgentNet(c *call) (any, *apiError) {
	s.mu.Lock()
	defer s.mu.Unlock()
	v, aerr := s.lookupVM(c)
	if aerr != nil {
		return nil, aerr
	}
	if !v.agentOn() {
		return nil, errInternal("No QEMU guest agent configured")
	}
	if !v.isRunning() {
		return nil, errInternal(fmt.Sprintf("VM %d is not running", v.vmid))
	}
	if v.agentNever || v.qmp != statusRunning || v.agentAt.IsZero() || time.Now().Before(v.agentAt) {
		return nil, errInternal("QEMU guest agent is not running")
	}
	mac := "BC:24:11:00:00:00"
	if first, _, _ := strings.Cut(v.conf["net0"], ","); strings.Contains(first, "=") {
		_, mac, _ = strings.Cut(first, "=")
	}
	addr, prefixLen := s.guestAddress(v.vmid), 8
	if s.guestNet.IsValid() {
		prefixLen = s.guestNet.Bits()
	}
	return map[string]any{"result": []map[string]any{
		{
			"name": "lo", "hardware-address": "00:00:00:00:00:00",
			"ip-addresses": []map[string]any{
				{"ip-address": "127.0.0.1", "ip-address-type": "ipv4", "prefix": 8},
				{"ip-address": "::1", "ip-address-type": "ipv6", "prefix": 128},
			},
		},
		{
			"name": "ens18", "hardware-address": strings.ToLower(mac),
			"ip-addresses": []map[string]any{
				{"ip-address": addr.String(), "ip-address-type": "ipv4", "prefix": prefixLen},
				{"ip-address": fmt.Sprintf("fe80::be24:11ff:fe%02x:%02x%02x", v.vmid>>16&0xff, v.vmid>>8&0xff, v.vmid&0xff), "ip-address-type": "ipv6", "prefix": 64},
			},
			"statistics": map[string]any{"rx-bytes": 0, "tx-bytes": 0, "rx-packets": 0, "tx-packets": 0, "rx-errs": 0, "tx-errs": 0, "rx-dropped": 0, "tx-dropped": 0},
		},
	}}, nil
}
