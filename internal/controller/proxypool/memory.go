package proxypool

import (
	"maps"
	"time"

	"k8s.io/apimachinery/pkg/types"

	"github.com/egress-proxies/egress-proxies-operator/internal/controller/shared"
)

// expectationMaxWait is how long a pool waits for its cache to show a member
// it created before it plans without it.
const expectationMaxWait = 30 * time.Second

// poolMemory is what the pool reconciler remembers of each pool between
// reconciles, ahead of what its cache and the pool's status show. A pool is
// reconciled by one worker at a time, so the entries of one pool are never
// written concurrently; forget drops them all when the pool is gone. After
// a restart nothing is remembered: the status's nextMemberSerial and the
// deterministic member names keep a create from being made twice. The zero
// value is ready; it is safe for concurrent use.
type poolMemory struct {
	// serials are the pools' next member serials as this process knows
	// them, ahead of a status write that has not landed.
	serials shared.Memo[types.NamespacedName, int]
	// expected are the members this process created and its cache has not
	// shown yet, with the time after which to stop waiting. A stored map is
	// never changed: each change stores a new one.
	expected shared.Memo[types.NamespacedName, map[string]time.Time]
	// pending are rotations started and not yet written to the pool's
	// status.rotations (its status patch conflicted).
	pending shared.Memo[types.NamespacedName, int64]
}

// nextSerial returns the pool's next member serial: the status's, the used
// one's, or this process's when it is ahead.
func (m *poolMemory) nextSerial(key types.NamespacedName, status int64, used int) int {
	s, _ := m.serials.Load(key)
	s = max(s, int(status), used)
	m.serials.Store(key, s)
	return s
}

// expectCreated records a member created by this process.
func (m *poolMemory) expectCreated(key types.NamespacedName, name string, now time.Time) {
	exp, _ := m.expected.Load(key)
	exp = maps.Clone(exp)
	if exp == nil {
		exp = map[string]time.Time{}
	}
	exp[name] = now.Add(expectationMaxWait)
	m.expected.Store(key, exp)
}

// waitingForCache reports whether members this process created are not yet
// among the names the cache lists: planning from such a list would create
// them again. A member listed, or waited for past its deadline, is no
// longer expected.
func (m *poolMemory) waitingForCache(key types.NamespacedName, listed []string, now time.Time) bool {
	exp, ok := m.expected.Load(key)
	if !ok {
		return false
	}
	left := maps.Clone(exp)
	for _, name := range listed {
		delete(left, name)
	}
	maps.DeleteFunc(left, func(_ string, deadline time.Time) bool { return now.After(deadline) })
	if len(left) == 0 {
		m.expected.Forget(key)
		return false
	}
	m.expected.Store(key, left)
	return true
}

// addPending adds the rotations just started to the pool's pending count
// and returns the count.
func (m *poolMemory) addPending(key types.NamespacedName, started map[string]int) int64 {
	n, _ := m.pending.Load(key)
	for _, c := range started {
		n += int64(c)
	}
	m.pending.Store(key, n)
	return n
}

// written notes that the pool's status, rotations included, was written.
func (m *poolMemory) written(key types.NamespacedName) { m.pending.Forget(key) }

// forget drops everything remembered of a pool that is gone.
func (m *poolMemory) forget(key types.NamespacedName) {
	m.serials.Forget(key)
	m.expected.Forget(key)
	m.pending.Forget(key)
}
