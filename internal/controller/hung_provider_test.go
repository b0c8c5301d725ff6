package controller_test

import (
	"context"
	"fmt"
	"testing"
	"time"

	crawlv1alpha1 "github.com/egress-proxies/egress-proxies-operator/api/v1alpha1"
	"github.com/egress-proxies/egress-proxies-operator/internal/config"
	"github.com/egress-proxies/egress-proxies-operator/internal/controller"
	"github.com/egress-proxies/egress-proxies-operator/internal/provider"
	"github.com/egress-proxies/egress-proxies-operator/internal/testing/fakeprovider"
)

// twoEntries is a configuration with the entries "lab" and "other".
func twoEntries(t *testing.T) *config.Config {
	t.Helper()
	cfg, err := config.Parse([]byte(`
providers:
  - name: lab
    type: fake
    zones: [rack-a]
    machineTypes: {small: {cores: 1, memoryMiB: 512}}
    images: [debian-12]
    deadlines: {create: 1h, get: 1h, delete: 1h, list: 1h}
  - name: other
    type: fake
    zones: [rack-a]
    machineTypes: {small: {cores: 1, memoryMiB: 512}}
    images: [debian-12]
`), fakeprovider.Registry())
	if err != nil {
		t.Fatalf("test config: %v", err)
	}
	return cfg
}

func TestHungEntryDoesNotStarveTheOthers(t *testing.T) {
	ns := newNamespace(t)
	hung, healthy := fakeprovider.New(nil), fakeprovider.New(nil)
	// Every call to lab waits for its deadline (an hour, longer than this
	// test): without a bound per entry, lab's Proxies take
	// every worker.
	hung.SetHung(true)
	startOperator(t, operatorOptions{namespace: ns, cfg: twoEntries(t),
		providers: map[string]provider.Provider{"lab": withoutKeyCheck{hung, hung}, "other": healthy},
		opts:      controller.Options{MaxConcurrentReconciles: 4}})
	ctx := context.Background()
	for i := range 6 {
		if err := k8s.Create(ctx, newProxy(ns, fmt.Sprintf("stuck-%d", i))); err != nil {
			t.Fatal(err)
		}
	}
	// Let lab's Proxies take what they can before the other entry's comes.
	eventually(t, 20*time.Second, func() (bool, string) {
		n := hung.CallCount(provider.OpCreate)
		return n >= 2, fmt.Sprintf("%d creates reached the hung entry", n)
	})
	p := newProxy(ns, "served")
	p.Spec.Provider = "other"
	if err := k8s.Create(ctx, p); err != nil {
		t.Fatal(err)
	}
	waitPhase(t, ns, "served", crawlv1alpha1.ProxyPhaseReady, crawlv1alpha1.ReasonInstanceRunning)
	// Lab held at most its share (4 workers, 2 entries): never more calls
	// in flight than that. Each hung call is one recorded call that has not
	// returned, and none returns during the test.
	if n := hung.CallCount(provider.OpCreate); n > 2 {
		t.Errorf("the hung entry got %d calls in flight, more than its share of 2 workers", n)
	}
}

func TestGarbageCollectionRunsForEveryEntryWhileOneHangs(t *testing.T) {
	ctx := context.Background()
	needEnvtest(t)
	now := time.Now()
	hung, healthy := fakeprovider.New(nil), fakeprovider.New(nil)
	hung.SetHung(true)
	healthy.AddInstance(provider.Instance{ID: "fake/1", Name: "orphan", OwnerUID: "uid-of-a-deleted-proxy",
		State: provider.StateRunning, CreatedAt: now.Add(-time.Hour)}, true)
	gc := &controller.GarbageCollector{
		Reader: k8s, Providers: map[string]provider.Provider{"lab": hung, "other": healthy},
		GracePeriod: time.Minute, Interval: time.Hour,
	}
	pass, cancel := context.WithCancel(ctx)
	done := make(chan struct{})
	go func() {
		defer close(done)
		_, _ = gc.RunOnce(pass)
	}()
	t.Cleanup(func() { cancel(); <-done })
	// "lab" sorts first: a pass that walks the entries one after another
	// never gets to "other" while lab hangs.
	eventually(t, 20*time.Second, func() (bool, string) {
		n := len(healthy.Instances())
		return n == 0, fmt.Sprintf("%d instances left on the healthy entry while the other hangs", n)
	})
	select {
	case <-done:
		t.Errorf("the pass ended while lab still hangs: the test did not test a hung entry")
	default:
	}
}

// withoutKeyCheck hides the fake's provider.UnverifiedLister: the first
// create of an entry after a start lists it for the key check, which on a
// hung entry would turn the creates this test counts into one listing.
type withoutKeyCheck struct {
	provider.Provider
	provider.Checker
}
