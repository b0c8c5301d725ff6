package proxypool

import (
	"cmp"
	"fmt"
	"hash/fnv"
	"slices"
	"time"

	crawlv1alpha1 "github.com/egress-proxies/egress-proxies-operator/api/v1alpha1"
)

// A pool keeps replicas slots, 0 to replicas-1. A slot's placement (provider
// entry and zone) is fixed by its index, so scaling down removes the highest
// slots and leaves the spread of the rest as it was. A slot holds one
// member, or two while it is being rotated: the old one and its successor,
// which has a higher serial number (its "generation"). Serial numbers count
// up over the pool's life (status.nextMemberSerial) and are never reused.
// Member names are derived from the pool's UID and the serial, so that
// creating a member twice (a retry after a failed status write) finds the
// first one instead of making a second; the reconciler also waits until
// its cache has seen the members it created before it plans again.

// Rotation reasons, also the values of the rotations metric's reason label.
const (
	rotationMaxAge    = "maxAge"
	rotationRequested = "requested"
	rotationTemplate  = "template"
	rotationProbe     = "probe"
	deletionScaleDown = "scaleDown"
	deletionReplaced  = "replaced"
)

// slotPlacement is where a slot's member goes (its placement entry, with
// the template's provider and zone filled in) and the hash of what it is
// made from. poolSlots computes them once per reconcile; the plan hands
// each create the one of its slot.
type slotPlacement struct {
	entry crawlv1alpha1.PlacementEntry
	hash  string
}

// poolMember is what the plan needs to know of one member.
type poolMember struct {
	name     string
	slot     int
	gen      int
	hash     string
	created  time.Time
	deleting bool
	ready    bool
	serving  bool
	// failed: latched in phase Failed (invalid spec, permanent provider
	// error such as a full quota); recreating it would fail the same way.
	failed bool
	// probeFailed: the probe through it failed the threshold number of
	// times in a row.
	probeFailed bool
	// rotationRequested: it carries AnnotationRotationRequested.
	rotationRequested bool
}

// planInput is everything planPool decides from.
type planInput struct {
	slots          []slotPlacement // one per desired slot
	members        []poolMember
	now            time.Time
	maxAge         time.Duration // zero: no age limit
	maxSurge       int
	maxUnavailable int
	// nextSerial is the pool's next member serial number
	// (status.nextMemberSerial).
	nextSerial int
}

// memberCreate is one member to create.
type memberCreate struct {
	slot, gen int
	// placement is the slot's, from planInput.slots.
	placement slotPlacement
	// reason is the rotation reason when the member succeeds another, empty
	// when it fills an empty slot.
	reason string
}

// memberDelete is one member to delete and why.
type memberDelete struct {
	name   string
	reason string
}

// poolPlan is what one reconcile of a pool does.
type poolPlan struct {
	creates []memberCreate
	deletes []memberDelete
	// rotating counts slots with a rotation in progress or starting, by
	// reason.
	rotating map[string]int
	// waiting counts slots that need a rotation and wait for budget.
	waiting int
	// recheck is when the next member reaches maxAge (zero: none).
	recheck time.Duration
	// nextSerial is the serial number after the last one used.
	nextSerial int
}

// planPool decides which members to create and delete. It is pure: the
// reconciler carries the plan out and the next reconcile plans again from
// what it then sees.
func planPool(in planInput) poolPlan {
	p := poolPlan{rotating: map[string]int{}}
	bySlot := map[int][]poolMember{}
	// Serial numbers are never reused: a member deleted a moment ago may
	// still own a Secret of the name a reused serial would give.
	serial := in.nextSerial
	for _, m := range in.members {
		serial = max(serial, m.gen+1)
		if m.deleting {
			continue
		}
		if m.slot >= len(in.slots) || m.slot < 0 {
			p.deletes = append(p.deletes, memberDelete{m.name, deletionScaleDown})
			continue
		}
		bySlot[m.slot] = append(bySlot[m.slot], m)
	}
	nextGen := func(int) int {
		serial++
		return serial - 1
	}

	servingSlots, surging := 0, 0
	for slot := range in.slots {
		ms := bySlot[slot]
		if slices.ContainsFunc(ms, func(m poolMember) bool { return m.serving }) {
			servingSlots++
		}
		if len(ms) > 1 {
			surging++
		}
	}
	surgeBudget := in.maxSurge - surging
	unavailableBudget := in.maxUnavailable - (len(in.slots) - servingSlots)

	type candidate struct {
		m      poolMember
		reason string
	}
	var candidates []candidate
	for slot, want := range in.slots {
		ms := bySlot[slot]
		if len(ms) == 0 {
			p.creates = append(p.creates, memberCreate{slot: slot, gen: nextGen(slot), placement: want})
			continue
		}
		slices.SortFunc(ms, func(a, b poolMember) int { return cmp.Compare(a.gen, b.gen) })
		newest := ms[len(ms)-1]
		if len(ms) > 1 {
			// A rotation is in progress: the old members go once the
			// newest serves, or at once when they serve nothing.
			p.rotating[rotationInProgress]++
			if newest.probeFailed {
				// The successor does not work: replace it, keep the old.
				p.deletes = append(p.deletes, memberDelete{newest.name, rotationProbe})
				continue
			}
			for _, old := range ms[:len(ms)-1] {
				if newest.serving || !old.serving {
					p.deletes = append(p.deletes, memberDelete{old.name, deletionReplaced})
				}
			}
			continue
		}
		reason := ""
		switch {
		case newest.probeFailed:
			reason = rotationProbe
		case newest.hash != want.hash:
			reason = rotationTemplate
		case newest.rotationRequested:
			reason = rotationRequested
		case in.maxAge > 0 && !newest.failed && in.now.Sub(newest.created) >= in.maxAge:
			reason = rotationMaxAge
		}
		if in.maxAge > 0 && !newest.failed && reason == "" {
			left := newest.created.Add(in.maxAge).Sub(in.now)
			if p.recheck == 0 || left < p.recheck {
				p.recheck = left
			}
		}
		if reason == "" {
			continue
		}
		if !newest.serving {
			// Replacing a member that serves nothing costs no capacity:
			// delete it, and the next reconcile fills the slot.
			p.deletes = append(p.deletes, memberDelete{newest.name, reason})
			p.rotating[reason]++
			continue
		}
		candidates = append(candidates, candidate{newest, reason})
	}

	// Oldest first, so that a rotation of the whole pool goes in age order.
	slices.SortStableFunc(candidates, func(a, b candidate) int { return a.m.created.Compare(b.m.created) })
	for _, c := range candidates {
		switch {
		case surgeBudget > 0:
			surgeBudget--
			p.creates = append(p.creates, memberCreate{slot: c.m.slot, gen: nextGen(c.m.slot), placement: in.slots[c.m.slot], reason: c.reason})
			p.rotating[c.reason]++
		case unavailableBudget > 0:
			unavailableBudget--
			p.deletes = append(p.deletes, memberDelete{c.m.name, c.reason})
			p.rotating[c.reason]++
		default:
			p.waiting++
		}
	}
	p.nextSerial = serial
	slices.SortFunc(p.creates, func(a, b memberCreate) int { return cmp.Compare(a.slot, b.slot) })
	slices.SortFunc(p.deletes, func(a, b memberDelete) int { return cmp.Compare(a.name, b.name) })
	return p
}

