package chaos_test

import (
	"context"
	"fmt"
	"maps"
	"slices"
	"strings"
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
)

// episode is a fault the run plays over many steps, each with the evidence
// it waits for and a bound that follows the run's measured pace: a provider
// entry that hangs (hangEpisode), the ownership key lost and restored
// (keyEpisode). One runs at a time, while the script goes on around it.
type episode interface {
	// advance moves the episode on at a step; it reports its end.
	advance(ctx context.Context, r *run) (done bool)
}

// advanceEpisode moves the running episode on, or starts the next planned
// one once the run is far enough and the world is ready for it.
func (r *run) advanceEpisode(ctx context.Context) {
	if r.episode != nil {
		if r.episode.advance(ctx, r) {
			r.episode = nil
		}
		return
	}
	ran := r.hangs + r.keyLosses
	total := r.plan.KeyLosses + r.plan.Hangs
	if ran >= total || r.created < (ran+1)*r.plan.Proxies/(total+1) {
		return
	}
	// Key losses and hangs take turns, a key loss first.
	if r.keyLosses < r.plan.KeyLosses && (r.keyLosses <= r.hangs || r.hangs >= r.plan.Hangs) {
		r.episode = r.loseKey(ctx)
		return
	}
	r.episode = r.hang(ctx)
}

// keyLost reports whether the ownership key is lost right now: from the
// start of an operator with a new key to the kill before the restore.
func (r *run) keyLost() bool {
	k, ok := r.episode.(*keyEpisode)
	return ok && k.lost
}

// hanging reports whether hungEntry's cluster hangs, or calls it held
// still wait for their deadline.
func (r *run) hanging() bool {
	_, ok := r.episode.(*hangEpisode)
	return ok
}

// pace is the median wall time from a lab Proxy's creation to its first
// Ready, over the run so far (those a key loss held excepted): the unit of
// the episodes' bounds, so that a loaded machine gets proportionally longer
// ones. It is false before three Proxies were Ready.
func (r *run) pace() (time.Duration, bool) {
	var d []time.Duration
	for _, p := range r.proxies {
		if p.entry == pvelab.EntryName && !p.readyAt.IsZero() && !p.createdWhileLost {
			d = append(d, p.readyAt.Sub(p.createdAt))
		}
	}
	if len(d) < 3 {
		return 0, false
	}
	slices.Sort(d)
	return d[len(d)/2], true
}

// paced is n times the pace, within [lo, hi].
func (r *run) paced(n int, lo, hi time.Duration) time.Duration {
	p, _ := r.pace()
	return min(max(time.Duration(n)*p, lo), hi)
}

// settled reports whether the operator runs and has run long enough since
// its start to have listed every entry (a GC pass, a health check).
func (r *run) settled() bool {
	_, known := r.pace()
	return known && r.up() && r.upFor() >= time.Second
}

// providerHealth reads an entry's ProviderHealth; nil when it is not there
// yet.
func (r *run) providerHealth(ctx context.Context, entry string) *crawlv1alpha1.ProviderHealth {
	var ph crawlv1alpha1.ProviderHealth
	if err := env.Client.Get(ctx, client.ObjectKey{Name: entry}, &ph); err != nil {
		if apierrors.IsNotFound(err) {
			return nil
		}
		r.t.Fatal(err)
	}
	return &ph
}

// ownershipCondition is the lab's OwnershipKey condition; nil when there is
// none yet.
func (r *run) ownershipCondition(ctx context.Context) *metav1.Condition {
	ph := r.providerHealth(ctx, pvelab.EntryName)
	if ph == nil {
		return nil
	}
	return apimeta.FindStatusCondition(ph.Status.Conditions, crawlv1alpha1.ConditionOwnershipKey)
}

// ourLabVMs returns the names of the lab's VMs that name a Proxy of the run.
func (r *run) ourLabVMs() []string {
	uids := make([]types.UID, 0, len(r.proxies))
	for _, p := range r.proxies {
		uids = append(uids, p.uid)
	}
	var names []string
	r.clusters()[0].ourVMs(func(vm pvesim.VMInfo, conf map[string]string) {
		if _, ok := uidOf(conf["description"], uids); ok {
			names = append(names, vm.Name)
		}
	})
	return names
}

