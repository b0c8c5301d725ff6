package controller

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"sync"
	"testing"
	"time"

	"k8s.io/apimachinery/pkg/types"

	"github.com/egress-proxies/egress-proxies-operator/internal/probe"
	"github.com/egress-proxies/egress-proxies-operator/internal/testing/fakeprobe"
	"github.com/egress-proxies/egress-proxies-operator/internal/testing/poll"
)

// gateProber holds every probe until the test opens the gate, and records
// how many ran at once.
type gateProber struct {
	gate chan struct{}

	mu       sync.Mutex
	now, top int
}

func (g *gateProber) Probe(ctx context.Context, t probe.Target) (probe.Result, error) {
	g.mu.Lock()
	g.now++
	g.top = max(g.top, g.now)
	g.mu.Unlock()
	defer func() {
		g.mu.Lock()
		g.now--
		g.mu.Unlock()
	}()
	select {
	case <-g.gate:
	case <-ctx.Done():
		return probe.Result{}, ctx.Err()
	}
	if t.Address == "198.51.100.9:3128" {
		return probe.Result{}, errors.New("the proxy answered 502")
	}
	return probe.Result{Latency: time.Millisecond}, nil
}

func (g *gateProber) running() (now, top int) {
	g.mu.Lock()
	defer g.mu.Unlock()
	return g.now, g.top
}

// TestProbeRuns: probes run off the caller, at most limit at once and one
// per Proxy; each end wakes its Proxy, whose outcome is taken once and only
// for the address probed; nothing starts before the manager runs or after
// it stopped, and Start returns once the running probes ended.
func TestProbeRuns(t *testing.T) {
	g := &gateProber{gate: make(chan struct{})}
	var mu sync.Mutex
	var woken []string
	r := newProbeRuns(g, 2, func(k types.NamespacedName) {
		mu.Lock()
		defer mu.Unlock()
		woken = append(woken, k.Name)
	})
	key := func(i int) types.NamespacedName {
		return types.NamespacedName{Namespace: "crawl", Name: fmt.Sprintf("p%d", i)}
	}
	target := func(i int) probe.Target { return probe.Target{Address: fmt.Sprintf("198.51.100.%d:3128", i)} }

	if r.start(key(1), target(1)) {
		t.Fatal("start before the manager runs = true; the caller must probe by itself then")
	}
	ctx, cancel := context.WithCancel(context.Background())
	stopped := make(chan error, 1)
	go func() { stopped <- r.Start(ctx) }()
	poll.UntilPaced(t, 5*time.Second, func() (bool, string) { return r.start(key(1), target(1)), "the runner did not start" })
	for i := 2; i <= 9; i++ {
		if !r.start(key(i), target(i)) {
			t.Fatalf("start of p%d = false", i)
		}
	}
	if !r.start(key(1), target(1)) {
		t.Fatal("a second start of a running probe = false")
	}
	poll.UntilPaced(t, 5*time.Second, func() (bool, string) {
		now, _ := g.running()
		return now == 2, fmt.Sprintf("%d probes running, want the limit, 2", now)
	})
	if _, ok := r.take(key(1), target(1).Address); ok {
		t.Error("take of a probe still running = true")
	}
	close(g.gate)
	poll.UntilPaced(t, 5*time.Second, func() (bool, string) {
		mu.Lock()
		defer mu.Unlock()
		return len(woken) == 9, fmt.Sprintf("woken %v, want p1 to p9 once each", woken)
	})
	if _, top := g.running(); top != 2 {
		t.Errorf("at most %d probes ran at once, want 2", top)
	}
	slices.Sort(woken)
	if want := []string{"p1", "p2", "p3", "p4", "p5", "p6", "p7", "p8", "p9"}; !slices.Equal(woken, want) {
		t.Errorf("woken %v, want %v (one probe per Proxy)", woken, want)
	}
	if e, ok := r.take(key(1), target(1).Address); !ok || e.err != nil || e.result.Latency != time.Millisecond {
		t.Errorf("take of p1 = %+v, %v; want its passed probe", e, ok)
	}
	if _, ok := r.take(key(1), target(1).Address); ok {
		t.Error("an outcome was taken twice")
	}
	if e, ok := r.take(key(9), target(9).Address); !ok || e.err == nil {
		t.Errorf("take of p9 = %+v, %v; want its failure", e, ok)
	}
	if _, ok := r.take(key(2), "198.51.100.200:3128"); ok {
		t.Error("the outcome of a probe of another address (a replaced instance) was taken")
	}

	cancel()
	if err := poll.Receive(t, poll.Paced(5*time.Second), "Start's return after its context ended", stopped); err != nil {
		t.Errorf("Start = %v", err)
	}
	if r.start(key(3), target(3)) {
		t.Error("start after the manager stopped = true")
	}
}

// TestProbeRunsStopWhileStarting: the manager may stop while a reconcile
// starts a probe. Start's wait must not race with that start (a WaitGroup
// Add from zero concurrent with Wait is a data race, and a probe started
// after the wait began would outlive Start); -race catches the former.
func TestProbeRunsStopWhileStarting(t *testing.T) {
	for round := range 50 {
		r := newProbeRuns(fakeprobe.New(), 4, func(types.NamespacedName) {})
		ctx, cancel := context.WithCancel(context.Background())
		stopped := make(chan error, 1)
		go func() { stopped <- r.Start(ctx) }()
		key := types.NamespacedName{Namespace: "crawl", Name: fmt.Sprintf("p%d", round)}
		poll.UntilPaced(t, 5*time.Second, func() (bool, string) {
			return r.start(key, probe.Target{Address: "198.51.100.1:3128"}), "the runner did not start"
		})
		var wg sync.WaitGroup
		for i := range 4 {
			wg.Go(func() {
				k := types.NamespacedName{Namespace: "crawl", Name: fmt.Sprintf("p%d-%d", round, i)}
				for ctx.Err() == nil {
					r.start(k, probe.Target{Address: "198.51.100.1:3128"}) //nolint:contextcheck // start takes no context by design: the probe runs with the runner's (probeRuns.Start).
				}
			})
		}
		cancel()
		wg.Wait()
		if err := poll.Receive(t, poll.Paced(5*time.Second), "Start's return after its context ended", stopped); err != nil {
			t.Fatalf("Start = %v", err)
		}
	}
}
