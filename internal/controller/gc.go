package controller

import (
	"context"
	"fmt"
	"maps"
	"slices"
	"sort"
	"sync"
	"time"

	"github.com/go-logr/logr"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/tools/events"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"

	crawlv1alpha1 "github.com/egress-proxies/egress-proxies-operator/api/v1alpha1"
	"github.com/egress-proxies/egress-proxies-operator/internal/metrics"
	"github.com/egress-proxies/egress-proxies-operator/internal/provider"
)

// Defaults of GarbageCollector.
const (
	DefaultGCInterval    = 10 * time.Minute
	DefaultGCGracePeriod = 15 * time.Minute
)

// GarbageCollector periodically deletes instances whose owner Proxy no longer
// exists. It is the only path that deletes an instance without a Proxy, so it
// is deliberately narrow: it only sees what ListByTag returns (instances with
// the operator's mark), it skips instances without an owner UID or creation
// time, it skips every instance whose owner UID belongs to any Proxy in any
// namespace (read from the API server, not the cache), and it waits a grace
// period after the instance's creation, so that a create racing with the
// listing is never mistaken for an orphan.
type GarbageCollector struct {
	// Reader lists Proxies; it must read from the API server (the manager's
	// APIReader), since a lagging cache could hide a new Proxy.
	Reader client.Reader
	// Providers are the configured entries' providers, by entry name.
	Providers map[string]provider.Provider
	// Recorder emits an event on the entry's ProviderHealth for each deletion.
	Recorder events.EventRecorder
	// Metrics counts deletions.
	Metrics *metrics.Metrics
	// Interval between passes; zero means DefaultGCInterval.
	Interval time.Duration
	// GracePeriod is the minimum age of an instance before it can be
	// collected; zero means DefaultGCGracePeriod.
	GracePeriod time.Duration
	// Now is the clock; nil means time.Now.
	Now func() time.Time
	// Log is the logger of the passes and of the provider calls they make;
	// the zero value takes the one of Start's context. The manager hands its
	// runnables a context without its logger, so the setup passes it here.
	Log logr.Logger

	// refusals collects the listings the providers refused, for
	// ProviderHealth; nil records none.
	refusals *refusalLog
	// ownership receives each listing's verified and unverified
	// instances: the key check needs no call of its own (nil records
	// none).
	ownership *ownershipGate

	// deleting holds, per entry, the orphans whose Delete answered
	// InProgress: a later pass that no longer lists one counts it. A delete
	// that ends between two passes (on a real host, nearly every one) would
	// otherwise never be counted, since it is no longer listed to be asked
	// again.
	deletingMu sync.Mutex
	deleting   map[string]map[provider.ID]provider.Instance
}

// startedDeleting remembers that the deletion of in, on entry, is under way.
func (g *GarbageCollector) startedDeleting(entry string, in provider.Instance) {
	g.deletingMu.Lock()
	defer g.deletingMu.Unlock()
	if g.deleting == nil {
		g.deleting = map[string]map[provider.ID]provider.Instance{}
	}
	if g.deleting[entry] == nil {
		g.deleting[entry] = map[provider.ID]provider.Instance{}
	}
	g.deleting[entry][in.ID] = in
}

// endedDeleting forgets and returns the deletions of entry that ended
// between passes: those of instances the listing no longer holds.
func (g *GarbageCollector) endedDeleting(entry string, listed map[provider.ID]bool) []provider.Instance {
	g.deletingMu.Lock()
	defer g.deletingMu.Unlock()
	var gone []provider.Instance
	for id, in := range g.deleting[entry] {
		if !listed[id] {
			gone = append(gone, in)
			delete(g.deleting[entry], id)
		}
	}
	sort.Slice(gone, func(i, j int) bool { return gone[i].ID < gone[j].ID })
	return gone
}

// endedDeletingNow forgets the deletion of id on entry, whose Delete
// returned nil.
func (g *GarbageCollector) endedDeletingNow(entry string, id provider.ID) {
	g.deletingMu.Lock()
	defer g.deletingMu.Unlock()
	delete(g.deleting[entry], id)
}

