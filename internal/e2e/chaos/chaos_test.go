package chaos_test

import (
	"context"
	"encoding/json"
	"fmt"
	"maps"
	"math/rand/v2"
	"net/http"
	"os"
	"path/filepath"
	"slices"
	"sort"
	"strconv"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	apimeta "k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"sigs.k8s.io/controller-runtime/pkg/client"

	crawlv1alpha1 "github.com/egress-proxies/egress-proxies-operator/api/v1alpha1"
	"github.com/egress-proxies/egress-proxies-operator/internal/testing/pvelab"
	"github.com/egress-proxies/egress-proxies-operator/internal/testing/pvesim"
	"github.com/egress-proxies/egress-proxies-operator/internal/testing/testenv"
)

// tracked is what the run knows of one Proxy.
type tracked struct {
	name string
	uid  types.UID
	// entry is the provider entry it asked for.
	entry string
	// createdAt is when the run created it, readyAt when it was first seen
	// Ready (zero before); reason is its Ready condition's latest reason.
	createdAt, readyAt time.Time
	reason             string
	// createdWhileLost: created while the ownership key was lost, so held.
	createdWhileLost bool
	// deleted: the run asked for its deletion; gone: the API server no
	// longer has it, since the operator had run goneAt in all.
	deleted, gone bool
	goneAt        time.Duration
	// goneWhileLost: it went while the ownership key was lost (or just
	// before, its VM not yet collected), so its leak deadline counts from
	// the key's restore (its instance is nobody's until then).
	goneWhileLost bool
	// wentWhileLost stays true after the restore: its Delete ran with the
	// wrong key, which cannot name the instance's seed (its name is
	// signed), so with the VM removed behind the operator's back too only
	// the sweep leads to the seed.
	wentWhileLost bool
	replacements  int32
	// instances are the instance names its status has shown (its seeds
	// are named after them).
	instances map[string]bool
}

// run is one chaos run: the world, the random source, what is tracked and
// what was found.
type run struct {
	*world
	t    *testing.T
	plan plan
	rng  *rand.Rand

	proxies map[string]*tracked
	foreign map[int]string // VMID on the lab: class
	// mutSeen counts the mutations checked, per cluster (clusters()).
	mutSeen  []int
	seen     map[string]bool // events and statuses already captured
	undo     []undo
	step     int
	nextVMID int

	faults                     map[string]int
	created, deleted, provoked int
	duplicates, leaks, touches int
	// keyLossMutations counts the operator's mutations on the lab while its
	// key was lost (all must be 0).
	keyLossMutations int
	secretsFound     int
	// vanished are the VMs this run removed behind the operator's back,
	// by instance name; sweepBound the seeds found after a delete whose
	// VM's removal left them to the sweep (leftForSweep).
	vanished      map[string]vanishing
	sweepBound    map[string]bool
	copies        int
	polls         int
	violations    []string
	violationSeen map[string]bool
	maxVMsOfOne   int
	wallStarted   time.Time

	// The planned episodes (episodes_test.go): the one running, and how
	// many of each kind ran to their end.
	episode          episode
	hangs, keyLosses int
	orphans          int
	// hangTook is the longest a hang's evidence took, hangBound its
	// latest bound.
	hangTook, hangBound time.Duration
}

// undo is a fault lifted a few steps after it was set (a node back, a
// stale lock cleared).
type undo struct {
	at int
	fn func()
}

// TestChaos is the chaos run (docs/testing.md). A failure prints the seed;
// replay it with CHAOS_SEED=<seed> (or -args -chaos.seed=<seed>).
func TestChaos(t *testing.T) {
	testenv.Need(t, env)
	p, err := planFromEnv()
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("chaos seed %d (replay: CHAOS_SEED=%d)", p.Seed, p.Seed)
	ns := &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{GenerateName: "chaos-"}}
	if err := env.Client.Create(context.Background(), ns); err != nil {
		t.Fatal(err)
	}
	r := &run{t: t, plan: p, rng: rand.New(rand.NewPCG(uint64(p.Seed), 0x63686173)),
		proxies: map[string]*tracked{}, seen: map[string]bool{}, faults: map[string]int{}, vanished: map[string]vanishing{}, sweepBound: map[string]bool{}, violationSeen: map[string]bool{}, nextVMID: 5000}
	r.world = newWorld(t, p, ns.Name)
	r.foreign = r.placeOtherInstallation(context.Background(), 3)
	// The other installation's calls used the same token: the check starts
	// after them.
	r.mutSeen = []int{len(r.lab.Sim.Mutations()), len(r.hung.Sim.Mutations())}
	for vmid, class := range placeForeign(t, r.lab.Sim, r.rng) {
		r.foreign[vmid] = class
	}
	r.wallStarted = time.Now()
	r.start()
	defer r.kill()

	r.drive()
	r.settle()
	r.report()
}

