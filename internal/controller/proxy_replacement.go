package controller

import (
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	crawlv1alpha1 "github.com/egress-proxies/egress-proxies-operator/api/v1alpha1"
)

// Defaults of ReplacementPolicy.
const (
	DefaultReplacementBackoff = 10 * time.Second
	DefaultReplacementLimit   = 5
	DefaultReplacementWindow  = time.Hour
)

// ReplacementPolicy bounds how fast and how often one Proxy's instance is
// replaced, so that an instance that dies right after it starts (a broken
// image, a host that kills it) cannot make the operator create VMs without
// end.
type ReplacementPolicy struct {
	// Backoff is the wait before the successor of the first replacement in
	// a window; it doubles with each further one, up to DefaultBackoffMax.
	// Zero means DefaultReplacementBackoff.
	Backoff time.Duration
	// Limit is how many replacements a window may hold; the next one stops
	// the Proxy with reason ReplacementLoop. Zero means
	// DefaultReplacementLimit.
	Limit int32
	// Window is how long replacements are counted from the first; zero
	// means DefaultReplacementWindow.
	Window time.Duration
}

func (pol ReplacementPolicy) withDefaults() ReplacementPolicy {
	if pol.Backoff == 0 {
		pol.Backoff = DefaultReplacementBackoff
	}
	if pol.Limit == 0 {
		pol.Limit = DefaultReplacementLimit
	}
	if pol.Window == 0 {
		pol.Window = DefaultReplacementWindow
	}
	return pol
}

// recordReplacement counts a replacement at now into s: a new window starts
// when none is open or the open one has passed.
func (pol ReplacementPolicy) recordReplacement(s *crawlv1alpha1.ProxyStatus, now time.Time) {
	pol = pol.withDefaults()
	t := metav1.NewTime(now)
	if s.ReplacementWindowStart == nil || now.Sub(s.ReplacementWindowStart.Time) >= pol.Window {
		s.ReplacementWindowStart = &t
		s.RecentReplacements = 0
	}
	s.RecentReplacements++
	s.LastReplacementTime = &t
}

// delay is the backoff before the successor of the n-th replacement of a
// window: Backoff, doubled for each earlier one, capped at DefaultBackoffMax.
func (pol ReplacementPolicy) delay(n int32) time.Duration {
	pol = pol.withDefaults()
	d := pol.Backoff
	for i := int32(1); i < n && d < DefaultBackoffMax; i++ {
		d *= 2
	}
	return min(d, DefaultBackoffMax)
}

// beforeCreate says, for a Proxy about to create an instance, whether the
// replacement loop is to stop it (loop) or how long it must still wait
// (wait > 0). A Proxy that was never replaced, or whose window has passed,
// creates at once.
func (pol ReplacementPolicy) beforeCreate(s crawlv1alpha1.ProxyStatus, now time.Time) (wait time.Duration, loop bool) {
	pol = pol.withDefaults()
	if s.LastReplacementTime == nil || s.ReplacementWindowStart == nil || now.Sub(s.ReplacementWindowStart.Time) >= pol.Window {
		return 0, false
	}
	if s.RecentReplacements > pol.Limit {
		return 0, true
	}
	return max(0, s.LastReplacementTime.Add(pol.delay(s.RecentReplacements)).Sub(now)), false
}
