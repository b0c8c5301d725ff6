package poll

import (
	"context"
	"errors"
	"runtime"
	"slices"
	"sync"
	"sync/atomic"
	"testing"
	"time"
)

// TestProbeSeesLoad: the probe's ratio rises when more threads than cores
// compete with it. A probe that measured CPU time instead of wall time (or
// a clock that ignores waiting) would say 1 both times.
func TestProbeSeesLoad(t *testing.T) {
	probes := func() []float64 {
		var r []float64
		for range 5 {
			r = append(r, probe())
		}
		slices.Sort(r)
		return r
	}
	// The best of the probes without the spinning threads against the
	// median with them: the machine's own load varies between the two.
	quietProbes := probes()
	quiet := quietProbes[0]
	// The spinning threads must compete with the probe for the cores, in
	// the kernel's scheduler: with GOMAXPROCS left at the core count they
	// would share its few Ps with the probe instead, and a 10 ms probe
	// that the Go scheduler happens not to preempt (its quantum is 10 ms)
	// sees no load at all (CI saw a ratio of 1.20 so).
	spinners := 8 * runtime.NumCPU()
	defer runtime.GOMAXPROCS(runtime.GOMAXPROCS(spinners + runtime.GOMAXPROCS(0)))
	var stop atomic.Bool
	var wg sync.WaitGroup
	for range spinners {
		wg.Go(func() {
			runtime.LockOSThread()
			defer runtime.UnlockOSThread()
			x := 0
			for !stop.Load() {
				x++
			}
			_ = x
		})
	}
	loaded := probes()[2]
	stop.Store(true)
	wg.Wait()
	t.Logf("probe ratio %.2f, with %d spinning threads beside it %.2f", quiet, spinners, loaded)
	// The median: the thread's CPU time is counted in ticks, so a single
	// probe's ratio can dip below 1 (0.88 seen).
	if quietProbes[2] < 0.9 {
		t.Errorf("the probe's wall time over CPU time is %.2f, below 1: it does not measure wall time over CPU time", quietProbes[2])
	}
	// Eight threads per core more make a burst several times slower,
	// however loaded the machine already was.
	if loaded < 1.5*quiet {
		t.Errorf("with %d spinning threads the probe ratio is %.2f, not well above %.2f without them: it does not see load", spinners, loaded, quiet)
	}
}

func TestSlowdownIsBounded(t *testing.T) {
	if s := Slowdown(); s < 1 || s > maxSlowdown {
		t.Errorf("Slowdown() = %.2f, want within [1, %d]", s, maxSlowdown)
	}
	if got := Paced(time.Second); got < time.Second || got > maxSlowdown*time.Second {
		t.Errorf("Paced(1s) = %s, want within [1s, %ds]", got, maxSlowdown)
	}
}

func TestWaitPacedTimesOutWithItsBound(t *testing.T) {
	calls := 0
	err := WaitPaced(context.Background(), 3*Interval, func() (bool, string) { calls++; return false, "still waiting" })
	var te *TimeoutError
	if !errors.As(err, &te) || te.Why != "still waiting" || te.Timeout < 3*Interval {
		t.Fatalf("got %v, want a TimeoutError with the condition's explanation and a bound of at least the quiet one", err)
	}
	if calls < 2 {
		t.Errorf("cond called %d times, want it polled more than once", calls)
	}
	if err := WaitPaced(context.Background(), time.Minute, func() (bool, string) { calls++; return calls > 4, "" }); err != nil {
		t.Errorf("WaitPaced of a condition that comes true: %v", err)
	}
}

func TestWaitPacedNeverPassesTheLimit(t *testing.T) {
	began := time.Now()
	err := waitPaced(context.Background(), time.Hour, 5*Interval, func() (bool, string) { return false, "never" })
	var te *TimeoutError
	if !errors.As(err, &te) {
		t.Fatalf("got %v, want a TimeoutError", err)
	}
	// The limit (the test's deadline) wins over the paced hour.
	if took := time.Since(began); took > time.Minute {
		t.Errorf("waited %s with a limit of %s", took, 5*Interval)
	}
}

func TestPacedContextEnds(t *testing.T) {
	ctx, cancel := PacedContext(context.Background(), time.Millisecond)
	defer cancel()
	if err := Wait(context.Background(), time.Minute, func() (bool, string) { return ctx.Err() != nil, "the paced context is still open" }); err != nil {
		t.Fatal(err)
	}
	var te *TimeoutError
	if !errors.As(context.Cause(ctx), &te) {
		t.Errorf("cause %v, want the paced bound", context.Cause(ctx))
	}
	ctx2, cancel2 := PacedContext(context.Background(), time.Hour)
	cancel2()
	if !errors.Is(ctx2.Err(), context.Canceled) {
		t.Errorf("cancelled paced context: %v", ctx2.Err())
	}
}
