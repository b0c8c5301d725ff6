package pvesim

import (
	"net/http"
	"slices"
	"strconv"
	"strings"
	"time"
)

// hVersion answers GET /version.
func (s *Sim) hVersion(*call) (any, *apiError) {
	release, _, _ := strings.Cut(s.cfg.Version, ".")
	if parts := strings.SplitN(s.cfg.Version, ".", 3); len(parts) >= 2 {
		release = parts[0] + "." + parts[1]
	}
	return map[string]any{"version": s.cfg.Version, "release": release, "repoid": "0123456789abcdef"}, nil
}

// vmResource is a /cluster/resources entry of a QEMU VM (F8). A VM being
// cloned is listed with only type, vmid, id, node, lock and status unknown:
// no name. Guests of an unreachable node are listed with status unknown.
func (s *Sim) vmResource(v *vm, nodeDown bool) map[string]any {
	m := map[string]any{"id": "qemu/" + itoa(v.vmid), "type": "qemu", "vmid": v.vmid, "node": v.node}
	if v.cloning {
		m["lock"] = lockClone
		m["status"] = statusUnknown
		return m
	}
	status := v.status // F14: a paused VM is plain running here.
	if nodeDown {
		status = statusUnknown
	}
	cores, _ := strconv.Atoi(v.conf["cores"])
	mem, _ := strconv.ParseInt(v.conf["memory"], 10, 64)
	m["name"] = v.name()
	m["status"] = status
	m["template"] = boolInt(v.template())
	m["maxcpu"] = max(cores, 1)
	m["maxmem"] = mem << 20
	m["maxdisk"] = s.bootDiskSize(v)
	m["uptime"] = s.uptime(v)
	m["cpu"] = 0
	m["mem"] = 0
	m["disk"] = 0
	m["diskread"] = 0
	m["diskwrite"] = 0
	m["netin"] = 0
	m["netout"] = 0
	if tags := v.conf["tags"]; tags != "" {
		m["tags"] = tags
	}
	if l := v.lock(); l != "" {
		m["lock"] = l
	}
	return m
}

// uptime is the simulated seconds since the VM left prelaunch (wall time
// times the speed-up, like every other simulated duration), 0 when stopped.
func (s *Sim) uptime(v *vm) int64 {
	if !v.isRunning() || v.started.IsZero() {
		return 0
	}
	return int64(time.Since(v.started).Seconds() * s.speed)
}

// boolInt renders a boolean as Proxmox does (0 or 1).
func boolInt(b bool) int {
	if b {
		return 1
	}
	return 0
}

// bootDiskSize is the size of the first non-CD-ROM disk of the boot order.
func (s *Sim) bootDiskSize(v *vm) int64 {
	for _, slot := range bootOrder(v.conf["boot"]) {
		opt := v.conf[slot]
		if opt == "" || isCDROM(opt) {
			continue
		}
		n, _ := parseSize(driveOption(opt, "size"))
		return n
	}
	return 0
}

// bootOrder returns the slots of "order=scsi0;ide2".
func bootOrder(boot string) []string {
	for _, part := range strings.Split(boot, ",") {
		if v, ok := strings.CutPrefix(part, "order="); ok {
			return strings.Split(v, ";")
		}
	}
	return nil
}

// hResources answers GET /cluster/resources (F8). VMs the token cannot
// audit are left out, as on Proxmox.
func (s *Sim) hResources(c *call) (any, *apiError) {
	typ := c.params["type"]
	s.mu.Lock()
	defer s.mu.Unlock()
	out := []map[string]any{}
	if typ == "" || typ == "node" {
		for _, name := range s.nodeOrder {
			out = append(out, s.nodeEntry(name, "node/"+name))
		}
	}
	if typ == "" || typ == "vm" {
		ids := make([]int, 0, len(s.vms)+len(s.containers))
		for id := range s.vms {
			ids = append(ids, id)
		}
		for id := range s.containers {
			ids = append(ids, id)
		}
		slices.Sort(ids)
		for _, id := range ids {
			if !c.p.has("/vms/"+itoa(id), "VM.Audit") {
				continue
			}
			if v := s.vms[id]; v != nil {
				_, down := s.faults.nodeDown(v.node)
				out = append(out, s.vmResource(v, down))
				continue
			}
			ct := s.containers[id]
			status := statusRunning
			if _, down := s.faults.nodeDown(ct.Node); down {
				status = statusUnknown
			}
			out = append(out, map[string]any{
				"id": "lxc/" + itoa(id), "type": "lxc", "vmid": id, "node": ct.Node, "name": ct.Name,
				"status": status, "template": 0, "maxcpu": 1, "maxmem": 512 << 20, "maxdisk": 8 << 30, "uptime": 0,
			})
		}
	}
	if typ == "" || typ == "storage" {
		for _, name := range s.nodeOrder {
			for _, st := range s.sortedStorages() {
				if !st.availableOn(name) {
					continue
				}
				out = append(out, map[string]any{
					"id": "storage/" + name + "/" + st.cfg.ID, "type": "storage", "storage": st.cfg.ID,
					"node": name, "status": "available", "shared": boolInt(st.cfg.Shared),
					"content": strings.Join(st.cfg.Content, ","), "plugintype": st.cfg.Type,
					"maxdisk": int64(st.cfg.SizeGiB) << 30, "disk": st.used(name),
				})
			}
		}
	}
	return out, nil
}

