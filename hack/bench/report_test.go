package main

import (
	"testing"
	"time"
)

// TestSteadyBound: the bound printed beside the steady state's count is
// one cluster-wide listing per poll interval plus one listing per node per
// pause window, over the Proxies; at the 10 000 Proxies and the
// operator's ratio of intervals (60 poll intervals per resync) it is under
// issue #23's 0.01.
func TestSteadyBound(t *testing.T) {
	o := options{resyncInterval: 6 * time.Second, pollInterval: 100 * time.Millisecond}
	for _, c := range []struct {
		n    int
		want float64
	}{
		{1, 75},       // 60 cluster listings + 3 nodes × 5 pause windows
		{1000, 0.075}, // the same reads shared by a thousand
		{10000, 0.0075},
	} {
		if got := steadyBound(o, c.n); got < c.want*0.999 || got > c.want*1.001 {
			t.Errorf("steadyBound(N = %d) = %g, want %g", c.n, got, c.want)
		}
	}
	if got := steadyBound(o, targetSteadyN); got > targetSteadyCalls {
		t.Errorf("the design's bound at %d Proxies is %g, over the target %g", targetSteadyN, got, targetSteadyCalls)
	}
}
