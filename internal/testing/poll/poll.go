package poll

import (
	"context"
	"fmt"
	"testing"
	"time"
)

// Interval is how often conditions are polled: short next to any timeout a
// test uses, long enough not to busy-loop.
const Interval = 10 * time.Millisecond

// Until polls cond until it returns true and fails the test with cond's last
// explanation when timeout passes first.
func Until(t testing.TB, timeout time.Duration, cond func() (ok bool, why string)) {
	t.Helper()
	if err := Wait(t.Context(), timeout, cond); err != nil {
		t.Fatal(err)
	}
}

// Wait polls cond until it returns true, or returns an error with cond's last
// explanation when timeout passes or ctx ends first. It is Until for code
// that is not a test (the demo) or must not stop the test.
func Wait(ctx context.Context, timeout time.Duration, cond func() (ok bool, why string)) error {
	deadline := time.NewTimer(timeout)
	defer deadline.Stop()
	tick := time.NewTicker(Interval)
	defer tick.Stop()
	for {
		ok, why := cond()
		if ok {
			return nil
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("%w while waiting: %s", ctx.Err(), why)
		case <-deadline.C:
			return &TimeoutError{Timeout: timeout, Why: why}
		case <-tick.C:
		}
	}
}

// Receive returns the next value on ch, and fails the test when none comes
// within timeout: the one way tests wait for a channel with a deadline.
func Receive[T any](t testing.TB, timeout time.Duration, what string, ch <-chan T) T {
	t.Helper()
	deadline := time.NewTimer(timeout)
	defer deadline.Stop()
	select {
	case v := <-ch:
		return v
	case <-deadline.C:
		t.Fatalf("nothing received within %s: %s", timeout, what)
		var zero T
		return zero
	}
}

// Always fails the test as soon as cond returns false within d.
func Always(t testing.TB, d time.Duration, cond func() (ok bool, why string)) {
	t.Helper()
	deadline := time.NewTimer(d)
	defer deadline.Stop()
	tick := time.NewTicker(Interval)
	defer tick.Stop()
	for {
		if ok, why := cond(); !ok {
			t.Fatalf("condition broke: %s", why)
		}
		select {
		case <-deadline.C:
			return
		case <-tick.C:
		}
	}
}

// TimeoutError is Wait's error: the condition did not hold in time.
type TimeoutError struct {
	Timeout time.Duration
	Why     string
}

// Error says how long was waited and why the condition was not met.
func (e *TimeoutError) Error() string {
	return "condition not met within " + e.Timeout.String() + ": " + e.Why
}