// sortedStorages returns the storages by ID.
func (s *Sim) sortedStorages() []*storage {
	out := make([]*storage, 0, len(s.storages))
	for _, st := range s.storages {
		out = append(out, st)
	}
	slices.SortFunc(out, func(a, b *storage) int { return strings.Compare(a.cfg.ID, b.cfg.ID) })
	return out
}

// used is the bytes used by the volumes seen from a node.
func (st *storage) used(node string) int64 {
	var n int64
	for _, v := range st.vols(node) {
		n += v.size
	}
	return n
}

// nodeEntry is a node's /nodes and /cluster/resources entry.
func (s *Sim) nodeEntry(name, id string) map[string]any {
	nd := s.nodes[name]
	status := "online"
	if _, down := s.faults.nodeDown(name); down {
		status = "offline"
	}
	return map[string]any{
		"id": id, "type": "node", "node": name, "status": status, "level": "",
		"maxcpu": nd.cpus, "maxmem": nd.memory, "mem": nd.memory / 8, "cpu": 0.02,
		"uptime": int64(time.Since(s.bootTime)/time.Second) + 86400, "maxdisk": int64(100) << 30,
	}
}

// hNodes answers GET /nodes.
func (s *Sim) hNodes(*call) (any, *apiError) {
	s.mu.Lock()
	defer s.mu.Unlock()
	out := make([]map[string]any, 0, len(s.nodeOrder))
	for _, name := range s.nodeOrder {
		out = append(out, s.nodeEntry(name, "node/"+name))
	}
	return out, nil
}

// hNodeStatus answers GET /nodes/{node}/status.
func (s *Sim) hNodeStatus(c *call) (any, *apiError) {
	s.mu.Lock()
	defer s.mu.Unlock()
	nd := s.nodes[c.node]
	return map[string]any{
		"uptime":     int64(time.Since(s.bootTime)/time.Second) + 86400,
		"pveversion": "pve-manager/" + s.cfg.Version + "/0123456789abcdef",
		"kversion":   "Linux 6.17.2-1-pve #1 SMP PREEMPT_DYNAMIC x86_64",
		"cpu":        0.02, "wait": 0, "loadavg": []string{"0.10", "0.12", "0.09"},
		"cpuinfo": map[string]any{"cpus": nd.cpus, "cores": nd.cpus, "sockets": 1, "model": "Simulated CPU"},
		"memory":  map[string]any{"total": nd.memory, "used": nd.memory / 8, "free": nd.memory - nd.memory/8},
	}, nil
}

// hNextID answers GET /cluster/nextid: the lowest free VMID from 100, or
// checks a proposed one.
func (s *Sim) hNextID(c *call) (any, *apiError) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if v, ok := c.params["vmid"]; ok {
		id, _ := strconv.Atoi(v)
		if s.vmidTaken(id) {
			return nil, paramError(map[string]string{"vmid": "VM " + v + " already exists"})
		}
		return v, nil
	}
	for id := 100; ; id++ {
		if !s.vmidTaken(id) {
			return itoa(id), nil
		}
	}
}

// vmidTaken reports whether a VMID is used by a VM or a container.
func (s *Sim) vmidTaken(id int) bool {
	_, vmOK := s.vms[id]
	_, ctOK := s.containers[id]
	return vmOK || ctOK
}

// lookupVM returns the VM on the call's node or the F2 error.
func (s *Sim) lookupVM(c *call) (*vm, *apiError) {
	v := s.vms[c.vmid]
	if v == nil || v.node != c.node {
		return nil, errNoConfig(c.node, c.vmid)
	}
	return v, nil
}

// errInternal is a 500 with a text.
func errInternal(msg string) *apiError {
	return &apiError{status: http.StatusInternalServerError, message: msg}
}