// drive runs the random phase: every Step one or more actions, every Poll
// the checks, until every Proxy was created and deleted.
func (r *run) drive() {
	ctx := context.Background()
	poll := time.NewTicker(r.plan.Poll)
	defer poll.Stop()
	step := time.NewTicker(r.plan.Step)
	defer step.Stop()
	// A bound against a hang, not a speed goal: a 50-Proxy run takes 40 s
	// to 2.5 min on two shared cores, episodes included.
	deadline := time.NewTimer(time.Duration(r.plan.Proxies) * 12 * time.Second)
	defer deadline.Stop()
	for {
		select {
		case <-deadline.C:
			r.t.Fatalf("seed %d: the run did not finish in time: %d created, %d deleted", r.plan.Seed, r.created, r.deleted)
		case <-poll.C:
			r.check(ctx)
		case <-step.C:
			r.act(ctx)
			if r.created >= r.plan.Proxies && r.live() == 0 && r.episode == nil {
				return
			}
		}
	}
}

// live counts the Proxies created and not yet asked to go.
func (r *run) live() int {
	n := 0
	for _, p := range r.proxies {
		if !p.deleted {
			n++
		}
	}
	return n
}

// act takes the random actions of one step.
func (r *run) act(ctx context.Context) {
	r.step++
	kept := r.undo[:0]
	for _, u := range r.undo {
		if u.at <= r.step {
			u.fn()
			continue
		}
		kept = append(kept, u)
	}
	r.undo = kept

	r.advanceEpisode(ctx)
	// The operator: killed at a random point, back one to three steps
	// later; not while a provider hangs, since a restart ends the hung
	// calls.
	if r.up() && r.rng.Float64() < r.plan.Restart && !r.hanging() {
		r.kill()
		back := r.step + 1 + r.rng.IntN(3)
		r.undo = append(r.undo, undo{at: back, fn: r.start})
	}
	if r.created < r.plan.Proxies && r.live() < r.plan.MaxLive && r.rng.Float64() < 0.6 {
		if r.rng.Float64() < 0.1 {
			r.lab.Sim.AgentNeverStartsNext(1)
			r.faults["agent never up"]++
		}
		r.create(ctx, pvelab.EntryName)
	}
	if r.rng.Float64() < 0.12 {
		r.replace()
	}
	// Deletions keep up with creations; once all are created, the rest go.
	if r.live() > 0 && (r.rng.Float64() < 0.25 || (r.created == r.plan.Proxies && r.rng.Float64() < 0.5)) {
		r.remove(ctx)
	}
	if r.rng.Float64() < r.plan.Fault && !r.hanging() {
		r.fault()
	}
	if r.rng.Float64() < 0.03 {
		r.copyLiveMark()
	}
}

// create creates the next Proxy on the entry; the script's creates give
// one in ten a VM whose agent never comes up (the next clone, whichever
// Proxy's it is).
func (r *run) create(ctx context.Context, entry string) *tracked {
	name := fmt.Sprintf("egress-%03d", r.created)
	p := &crawlv1alpha1.Proxy{ObjectMeta: metav1.ObjectMeta{Namespace: r.ns, Name: name},
		Spec: crawlv1alpha1.ProxySpec{Provider: entry, MachineType: pvelab.MachineType, Image: pvelab.Image}}
	if err := env.Client.Create(ctx, p); err != nil {
		r.t.Fatal(err)
	}
	tr := &tracked{name: name, uid: p.UID, entry: entry, createdAt: time.Now(), createdWhileLost: r.keyLost(), instances: map[string]bool{}}
	r.proxies[name] = tr
	r.created++
	return tr
}

// replace stops or removes, behind the operator's back, the VM of a Proxy
// that has one.
func (r *run) replace() {
	var vmids []int
	for _, vm := range r.lab.Sim.VMs() {
		if _, foreign := r.foreign[vm.VMID]; !foreign && !vm.Template && vm.Lock == "" && !r.hangKeeps(vm.VMID) {
			vmids = append(vmids, vm.VMID)
		}
	}
	if len(vmids) == 0 {
		return
	}
	vmid := vmids[r.rng.IntN(len(vmids))]
	// While the key is lost the old fleet stays: with none of it left, a
	// lost key looks like a fresh install (docs/security.md).
	if r.rng.Float64() < 0.5 || r.keyLost() {
		if r.lab.Sim.Crash(vmid) {
			r.provoked++
		}
		return
	}
	conf, _ := r.lab.Sim.VMConfig(vmid)
	if r.lab.Sim.Vanish(vmid) {
		r.provoked++
		if name := conf["name"]; name != "" {
			r.vanished[name] = vanishing{step: r.step, sweepOnly: r.onlySweepLeadsTo(name)}
		}
	}
}

