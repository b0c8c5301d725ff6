package controller

import (
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	crawlv1alpha1 "github.com/egress-proxies/egress-proxies-operator/api/v1alpha1"
)

func TestReplacementPolicy(t *testing.T) {
	t0 := time.Date(2025, 3, 1, 9, 0, 0, 0, time.UTC)
	at := func(d time.Duration) *metav1.Time { m := metav1.NewTime(t0.Add(d)); return &m }
	pol := ReplacementPolicy{Backoff: 10 * time.Second, Limit: 3, Window: time.Hour}
	type result struct {
		Wait time.Duration
		Loop bool
	}
	tests := []struct {
		name   string
		reason string
		s      crawlv1alpha1.ProxyStatus
		now    time.Duration
		want   result
	}{
		{name: "never replaced", reason: "a first create must not wait", now: 0, want: result{}},
		{name: "first replacement, just now", reason: "the first successor waits the base backoff",
			s:   crawlv1alpha1.ProxyStatus{RecentReplacements: 1, ReplacementWindowStart: at(0), LastReplacementTime: at(0)},
			now: 0, want: result{Wait: 10 * time.Second}},
		{name: "third replacement, 15s later", reason: "each further successor waits twice as long: 40s from the replacement",
			s:   crawlv1alpha1.ProxyStatus{RecentReplacements: 3, ReplacementWindowStart: at(0), LastReplacementTime: at(time.Minute)},
			now: time.Minute + 15*time.Second, want: result{Wait: 25 * time.Second}},
		{name: "backoff over", reason: "once the wait has passed the successor is created",
			s:   crawlv1alpha1.ProxyStatus{RecentReplacements: 2, ReplacementWindowStart: at(0), LastReplacementTime: at(time.Minute)},
			now: 2 * time.Minute, want: result{}},
		{name: "over the limit", reason: "the fourth replacement in the window stops the Proxy: no successor at all",
			s:   crawlv1alpha1.ProxyStatus{RecentReplacements: 4, ReplacementWindowStart: at(0), LastReplacementTime: at(time.Minute)},
			now: 2 * time.Minute, want: result{Loop: true}},
		{name: "window passed", reason: "a Proxy replaced often long ago is not in a loop now",
			s:   crawlv1alpha1.ProxyStatus{RecentReplacements: 4, ReplacementWindowStart: at(0), LastReplacementTime: at(time.Minute)},
			now: 61 * time.Minute, want: result{}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			wait, loop := pol.beforeCreate(tc.s, t0.Add(tc.now))
			if diff := cmp.Diff(tc.want, result{wait, loop}); diff != "" {
				t.Errorf("beforeCreate (-want +got):\n%s\nwhy: %s", diff, tc.reason)
			}
		})
	}
}

func TestRecordReplacement(t *testing.T) {
	t0 := time.Date(2025, 3, 1, 9, 0, 0, 0, time.UTC)
	pol := ReplacementPolicy{Limit: 3, Window: time.Hour}
	var s crawlv1alpha1.ProxyStatus
	pol.recordReplacement(&s, t0)
	pol.recordReplacement(&s, t0.Add(30*time.Minute))
	if s.RecentReplacements != 2 || !s.ReplacementWindowStart.Time.Equal(t0) || !s.LastReplacementTime.Time.Equal(t0.Add(30*time.Minute)) {
		t.Errorf("two in a window: %d since %v, last %v", s.RecentReplacements, s.ReplacementWindowStart, s.LastReplacementTime)
	}
	// After the window a new one starts: the count does not grow forever
	// for a Proxy whose instance dies once a day.
	pol.recordReplacement(&s, t0.Add(2*time.Hour))
	if s.RecentReplacements != 1 || !s.ReplacementWindowStart.Time.Equal(t0.Add(2*time.Hour)) {
		t.Errorf("after the window: %d since %v, want 1 since the new replacement", s.RecentReplacements, s.ReplacementWindowStart)
	}
}

func TestReplacementDelayIsCapped(t *testing.T) {
	pol := ReplacementPolicy{Backoff: time.Minute}
	if got := pol.delay(30); got != DefaultBackoffMax {
		t.Errorf("delay(30) = %s, want the cap %s (and no overflow)", got, DefaultBackoffMax)
	}
}
