package pvesim

import (
	"cmp"
	"encoding/json"
	"net/http"
	"slices"
	"strings"
)

// AdminHandler serves the admin API (JSON in and out), meant for a separate
// loopback listener (ServeAdmin):
//
//	GET    /admin/counters              request counts by "METHOD /template"
//	GET    /admin/bytes                 bytes answered (successful bodies) by "METHOD /template"
//	DELETE /admin/counters              reset the counters and the bytes
//	POST   /admin/faults/call           a CallFault (failure, latency, cut)
//	POST   /admin/faults/task           {"type","exitstatus","count"}
//	POST   /admin/faults/node           {"node","unreachable","status","text"}
//	POST   /admin/faults/agent          {"vmid","never"} or {"next": n}
//	GET    /admin/mutations             every mutating call (Mutation)
//	POST   /admin/faults/lock           {"vmid","lock"}
//	DELETE /admin/faults                clear call, task and node faults
//	GET    /admin/vms                   VMID, node, name, status, lock of every VM
func (s *Sim) AdminHandler() http.Handler {
	mux := http.NewServeMux()
	mux.HandleFunc("GET /admin/counters", func(w http.ResponseWriter, _ *http.Request) {
		writeJSON(w, http.StatusOK, s.Counters())
	})
	mux.HandleFunc("GET /admin/bytes", func(w http.ResponseWriter, _ *http.Request) {
		writeJSON(w, http.StatusOK, s.ResponseBytes())
	})
	mux.HandleFunc("DELETE /admin/counters", func(w http.ResponseWriter, _ *http.Request) {
		s.ResetCounters()
		writeJSON(w, http.StatusOK, map[string]bool{"ok": true})
	})
	mux.HandleFunc("POST /admin/faults/call", func(w http.ResponseWriter, r *http.Request) {
		var f CallFault
		if !readJSON(w, r, &f) {
			return
		}
		s.AddCallFault(f)
		writeJSON(w, http.StatusOK, map[string]bool{"ok": true})
	})
	mux.HandleFunc("POST /admin/faults/task", func(w http.ResponseWriter, r *http.Request) {
		var body struct {
			Type       string `json:"type"`
			ExitStatus string `json:"exitstatus"`
			Count      int    `json:"count"`
		}
		if !readJSON(w, r, &body) {
			return
		}
		s.FailTasks(body.Type, body.ExitStatus, body.Count)
		writeJSON(w, http.StatusOK, map[string]bool{"ok": true})
	})
	mux.HandleFunc("POST /admin/faults/node", func(w http.ResponseWriter, r *http.Request) {
		var body struct {
			Node        string `json:"node"`
			Unreachable bool   `json:"unreachable"`
			Status      int    `json:"status"`
			Text        string `json:"text"`
		}
		if !readJSON(w, r, &body) {
			return
		}
		s.mu.Lock()
		_, known := s.nodes[body.Node]
		s.mu.Unlock()
		if !known {
			writeJSON(w, http.StatusNotFound, map[string]string{"error": "unknown node"})
			return
		}
		s.SetNodeUnreachable(body.Node, body.Unreachable, body.Status, body.Text)
		writeJSON(w, http.StatusOK, map[string]bool{"ok": true})
	})
	mux.HandleFunc("POST /admin/faults/agent", func(w http.ResponseWriter, r *http.Request) {
		var body struct {
			VMID  int  `json:"vmid"`
			Never bool `json:"never"`
			Next  int  `json:"next"`
		}
		if !readJSON(w, r, &body) {
			return
		}
		if body.Next > 0 {
			s.AgentNeverStartsNext(body.Next)
			writeJSON(w, http.StatusOK, map[string]bool{"ok": true})
			return
		}
		if !s.SetAgentNeverStarts(body.VMID, body.Never) {
			writeJSON(w, http.StatusNotFound, map[string]string{"error": "unknown vmid"})
			return
		}
		writeJSON(w, http.StatusOK, map[string]bool{"ok": true})
	})
	mux.HandleFunc("POST /admin/faults/lock", func(w http.ResponseWriter, r *http.Request) {
		var body struct {
			VMID int    `json:"vmid"`
			Lock string `json:"lock"`
		}
		if !readJSON(w, r, &body) {
			return
		}
		if !s.SetLock(body.VMID, body.Lock) {
			writeJSON(w, http.StatusNotFound, map[string]string{"error": "unknown vmid"})
			return
		}
		writeJSON(w, http.StatusOK, map[string]bool{"ok": true})
	})
	mux.HandleFunc("DELETE /admin/faults", func(w http.ResponseWriter, _ *http.Request) {
		s.ClearFaults()
		writeJSON(w, http.StatusOK, map[string]bool{"ok": true})
	})
	mux.HandleFunc("GET /admin/mutations", func(w http.ResponseWriter, _ *http.Request) {
		writeJSON(w, http.StatusOK, s.Mutations())
	})
	mux.HandleFunc("GET /admin/vms", func(w http.ResponseWriter, _ *http.Request) {
		writeJSON(w, http.StatusOK, s.VMs())
	})
	return mux
}