// onlySweepLeadsTo reports whether, with the VM of an instance removed,
// only garbage collection's sweep can still find the instance's seed:
//   - the instance has not shown in a Proxy's status (Create has not
//     returned it), so a Delete of its Proxy has no name to look for;
//   - or its Proxy is gone already and the VM was left to garbage
//     collection (the Proxy went while the ownership key was lost, or while
//     its provider hung), whose listing was the one path to the seed.
func (r *run) onlySweepLeadsTo(instance string) bool {
	for _, p := range r.proxies {
		if p.instances[instance] {
			return p.gone
		}
	}
	return true
}

// remove deletes a random live Proxy, whatever its phase (deletion during
// create included).
func (r *run) remove(ctx context.Context) {
	var names []string
	for _, n := range slices.Sorted(maps.Keys(r.proxies)) {
		if !r.proxies[n].deleted {
			names = append(names, n)
		}
	}
	if len(names) == 0 {
		return
	}
	p := r.proxies[names[r.rng.IntN(len(names))]]
	obj := &crawlv1alpha1.Proxy{ObjectMeta: metav1.ObjectMeta{Namespace: r.ns, Name: p.name}}
	if err := client.IgnoreNotFound(env.Client.Delete(ctx, obj)); err != nil {
		r.t.Fatal(err)
	}
	p.deleted = true
	r.deleted++
}

// Routes the provider calls, for call faults.
var (
	readRoutes = []string{"/cluster/resources", "/nodes/{node}/qemu/{vmid}/config", "/nodes/{node}/qemu/{vmid}/status/current",
		"/nodes/{node}/tasks/{upid}/status", "/nodes/{node}/qemu/{vmid}/agent/network-get-interfaces", "/nodes/{node}/storage/{storage}/content"}
	writeRoutes = []struct{ method, route string }{
		{http.MethodPost, "/nodes/{node}/qemu/{vmid}/clone"}, {http.MethodPost, "/nodes/{node}/storage/{storage}/upload"},
		{http.MethodPost, "/nodes/{node}/qemu/{vmid}/config"}, {http.MethodPut, "/nodes/{node}/qemu/{vmid}/config"},
		{http.MethodPost, "/nodes/{node}/qemu/{vmid}/status/start"}, {http.MethodPost, "/nodes/{node}/qemu/{vmid}/status/stop"},
		{http.MethodDelete, "/nodes/{node}/qemu/{vmid}"}, {http.MethodDelete, "/nodes/{node}/storage/{storage}/content/{volume}"},
	}
	vmWriteRoutes = writeRoutes[2:7]
	taskTypes     = []string{"qmclone", "qmstart", "qmstop", "qmdestroy", "imgcopy", "imgdel", "qmconfig"}
)

