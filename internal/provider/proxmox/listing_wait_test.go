package proxmox

import (
	"testing"
	"time"
)

func TestUntilNextListing(t *testing.T) {
	now := time.Date(2026, 12, 1, 10, 0, 0, 0, time.UTC)
	p := &Provider{block: &Block{}, now: func() time.Time { return now }} // poll interval: the default, 5 s
	cases := []struct {
		name   string
		reason string
		read   time.Duration // how long ago the task list was read
		want   time.Duration
	}{
		{name: "read just now", reason: "a list this step read itself: a whole interval, as before",
			read: 0, want: 5 * time.Second},
		{name: "read 3 s ago", reason: "a list shared with other steps, read 3 s ago: the rest of its interval, not a whole one from now",
			read: 3 * time.Second, want: 2*time.Second + 250*time.Millisecond},
		{name: "read a whole interval ago", reason: "a list that may be read anew already: a short wait, never a busy loop",
			read: 5 * time.Second, want: 500 * time.Millisecond},
		{name: "read in the future", reason: "a clock that jumped back never makes the wait longer than an interval",
			read: -time.Minute, want: 5 * time.Second},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			if got := p.untilNextListing(now.Add(-tc.read)); got != tc.want {
				t.Errorf("%s: untilNextListing = %s, want %s", tc.reason, got, tc.want)
			}
		})
	}
}
