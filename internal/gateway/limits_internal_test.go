package gateway

import (
	"fmt"
	"strconv"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
)

// TestLRUForgetsTheLeastRecentlyUsed: the map never holds more than its
// size, and what it forgets is what was used least recently.
func TestLRUForgetsTheLeastRecentlyUsed(t *testing.T) {
	c := newLRU[string, int](3)
	for i, k := range []string{"a", "b", "c"} {
		c.put(k, i)
	}
	c.get("a")    // a is the most recent: b is the oldest
	c.put("d", 3) // forgets b
	c.put("c", 9) // an update keeps the size
	var got []string
	for _, k := range []string{"a", "b", "c", "d"} {
		v, ok := c.get(k)
		got = append(got, fmt.Sprint(k, v, ok))
	}
	if diff := cmp.Diff([]string{"a0 true", "b0 false", "c9 true", "d3 true"}, got); diff != "" {
		t.Errorf("after puts and gets (-want +got):\n%s", diff)
	}
	for i := range 1000 {
		c.put(strconv.Itoa(i), i)
	}
	if c.len() != 3 {
		t.Errorf("after 1000 puts the map holds %d; want its size, 3", c.len())
	}
}

// TestRateLimiterBounds: a token bucket per (member, host) with its burst
// and refill, and a bounded number of pairs.
func TestRateLimiterBounds(t *testing.T) {
	t0 := time.Unix(1_700_000_000, 0)
	for _, tc := range []struct {
		reason string
		rate   float64
		burst  int
		steps  []time.Duration // offsets of the takes from t0
		want   []string
	}{
		{"a burst, then the wait for the next token", 2, 3, []time.Duration{0, 0, 0, 0}, []string{"true 0s", "true 0s", "true 0s", "false 500ms"}},
		{"the bucket refills at the rate", 2, 1, []time.Duration{0, 0, 500 * time.Millisecond, 600 * time.Millisecond}, []string{"true 0s", "false 500ms", "true 0s", "false 400ms"}},
		{"no burst given: the rate rounded up", 1.5, 0, []time.Duration{0, 0, 0}, []string{"true 0s", "true 0s", "false 666.666ms"}},
	} {
		r := newRateLimiter(tc.rate, tc.burst)
		var got []string
		for _, d := range tc.steps {
			ok, wait := r.take(1, "example.org", t0.Add(d))
			got = append(got, fmt.Sprint(ok, wait.Truncate(time.Microsecond)))
		}
		if diff := cmp.Diff(tc.want, got); diff != "" {
			t.Errorf("%s (-want +got):\n%s", tc.reason, diff)
		}
	}
	r := newRateLimiter(1, 1)
	for i := range maxRateKeys + 100 {
		r.take(uint64(i), "example.org", t0)
	}
	if n := r.buckets.len(); n != maxRateKeys {
		t.Errorf("after %d pairs the limiter keeps %d; want its bound, %d", maxRateKeys+100, n, maxRateKeys)
	}
}