// VMInfo is a summary of a VM for tests, benchmarks and the admin API.
type VMInfo struct {
	VMID     int    `json:"vmid"`
	Node     string `json:"node"`
	Name     string `json:"name,omitempty"`
	Status   string `json:"status"`
	QMP      string `json:"qmpstatus"`
	Lock     string `json:"lock,omitempty"`
	Template bool   `json:"template,omitempty"`
}

// VMs lists every VM by VMID.
func (s *Sim) VMs() []VMInfo {
	s.mu.Lock()
	defer s.mu.Unlock()
	out := make([]VMInfo, 0, len(s.vms))
	for _, v := range s.vms {
		out = append(out, VMInfo{VMID: v.vmid, Node: v.node, Name: v.name(), Status: v.status, QMP: v.qmp, Lock: v.lock(), Template: v.template()})
	}
	slices.SortFunc(out, func(a, b VMInfo) int { return a.VMID - b.VMID })
	return out
}

// VolumeInfo is a summary of a stored volume for tests and benchmarks.
type VolumeInfo struct {
	// Node is where the volume is seen, "" on a shared storage.
	Node    string `json:"node,omitempty"`
	Storage string `json:"storage"`
	VolID   string `json:"volid"`
	Content string `json:"content"`
	Size    int64  `json:"size"`
	// VMID is the VM a disk or state volume belongs to, 0 for an ISO.
	VMID int `json:"vmid,omitempty"`
}

// Volumes lists every volume of a content type ("" for all), by storage,
// node and volume ID.
func (s *Sim) Volumes(content string) []VolumeInfo {
	s.mu.Lock()
	defer s.mu.Unlock()
	var out []VolumeInfo
	for id, st := range s.storages {
		for node, vols := range st.volumes {
			for _, v := range vols {
				if content == "" || v.content == content {
					out = append(out, VolumeInfo{Node: node, Storage: id, VolID: v.volid, Content: v.content, Size: v.size, VMID: v.vmid})
				}
			}
		}
	}
	slices.SortFunc(out, func(a, b VolumeInfo) int {
		return cmp.Or(strings.Compare(a.Storage, b.Storage), strings.Compare(a.Node, b.Node), strings.Compare(a.VolID, b.VolID))
	})
	return out
}

// OrphanVolumes lists the volumes of a VM (disks, state volumes) whose VM
// no longer exists (on the volume's node, for a storage that is not
// shared), looked at in one moment: what a destroy left behind.
func (s *Sim) OrphanVolumes() []VolumeInfo {
	var out []VolumeInfo
	s.mu.Lock()
	defer s.mu.Unlock()
	for id, st := range s.storages {
		for node, vols := range st.volumes {
			for _, v := range vols {
				if vm, ok := s.vms[v.vmid]; v.vmid != 0 && (!ok || node != "" && vm.node != node) {
					out = append(out, VolumeInfo{Node: node, Storage: id, VolID: v.volid, Content: v.content, Size: v.size, VMID: v.vmid})
				}
			}
		}
	}
	slices.SortFunc(out, func(a, b VolumeInfo) int { return strings.Compare(a.VolID, b.VolID) })
	return out
}

// VMConfig returns a copy of a VM's config.
func (s *Sim) VMConfig(vmid int) (map[string]string, bool) {
	s.mu.Lock()
	defer s.mu.Unlock()
	v := s.vms[vmid]
	if v == nil {
		return nil, false
	}
	out := make(map[string]string, len(v.conf))
	for k, val := range v.conf {
		out[k] = val
	}
	return out, true
}

// readJSON decodes a small JSON request body or answers 400.
func readJSON(w http.ResponseWriter, r *http.Request, v any) bool {
	dec := json.NewDecoder(http.MaxBytesReader(w, r.Body, 1<<16))
	dec.DisallowUnknownFields()
	if err := dec.Decode(v); err != nil {
		writeJSON(w, http.StatusBadRequest, map[string]string{"error": strings.TrimSpace(err.Error())})
		return false
	}
	return true
}

// writeJSON writes an admin answer.
func writeJSON(w http.ResponseWriter, status int, v any) {
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(status)
	_ = json.NewEncoder(w).Encode(v)
}
