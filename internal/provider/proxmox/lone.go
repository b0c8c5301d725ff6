package proxmox

import (
	"context"
	"fmt"
	"time"

	"github.com/go-logr/logr"

	"github.com/egress-proxies/egress-proxies-operator/internal/provider"
)

// viewVMsPerLook is how many of its VMs a node's view may hold per Get it
// serves before a Get of a VM in creation reads its VM's own status
// instead. A view entry and a status/current answer are about the same size
// (one VM each, docs/performance.md), so a view of V VMs costs about V lone
// looks in bytes and one call: read only when it serves at least one look
// per viewVMsPerLook VMs, it costs at most that many lone looks' bytes per
// Get it serves, and saves a call for each.
const viewVMsPerLook = 4

// nodeDemand is how many Gets looked at a node's VMs in the current poll
// interval and the one before (all of them, and those of VMs not in
// creation, which always read the view), and how many VMs the node's newest
// listing held (-1 before any).
type nodeDemand struct {
	window            time.Time // when the current interval's count began
	cur, prev         int
	steadyCur, steady int // steady: in the interval before
	vms               int
}

// noteLook counts a Get of a VM on node (steady: a VM not in creation) and
// returns the looks of the busier of the current poll interval (this one
// included) and the one before, the looks of VMs not in creation in both,
// and the number of VMs on node (-1 when no listing has shown the node yet).
func (p *Provider) noteLook(node string, steady bool) (looks, steadyLooks, vms int) {
	now, poll := p.now(), p.poll()
	p.listMu.Lock()
	defer p.listMu.Unlock()
	d := p.nodeDemandLocked(node)
	switch age := now.Sub(d.window); {
	case d.window.IsZero() || age >= 2*poll || age < 0:
		d.window, d.cur, d.prev, d.steadyCur, d.steady = now, 0, 0, 0, 0
	case age >= poll:
		d.window, d.cur, d.prev, d.steadyCur, d.steady = d.window.Add(poll), 0, d.cur, 0, d.steadyCur
	}
	d.cur++
	if steady {
		d.steadyCur++
	}
	return max(d.cur, d.prev), d.steadyCur + d.steady, d.vms
}

// nodeDemandLocked is node's demand record; p.listMu must be held.
func (p *Provider) nodeDemandLocked(node string) *nodeDemand {
	d, ok := p.demand[node]
	if !ok {
		d = &nodeDemand{vms: -1}
		p.demand[node] = d
	}
	return d
}

// noteNodeSize records the number of VMs a listing of node showed.
func (p *Provider) noteNodeSize(node string, vms int) {
	p.listMu.Lock()
	defer p.listMu.Unlock()
	p.nodeDemandLocked(node).vms = vms
}

// noteClusterSizes records the number of QEMU VMs of every node the
// cluster-wide listing shows: Create reads it first, so a Get knows the
// size of a view before any view was read.
func (p *Provider) noteClusterSizes(list []Resource) {
	sizes := map[string]int{}
	for _, r := range list {
		if r.Type == "qemu" {
			sizes[r.Node]++
		}
	}
	p.listMu.Lock()
	defer p.listMu.Unlock()
	for node, n := range sizes {
		p.nodeDemandLocked(node).vms = n
	}
}

// lookAlone says whether a Get of vmid on node reads the VM's own status
// instead of the node's view (get step 1): only for a VM in creation
// (booting), when no view fresh enough is kept or in flight, when no Get of
// a VM not in creation looked at the node in this poll interval or the one
// before (those always read the view, so it is read anyway and costs a VM
// in creation nothing), and when the node has too few Gets to serve for the
// view to be worth its bytes (fewer than one per viewVMsPerLook of its VMs,
// counting this one). Every Get counts towards its node's demand.
func (p *Provider) lookAlone(node string, vmid int, notBefore time.Time) bool {
	p.mu.Lock()
	booting := p.booting[vmid]
	p.mu.Unlock()
	looks, steady, vms := p.noteLook(node, !booting)
	return booting && steady == 0 && looks*viewVMsPerLook < vms && !p.nodeView(node).Fresh(notBefore)
}

// loneLook is a Get of a VM in creation from its own status (F14: status and
// qmpstatus, mapped as the view's entry is, get step 3); its answer does not
// grow with the cluster. ok is false when it cannot answer (F2: gone or
// moved, or the read failed): the view and the cluster-wide listing then
// tell, as for any other Get.
func (p *Provider) loneLook(ctx context.Context, node string, vmid int, name string) (inst provider.Instance, ok bool, err error) {
	at := p.now()
	st, err := p.api.status(ctx, node, vmid)
	if err != nil {
		if ctx.Err() != nil {
			return provider.Instance{}, true, classify(fmt.Sprintf("reading the status of VM %d", vmid), err)
		}
		logr.FromContextOrDiscard(ctx).V(1).Info("the status of a VM in creation could not be read; reading its node's listing instead", "node", node, "vmid", vmid, "error", err.Error())
		return provider.Instance{}, false, nil
	}
	v := NodeVM{VMID: vmid, Name: st.Name, Status: st.Status, QMPStatus: st.QMPStatus, Uptime: st.Uptime, Lock: st.Lock}
	inst, err = p.judge(ctx, Resource{Type: "qemu", VMID: vmid, Name: v.Name, Node: node, Status: v.Status, Lock: v.Lock, Uptime: v.Uptime}, &v, at, name)
	return inst, true, err
}

// setBooting records whether vmid is a VM in creation (booting).
func (p *Provider) setBooting(vmid int, on bool) {
	p.mu.Lock()
	defer p.mu.Unlock()
	if on {
		p.booting[vmid] = true
	} else {
		delete(p.booting, vmid)
	}
}
