package main

import (
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
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

// TestAtQuantile: the spread table reads nearest-rank quantiles, so that
// the max is the last Proxy's time and p50 of an even count is a real
// Proxy's time, not an average of two.
func TestAtQuantile(t *testing.T) {
	s := func(secs ...int) []time.Duration {
		d := make([]time.Duration, len(secs))
		for i, v := range secs {
			d[i] = time.Duration(v) * time.Second
		}
		return d
	}
	for _, tc := range []struct {
		why    string
		sorted []time.Duration
		q      float64
		want   string
	}{
		{"nothing seen is a dash, not zero", nil, 0.5, "-"},
		{"q 0 is the first", s(3, 5, 9), 0, "3.0"},
		{"the max is the last", s(3, 5, 9), 1, "9.0"},
		{"p50 of an even count is the lower middle", s(1, 2, 3, 4), 0.5, "2.0"},
		{"p90 of ten is the ninth", s(1, 2, 3, 4, 5, 6, 7, 8, 9, 10), 0.9, "9.0"},
		{"p99 of ten is the tenth", s(1, 2, 3, 4, 5, 6, 7, 8, 9, 10), 0.99, "10.0"},
	} {
		if got := atQuantile(tc.sorted, tc.q); got != tc.want {
			t.Errorf("%s: atQuantile(%v, %g) = %s, want %s", tc.why, tc.sorted, tc.q, got, tc.want)
		}
	}
}

// TestTop: the per-path tables show the largest counts and every listing,
// however small its count: the listings are what issue #23 item 2 reads,
// and a change that makes them rare must still show how rare.
func TestTop(t *testing.T) {
	c := map[string]int64{"a": 5, "b": 9, "c": 1, "d": 9, "e": 2}
	for _, tc := range []struct {
		why    string
		k      int
		always []string
		want   []kv
	}{
		{"largest first, ties by key", 3, nil, []kv{{"b", 9}, {"d", 9}, {"a", 5}}},
		{"an always key below the cut is kept, in its place", 2, []string{"c"}, []kv{{"b", 9}, {"d", 9}, {"c", 1}}},
		{"an always key absent from the counts adds nothing", 2, []string{"z"}, []kv{{"b", 9}, {"d", 9}}},
		{"k beyond the entries is all of them", 9, nil, []kv{{"b", 9}, {"d", 9}, {"a", 5}, {"e", 2}, {"c", 1}}},
	} {
		if diff := cmp.Diff(tc.want, top(c, tc.k, tc.always...), cmp.AllowUnexported(kv{})); diff != "" {
			t.Errorf("%s: top(k = %d, always %v) (-want +got):\n%s", tc.why, tc.k, tc.always, diff)
		}
	}
}