// fault injects one random fault.
func (r *run) fault() {
	sim := r.lab.Sim
	anyCall := func() (string, string) {
		if r.rng.IntN(2) == 0 {
			return http.MethodGet, readRoutes[r.rng.IntN(len(readRoutes))]
		}
		w := writeRoutes[r.rng.IntN(len(writeRoutes))]
		return w.method, w.route
	}
	n := 1 + r.rng.IntN(3)
	switch kind := r.rng.IntN(9); kind {
	case 0:
		m, route := anyCall()
		status := []int{500, 502, 503}[r.rng.IntN(3)]
		sim.FailNext(m, route, n, status, "simulated server error")
		r.faults[strconv.Itoa(status)] += n
	case 1:
		m, route := anyCall()
		sim.FailNext(m, route, n, pvesim.StatusNoResponse, "Connection timed out")
		r.faults["595"] += n
	case 2:
		m, route := anyCall()
		sim.FailNext(m, route, n, pvesim.StatusConnectionError, "Connection refused")
		r.faults["596"] += n
	case 3:
		m, route := anyCall()
		sim.CutNext(m, route, n)
		r.faults["cut connection"] += n
	case 4:
		w := writeRoutes[r.rng.IntN(len(writeRoutes))]
		sim.LoseAnswerNext(w.method, w.route, 1)
		r.faults["lost answer"]++
	case 5:
		sim.FailTasks(taskTypes[r.rng.IntN(len(taskTypes))], "simulated task failure", 1)
		r.faults["task failure"]++
	case 6:
		w := vmWriteRoutes[r.rng.IntN(len(vmWriteRoutes))]
		sim.LockTimeoutNext(w.method, w.route, n)
		r.faults["lock timeout"] += n
	case 7:
		node := fmt.Sprintf("pve%d", 1+r.rng.IntN(3))
		status := []int{pvesim.StatusNoResponse, pvesim.StatusConnectionError}[r.rng.IntN(2)]
		sim.SetNodeUnreachable(node, true, status, "")
		r.undo = append(r.undo, undo{at: r.step + 1 + r.rng.IntN(4), fn: func() { sim.SetNodeUnreachable(node, false, 0, "") }})
		r.faults["node unreachable"]++
	case 8:
		// A stale lock on one of our VMs (a backup that hangs), lifted a
		// few steps later.
		for _, vm := range sim.VMs() {
			if _, foreign := r.foreign[vm.VMID]; !foreign && !vm.Template && vm.Lock == "" && r.rng.IntN(3) == 0 {
				sim.SetLock(vm.VMID, "backup")
				vmid := vm.VMID
				r.undo = append(r.undo, undo{at: r.step + 1 + r.rng.IntN(6), fn: func() { sim.SetLock(vmid, "") }})
				r.faults["stale lock"]++
				break
			}
		}
	}
}

// copyLiveMark places a foreign VM with the tags and description of one of
// our VMs: a mark copied verbatim, signature and all.
func (r *run) copyLiveMark() {
	for _, vm := range r.lab.Sim.VMs() {
		if _, foreign := r.foreign[vm.VMID]; foreign || vm.Template {
			continue
		}
		r.nextVMID++
		vmid, err := copyMark(r.lab.Sim, vm.VMID, r.nextVMID, vm.Node)
		if err != nil {
			r.t.Fatal(err)
		}
		if vmid != 0 {
			r.foreign[vmid] = classCopied
			r.copies++
		}
		return
	}
}

// violation records a broken invariant once per key.
func (r *run) violation(key, format string, args ...any) bool {
	if r.violationSeen[key] {
		return false
	}
	r.violationSeen[key] = true
	msg := fmt.Sprintf(format, args...)
	r.violations = append(r.violations, msg)
	r.t.Errorf("seed %d, step %d: %s", r.plan.Seed, r.step, msg)
	return true
}

// check observes the cluster and the simulator and checks every invariant.
func (r *run) check(ctx context.Context) {
	r.polls++
	r.observeProxies(ctx)
	r.observeSecretsAndEvents(ctx)
	r.checkVMs()
	r.checkMutations()
	r.checkLeaks()
	findings := r.watch.Findings()
	for _, f := range findings[r.secretsFound:] {
		r.violation("secret|"+f.Source+"|"+f.Label+"|"+f.Spelling, "secret in output: %s", f)
	}
	r.secretsFound = len(findings)
}

// observeProxies reads the Proxies: UIDs, instance names, replacements,
// disappearance; each status is captured for the secret check.
func (r *run) observeProxies(ctx context.Context) {
	var list crawlv1alpha1.ProxyList
	if err := env.Client.List(ctx, &list, client.InNamespace(r.ns)); err != nil {
		r.t.Fatal(err)
	}
	present := map[string]bool{}
	for i := range list.Items {
		p := &list.Items[i]
		present[p.Name] = true
		tr := r.proxies[p.Name]
		if tr == nil {
			continue
		}
		tr.uid = p.UID
		if p.Status.InstanceName != "" {
			tr.instances[p.Status.InstanceName] = true
		}
		tr.replacements = max(tr.replacements, p.Status.Replacements)
		if c := apimeta.FindStatusCondition(p.Status.Conditions, crawlv1alpha1.ConditionReady); c != nil {
			tr.reason = c.Reason
		}
		if p.Status.Phase == crawlv1alpha1.ProxyPhaseReady && tr.readyAt.IsZero() {
			tr.readyAt = time.Now()
		}
		if key := "status|" + p.Name + "|" + p.ResourceVersion; !r.seen[key] {
			r.seen[key] = true
			b, _ := json.Marshal(p.Status)
			r.watch.Add("status", string(b))
		}
	}
	for _, tr := range r.proxies {
		if tr.deleted && !tr.gone && !present[tr.name] {
			tr.gone, tr.goneAt, tr.goneWhileLost = true, r.operatorUptime(), r.keyLost()
			tr.wentWhileLost = tr.goneWhileLost
		}
	}
}

