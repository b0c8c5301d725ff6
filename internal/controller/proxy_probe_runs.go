package controller

import (
	"context"
	"sync"

	"k8s.io/apimachinery/pkg/types"

	"github.com/egress-proxies/egress-proxies-operator/internal/probe"
)

// probeConcurrency is how many probes run at once.
const probeConcurrency = 32

// probeRuns runs the probes through Ready proxies off the reconcile
// workers. A probe lasts up to its timeout (5 s by default) through a proxy
// that drops packets. Run inside a reconcile, it would hold one of the few
// workers that also create and replace instances: a network partition
// between the operator and a few dozen of its proxies would stall every
// create behind their probes. So a probe that is due is started here, its
// Proxy is woken when it ends, and the Proxy's next reconcile takes its
// outcome (take). At most limit probes run at once; the others wait for a
// turn, one goroutine per Proxy at most.
//
// It is a manager Runnable: probes run with the manager's context, are
// started only once the manager runs, and Start returns when they have
// all ended. The zero value is not ready: use newProbeRuns.
type probeRuns struct {
	prober probe.Prober
	wake   func(types.NamespacedName)
	turns  chan struct{}

	mu      sync.Mutex
	ctx     context.Context // the manager's, from Start: the probes started later run with it
	running map[types.NamespacedName]bool
	ended   map[types.NamespacedName]endedProbe
	wg      sync.WaitGroup
}

// endedProbe is the outcome of a probe that no reconcile has taken yet.
type endedProbe struct {
	address string
	result  probe.Result
	err     error
}

// newProbeRuns returns a runner of at most limit probes at once, which
// calls wake with the Proxy of each probe that ends.
func newProbeRuns(prober probe.Prober, limit int, wake func(types.NamespacedName)) *probeRuns {
	return &probeRuns{
		prober: prober, wake: wake, turns: make(chan struct{}, max(limit, 1)),
		running: map[types.NamespacedName]bool{}, ended: map[types.NamespacedName]endedProbe{},
	}
}

// Start implements manager.Runnable: it hands the manager's context to the
// probes and, once the context ends, waits for them.
func (r *probeRuns) Start(ctx context.Context) error {
	r.mu.Lock()
	r.ctx = ctx
	r.mu.Unlock()
	<-ctx.Done()
	// start adds to wg under mu after seeing ctx live. Taking mu once the
	// context ended orders every such Add before the Wait: a start that
	// comes later sees the context ended and adds nothing.
	r.mu.Lock()
	r.mu.Unlock() //nolint:staticcheck // SA2001: the empty critical section is the ordering point, see above.
	r.wg.Wait()
	return nil
}

// take returns the outcome of the Proxy's last probe, once, when that
// probe went to address; an outcome for another address (the instance was
// replaced meanwhile) is dropped.
func (r *probeRuns) take(key types.NamespacedName, address string) (endedProbe, bool) {
	r.mu.Lock()
	defer r.mu.Unlock()
	e, ok := r.ended[key]
	if !ok {
		return endedProbe{}, false
	}
	delete(r.ended, key)
	return e, e.address == address
}

// start begins a probe of the Proxy unless one is running. It reports
// false when the runner does not run (before the manager starts, or after
// it stopped): then nothing was started.
func (r *probeRuns) start(key types.NamespacedName, t probe.Target) bool {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.ctx == nil || r.ctx.Err() != nil {
		return false
	}
	if r.running[key] {
		return true
	}
	r.running[key] = true
	ctx := r.ctx
	r.wg.Add(1)
	go func() {
		defer r.wg.Done()
		var e endedProbe
		select {
		case r.turns <- struct{}{}:
			e.result, e.err = r.prober.Probe(ctx, t)
			<-r.turns
		case <-ctx.Done():
			e.err = ctx.Err()
		}
		e.address = t.Address
		r.mu.Lock()
		delete(r.running, key)
		if ctx.Err() == nil {
			r.ended[key] = e
		}
		r.mu.Unlock()
		if ctx.Err() == nil {
			r.wake(key)
		}
	}()
	return true
}

// forget drops what is known of a Proxy that is gone. A probe still
// running ends on its own; its outcome is then dropped at the Proxy's
// next reconcile, which finds the Proxy gone.
func (r *probeRuns) forget(key types.NamespacedName) {
	r.mu.Lock()
	defer r.mu.Unlock()
	delete(r.ended, key)
}
