package proxmox

import (
	"testing"
	"time"
)

// TestUntilNextListing: a step whose task a list showed running looks again
// when a newer list may be read, a relook interval after that one, so that
// the steps of many creates at random phases share one list per node and
// none waits a whole poll interval for a task that ended meanwhile.
func TestUntilNextListing(t *testing.T) {
	now := time.Date(2026, 12, 1, 10, 0, 0, 0, time.UTC)
	p := &Provider{block: &Block{}, now: func() time.Time { return now }} // poll interval: the default, 5 s
	cases := []struct {
		name   string
		reason string
		read   time.Duration // how long ago the task list was read
		want   time.Duration
	}{
		{name: "read just now", reason: "a list this step read itself: a relook interval (a fifth of the poll interval) and a little, not a whole poll interval",
			read: 0, want: time.Second + 250*time.Millisecond},
		{name: "read 0.5 s ago", reason: "a list shared with other steps, read 0.5 s ago: the rest of its relook interval, not a whole one from now",
			read: 500 * time.Millisecond, want: 750 * time.Millisecond},
		{name: "read a whole relook interval ago", reason: "a list that may be read anew already: a short wait, never a busy loop",
			read: 2 * time.Second, want: 500 * time.Millisecond},
		{name: "read in the future", reason: "a clock that jumped back never makes the wait longer than a relook interval",
			read: -time.Minute, want: time.Second + 250*time.Millisecond},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			if got := p.untilNextListing(now.Add(-tc.read)); got != tc.want {
				t.Errorf("%s: untilNextListing = %s, want %s", tc.reason, got, tc.want)
			}
		})
	}
}