// Garbage collection lists the Proxies of every namespace, not only of the
// namespaces the operator serves: an instance whose Proxy lives in a
// namespace taken off the list (or served by another installation) is not
// an orphan. Listing Proxies reads no credentials.
// +kubebuilder:rbac:groups=crawl.example.com,resources=proxies,verbs=list

// NeedLeaderElection makes only the leader collect.
func (g *GarbageCollector) NeedLeaderElection() bool { return true }

// Start collects every entry on its own loop, a pass every Interval, until
// ctx is done: an entry whose provider hangs or is slow delays only its own
// next pass (its calls end by their deadlines, set per operation in the
// entry), never another entry's.
func (g *GarbageCollector) Start(ctx context.Context) error {
	if g.Log.GetSink() != nil {
		ctx = logr.NewContext(ctx, g.Log)
	}
	var wg sync.WaitGroup
	for _, name := range slices.Sorted(maps.Keys(g.Providers)) {
		wg.Go(func() { g.loop(ctx, name) })
	}
	wg.Wait()
	return nil
}

// loop runs the entry's passes until ctx is done.
func (g *GarbageCollector) loop(ctx context.Context, name string) {
	log := ctrl.LoggerFrom(ctx).WithName("gc")
	t := time.NewTicker(g.interval())
	defer t.Stop()
	for {
		if _, err := g.RunEntry(ctx, name); err != nil && ctx.Err() == nil {
			log.Error(err, "garbage collection pass failed; retrying at the next interval", "provider", name)
		}
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
	}
}

// RunEntry runs one pass over one entry and returns how many instances it
// deleted; see RunOnce.
func (g *GarbageCollector) RunEntry(ctx context.Context, name string) (int, error) {
	now, grace := g.clock()
	alive, err := g.owners(ctx)
	if err != nil {
		return 0, err
	}
	return g.collect(ctx, name, alive, now, grace)
}

// clock returns the clock and the grace period, defaulted.
func (g *GarbageCollector) clock() (func() time.Time, time.Duration) {
	now, grace := time.Now, g.GracePeriod
	if g.Now != nil {
		now = g.Now
	}
	if grace == 0 {
		grace = DefaultGCGracePeriod
	}
	return now, grace
}

// owners lists the UIDs of every Proxy. They are listed before the
// instances: a Proxy created after this listing has an instance younger
// than the grace period.
func (g *GarbageCollector) owners(ctx context.Context) (map[string]bool, error) {
	owners := &metav1.PartialObjectMetadataList{}
	owners.SetGroupVersionKind(crawlv1alpha1.GroupVersion.WithKind("ProxyList"))
	if err := g.Reader.List(ctx, owners); err != nil {
		return nil, fmt.Errorf("listing proxies: %w", err)
	}
	alive := make(map[string]bool, len(owners.Items))
	for _, o := range owners.Items {
		alive[string(o.UID)] = true
	}
	return alive, nil
}

// RunOnce runs one pass over every entry, the entries side by side, and
// returns how many instances it deleted. An entry whose listing fails (or
// passes its deadline) is skipped for this pass. Entries
// whose provider is a provider.Sweeper are then swept of what their deleted
// instances left behind (seeds), before their instances are listed: what
// this pass's deletions leave is swept at the next pass, once the deletes
// finished.
func (g *GarbageCollector) RunOnce(ctx context.Context) (int, error) {
	now, grace := g.clock()
	alive, err := g.owners(ctx)
	if err != nil {
		return 0, err
	}
	names := slices.Sorted(maps.Keys(g.Providers))
	// Each entry is collected on its own: one whose provider hangs holds up
	// none of the others.
	type result struct {
		deleted int
		err     error
	}
	results := make([]result, len(names))
	var wg sync.WaitGroup
	for i, name := range names {
		wg.Go(func() {
			results[i].deleted, results[i].err = g.collect(ctx, name, alive, now, grace)
		})
	}
	wg.Wait()
	deleted := 0
	var firstErr error
	for _, r := range results {
		deleted += r.deleted
		if firstErr == nil {
			firstErr = r.err
		}
	}
	return deleted, firstErr
}

// interval returns the time between two passes of an entry, defaulted.
func (g *GarbageCollector) interval() time.Duration {
	if g.Interval == 0 {
		return DefaultGCInterval
	}
	return g.Interval
}