// rotationInProgress is the plan's key for slots whose successor exists.
const rotationInProgress = "inProgress"

// spreadSlots assigns n slots to the placement entries in proportion to
// their weights, with the smooth weighted round-robin order: every prefix
// of the sequence is as close to the weights as it can be, so that any
// number of replicas is spread evenly.
func spreadSlots(weights []int32, n int) []int {
	out := make([]int, 0, n)
	if len(weights) == 0 {
		return out
	}
	current := make([]int64, len(weights))
	var total int64
	for _, w := range weights {
		total += int64(w)
	}
	for range n {
		best := 0
		for i, w := range weights {
			current[i] += int64(w)
			if current[i] > current[best] {
				best = i
			}
		}
		current[best] -= total
		out = append(out, best)
	}
	return out
}

// memberName is the name of a pool's member with a serial number: the
// pool's name, a dash and five characters derived from the pool's UID and
// the serial.
func memberName(pool, uid string, serial int) string {
	h := fnv.New64a()
	_, _ = fmt.Fprintf(h, "%s/%d", uid, serial)
	sum := h.Sum64()
	// The alphabet of Kubernetes' generated names: no vowels, no 0, 1, 3.
	const alphabet = "bcdfghjklmnpqrstvwxz2456789"
	b := make([]byte, 5)
	for i := range b {
		b[i] = alphabet[sum%uint64(len(alphabet))]
		sum /= uint64(len(alphabet))
	}
	return pool + "-" + string(b)
}

// poolSlots returns the pool's resolved placement entries and its slots,
// one per desired replica, each with its entry and that entry's template
// hash (computed once per entry).
func poolSlots(pool *crawlv1alpha1.ProxyPool) ([]crawlv1alpha1.PlacementEntry, []slotPlacement) {
	entries, weights := resolvedPlacements(pool)
	byEntry := make([]slotPlacement, len(entries))
	for i, e := range entries {
		byEntry[i] = slotPlacement{entry: e, hash: templateHash(pool, e)}
	}
	spread := spreadSlots(weights, int(replicasOf(pool)))
	slots := make([]slotPlacement, len(spread))
	for slot, idx := range spread {
		slots[slot] = byEntry[idx]
	}
	return entries, slots
}

// replicasOf is spec.replicas with its default.
func replicasOf(pool *crawlv1alpha1.ProxyPool) int32 {
	if pool.Spec.Replicas == nil {
		return 1
	}
	return *pool.Spec.Replicas
}

// resolvedPlacements returns the pool's placement entries with the
// template's provider and zone filled in, and their weights.
func resolvedPlacements(pool *crawlv1alpha1.ProxyPool) ([]crawlv1alpha1.PlacementEntry, []int32) {
	tpl := pool.Spec.Template.Spec
	entries := pool.Spec.Placement
	if len(entries) == 0 {
		entries = []crawlv1alpha1.PlacementEntry{{}}
	}
	out := make([]crawlv1alpha1.PlacementEntry, len(entries))
	weights := make([]int32, len(entries))
	for i, e := range entries {
		if e.Provider == "" {
			e.Provider = tpl.Provider
		}
		if e.Zone == "" && e.Provider == tpl.Provider {
			e.Zone = tpl.Zone
		}
		if e.Weight < 1 {
			e.Weight = 1
		}
		out[i], weights[i] = e, e.Weight
	}
	return out, weights
}