// observeSecretsAndEvents learns the proxies' passwords from their Secrets
// and captures new events of the namespace and of the cluster-scoped
// ProviderHealth (namespace default).
func (r *run) observeSecretsAndEvents(ctx context.Context) {
	var secrets corev1.SecretList
	if err := env.Client.List(ctx, &secrets, client.InNamespace(r.ns)); err != nil {
		r.t.Fatal(err)
	}
	for _, s := range secrets.Items {
		if pw := string(s.Data["password"]); pw != "" && !r.seen["secret|"+s.Name] {
			r.seen["secret|"+s.Name] = true
			if err := r.watch.AddSecret("password of "+s.Name, pw); err != nil {
				r.t.Fatal(err)
			}
		}
	}
	for _, ns := range []string{r.ns, metav1.NamespaceDefault} {
		var events corev1.EventList
		if err := env.Client.List(ctx, &events, client.InNamespace(ns)); err != nil {
			r.t.Fatal(err)
		}
		for _, e := range events.Items {
			if key := "event|" + string(e.UID) + "|" + e.ResourceVersion; !r.seen[key] {
				r.seen[key] = true
				r.watch.Add("events", e.InvolvedObject.Kind+"/"+e.InvolvedObject.Name+" "+e.Reason+" "+e.Action+": "+e.Message)
			}
		}
	}
}

// cluster is one simulated cluster of the run: the lab, where every fault
// but the hang plays and every foreign VM is, or the cluster of hungEntry.
type cluster struct {
	name    string
	sim     *pvesim.Sim
	foreign map[int]string
}

// clusters are the run's clusters, the lab first.
func (r *run) clusters() []cluster {
	return []cluster{{pvelab.EntryName, r.lab.Sim, r.foreign}, {hungEntry, r.hung.Sim, nil}}
}

// ourVMs calls fn with each VM of the cluster that is not foreign and not a
// template, and its configuration.
func (c cluster) ourVMs(fn func(vm pvesim.VMInfo, conf map[string]string)) {
	for _, vm := range c.sim.VMs() {
		if _, foreign := c.foreign[vm.VMID]; foreign || vm.Template {
			continue
		}
		if conf, ok := c.sim.VMConfig(vm.VMID); ok {
			fn(vm, conf)
		}
	}
}

// checkVMs: never two VMs for one Proxy, on one cluster or across both.
func (r *run) checkVMs() {
	uids := make([]types.UID, 0, len(r.proxies))
	byUID := map[types.UID]*tracked{}
	for _, p := range r.proxies {
		if p.uid != "" {
			uids = append(uids, p.uid)
			byUID[p.uid] = p
		}
	}
	vmsOf := map[types.UID][]string{}
	for _, c := range r.clusters() {
		c.ourVMs(func(vm pvesim.VMInfo, conf map[string]string) {
			if uid, ok := uidOf(conf["description"], uids); ok {
				vmsOf[uid] = append(vmsOf[uid], fmt.Sprintf("%s/%d", c.name, vm.VMID))
			}
		})
	}
	for uid, vmids := range vmsOf {
		r.maxVMsOfOne = max(r.maxVMsOfOne, len(vmids))
		if len(vmids) > 1 {
			sort.Strings(vmids)
			if r.violation(fmt.Sprintf("dup|%s|%v", uid, vmids), "duplicate: Proxy %s has %d VMs at once: %v", byUID[uid].name, len(vmids), vmids) {
				r.duplicates++
			}
		}
	}
}

// checkMutations: no mutating call of the operator names a foreign VM (or
// creates one onto a foreign VMID); and while the ownership key is lost, the
// operator changes nothing on the lab, whose fleet the key no longer
// verifies: nothing created (no second fleet), nothing of the old one
// touched.
func (r *run) checkMutations() {
	for ci, c := range r.clusters() {
		all := c.sim.Mutations()
		lost := r.keyLost() && c.name == pvelab.EntryName
		for i, m := range all[r.mutSeen[ci]:] {
			if m.Token != r.tokenID {
				continue
			}
			if lost {
				if r.violation(fmt.Sprintf("lostkey|%d", r.mutSeen[ci]+i), "mutation on %s while the ownership key was lost: %s %s (VM %d), answered %d",
					c.name, m.Method, m.Path, m.VMID, m.Status) {
					r.keyLossMutations++
				}
			}
			class, foreign := c.foreign[m.VMID]
			if !foreign && m.NewID != 0 {
				if cl, ok := c.foreign[m.NewID]; ok && m.Status == http.StatusOK {
					class, foreign = cl, true
				}
			}
			if foreign {
				if r.violation(fmt.Sprintf("touch|%d", r.mutSeen[ci]+i), "foreign VM touched: %s %s (VM %d, %s), answered %d", m.Method, m.Path, m.VMID, class, m.Status) {
					r.touches++
				}
			}
		}
		r.mutSeen[ci] = len(all)
	}
}