// keyEpisode: the ownership key Secret is lost (deleted) and the operator
// restarts, so that its leader mints a new key; the lab's fleet no longer
// verifies. While lost: the lab's ProviderHealth says OwnershipKey=False
// (OwnershipKeyMismatch) naming the old instances, a new Proxy's create is
// held (its Ready reason OwnershipKeyMismatch), and the operator changes
// nothing on the lab (checkMutations), while GC passes many times. Then the
// Secret is restored from its backup and the operator restarted, as
// docs/security.md says: the key is the old one again, OwnershipKey turns
// True (KeyVerified), and the held Proxy's create goes on (its instance is
// created; whether it becomes Ready is the chaos's business).
type keyEpisode struct {
	backup   *corev1.Secret
	oldKeyID string
	// oldFleet are the names of the lab's VMs at the loss.
	oldFleet []string
	held     *tracked
	lost     bool
	// lostAt is the operator's uptime at the loss; since is the wall
	// time the current phase began, bound its limit.
	lostAt             time.Duration
	since              time.Time
	bound              time.Duration
	mismatch, heldSeen bool
	verified           bool
}

// loseKey starts a key loss when the world is ready for one: the operator
// settled, no Proxy of hungEntry left (its cluster would show the loss as
// well, and an empty one would let creates there go on with the new key),
// and at least two VMs of the lab's fleet, whose marks show the loss.
func (r *run) loseKey(ctx context.Context) episode {
	if !r.settled() || len(r.ourLabVMs()) < 2 {
		return nil
	}
	for _, p := range r.proxies {
		if p.entry == hungEntry && !p.gone {
			return nil
		}
	}
	var s corev1.Secret
	if err := env.Client.Get(ctx, client.ObjectKey{Namespace: r.keyRef.Namespace, Name: r.keyRef.Name}, &s); err != nil {
		r.t.Fatal(err)
	}
	k := &keyEpisode{oldKeyID: r.keyID, oldFleet: r.ourLabVMs(),
		// kubectl get secret -o yaml, without the server's fields.
		backup: &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Namespace: s.Namespace, Name: s.Name, Labels: s.Labels, Annotations: s.Annotations},
			Immutable: s.Immutable, Type: s.Type, Data: s.Data}}
	r.kill()
	r.deleteKeySecret(ctx)
	// What the old operator did is checked under the old rules.
	r.checkMutations()
	k.lost = true
	r.start() //nolint:contextcheck // the operator lives as long as the run, not as the step that restarts it.
	if r.keyID == k.oldKeyID {
		r.t.Fatalf("seed %d: the operator kept the key %s after its Secret was deleted", r.plan.Seed, r.keyID)
	}
	k.held = r.create(ctx, pvelab.EntryName)
	k.lostAt, k.since = r.operatorUptime(), time.Now()
	// A Proxy gone just before the loss may leave a VM that garbage
	// collection had not yet taken (an orphan within its grace period, a
	// delete it was retrying): the operator may not touch it until the
	// restore, so its leak deadline counts from there, as for a Proxy
	// gone during the loss.
	for _, p := range r.proxies {
		if p.gone && !p.goneWhileLost && k.lostAt-p.goneAt < leakUptime {
			p.goneWhileLost = true
		}
	}
	k.bound = r.paced(20, 30*time.Second, 2*time.Minute)
	r.faults["ownership key lost"]++
	return k
}

// deleteKeySecret deletes the key Secret, as a lost namespace or a mistaken
// kubectl delete does.
func (r *run) deleteKeySecret(ctx context.Context) {
	s := &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Namespace: r.keyRef.Namespace, Name: r.keyRef.Name}}
	if err := client.IgnoreNotFound(env.Client.Delete(ctx, s)); err != nil {
		r.t.Fatal(err)
	}
}

func (k *keyEpisode) advance(ctx context.Context, r *run) bool {
	c := r.ownershipCondition(ctx)
	if k.lost {
		if c != nil && c.Status == metav1.ConditionFalse && c.Reason == crawlv1alpha1.ReasonOwnershipKeyMismatch && k.namesOldFleet(c.Message) {
			k.mismatch = true
		}
		k.heldSeen = k.heldSeen || k.held.reason == crawlv1alpha1.ReasonOwnershipKeyMismatch
		// GC and the reconciles have had many chances to create or touch
		// something.
		long := r.operatorUptime()-k.lostAt >= leakUptime
		switch {
		case k.mismatch && (k.heldSeen || k.held.deleted) && long:
		case time.Since(k.since) > k.bound:
			r.violation(fmt.Sprintf("lostkey|report|%d", r.step), "the lost ownership key was not reported within %s: OwnershipKey=False naming the old fleet %v seen: %t; "+
				"the new Proxy %s held (reason %q): %t; the lab's OwnershipKey condition: %s", k.bound, k.oldFleet, k.mismatch, k.held.name, k.held.reason, k.heldSeen, conditionText(c))
		default:
			return false
		}
		k.restore(ctx, r)
		return false
	}
	k.verified = k.verified || (c != nil && c.Status == metav1.ConditionTrue && c.Reason == crawlv1alpha1.ReasonKeyVerified)
	switch {
	case k.verified && (k.held.deleted || len(k.held.instances) > 0):
		r.keyLosses++
		return true
	case time.Since(k.since) > k.bound:
		r.violation(fmt.Sprintf("lostkey|restore|%d", r.step), "the restored ownership key did not bring the fleet back within %s: OwnershipKey %s; the held Proxy %s got an instance: %t",
			k.bound, conditionText(c), k.held.name, len(k.held.instances) > 0)
		r.keyLosses++
		return true
	}
	return false
}

