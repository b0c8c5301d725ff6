package proxypool

import (
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"github.com/google/go-cmp/cmp/cmpopts"

	crawlv1alpha1 "github.com/egress-proxies/egress-proxies-operator/api/v1alpha1"
)

var planNow = time.Date(2025, 3, 1, 10, 0, 0, 0, time.UTC)

// labSlot is the placement of every slot of slotsOf.
var labSlot = slotPlacement{entry: crawlv1alpha1.PlacementEntry{Provider: "lab", Zone: "a", Weight: 1}, hash: "h"}

// otherSlot is a second placement, of another provider and hash.
var otherSlot = slotPlacement{entry: crawlv1alpha1.PlacementEntry{Provider: "lab2", Zone: "b", Weight: 1}, hash: "h2"}

// slotsOf returns n slots with the same placement and hash "h".
func slotsOf(n int) []slotPlacement {
	out := make([]slotPlacement, n)
	for i := range out {
		out[i] = labSlot
	}
	return out
}

// serving is a Serving member of slot and generation, made age ago.
func serving(name string, slot, gen int, age time.Duration) poolMember {
	return poolMember{name: name, slot: slot, gen: gen, hash: "h", created: planNow.Add(-age), ready: true, serving: true}
}

func TestPlanPool(t *testing.T) {
	withFlag := func(m poolMember, f func(*poolMember)) poolMember { f(&m); return m }
	tests := []struct {
		name   string
		reason string
		in     planInput
		want   poolPlan
	}{
		{
			name:   "empty pool fills every slot",
			reason: "scaling up from zero creates one member per slot, each with its own serial",
			in:     planInput{slots: slotsOf(3), now: planNow, maxSurge: 1},
			want:   poolPlan{creates: []memberCreate{{placement: labSlot, slot: 0, gen: 0}, {placement: labSlot, slot: 1, gen: 1}, {placement: labSlot, slot: 2, gen: 2}}, nextSerial: 3},
		},
		{
			name:   "serials are never reused",
			reason: "a member deleted a moment ago may still own a Secret of the name a reused serial would give",
			in:     planInput{slots: slotsOf(1), now: planNow, maxSurge: 1, nextSerial: 7},
			want:   poolPlan{creates: []memberCreate{{placement: labSlot, slot: 0, gen: 7}}, nextSerial: 8},
		},
		{
			name:   "scale down removes the highest slots",
			reason: "the lower slots keep their placement, so the spread of the rest stays as it was",
			in: planInput{slots: slotsOf(1), now: planNow, maxSurge: 1,
				members: []poolMember{serving("m0", 0, 0, time.Hour), serving("m1", 1, 0, time.Hour), serving("m2", 2, 3, time.Hour)}},
			want: poolPlan{deletes: []memberDelete{{"m1", deletionScaleDown}, {"m2", deletionScaleDown}}, nextSerial: 4},
		},
		{
			name:   "a member deleted by hand is recreated with the next serial",
			reason: "the one being deleted still holds its name; its successor must not collide with it",
			in: planInput{slots: slotsOf(2), now: planNow, maxSurge: 1, members: []poolMember{
				serving("m0", 0, 0, time.Hour), withFlag(serving("m1", 1, 4, time.Hour), func(m *poolMember) { m.deleting = true })}},
			want: poolPlan{creates: []memberCreate{{placement: labSlot, slot: 1, gen: 5}}, nextSerial: 6},
		},
		{
			name:   "maxAge with surge creates successors first, oldest first, within maxSurge",
			reason: "surge first keeps the serving count: the old member goes only once its successor serves",
			in: planInput{slots: slotsOf(3), now: planNow, maxAge: time.Hour, maxSurge: 1, members: []poolMember{
				serving("m0", 0, 0, 2*time.Hour), serving("m1", 1, 0, 3*time.Hour), serving("m2", 2, 0, 30*time.Minute)}},
			want: poolPlan{creates: []memberCreate{{placement: labSlot, slot: 1, gen: 1, reason: rotationMaxAge}},
				rotating: map[string]int{rotationMaxAge: 1}, waiting: 1, recheck: 30 * time.Minute, nextSerial: 2},
		},
		{
			name:   "old member waits until its successor serves",
			reason: "with maxUnavailable 0 the serving count must never drop below replicas",
			in: planInput{slots: slotsOf(1), now: planNow, maxAge: time.Hour, maxSurge: 1, members: []poolMember{
				serving("old", 0, 0, 2*time.Hour), {name: "new", slot: 0, gen: 1, hash: "h", created: planNow}}},
			want: poolPlan{rotating: map[string]int{rotationInProgress: 1}, nextSerial: 2},
		},
		{
			name:   "old member goes once its successor serves",
			reason: "the rotation completes and frees the surge budget",
			in: planInput{slots: slotsOf(1), now: planNow, maxAge: time.Hour, maxSurge: 1, members: []poolMember{
				serving("old", 0, 0, 2*time.Hour), serving("new", 0, 1, time.Minute)}},
			want: poolPlan{deletes: []memberDelete{{"old", deletionReplaced}}, rotating: map[string]int{rotationInProgress: 1}, nextSerial: 2},
		},
		{
			name:   "surge in use blocks further rotations",
			reason: "maxSurge bounds the extra members, and so the extra cost, of a rotation",
			in: planInput{slots: slotsOf(2), now: planNow, maxAge: time.Hour, maxSurge: 1, members: []poolMember{
				serving("a0", 0, 0, 2*time.Hour), {name: "a1", slot: 0, gen: 1, hash: "h", created: planNow}, serving("b0", 1, 0, 2*time.Hour)}},
			want: poolPlan{rotating: map[string]int{rotationInProgress: 1}, waiting: 1, nextSerial: 2},
		},
		{
			name:   "maxSurge 0 deletes first within maxUnavailable",
			reason: "without surge budget a rotation may only take members out while maxUnavailable allows",
			in: planInput{slots: slotsOf(3), now: planNow, maxAge: time.Hour, maxUnavailable: 1, members: []poolMember{
				serving("m0", 0, 0, 2*time.Hour), serving("m1", 1, 0, 3*time.Hour), serving("m2", 2, 0, 4*time.Hour)}},
			want: poolPlan{deletes: []memberDelete{{"m2", rotationMaxAge}}, rotating: map[string]int{rotationMaxAge: 1}, waiting: 2, nextSerial: 1},
		},
		{
			name:   "an unavailable slot uses up maxUnavailable",
			reason: "a slot that serves nothing already counts against maxUnavailable",
			in: planInput{slots: slotsOf(2), now: planNow, maxAge: time.Hour, maxUnavailable: 1, members: []poolMember{
				serving("m0", 0, 0, 2*time.Hour), {name: "m1", slot: 1, gen: 0, hash: "h", created: planNow}}},
			want: poolPlan{waiting: 1, recheck: time.Hour, nextSerial: 1},
		},
		{
			name:   "a member whose probe failed is replaced at once",
			reason: "it serves nothing, so deleting it costs no capacity",
			in: planInput{slots: slotsOf(2), now: planNow, maxSurge: 1, members: []poolMember{
				serving("m0", 0, 0, time.Hour), {name: "m1", slot: 1, gen: 2, hash: "h", created: planNow, ready: true, probeFailed: true}}},
			want: poolPlan{deletes: []memberDelete{{"m1", rotationProbe}}, rotating: map[string]int{rotationProbe: 1}, nextSerial: 3},
		},
		{
			name:   "a failed member is left alone",
			reason: "recreating a member the provider refused (a full quota) would fail the same way, in a loop",
			in: planInput{slots: slotsOf(2), now: planNow, maxAge: time.Minute, maxSurge: 1, members: []poolMember{
				serving("m0", 0, 0, 30*time.Second), {name: "m1", slot: 1, hash: "h", created: planNow.Add(-time.Hour), failed: true}}},
			want: poolPlan{recheck: 30 * time.Second, nextSerial: 1},
		},
		{
			name:   "a template change rotates serving members surge first",
			reason: "the Proxy spec is immutable: a new template means new members",
			in: planInput{slots: slotsOf(1), now: planNow, maxSurge: 1, members: []poolMember{
				withFlag(serving("m0", 0, 0, time.Hour), func(m *poolMember) { m.hash = "old" })}},
			want: poolPlan{creates: []memberCreate{{placement: labSlot, slot: 0, gen: 1, reason: rotationTemplate}}, rotating: map[string]int{rotationTemplate: 1}, nextSerial: 2},
		},
		{
			name:   "a requested rotation",
			reason: "the rotate annotation marks members; each is replaced surge first",
			in: planInput{slots: slotsOf(1), now: planNow, maxSurge: 1, members: []poolMember{
				withFlag(serving("m0", 0, 0, time.Hour), func(m *poolMember) { m.rotationRequested = true })}},
			want: poolPlan{creates: []memberCreate{{placement: labSlot, slot: 0, gen: 1, reason: rotationRequested}}, rotating: map[string]int{rotationRequested: 1}, nextSerial: 2},
		},
		{
			name:   "a successor whose probe failed is replaced and the old member kept",
			reason: "a rotation must not end with a broken member in place of a working one",
			in: planInput{slots: slotsOf(1), now: planNow, maxSurge: 1, members: []poolMember{
				serving("old", 0, 0, time.Hour), {name: "new", slot: 0, gen: 1, hash: "h", created: planNow, ready: true, probeFailed: true}}},
			want: poolPlan{deletes: []memberDelete{{"new", rotationProbe}}, rotating: map[string]int{rotationInProgress: 1}, nextSerial: 2},
		},
		{
			name:   "a member with unreadable labels is deleted",
			reason: "its slot is unknown, so it cannot be counted; its slot is filled again",
			in:     planInput{slots: slotsOf(1), now: planNow, maxSurge: 1, members: []poolMember{{name: "odd", slot: -1}}},
			want:   poolPlan{creates: []memberCreate{{placement: labSlot, slot: 0, gen: 1}}, deletes: []memberDelete{{"odd", deletionScaleDown}}, nextSerial: 2},
		},
		{
			name:   "each create carries its slot's placement and hash",
			reason: "the reconciler builds the member from the create alone; a member placed by another slot's entry would run on the wrong provider and be rotated at once for its hash",
			in: planInput{slots: []slotPlacement{labSlot, otherSlot, otherSlot}, now: planNow, maxSurge: 1, members: []poolMember{
				serving("m0", 0, 0, time.Hour), {name: "m1", slot: 1, gen: 1, hash: "h", created: planNow.Add(-time.Hour), ready: true, serving: true}}},
			want: poolPlan{creates: []memberCreate{{placement: otherSlot, slot: 1, gen: 3, reason: rotationTemplate}, {placement: otherSlot, slot: 2, gen: 2}},
				rotating: map[string]int{rotationTemplate: 1}, nextSerial: 4},
		},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			got := planPool(tc.in)
			if diff := cmp.Diff(tc.want, got, cmp.AllowUnexported(poolPlan{}, memberCreate{}, memberDelete{}, slotPlacement{}), cmpopts.EquateEmpty()); diff != "" {
				t.Errorf("planPool() (-want +got):\n%s\nwhy this matters: %s", diff, tc.reason)
			}
		})
	}
}