// checkLeaks: once the operator has run leakUptime since a Proxy went,
// neither a VM naming it nor a seed of one of its instances is left.
func (r *run) checkLeaks() {
	now := r.operatorUptime()
	var due []*tracked
	for _, p := range r.proxies {
		if p.gone && !p.goneWhileLost && now-p.goneAt >= leakUptime {
			due = append(due, p)
		}
	}
	if len(due) == 0 {
		return
	}
	r.findLeaks(due, "")
}

// findLeaks reports the VMs and seeds left of the given gone Proxies, and
// the disks left of any VM that no longer exists.
func (r *run) findLeaks(gone []*tracked, when string) {
	uids := make([]types.UID, 0, len(gone))
	byUID := map[types.UID]*tracked{}
	for _, p := range gone {
		uids = append(uids, p.uid)
		byUID[p.uid] = p
	}
	for _, c := range r.clusters() {
		c.ourVMs(func(vm pvesim.VMInfo, conf map[string]string) {
			if uid, ok := uidOf(conf["description"], uids); ok {
				if r.violation(fmt.Sprintf("leak|vm|%s|%d", c.name, vm.VMID), "leak%s: VM %d on %s (%s, %s, lock %q) of deleted Proxy %s",
					when, vm.VMID, c.name, vm.Name, vm.Status, vm.Lock, byUID[uid].name) {
					r.leaks++
				}
			}
		})
		// The volumes that carry the cloud-init payload: the seed ISOs, on
		// any storage and node (not only the entry's seed storage), and the
		// disks of a VM, to which its guest wrote what the seed said.
		for _, v := range c.sim.Volumes("") {
			vol, node := v.VolID, v.Node
			for _, p := range gone {
				if owner := seedOwner(vol, p); owner {
					if r.leftForSweep(vol, p) {
						continue
					}
					if r.violation("leak|seed|"+c.name+"|"+node+"|"+vol, "leak%s: seed %s on %s/%s of deleted Proxy %s%s", when, vol, c.name, node, p.name, r.vanishedNote(vol)) {
						r.leaks++
					}
				}
			}
		}
		for _, v := range c.sim.OrphanVolumes() {
			if r.violation("leak|volume|"+c.name+"|"+v.Node+"|"+v.VolID, "leak%s: volume %s on %s/%s of VM %d, which no longer exists", when, v.VolID, c.name, v.Node, v.VMID) {
				r.leaks++
			}
		}
	}
}

// leftForSweep reports (and counts once) a seed of gone Proxy p whose VM
// this run removed behind the operator's back when nothing but the sweep
// led to the seed any more: nothing else did at the removal
// (onlySweepLeadsTo), or p went while the ownership key was lost, when its
// Delete could not name the seed. No VM and no recorded instance lead to
// it, and only garbage collection's sweep removes it, once it is older
// than the sweep's grace period (15 minutes, docs/proxmox.md), longer than
// a run. Known and bounded; see docs/security.md, chaos section.
func (r *run) leftForSweep(volid string, p *tracked) bool {
	if _, v, ok := r.vanishedVM(volid); ok && (v.sweepOnly || p.wentWhileLost) {
		r.sweepBound[volid] = true
		return true
	}
	return false
}

// vanishing is this run's removal of a VM behind the operator's back.
type vanishing struct {
	step int
	// sweepOnly: nothing but the sweep led to the VM's seed any more
	// (onlySweepLeadsTo, at the removal).
	sweepOnly bool
}

// vanishedVM returns the instance of a seed's volume whose VM this run
// removed behind the operator's back, and that removal.
func (r *run) vanishedVM(volid string) (string, vanishing, bool) {
	file := volid[strings.LastIndex(volid, "/")+1:]
	for name, v := range r.vanished {
		if strings.HasPrefix(file, name+"-") {
			return name, v, true
		}
	}
	return "", vanishing{}, false
}