// collect runs one entry's part of a pass: it sweeps, lists and deletes the
// orphans, and returns how many it deleted and the first error.
func (g *GarbageCollector) collect(ctx context.Context, name string, alive map[string]bool, now func() time.Time, grace time.Duration) (int, error) {
	log := ctrl.LoggerFrom(ctx).WithName("gc")
	prov := g.Providers[name]
	g.sweep(ctx, name, prov)
	instances, err := prov.ListByTag(ctx)
	if err != nil {
		if provider.IsRefused(err) {
			g.refusals.record(name, err.Error(), now())
		}
		log.Info("skipping provider this pass: listing failed", "provider", name, "error", err.Error())
		return 0, err
	}
	if l, ok := provider.AsUnverifiedLister(prov); ok {
		g.ownership.observe(name, len(instances), l.Unverified())
	}
	deleted := 0
	listed := make(map[provider.ID]bool, len(instances))
	for _, in := range instances {
		listed[in.ID] = true
	}
	for _, in := range g.endedDeleting(name, listed) {
		deleted++
		g.deletedOrphan(ctx, name, in)
	}
	var firstErr error
	for _, in := range instances {
		switch {
		case in.OwnerUID == "" || in.CreatedAt.IsZero():
			log.V(1).Info("leaving alone an instance without owner or creation time", "provider", name, "instanceID", in.ID)
			continue
		case alive[in.OwnerUID]:
			continue
		case now().Sub(in.CreatedAt) < grace:
			log.V(1).Info("orphan within its grace period", "provider", name, "instanceID", in.ID)
			continue
		}
		err := prov.Delete(ctx, in.ID)
		switch {
		case provider.IsInProgress(err):
			// Counted once it is gone: when a Delete returns nil, or when
			// a later pass no longer lists it.
			g.startedDeleting(name, in)
			log.V(1).Info("deletion of an orphaned instance under way", "provider", name, "instanceID", in.ID)
			continue
		case err != nil:
			log.Info("deleting an orphaned instance failed; retrying at the next pass", "provider", name, "instanceID", in.ID, "error", err.Error())
			if firstErr == nil {
				firstErr = err
			}
			continue
		}
		g.endedDeletingNow(name, in.ID)
		deleted++
		g.deletedOrphan(ctx, name, in)
	}
	// The alert on garbage collection not running reads when a pass over
	// the entry last completed.
	if firstErr == nil && g.Metrics != nil {
		g.Metrics.GCLastSuccess.WithLabelValues(name).Set(float64(now().UnixNano()) / 1e9)
	}
	return deleted, firstErr
}

// deletedOrphan logs, counts and reports the deletion of in, an orphan of
// entry.
func (g *GarbageCollector) deletedOrphan(ctx context.Context, entry string, in provider.Instance) {
	ctrl.LoggerFrom(ctx).WithName("gc").Info("deleted orphaned instance", "provider", entry, "instanceID", in.ID, "ownerUID", in.OwnerUID, "name", in.Name)
	if g.Metrics != nil {
		g.Metrics.GCDeletions.WithLabelValues(entry).Inc()
	}
	if g.Recorder != nil {
		ref := &crawlv1alpha1.ProviderHealth{ObjectMeta: metav1.ObjectMeta{Name: entry}}
		ref.SetGroupVersionKind(crawlv1alpha1.GroupVersion.WithKind("ProviderHealth"))
		g.Recorder.Eventf(ref, nil, corev1.EventTypeNormal, "OrphanDeleted", "GarbageCollect",
			"Deleted instance %s (%s): its Proxy (UID %s) no longer exists", in.ID, in.Name, in.OwnerUID)
	}
}

// sweep removes what the instances of an entry left behind, when its
// provider is a provider.Sweeper. A failure is logged and retried at the
// next pass; it does not stop the pass.
func (g *GarbageCollector) sweep(ctx context.Context, name string, prov provider.Provider) {
	s, ok := provider.AsSweeper(prov)
	if !ok {
		return
	}
	log := ctrl.LoggerFrom(ctx).WithName("gc")
	n, err := s.Sweep(ctx)
	if n > 0 {
		log.Info("swept what deleted instances left behind", "provider", name, "count", n)
	}
	if err != nil {
		log.Info("sweeping failed; retrying at the next pass", "provider", name, "error", err.Error())
	}
}
