package poll

import (
	"context"
	"fmt"
	"os"
	"runtime"
	"slices"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"
)

// The machine's pace: how much slower than on an idle machine work runs
// now. Tests whose waits depend on the machine (real daemons, real guests)
// scale the bounds they would use on a quiet machine by it, as the chaos run
// scales its bounds by its measured create-to-Ready time, so that a loaded
// CI machine gets proportionally longer waits and a quiet one keeps short
// ones. It is measured, never configured, two ways, and the larger wins:
//
//   - a probe spins for paceProbeCPU of its thread's CPU time and compares
//     the wall time that took: how much a short burst of work (a virsh, an
//     ssh session, a reconcile) is delayed now;
//   - the run queue per core (the 1-minute load average over the cores the
//     process may use): what a long CPU-bound program (a TCG guest, a
//     compiler) gets, which the probe underestimates, since the scheduler
//     favours a thread that just woke.
//
// A probe runs when a bound is asked for and the last one is older than
// paceProbeEvery, so nothing runs in the background; the probe's part is
// the median of the probes of the last paceWindow.
const (
	paceProbeCPU   = 10 * time.Millisecond
	paceProbeEvery = 2 * time.Second
	paceWindow     = 30 * time.Second
	// maxSlowdown caps the scaling: a wait that would take more is stuck,
	// not slow.
	maxSlowdown = 25
)

var pace struct {
	mu      sync.Mutex
	samples []paceSample
	last    time.Time
}

type paceSample struct {
	at    time.Time
	ratio float64
}

// Slowdown is how many times slower than on an idle machine work runs now
// (at least 1, at most 25), measured as the comment on paceProbeCPU says.
func Slowdown() float64 {
	pace.mu.Lock()
	defer pace.mu.Unlock()
	now := time.Now()
	if now.Sub(pace.last) >= paceProbeEvery {
		pace.samples = append(pace.samples, paceSample{at: now, ratio: probe()})
		pace.last = time.Now()
	}
	pace.samples = slices.DeleteFunc(pace.samples, func(s paceSample) bool { return now.Sub(s.at) > paceWindow })
	ratios := make([]float64, 0, len(pace.samples))
	for _, s := range pace.samples {
		ratios = append(ratios, s.ratio)
	}
	slices.Sort(ratios)
	return min(max(ratios[len(ratios)/2], loadPerCore(), 1), maxSlowdown)
}

// loadPerCore is the 1-minute load average over the CPUs the process may
// use; 0 when /proc/loadavg cannot be read.
func loadPerCore() float64 {
	b, err := os.ReadFile("/proc/loadavg")
	if err != nil {
		return 0
	}
	f := strings.Fields(string(b))
	if len(f) == 0 {
		return 0
	}
	load, err := strconv.ParseFloat(f[0], 64)
	if err != nil {
		return 0
	}
	return load / float64(runtime.NumCPU())
}

// probe spins for paceProbeCPU of its thread's CPU time and returns the
// wall time that took over that CPU time.
func probe() float64 {
	runtime.LockOSThread()
	defer runtime.UnlockOSThread()
	began, cpu0 := time.Now(), threadCPU()
	x := 0
	for threadCPU()-cpu0 < paceProbeCPU {
		for i := range 20000 {
			x ^= i
		}
	}
	_ = x
	return float64(time.Since(began)) / float64(paceProbeCPU)
}

func threadCPU() time.Duration {
	var ru syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_THREAD, &ru); err != nil {
		return 0
	}
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}

// Paced is the bound a wait that takes at most quiet on a quiet machine gets
// now: quiet times the Slowdown.
func Paced(quiet time.Duration) time.Duration {
	return time.Duration(float64(quiet) * Slowdown())
}

// UntilPaced is Until whose timeout follows the machine's pace: the wait
// fails once the time waited exceeds Paced(quiet), re-read at every poll,
// so that load arriving during the wait lengthens it; polls are spaced by
// Interval times the slowdown (a loaded machine is not polled harder). The
// bound never passes the test's own deadline (go test -timeout) less a
// minute (or half the time left), so that a wait that fails says why instead of the test binary
// panicking.
func UntilPaced(t testing.TB, quiet time.Duration, cond func() (ok bool, why string)) {
	t.Helper()
	limit := time.Duration(0)
	if d, ok := t.(interface{ Deadline() (time.Time, bool) }); ok {
		if dl, has := d.Deadline(); has {
			left := time.Until(dl)
			limit = max(left-time.Minute, left/2)
		}
	}
	if err := waitPaced(t.Context(), quiet, limit, cond); err != nil {
		t.Fatal(err)
	}
}

// WaitPaced is UntilPaced for code that must not stop the test.
func WaitPaced(ctx context.Context, quiet time.Duration, cond func() (ok bool, why string)) error {
	return waitPaced(ctx, quiet, 0, cond)
}

func waitPaced(ctx context.Context, quiet, limit time.Duration, cond func() (bool, string)) error {
	began := time.Now()
	timer := time.NewTimer(Interval)
	defer timer.Stop()
	for {
		ok, why := cond()
		if ok {
			return nil
		}
		slow := Slowdown()
		bound := time.Duration(float64(quiet) * slow)
		if limit > 0 {
			bound = min(bound, limit)
		}
		if time.Since(began) > bound {
			return &TimeoutError{Timeout: bound, Why: why}
		}
		timer.Reset(time.Duration(float64(Interval) * slow))
		select {
		case <-ctx.Done():
			return fmt.Errorf("%w while waiting: %s", ctx.Err(), why)
		case <-timer.C:
		}
	}
}

// PacedContext returns a context that ends once Paced(quiet) has passed
// since the call, the bound re-read every second (so a long run of calls
// that meets load gets longer), or when parent ends or cancel is called.
func PacedContext(parent context.Context, quiet time.Duration) (context.Context, context.CancelFunc) {
	ctx, cancel := context.WithCancelCause(parent)
	began := time.Now()
	go func() {
		tick := time.NewTicker(time.Second)
		defer tick.Stop()
		for {
			select {
			case <-ctx.Done():
				return
			case <-tick.C:
				if bound := Paced(quiet); time.Since(began) > bound {
					cancel(&TimeoutError{Timeout: bound, Why: "the paced context's bound passed"})
					return
				}
			}
		}
	}()
	return ctx, func() { cancel(context.Canceled) }
}
