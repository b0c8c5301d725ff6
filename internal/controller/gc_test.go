package controller_test

import (
	"context"
	"net/netip"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"

	"github.com/egress-proxies/egress-proxies-operator/internal/controller"
	"github.com/egress-proxies/egress-proxies-operator/internal/metrics"
	"github.com/egress-proxies/egress-proxies-operator/internal/provider"
	"github.com/egress-proxies/egress-proxies-operator/internal/testing/fakeprovider"
)

func TestGarbageCollectionDeletesOnlyOldOrphansOfOurs(t *testing.T) {
	ctx := context.Background()
	ns := newNamespace(t)
	owner := newProxy(ns, "owner")
	if err := k8s.Create(ctx, owner); err != nil {
		t.Fatal(err)
	}
	now := time.Now()
	old := now.Add(-time.Hour)
	fake := fakeprovider.New(func() time.Time { return now })
	for _, in := range []struct {
		inst   provider.Instance
		marked bool
	}{
		// Its Proxy is gone and it is old: the one thing GC is for.
		{provider.Instance{ID: "fake/1", Name: "orphan", OwnerUID: "uid-of-a-deleted-proxy", CreatedAt: old}, true},
		// Its Proxy exists (in whatever namespace): never touched.
		{provider.Instance{ID: "fake/2", Name: "owned", OwnerUID: string(owner.UID), CreatedAt: old}, true},
		// Not created by the operator: never touched, whatever it looks like.
		{provider.Instance{ID: "fake/3", Name: "foreign", OwnerUID: "uid-of-a-deleted-proxy", CreatedAt: old}, false},
		// An orphan younger than the grace period may be a create that raced
		// the listing of Proxies.
		{provider.Instance{ID: "fake/4", Name: "young", OwnerUID: "uid-of-a-deleted-proxy", CreatedAt: now.Add(-time.Minute)}, true},
		// Ours but without an owner or a creation time: too little to be sure.
		{provider.Instance{ID: "fake/5", Name: "no-owner", CreatedAt: old}, true},
		{provider.Instance{ID: "fake/6", Name: "no-time", OwnerUID: "uid-of-a-deleted-proxy"}, true},
	} {
		in.inst.State = provider.StateRunning
		in.inst.Address = netip.MustParseAddr("198.51.100.1")
		fake.AddInstance(in.inst, in.marked)
	}
	m, err := metrics.New(prometheus.NewRegistry())
	if err != nil {
		t.Fatal(err)
	}
	gc := &controller.GarbageCollector{
		Reader: k8s, Providers: map[string]provider.Provider{"lab": fake}, Metrics: m,
		GracePeriod: 15 * time.Minute, Now: func() time.Time { return now },
	}
	deleted, err := gc.RunOnce(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if deleted != 1 {
		t.Errorf("deleted = %d, want 1", deleted)
	}
	var left []string
	for _, in := range fake.Instances() {
		left = append(left, in.Name)
	}
	if diff := cmp.Diff([]string{"owned", "foreign", "young", "no-owner", "no-time"}, left); diff != "" {
		t.Errorf("instances left (-want +got):\n%s", diff)
	}
	if got := testutil.ToFloat64(m.GCDeletions.WithLabelValues("lab")); got != 1 {
		t.Errorf("gc deletions metric = %v, want 1", got)
	}
	// The alert on garbage collection not running reads when a pass last
	// completed.
	if got, want := testutil.ToFloat64(m.GCLastSuccess.WithLabelValues("lab")), float64(now.UnixNano())/1e9; got != want {
		t.Errorf("gc last success metric = %v, want %v (now)", got, want)
	}

	// A second pass finds nothing more: the rules are stable.
	if deleted, err := gc.RunOnce(ctx); err != nil || deleted != 0 {
		t.Errorf("second pass deleted %d (err %v), want 0", deleted, err)
	}
}

// A delete that takes several steps ends, on a real host, between two
// passes: the pass that no longer lists the instance counts it, once. The
// deletions panel and its alert read that count (docs/monitoring.md).
func TestGarbageCollectionCountsADeletionThatEndedBetweenPasses(t *testing.T) {
	needEnvtest(t)
	ctx := context.Background()
	now := time.Now()
	fake := fakeprovider.New(nil)
	fake.DeletesUntilDone = 2
	fake.AddInstance(provider.Instance{ID: "fake/1", Name: "orphan", OwnerUID: "gone", CreatedAt: now.Add(-time.Hour)}, true)
	fake.AddInstance(provider.Instance{ID: "fake/2", Name: "slow-orphan", OwnerUID: "gone", CreatedAt: now.Add(-time.Hour)}, true)
	m, err := metrics.New(prometheus.NewRegistry())
	if err != nil {
		t.Fatal(err)
	}
	gc := &controller.GarbageCollector{
		Reader: k8s, Providers: map[string]provider.Provider{"lab": fake},
		GracePeriod: time.Minute, Now: func() time.Time { return now }, Metrics: m,
	}
	var got []int
	for pass := range 4 {
		deleted, err := gc.RunOnce(ctx)
		if err != nil {
			t.Fatal(err)
		}
		got = append(got, deleted)
		if pass == 0 {
			// The first orphan's delete ends on the host before the next
			// pass; the second is asked again and ends under a Delete.
			fake.Vanish("fake/1")
		}
	}
	// Pass 1: both under way. Pass 2: fake/1 gone (counted), fake/2 still
	// under way. Pass 3: fake/2's Delete returns nil (counted). Pass 4:
	// nothing.
	if diff := cmp.Diff([]int{0, 1, 1, 0}, got); diff != "" {
		t.Errorf("deletions counted per pass (-want +got):\n%s", diff)
	}
	if got := testutil.ToFloat64(m.GCDeletions.WithLabelValues("lab")); got != 2 {
		t.Errorf("gc deletions metric = %v, want 2: each orphan once", got)
	}
}

func TestGarbageCollectionSkipsAnEntryWhoseListingFails(t *testing.T) {
	needEnvtest(t)
	ctx := context.Background()
	now := time.Now()
	broken := fakeprovider.New(nil)
	broken.FailNext(provider.OpListByTag, 1, provider.NewTransient(context.DeadlineExceeded))
	healthy := fakeprovider.New(nil)
	healthy.AddInstance(provider.Instance{ID: "fake/1", Name: "orphan", OwnerUID: "gone", CreatedAt: now.Add(-time.Hour)}, true)
	m, err := metrics.New(prometheus.NewRegistry())
	if err != nil {
		t.Fatal(err)
	}
	gc := &controller.GarbageCollector{
		Reader: k8s, Providers: map[string]provider.Provider{"a-broken": broken, "b-healthy": healthy},
		GracePeriod: time.Minute, Now: func() time.Time { return now }, Metrics: m,
	}
	deleted, err := gc.RunOnce(ctx)
	if err == nil {
		t.Error("a failed listing must be reported")
	}
	if deleted != 1 || len(healthy.Instances()) != 0 {
		t.Errorf("the healthy entry must still be collected: deleted %d, left %d", deleted, len(healthy.Instances()))
	}
	// Only the entry whose pass completed counts as collected.
	if n := testutil.CollectAndCount(m.GCLastSuccess); n != 1 {
		t.Errorf("gc last success has %d series, want 1 (b-healthy only)", n)
	}
	if got := testutil.ToFloat64(m.GCLastSuccess.WithLabelValues("b-healthy")); got == 0 {
		t.Error("gc last success of b-healthy not set")
	}
}

func TestGarbageCollectionEmitsAnEventOnTheProviderHealth(t *testing.T) {
	ns := newNamespace(t)
	fake := fakeprovider.New(nil)
	fake.AddInstance(provider.Instance{ID: "fake/9", Name: "orphan", OwnerUID: "gone", CreatedAt: time.Now().Add(-time.Hour)}, true)
	startOperator(t, operatorOptions{namespace: ns, fake: fake, opts: controller.Options{
		GCInterval: 100 * time.Millisecond, GCGracePeriod: time.Minute,
	}})
	eventually(t, 10*time.Second, func() (bool, string) {
		return len(fake.Instances()) == 0, "orphan not collected"
	})
	eventually(t, 10*time.Second, func() (bool, string) {
		var list eventsList
		if err := list.load("default"); err != nil {
			return false, err.Error()
		}
		for _, e := range list.Items {
			if e.Regarding.Kind == "ProviderHealth" && e.Regarding.Name == "lab" && e.Reason == "OrphanDeleted" {
				return true, ""
			}
		}
		return false, "no OrphanDeleted event on ProviderHealth lab"
	})
}

// sweepingProvider is a fake provider that is also a provider.Sweeper and
// counts its sweeps; it fails the first one when told to.
type sweepingProvider struct {
	*fakeprovider.Provider
	sweeps int
	fail   error
}

func (s *sweepingProvider) Sweep(context.Context) (int, error) {
	s.sweeps++
	if err := s.fail; err != nil {
		s.fail = nil
		return 0, err
	}
	return 1, nil
}

// TestGarbageCollectionSweepsSweepers: every pass sweeps each entry whose
// provider leaves things besides instances behind (Proxmox seeds, #12
// item 6), and a failed sweep neither stops the pass nor is fatal.
func TestGarbageCollectionSweepsSweepers(t *testing.T) {
	needEnvtest(t)
	ctx := context.Background()
	now := time.Now()
	sweeper := &sweepingProvider{Provider: fakeprovider.New(nil), fail: provider.NewTransient(context.DeadlineExceeded)}
	sweeper.AddInstance(provider.Instance{ID: "fake/1", Name: "orphan", OwnerUID: "gone", CreatedAt: now.Add(-time.Hour)}, true)
	gc := &controller.GarbageCollector{
		Reader: k8s, Providers: map[string]provider.Provider{"lab": sweeper, "plain": fakeprovider.New(nil)},
		GracePeriod: time.Minute, Now: func() time.Time { return now },
	}
	for pass := 1; pass <= 2; pass++ {
		if _, err := gc.RunOnce(ctx); err != nil {
			t.Fatalf("pass %d: %v", pass, err)
		}
		if sweeper.sweeps != pass {
			t.Errorf("after pass %d: %d sweeps, want one per pass", pass, sweeper.sweeps)
		}
	}
	if len(sweeper.Instances()) != 0 {
		t.Errorf("a failed sweep stopped the pass: instances left %v", sweeper.Instances())
	}
}