// vanishedNote says, for a leak message, at which step this run removed the
// VM of a seed's instance behind the operator's back, if it did.
func (r *run) vanishedNote(volid string) string {
	if name, v, ok := r.vanishedVM(volid); ok {
		return fmt.Sprintf(" (its VM %s was removed behind the operator's back at step %d)", name, v.step)
	}
	return ""
}

// seedOwner reports whether a seed volume belongs to a Proxy: it is named
// after one of its instances, or after any name of its UID (an instance
// whose name never reached the status).
func seedOwner(volid string, p *tracked) bool {
	file := volid[strings.LastIndex(volid, "/")+1:]
	for inst := range p.instances {
		// <instance>-seed.iso, or with a signature of the name between.
		if strings.HasPrefix(file, inst+"-") && strings.HasSuffix(file, "-seed.iso") {
			return true
		}
	}
	uid8 := strings.ReplaceAll(string(p.uid), "-", "")
	if len(uid8) > 8 {
		uid8 = uid8[:8]
	}
	return uid8 != "" && strings.Contains(file, "-"+uid8)
}

// settle ends the run: faults lifted, the operator up, every Proxy gone,
// then the leak check over all of them after the operator's GC passes.
func (r *run) settle() {
	ctx := context.Background()
	for _, u := range r.undo {
		u.fn()
	}
	r.undo = nil
	r.lab.Sim.ClearFaults()
	r.start()
	poll := time.NewTicker(r.plan.Poll)
	defer poll.Stop()
	deadline := time.NewTimer(5 * time.Minute)
	defer deadline.Stop()
	for {
		r.check(ctx)
		var list crawlv1alpha1.ProxyList
		if err := env.Client.List(ctx, &list, client.InNamespace(r.ns)); err != nil {
			r.t.Fatal(err)
		}
		if len(list.Items) == 0 {
			break
		}
		select {
		case <-deadline.C:
			var stuck []string
			for _, p := range list.Items {
				stuck = append(stuck, fmt.Sprintf("%s (%s: %s)", p.Name, p.Status.Phase, readyMessage(&p)))
			}
			r.t.Fatalf("seed %d: Proxies not gone five minutes after the last delete: %s", r.plan.Seed, strings.Join(stuck, "; "))
		case <-poll.C:
		}
	}
	// Every gone Proxy's leak deadline passes with the operator up.
	until := r.operatorUptime() + leakUptime
	for r.operatorUptime() < until {
		select {
		case <-deadline.C:
			r.t.Fatalf("seed %d: settling took too long", r.plan.Seed)
		case <-poll.C:
			r.check(ctx)
		}
	}
	var gone []*tracked
	for _, p := range r.proxies {
		if !p.gone {
			r.violation("notgone|"+p.name, "Proxy %s was deleted but never observed gone", p.name)
		}
		gone = append(gone, p)
	}
	r.findLeaks(gone, " at the end")
	for _, p := range r.proxies {
		if apierr := env.Client.Get(ctx, client.ObjectKey{Namespace: r.ns, Name: p.name}, &crawlv1alpha1.Proxy{}); !apierrors.IsNotFound(apierr) {
			r.violation("present|"+p.name, "Proxy %s still exists: %v", p.name, apierr)
		}
	}
}

// readyMessage is the Ready condition's message, for a stuck Proxy.
func readyMessage(p *crawlv1alpha1.Proxy) string {
	for _, c := range p.Status.Conditions {
		if c.Type == crawlv1alpha1.ConditionReady {
			return c.Reason + ": " + c.Message
		}
	}
	return "no Ready condition"
}

