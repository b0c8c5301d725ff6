package fakeprobe

import (
	"context"
	"fmt"
	"net/netip"
	"sync"
	"time"

	"github.com/egress-proxies/egress-proxies-operator/internal/probe"
)

// Prober is a probe.Prober for tests: every proxy passes, with an egress address of
// its own derived from its address, unless a test says otherwise with
// Fail, Egress or Pass. It records the targets it probed.
type Prober struct {
	mu      sync.Mutex
	failing map[string]error
	egress  map[string]netip.Addr
	probed  map[string]int
	hanging map[string]chan struct{}
	started map[string]int
}

var _ probe.Prober = (*Prober)(nil)

// New returns a Prober where every proxy passes.
func New() *Prober {
	return &Prober{failing: map[string]error{}, egress: map[string]netip.Addr{}, probed: map[string]int{},
		hanging: map[string]chan struct{}{}, started: map[string]int{}}
}

// Fail makes probes of the proxy at address (host:port) fail with err.
func (f *Prober) Fail(address string, err error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.failing[address] = err
}

// Pass undoes Fail.
func (f *Prober) Pass(address string) {
	f.mu.Lock()
	defer f.mu.Unlock()
	delete(f.failing, address)
}

// Egress makes the proxy at address report ip as its egress address.
func (f *Prober) Egress(address string, ip netip.Addr) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.egress[address] = ip
}

// Hang makes probes of the proxy at address block, as a proxy that drops
// packets does, until Release or the end of their context.
func (f *Prober) Hang(address string) {
	f.mu.Lock()
	defer f.mu.Unlock()
	if _, ok := f.hanging[address]; !ok {
		f.hanging[address] = make(chan struct{})
	}
}

// Release lets the probes that Hang holds, and later ones, go on.
func (f *Prober) Release(address string) {
	f.mu.Lock()
	defer f.mu.Unlock()
	if c, ok := f.hanging[address]; ok {
		close(c)
		delete(f.hanging, address)
	}
}

// Started returns how many probes of the proxy at address began, whether
// or not they ended.
func (f *Prober) Started(address string) int {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.started[address]
}

// Probed returns how many times the proxy at address was probed.
func (f *Prober) Probed(address string) int {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.probed[address]
}

// Probe implements probe.Prober. Without a check URL it reports no egress address,
// as the real one does; with one, the address set by Egress, or else the
// proxy's own host.
func (f *Prober) Probe(ctx context.Context, t probe.Target) (probe.Result, error) {
	if err := ctx.Err(); err != nil {
		return probe.Result{}, err
	}
	f.mu.Lock()
	f.started[t.Address]++
	hang := f.hanging[t.Address]
	f.mu.Unlock()
	if hang != nil {
		select {
		case <-hang:
		case <-ctx.Done():
			return probe.Result{}, fmt.Errorf("probing %s: %w", t.Address, ctx.Err())
		}
	}
	f.mu.Lock()
	defer f.mu.Unlock()
	f.probed[t.Address]++
	if err := f.failing[t.Address]; err != nil {
		return probe.Result{}, err
	}
	res := probe.Result{Latency: time.Millisecond}
	if t.CheckURL != "" {
		if ip, ok := f.egress[t.Address]; ok {
			res.EgressIP = ip
		} else if ap, err := netip.ParseAddrPort(t.Address); err == nil {
			res.EgressIP = ap.Addr()
		}
	}
	return res, nil
}
