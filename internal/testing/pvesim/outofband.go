package pvesim

import (
	"fmt"
	"slices"
)

// Changes made outside the API, as a colleague at the console, a crashed
// QEMU process or another tool would make them. They are not API calls, so
// they are neither counted nor recorded as mutations: a test tells its own
// doings from the client's.

// AddVM places a VM described as a template entry of the configuration
// (Template false makes a plain stopped VM; Tags and Extra["description"]
// set its tags and description), as if someone else had created it.
func (s *Sim) AddVM(tc TemplateConfig) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	if _, ok := s.nodes[tc.Node]; !ok {
		return fmt.Errorf("vm %d: unknown node %q", tc.VMID, tc.Node)
	}
	if s.vmidTaken(tc.VMID) {
		return fmt.Errorf("vm %d: the VMID is taken", tc.VMID)
	}
	for _, d := range tc.Disks {
		st := s.storages[d.Storage]
		if st == nil || !st.availableOn(tc.Node) {
			return fmt.Errorf("vm %d: storage %q is not available on node %q", tc.VMID, d.Storage, tc.Node)
		}
	}
	if tc.CloudInitStorage != "" {
		return fmt.Errorf("vm %d: a cloud-init drive cannot be placed out of band", tc.VMID)
	}
	s.addTemplate(tc)
	return nil
}

// Crash stops a running VM at once, as when its QEMU process dies or
// someone stops it at the console. It reports whether a running VM was
// there.
func (s *Sim) Crash(vmid int) bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	v := s.vms[vmid]
	if v == nil || !v.isRunning() {
		return false
	}
	s.stopVM(v)
	return true
}

// Vanish removes a VM and its disk volumes at once, as when someone else
// destroys it. It reports whether the VM was there.
func (s *Sim) Vanish(vmid int) bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	v := s.vms[vmid]
	if v == nil || v.template() {
		return false
	}
	for _, st := range s.storages {
		vols := st.vols(v.node)
		for id, vol := range vols {
			if vol.vmid == v.vmid && vol.content == "images" {
				delete(vols, id)
			}
		}
	}
	delete(s.vms, vmid)
	v.waiters = nil
	if v.isRunning() {
		g := s.guestOf(v)
		go s.guests.Stop(g)
	}
	return true
}

// StorageVolumes lists the volids on a storage of a node (every node's volumes for
// a shared storage), for tests that look for leftovers.
func (s *Sim) StorageVolumes(nodeName, storageID string) []string {
	s.mu.Lock()
	defer s.mu.Unlock()
	st := s.storages[storageID]
	if st == nil {
		return nil
	}
	var out []string
	for id := range st.vols(nodeName) {
		out = append(out, id)
	}
	slices.Sort(out)
	return out
}
