package shared

import "sync"

// Memo is a map safe for concurrent use, typed: the one form of the
// process-local memories of the loops (what they remember of an object
// between reconciles, ahead of their cache). Its zero value is ready.
type Memo[K comparable, V any] struct {
	m sync.Map // K -> V
}

// Load returns what is remembered for k.
func (m *Memo[K, V]) Load(k K) (V, bool) {
	v, ok := m.m.Load(k)
	t, isV := v.(V)
	return t, ok && isV
}

// Store remembers v for k.
func (m *Memo[K, V]) Store(k K, v V) { m.m.Store(k, v) }

// Forget drops what is remembered for k.
func (m *Memo[K, V]) Forget(k K) { m.m.Delete(k) }
