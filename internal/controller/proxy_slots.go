package controller

import (
	"context"
	"sync"
	"sync/atomic"

	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/util/workqueue"
	"sigs.k8s.io/controller-runtime/pkg/reconcile"
	"sigs.k8s.io/controller-runtime/pkg/source"
)

// createSlots caps, per provider entry, how many Proxies have a create in
// flight: from the first Create call until Create returns the instance's ID
// (the hypervisor's work: clone, configure, upload, start), until the create
// fails for good, or until the Proxy goes. Waiting for the guest to boot
// holds no slot: it costs the hypervisor nothing but reads, which the
// providers share.
//
// A Proxy that finds the entry full waits in line, without polling: when a
// slot frees, it is handed to the oldest waiter at once (a newcomer cannot
// take it first) and wake enqueues that waiter. So ten thousand queued
// Proxies cost no reconciles while they wait.
//
// It lives in memory; after a restart each Proxy that is still being created
// takes its slot back at its first reconcile (hold), so the count converges
// without a scan, and the waiters line up again as they are reconciled. The
// zero value is ready; it is safe for concurrent use.
type createSlots struct {
	mu      sync.Mutex
	holders map[string]map[types.NamespacedName]struct{} // entry -> Proxies
	entryOf map[types.NamespacedName]string              // Proxy -> entry it holds a slot of
	limits  map[string]int                               // entry -> its cap, as last asked
	waiters map[string][]types.NamespacedName            // entry -> Proxies in line, oldest first
	waiting map[types.NamespacedName]string              // Proxy -> entry it waits for

	// wake is told which Proxies were handed a slot, after the lock is
	// released; nil wakes nobody (they find the slot at their next
	// reconcile).
	wake func(types.NamespacedName)
}

// acquire takes a slot of entry for key, or puts key in line and reports
// false when the entry's limit is reached or others wait before it. A key
// that holds a slot already keeps it.
func (c *createSlots) acquire(entry string, key types.NamespacedName, limit int) bool {
	c.mu.Lock()
	c.init()
	c.limits[entry] = limit
	got := c.entryOf[key] == entry
	var woken []types.NamespacedName
	if !got {
		c.releaseLocked(key)
		if c.waiting[key] != entry {
			c.unwaitLocked(key)
			c.waiting[key] = entry
			c.waiters[entry] = append(c.waiters[entry], key)
		}
		// A raised limit, or a line left behind by a release that had no
		// limit to go by, may leave room: the oldest waiters get it first.
		for _, k := range c.handOffLocked(entry) {
			if k == key {
				got = true
				continue
			}
			woken = append(woken, k)
		}
	}
	wake := c.wake
	c.mu.Unlock()
	c.wakeAll(wake, woken)
	return got
}

// hold takes a slot of entry for key even past the limit: the create is in
// flight already (found after a restart), and refusing to count it would
// let others start.
func (c *createSlots) hold(entry string, key types.NamespacedName) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.init()
	if c.entryOf[key] == entry {
		return
	}
	c.releaseLocked(key)
	c.unwaitLocked(key)
	c.addLocked(entry, key)
}

// release frees key's slot and its place in line, if it has them, and hands
// the freed slot to the oldest waiter.
func (c *createSlots) release(key types.NamespacedName) {
	c.mu.Lock()
	c.init()
	entry, held := c.entryOf[key]
	c.releaseLocked(key)
	c.unwaitLocked(key)
	var woken []types.NamespacedName
	if held {
		woken = c.handOffLocked(entry)
	}
	wake := c.wake
	c.mu.Unlock()
	c.wakeAll(wake, woken)
}

// wakeAll tells wake, if any, about each Proxy handed a slot; it runs
// outside the lock, so that wake may take its time or call back.
func (c *createSlots) wakeAll(wake func(types.NamespacedName), woken []types.NamespacedName) {
	if wake == nil {
		return
	}
	for _, k := range woken {
		wake(k)
	}
}

// handOffLocked gives entry's free slots to its oldest waiters and returns
// them.
func (c *createSlots) handOffLocked(entry string) []types.NamespacedName {
	var woken []types.NamespacedName
	for len(c.waiters[entry]) > 0 && len(c.holders[entry]) < c.limits[entry] {
		k := c.waiters[entry][0]
		c.unwaitLocked(k)
		c.addLocked(entry, k)
		woken = append(woken, k)
	}
	return woken
}

func (c *createSlots) init() {
	if c.holders == nil {
		c.holders, c.entryOf = map[string]map[types.NamespacedName]struct{}{}, map[types.NamespacedName]string{}
		c.limits = map[string]int{}
		c.waiters, c.waiting = map[string][]types.NamespacedName{}, map[types.NamespacedName]string{}
	}
}

func (c *createSlots) addLocked(entry string, key types.NamespacedName) {
	if c.holders[entry] == nil {
		c.holders[entry] = map[types.NamespacedName]struct{}{}
	}
	c.holders[entry][key] = struct{}{}
	c.entryOf[key] = entry
}

func (c *createSlots) releaseLocked(key types.NamespacedName) {
	entry, ok := c.entryOf[key]
	if !ok {
		return
	}
	delete(c.holders[entry], key)
	delete(c.entryOf, key)
}

// unwaitLocked takes key out of line. Taking the oldest costs nothing;
// taking another (a Proxy deleted while it waited) is linear in the line.
func (c *createSlots) unwaitLocked(key types.NamespacedName) {
	entry, ok := c.waiting[key]
	if !ok {
		return
	}
	delete(c.waiting, key)
	line := c.waiters[entry]
	for i, k := range line {
		if k != key {
			continue
		}
		if i == 0 {
			// The usual case, a hand-off to the oldest: no copy.
			line = line[1:]
		} else {
			line = append(line[:i], line[i+1:]...)
		}
		c.waiters[entry] = line
		break
	}
	if len(c.waiters[entry]) == 0 {
		delete(c.waiters, entry)
	}
}

// wakeQueue enqueues the Proxies handed a create slot, and those whose
// probe ended (probeRuns). Its source is a
// controller source that remembers the controller's work queue when the
// controller starts; before that there is nobody to wake.
type wakeQueue struct {
	q atomic.Pointer[workqueue.TypedRateLimitingInterface[reconcile.Request]]
}

// source returns the controller source that hands the queue over.
func (w *wakeQueue) source() source.Source {
	return source.Func(func(_ context.Context, q workqueue.TypedRateLimitingInterface[reconcile.Request]) error {
		w.q.Store(&q)
		return nil
	})
}

// wake enqueues key; Add never blocks.
func (w *wakeQueue) wake(key types.NamespacedName) {
	if q := w.q.Load(); q != nil {
		(*q).Add(reconcile.Request{NamespacedName: key})
	}
}