// restore is the documented procedure: the Secret from its backup, the
// operator restarted. Proxies that went while the key was lost have their
// leak deadline counted from here, plus four times the pace: their VMs were
// left to garbage collection, which now takes them all at once, a step of
// each per pass, with the faults going on.
func (k *keyEpisode) restore(ctx context.Context, r *run) {
	r.kill()
	r.checkMutations()
	k.lost = false
	r.deleteKeySecret(ctx)
	if err := env.Client.Create(ctx, k.backup.DeepCopy()); err != nil {
		r.t.Fatalf("restoring the key Secret: %v", err)
	}
	r.start() //nolint:contextcheck // the operator lives as long as the run, not as the step that restarts it.
	k.bound = r.paced(20, 30*time.Second, 2*time.Minute)
	if r.keyID != k.oldKeyID {
		r.violation("lostkey|keyid", "after the restore the operator holds the key %s, not the restored %s", r.keyID, k.oldKeyID)
	}
	now := r.operatorUptime() + r.paced(4, 0, time.Minute)
	for _, p := range r.proxies {
		if p.goneWhileLost {
			p.goneWhileLost, p.goneAt = false, now
		}
	}
	k.since = time.Now()
}

// namesOldFleet reports whether a message names a VM of the old fleet that
// is still there.
func (k *keyEpisode) namesOldFleet(msg string) bool {
	for _, n := range k.oldFleet {
		if strings.Contains(msg, "("+n+")") {
			return true
		}
	}
	return false
}

func conditionText(c *metav1.Condition) string {
	if c == nil {
		return "none"
	}
	return fmt.Sprintf("%s/%s: %s", c.Status, c.Reason, c.Message)
}

// hangEpisode: every call to hungEntry's cluster hangs (its answer never
// comes; the operator gives each call up at its deadline, hungDeadline),
// while a burst of Proxies asks that entry for instances, enough to take
// every worker were the entry not held to its share. Meanwhile, on the lab:
// a Proxy created after the hang began becomes Ready, a Proxy orphaned a
// third of the bound later (its finalizer removed, as an uninstall leaves
// it; by then garbage collection's pass of the hung entry hangs too) has
// its VM collected,
// and the lab's health check goes on. The hang is lifted once all three are
// seen; the calls it held then end by their deadline, as Transient errors
// that name the entry and the operation (an event says so). The operator is
// not restarted meanwhile (a restart would end the hung calls), and no
// other fault is injected while the hang lasts: its bound must stay below
// the deadline, or starved workers would be freed by it and pass unseen.
type hangEpisode struct {
	since time.Time
	bound time.Duration
	// orphan is the Proxy to orphan, orphaned once orphaned is set.
	orphan    *tracked
	orphaned  bool
	checkedAt time.Time
	// readyAfter, orphanGone and checked are the evidence.
	readyAfter          int
	orphanGone, checked bool
	// lifted is when the hang was lifted, took how long it lasted.
	lifted time.Time
	took   time.Duration
}

// hangBurst is how many Proxies of hungEntry a hang creates: more than the
// operator's workers (4), so that without per-entry shares they would hold
// them all.
const hangBurst = 6

// hang starts a hang when the world is ready for one: the operator settled,
// the key not lost, and a Ready lab Proxy whose VM is there to orphan (the
// script does not delete it meanwhile: it counts as deleted).
func (r *run) hang(ctx context.Context) episode {
	if !r.settled() {
		return nil
	}
	var orphan *tracked
	// In name order: the script's choices must not follow map order.
	for _, n := range slices.Sorted(maps.Keys(r.proxies)) {
		p := r.proxies[n]
		if p.entry == pvelab.EntryName && !p.deleted && p.reason == crawlv1alpha1.ReasonInstanceRunning && r.hasVM(p) {
			orphan = p
			break
		}
	}
	if orphan == nil {
		return nil
	}
	ph := r.providerHealth(ctx, pvelab.EntryName)
	if ph == nil || ph.Status.LastCheckTime == nil {
		return nil
	}
	h := &hangEpisode{since: time.Now(), orphan: orphan, checkedAt: ph.Status.LastCheckTime.Time,
		bound: r.paced(6, 6*time.Second, hungDeadline*3/5)}
	r.hangBound = h.bound
	r.hung.Sim.AddLatency("", "", time.Hour)
	for range hangBurst {
		r.create(ctx, hungEntry)
	}
	for range 2 {
		r.create(ctx, pvelab.EntryName)
	}
	orphan.deleted = true
	r.deleted++
	r.faults["provider hangs"]++
	return h
}

