package controller

import (
	"testing"

	"github.com/google/go-cmp/cmp"
	"k8s.io/apimachinery/pkg/types"
)

// slotStep is one call on createSlots and what it must answer.
type slotStep struct {
	op    string // acquire, hold, release
	entry string
	key   string
	limit int
	want  bool // acquire's answer
}

func TestCreateSlots(t *testing.T) {
	acq := func(entry, key string, limit int, want bool) slotStep {
		return slotStep{op: "acquire", entry: entry, key: key, limit: limit, want: want}
	}
	hold := func(entry, key string) slotStep { return slotStep{op: "hold", entry: entry, key: key} }
	rel := func(key string) slotStep { return slotStep{op: "release", key: key} }
	cases := map[string]struct {
		reason string
		steps  []slotStep
		// wantWoken are the Proxies handed a slot by a release, in order.
		wantWoken    []string
		wantInFlight map[string]int
		wantQueued   map[string]int
	}{
		"Cap per entry": {
			reason: "an entry gives out as many slots as its limit; another entry has slots of its own",
			steps: []slotStep{
				acq("lab", "a", 2, true), acq("lab", "b", 2, true), acq("lab", "c", 2, false),
				acq("other", "x", 1, true),
			},
			wantInFlight: map[string]int{"lab": 2, "other": 1},
			wantQueued:   map[string]int{"lab": 1},
		},
		"A holder asking again keeps its slot": {
			reason:       "each reconcile of a create in flight asks again; it must not queue behind itself",
			steps:        []slotStep{acq("lab", "a", 1, true), acq("lab", "a", 1, true)},
			wantInFlight: map[string]int{"lab": 1},
		},
		"A freed slot goes to the oldest waiter": {
			reason: "the waiters are served in the order they came, and woken so that they need not poll",
			steps: []slotStep{
				acq("lab", "a", 1, true), acq("lab", "b", 1, false), acq("lab", "c", 1, false),
				rel("a"),
				acq("lab", "b", 1, true),
			},
			wantWoken:    []string{"b"},
			wantInFlight: map[string]int{"lab": 1},
			wantQueued:   map[string]int{"lab": 1},
		},
		"A newcomer does not jump the line": {
			reason: "a Proxy reconciled just after a release must not take the slot handed to the one that waited",
			steps: []slotStep{
				acq("lab", "a", 1, true), acq("lab", "b", 1, false),
				rel("a"),
				acq("lab", "n", 1, false),
			},
			wantWoken:    []string{"b"},
			wantInFlight: map[string]int{"lab": 1},
			wantQueued:   map[string]int{"lab": 1},
		},
		"Asking again keeps one's place in line": {
			reason: "a waiter reconciled again (its resync) stays where it was rather than going to the back",
			steps: []slotStep{
				acq("lab", "a", 1, true), acq("lab", "b", 1, false), acq("lab", "c", 1, false), acq("lab", "b", 1, false),
				rel("a"),
			},
			wantWoken:    []string{"b"},
			wantInFlight: map[string]int{"lab": 1},
			wantQueued:   map[string]int{"lab": 1},
		},
		"A waiter that goes leaves the line": {
			reason: "a Proxy deleted while it waited must not be handed a slot nobody would use",
			steps: []slotStep{
				acq("lab", "a", 1, true), acq("lab", "b", 1, false), acq("lab", "c", 1, false),
				rel("b"), rel("a"),
			},
			wantWoken:    []string{"c"},
			wantInFlight: map[string]int{"lab": 1},
		},
		"A create found after a restart counts past the limit": {
			reason: "hold counts a create already in flight, so that nobody else starts until the count is under the limit again",
			steps: []slotStep{
				acq("lab", "a", 2, true), acq("lab", "b", 2, true), hold("lab", "d"),
				rel("b"),
				acq("lab", "e", 2, false),
				rel("d"),
			},
			wantWoken:    []string{"e"},
			wantInFlight: map[string]int{"lab": 2},
		},
		"Hold takes a waiter out of line": {
			reason: "a waiter found to have a create in flight holds a slot; it must not also be handed another",
			steps: []slotStep{
				acq("lab", "a", 1, true), acq("lab", "b", 1, false), hold("lab", "b"),
				rel("a"),
			},
			wantInFlight: map[string]int{"lab": 1},
		},
		"A raised limit serves the line": {
			reason: "room made by a higher limit goes to those who waited, oldest first, before the one asking",
			steps: []slotStep{
				acq("lab", "a", 1, true), acq("lab", "b", 1, false), acq("lab", "c", 1, false),
				acq("lab", "d", 3, false),
			},
			wantWoken:    []string{"b", "c"},
			wantInFlight: map[string]int{"lab": 3},
			wantQueued:   map[string]int{"lab": 1},
		},
	}
	for name, tc := range cases {
		t.Run(name, func(t *testing.T) {
			var woken []string
			c := createSlots{wake: func(k types.NamespacedName) { woken = append(woken, k.Name) }}
			for i, s := range tc.steps {
				key := types.NamespacedName{Namespace: "ns", Name: s.key}
				switch s.op {
				case "acquire":
					if got := c.acquire(s.entry, key, s.limit); got != s.want {
						t.Fatalf("%s\nstep %d: acquire(%s, %s, %d) = %t, want %t", tc.reason, i, s.entry, s.key, s.limit, got, s.want)
					}
				case "hold":
					c.hold(s.entry, key)
				case "release":
					c.release(key)
				}
			}
			if diff := cmp.Diff(tc.wantWoken, woken); diff != "" {
				t.Errorf("%s\nwoken (-want +got):\n%s", tc.reason, diff)
			}
			inFlight, queued := map[string]int{}, map[string]int{}
			for _, e := range []string{"lab", "other"} {
				if n := c.inFlight(e); n > 0 {
					inFlight[e] = n
				}
				if n := c.queued(e); n > 0 {
					queued[e] = n
				}
			}
			if diff := cmp.Diff(nonEmpty(tc.wantInFlight), inFlight); diff != "" {
				t.Errorf("%s\nin flight (-want +got):\n%s", tc.reason, diff)
			}
			if diff := cmp.Diff(nonEmpty(tc.wantQueued), queued); diff != "" {
				t.Errorf("%s\nqueued (-want +got):\n%s", tc.reason, diff)
			}
		})
	}
}

// nonEmpty turns a nil map into an empty one, for cmp.Diff.
func nonEmpty(m map[string]int) map[string]int {
	if m == nil {
		return map[string]int{}
	}
	return m
}

// inFlight (for the tests) returns how many creates of entry hold a slot.
func (c *createSlots) inFlight(entry string) int {
	c.mu.Lock()
	defer c.mu.Unlock()
	return len(c.holders[entry])
}

// queued (for the tests) returns how many Proxies wait for a slot of entry.
func (c *createSlots) queued(entry string) int {
	c.mu.Lock()
	defer c.mu.Unlock()
	return len(c.waiters[entry])
}