// report prints the figures and fails the run on any violation or on a
// check that saw nothing.
func (r *run) report() {
	r.kill()
	wall := time.Since(r.wallStarted)
	replacements := int32(0)
	for _, p := range r.proxies {
		replacements += p.replacements
	}
	classes := map[string]int{}
	for _, c := range r.foreign {
		classes[c]++
	}
	var faults []string
	total := 0
	for _, k := range slices.Sorted(maps.Keys(r.faults)) {
		faults = append(faults, k+"="+strconv.Itoa(r.faults[k]))
		total += r.faults[k]
	}
	var captured []string
	for src, n := range r.watch.Captured() {
		captured = append(captured, fmt.Sprintf("%s %d B", src, n))
	}
	sort.Strings(captured)
	pace, _ := r.pace()
	var mutations int
	for _, m := range r.lab.Sim.Mutations() {
		if m.Token == r.tokenID {
			mutations++
		}
	}
	r.t.Logf(`chaos run, seed %d (replay: CHAOS_SEED=%d)
  wall %s, simulated %s (speed %.0fx), %d polls, %d steps
  proxies: %d created, %d deleted, %d replaced (%d VMs stopped or removed behind the operator's back)
  operator restarts: %d
  faults injected: %d (%s)
  foreign VMs: %v; operator mutations checked: %d
  secrets watched: %d; captured: %s
  episodes: %d ownership key losses (mutations on the lab while lost: %d), %d hangs of %s (%d Proxies orphaned during them and collected; evidence within %s, bound %s, pace %s)
  duplicates: %d (most VMs of one Proxy at once: %d), leaks: %d, foreign touches: %d, secrets in output: %d
  seeds left for the sweep (their VM removed behind the operator's back when nothing else led to them: leftForSweep): %d`,
		r.plan.Seed, r.plan.Seed, wall.Round(time.Second), (time.Duration(float64(wall) * r.plan.Speed)).Round(time.Minute), r.plan.Speed, r.polls, r.step,
		r.created, r.deleted, replacements, r.provoked, r.restarts, total, strings.Join(faults, ", "),
		classes, mutations, r.watch.Secrets(), strings.Join(captured, ", "),
		r.keyLosses, r.keyLossMutations, r.hangs, hungEntry, r.orphans, r.hangTook.Round(time.Millisecond), r.hangBound.Round(time.Millisecond), pace.Round(time.Millisecond),
		r.duplicates, r.maxVMsOfOne, r.leaks, r.touches, r.secretsFound, len(r.sweepBound))

	// The checks must have had something to look at.
	c := r.watch.Captured()
	switch {
	case c["logs"] == 0 || c["spans"] == 0 || c["events"] == 0 || c["status"] == 0:
		r.t.Errorf("seed %d: a secret check saw no output (%v): it would pass vacuously", r.plan.Seed, c)
	case !r.watch.Contains("logs", "provider call succeeded"):
		r.t.Errorf("seed %d: the logs lack the provider's call lines: the log capture does not reach the providers", r.plan.Seed)
	case !r.watch.Contains("logs", "/storage/seeds/status"):
		// Only the health checks read the seed storage's status.
		r.t.Errorf("seed %d: the logs lack the health checks' provider calls: the loops outside reconciles log nowhere", r.plan.Seed)
	case mutations == 0 || r.maxVMsOfOne == 0:
		r.t.Errorf("seed %d: no VM and no mutation observed: the VM checks would pass vacuously", r.plan.Seed)
	case r.restarts == 0 || total == 0:
		r.t.Errorf("seed %d: no restart or no fault: not a chaos run", r.plan.Seed)
	case r.keyLosses < r.plan.KeyLosses || r.hangs < r.plan.Hangs:
		r.t.Errorf("seed %d: %d of %d key losses and %d of %d hangs ran: their checks would pass vacuously", r.plan.Seed,
			r.keyLosses, r.plan.KeyLosses, r.hangs, r.plan.Hangs)
	}
	if len(r.violations) > 0 || r.t.Failed() {
		r.t.Errorf("seed %d: %d invariant violations; replay with CHAOS_SEED=%d", r.plan.Seed, len(r.violations), r.plan.Seed)
		r.saveArtifacts()
	}
}

// saveArtifacts writes the captured output and the simulator's mutation
// log of a failed run under $CHAOS_ARTIFACTS (default: the system's
// temporary directory), for the investigation; the secret check already
// passed over them or named what leaked.
func (r *run) saveArtifacts() {
	dir := os.Getenv("CHAOS_ARTIFACTS")
	if dir == "" {
		dir = os.TempDir()
	}
	dir = filepath.Join(dir, fmt.Sprintf("chaos-%d", r.plan.Seed))
	if err := os.MkdirAll(dir, 0o700); err != nil {
		r.t.Logf("saving artifacts: %v", err)
		return
	}
	muts, _ := json.MarshalIndent(r.lab.Sim.Mutations(), "", " ")
	files := map[string][]byte{"mutations.json": muts, "violations.txt": []byte(strings.Join(r.violations, "\n") + "\n")}
	for _, src := range []string{"logs", "events", "spans", "status"} {
		files[src+".txt"] = []byte(r.watch.Text(src))
	}
	for name, b := range files {
		if err := os.WriteFile(filepath.Join(dir, name), b, 0o600); err != nil {
			r.t.Logf("saving artifacts: %v", err)
			return
		}
	}
	r.t.Logf("logs, events, spans, statuses and the simulator's mutation log of this run: %s", dir)
}
