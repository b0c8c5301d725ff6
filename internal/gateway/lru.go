package gateway

import "container/list"

// The tables a client feeds (bans, reports, rates) are bounded: each is an
// lru, which forgets the least recently used entry past its size, so that
// no client can grow the gateway's memory without bound.

// lru is a map of at most size entries that forgets the least recently
// used; not safe for concurrent use.
type lru[K comparable, V any] struct {
	size  int
	order *list.List // front: most recently used; of lruEntry
	items map[K]*list.Element
	// onRemove, when set, sees every entry it forgets.
	onRemove func(K, V)
}

type lruEntry[K comparable, V any] struct {
	key K
	val V
}

func newLRU[K comparable, V any](size int) *lru[K, V] {
	return &lru[K, V]{size: size, order: list.New(), items: map[K]*list.Element{}}
}

func (c *lru[K, V]) get(k K) (V, bool) {
	if e, ok := c.items[k]; ok {
		c.order.MoveToFront(e)
		ent, _ := e.Value.(lruEntry[K, V]) // the list holds only lruEntry[K, V]
		return ent.val, true
	}
	var zero V
	return zero, false
}

func (c *lru[K, V]) put(k K, v V) {
	if e, ok := c.items[k]; ok {
		e.Value = lruEntry[K, V]{k, v}
		c.order.MoveToFront(e)
		return
	}
	c.items[k] = c.order.PushFront(lruEntry[K, V]{k, v})
	for c.order.Len() > c.size {
		c.drop(c.order.Back())
	}
}

// peek is get without making k the most recently used: a read that
// changes nothing.
func (c *lru[K, V]) peek(k K) (V, bool) {
	if e, ok := c.items[k]; ok {
		ent, _ := e.Value.(lruEntry[K, V])
		return ent.val, true
	}
	var zero V
	return zero, false
}

func (c *lru[K, V]) drop(e *list.Element) {
	c.order.Remove(e)
	ent, _ := e.Value.(lruEntry[K, V])
	delete(c.items, ent.key)
	if c.onRemove != nil {
		c.onRemove(ent.key, ent.val)
	}
}

// expire forgets, from the least recently used on, the entries done says
// are over, and stops at the first that is not: a table whose entries end
// in the order they were last used (bans, reports, idle buckets) sheds
// what is over as it is written to, besides what its size evicts.
func (c *lru[K, V]) expire(done func(K, V) bool) {
	for e := c.order.Back(); e != nil; e = c.order.Back() {
		ent, _ := e.Value.(lruEntry[K, V])
		if !done(ent.key, ent.val) {
			return
		}
		c.drop(e)
	}
}

// each calls fn with every entry, the most recently used first.
func (c *lru[K, V]) each(fn func(K, V)) {
	for e := c.order.Front(); e != nil; e = e.Next() {
		ent, _ := e.Value.(lruEntry[K, V])
		fn(ent.key, ent.val)
	}
}

func (c *lru[K, V]) len() int { return c.order.Len() }