func TestSpreadSlots(t *testing.T) {
	count := func(slots []int, n int) []int {
		out := make([]int, n)
		for _, s := range slots {
			out[s]++
		}
		return out
	}
	tests := []struct {
		name    string
		reason  string
		weights []int32
		n       int
		want    []int
	}{
		{"even over three", "equal weights spread evenly", []int32{1, 1, 1}, 6, []int{2, 2, 2}},
		{"uneven remainder", "a remainder goes to the first entries, one each", []int32{1, 1, 1}, 4, []int{2, 1, 1}},
		{"weights", "weights 3:1 give three quarters to the first", []int32{3, 1}, 8, []int{6, 2}},
		{"prefix is spread", "scaling down keeps the lowest slots, which must still be spread", []int32{1, 1, 1}, 2, []int{1, 1, 0}},
		{"no entries", "nothing to place on", nil, 3, []int{}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			got := count(spreadSlots(tc.weights, tc.n), len(tc.weights))
			if diff := cmp.Diff(tc.want, got); diff != "" {
				t.Errorf("members per entry (-want +got):\n%s\nwhy this matters: %s", diff, tc.reason)
			}
		})
	}
}

func TestPoolSlots(t *testing.T) {
	pool := func(replicas int32, placement ...crawlv1alpha1.PlacementEntry) *crawlv1alpha1.ProxyPool {
		return &crawlv1alpha1.ProxyPool{Spec: crawlv1alpha1.ProxyPoolSpec{
			Replicas:  &replicas,
			Placement: placement,
			Template:  crawlv1alpha1.ProxyTemplate{Spec: crawlv1alpha1.ProxySpec{Provider: "lab", Zone: "a", Port: 3128}},
		}}
	}
	at := func(p *crawlv1alpha1.ProxyPool, e crawlv1alpha1.PlacementEntry) slotPlacement {
		return slotPlacement{entry: e, hash: templateHash(p, e)}
	}
	lab := crawlv1alpha1.PlacementEntry{Provider: "lab", Zone: "a", Weight: 1}
	labB := crawlv1alpha1.PlacementEntry{Provider: "lab", Zone: "b", Weight: 1}
	other := crawlv1alpha1.PlacementEntry{Provider: "other", Weight: 2}
	tests := []struct {
		name   string
		reason string
		pool   *crawlv1alpha1.ProxyPool
		want   func(*crawlv1alpha1.ProxyPool) []slotPlacement
	}{
		{
			name:   "no placement: every slot is the template's",
			reason: "a pool without placement puts every member where its template says",
			pool:   pool(2),
			want:   func(p *crawlv1alpha1.ProxyPool) []slotPlacement { return []slotPlacement{at(p, lab), at(p, lab)} },
		},
		{
			name:   "entries are filled from the template and spread by weight",
			reason: "an entry without a zone on the template's provider takes the template's zone; another provider's keeps none; weights 1:2 give the second entry two of three slots",
			pool:   pool(3, crawlv1alpha1.PlacementEntry{Zone: "b"}, crawlv1alpha1.PlacementEntry{Provider: "other", Weight: 2}),
			want: func(p *crawlv1alpha1.ProxyPool) []slotPlacement {
				return []slotPlacement{at(p, other), at(p, labB), at(p, other)}
			},
		},
		{
			name:   "zero replicas: no slot",
			reason: "a pool scaled to zero plans no member",
			pool:   pool(0),
			want:   func(*crawlv1alpha1.ProxyPool) []slotPlacement { return []slotPlacement{} },
		},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			_, got := poolSlots(tc.pool)
			if diff := cmp.Diff(tc.want(tc.pool), got, cmp.AllowUnexported(slotPlacement{})); diff != "" {
				t.Errorf("poolSlots() (-want +got):\n%s\nwhy this matters: %s", diff, tc.reason)
			}
		})
	}
	p := pool(2, lab, labB)
	if _, slots := poolSlots(p); slots[0].hash == slots[1].hash {
		t.Errorf("two zones have the same template hash %s: a member moved to another zone would not be rotated", slots[0].hash)
	}
}

func TestMemberName(t *testing.T) {
	a := memberName("crawl", "uid-1", 0)
	if a != memberName("crawl", "uid-1", 0) {
		t.Error("memberName is not deterministic: a second create would make a second member")
	}
	seen := map[string]bool{}
	for serial := range 200 {
		n := memberName("crawl", "uid-1", serial)
		if seen[n] {
			t.Errorf("memberName collides at serial %d: %s", serial, n)
		}
		seen[n] = true
	}
	if len(a) != len("crawl-")+5 {
		t.Errorf("memberName = %q, want crawl-<5 characters>", a)
	}
}
