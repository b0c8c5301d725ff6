package main

import (
	"context"
	"fmt"
	"slices"
	"sync"
	"time"

	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/client-go/rest"
	toolscache "k8s.io/client-go/tools/cache"
	"sigs.k8s.io/controller-runtime/pkg/cache"
	"sigs.k8s.io/controller-runtime/pkg/client"

	crawlv1alpha1 "github.com/egress-proxies/egress-proxies-operator/api/v1alpha1"
)

// proxyCounts is the bench's view of one namespace's Proxies, kept by an
// informer: waiting for all N Ready then costs the API server one list and
// a watch whose events it already encodes for the operator. Listing the N
// Proxies from the API server every few hundred milliseconds instead (as
// the bench did until 2026-12-05) made the API server encode N objects per
// look, about 2 MB at N = 1000: work of the measuring tool, on the cores
// the operator and the API server it measures share.
//
// It also notes when it first saw each Proxy with its instance recorded
// and Ready, so that the report can say how the N creates spread, and not
// only when the last one ended.
type proxyCounts struct {
	cache cache.Cache
	stop  context.CancelFunc
	done  chan error

	mu      sync.Mutex
	idAt    map[string]time.Time // first seen with Status.InstanceID
	readyAt map[string]time.Time // first seen Ready
}

// watchProxies starts an informer on the Proxies of ns and waits for its
// first list.
func watchProxies(ctx context.Context, cfg *rest.Config, scheme *runtime.Scheme, ns string) (*proxyCounts, error) {
	c, err := cache.New(cfg, cache.Options{
		Scheme:            scheme,
		DefaultNamespaces: map[string]cache.Config{ns: {}},
		ByObject:          map[client.Object]cache.ByObject{&crawlv1alpha1.Proxy{}: {}},
	})
	if err != nil {
		return nil, fmt.Errorf("building the bench's cache of proxies: %w", err)
	}
	inf, err := c.GetInformer(ctx, &crawlv1alpha1.Proxy{})
	if err != nil {
		return nil, fmt.Errorf("the bench's informer of proxies: %w", err)
	}
	runCtx, stop := context.WithCancel(ctx)
	pc := &proxyCounts{cache: c, stop: stop, done: make(chan error, 1), idAt: map[string]time.Time{}, readyAt: map[string]time.Time{}}
	if _, err := inf.AddEventHandler(toolscache.ResourceEventHandlerFuncs{
		AddFunc:    pc.note,
		UpdateFunc: func(_, obj any) { pc.note(obj) },
	}); err != nil {
		stop()
		return nil, fmt.Errorf("watching the bench's informer of proxies: %w", err)
	}
	go func() { pc.done <- c.Start(runCtx) }()
	syncCtx, cancel := context.WithTimeout(ctx, time.Minute)
	defer cancel()
	if !c.WaitForCacheSync(syncCtx) {
		_ = pc.close() // the sync's failure is the news
		return nil, fmt.Errorf("the bench's cache of proxies in %s did not sync within a minute", ns)
	}
	return pc, nil
}

// count is how many Proxies the informer holds and how many of them are
// Ready and not being deleted.
func (pc *proxyCounts) count(ctx context.Context) (ready, total int, err error) {
	var list crawlv1alpha1.ProxyList
	// Read only: no copy of N objects per look.
	if err := pc.cache.List(ctx, &list, client.UnsafeDisableDeepCopy); err != nil {
		return 0, 0, fmt.Errorf("listing proxies from the bench's cache: %w", err)
	}
	for i := range list.Items {
		if countsAsReady(&list.Items[i]) {
			ready++
		}
	}
	return ready, len(list.Items), nil
}

// countsAsReady is what the bench counts as Ready: the phase, on a Proxy
// not being deleted.
func countsAsReady(p *crawlv1alpha1.Proxy) bool {
	return p.Status.Phase == crawlv1alpha1.ProxyPhaseReady && p.DeletionTimestamp == nil
}

// note records the first time obj was seen with an instance and Ready.
func (pc *proxyCounts) note(obj any) {
	p, ok := obj.(*crawlv1alpha1.Proxy)
	if !ok {
		return
	}
	now := time.Now()
	pc.mu.Lock()
	defer pc.mu.Unlock()
	if _, seen := pc.idAt[p.Name]; !seen && p.Status.InstanceID != "" {
		pc.idAt[p.Name] = now
	}
	if _, seen := pc.readyAt[p.Name]; !seen && countsAsReady(p) {
		pc.readyAt[p.Name] = now
	}
}

// spread is how long after start the Proxies were first seen with their
// instance recorded and Ready, sorted.
func (pc *proxyCounts) spread(start time.Time) (instance, ready []time.Duration) {
	pc.mu.Lock()
	defer pc.mu.Unlock()
	since := func(m map[string]time.Time) []time.Duration {
		d := make([]time.Duration, 0, len(m))
		for _, at := range m {
			d = append(d, at.Sub(start))
		}
		slices.Sort(d)
		return d
	}
	return since(pc.idAt), since(pc.readyAt)
}

// close stops the informer and returns what its Start returned.
func (pc *proxyCounts) close() error {
	pc.stop()
	return <-pc.done
}