// hangKeeps reports whether a lab VM is the running hang's orphan's, which
// only garbage collection may remove: the script leaves it alone, so that
// its going is GC's evidence.
func (r *run) hangKeeps(vmid int) bool {
	h, ok := r.episode.(*hangEpisode)
	if !ok {
		return false
	}
	conf, ok := r.lab.Sim.VMConfig(vmid)
	return ok && strings.Contains(conf["description"], string(h.orphan.uid))
}

// hasVM reports whether a VM on the lab names the Proxy.
func (r *run) hasVM(p *tracked) bool {
	found := false
	r.clusters()[0].ourVMs(func(_ pvesim.VMInfo, conf map[string]string) {
		found = found || strings.Contains(conf["description"], string(p.uid))
	})
	return found
}

// orphanProxy deletes a Proxy without the operator: its finalizer removed
// first, as after an uninstall, so that only garbage collection removes its
// VM.
func (r *run) orphanProxy(ctx context.Context, p *tracked) {
	var obj crawlv1alpha1.Proxy
	if err := env.Client.Get(ctx, client.ObjectKey{Namespace: r.ns, Name: p.name}, &obj); err != nil {
		r.t.Fatal(err)
	}
	patch := client.MergeFrom(obj.DeepCopy())
	obj.Finalizers = nil
	if err := env.Client.Patch(ctx, &obj, patch); err != nil {
		r.t.Fatal(err)
	}
	if err := client.IgnoreNotFound(env.Client.Delete(ctx, &obj)); err != nil {
		r.t.Fatal(err)
	}
	r.orphans++
}

func (h *hangEpisode) advance(ctx context.Context, r *run) bool {
	if !h.lifted.IsZero() {
		return h.drained(r)
	}
	if !h.orphaned && time.Since(h.since) >= h.bound/3 {
		r.orphanProxy(ctx, h.orphan)
		h.orphaned = true
	}
	h.readyAfter = 0
	for _, p := range r.proxies {
		if p.entry == pvelab.EntryName && p.createdAt.After(h.since) && !p.readyAt.IsZero() {
			h.readyAfter++
		}
	}
	h.orphanGone = h.orphanGone || (h.orphaned && !r.hasVM(h.orphan))
	if ph := r.providerHealth(ctx, pvelab.EntryName); ph != nil && ph.Status.LastCheckTime != nil {
		// lastCheckTime has a resolution of one second.
		h.checked = h.checked || ph.Status.LastCheckTime.Sub(h.checkedAt) >= 2*time.Second
	}
	switch {
	case h.readyAfter >= 1 && h.orphanGone && h.checked:
	case time.Since(h.since) > h.bound:
		r.violation(fmt.Sprintf("hang|%d", r.step), "while %s hung, for %s: no lab Proxy created since became Ready: %t, "+
			"the orphaned Proxy %s's VM collected: %t, the lab's health checked again: %t", hungEntry, h.bound, h.readyAfter > 0, h.orphan.name, h.orphanGone, h.checked)
	default:
		return false
	}
	r.hung.Sim.ClearFaults()
	h.lifted = time.Now()
	h.took = h.lifted.Sub(h.since)
	r.hangTook = max(r.hangTook, h.took)
	return false
}

// drained ends the episode once an event said that a call held by the hang
// ended at its deadline (which comes hungDeadline after the call began).
func (h *hangEpisode) drained(r *run) bool {
	switch {
	case r.hungCallsReported():
	case time.Since(h.since) > hungDeadline+h.bound:
		r.violation(fmt.Sprintf("hang|deadline|%d", r.step), "no event said, %s after %s began to hang, that a call to it ended at its deadline of %s naming the entry and the operation",
			time.Since(h.since).Round(time.Second), hungEntry, hungDeadline)
	default:
		return false
	}
	r.hangs++
	return true
}

// hungCallsReported reports whether an event or a Proxy's status said that
// a call to hungEntry ended at its deadline, naming the entry and the
// operation (a status is JSON: its quotes are escaped).
func (r *run) hungCallsReported() bool {
	for _, src := range []struct{ name, entry string }{{"events", `provider "` + hungEntry + `": `}, {"status", `provider \"` + hungEntry + `\": `}} {
		for _, l := range strings.Split(r.watch.Text(src.name), "\n") {
			if strings.Contains(l, src.entry) && strings.Contains(l, "within the deadline of "+hungDeadline.String()) {
				return true
			}
		}
	}
	return false
}
