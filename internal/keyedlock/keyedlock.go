package keyedlock

import (
	"context"
	"fmt"
	"sync"
)

// Locker is a set of mutexes by key. The zero value is ready to use.
type Locker struct {
	mu   sync.Mutex
	keys map[string]*entry
}

type entry struct {
	sem  chan struct{}
	refs int
}

// Lock locks key, waiting until it is free or ctx is done. On success it
// returns the function that unlocks it (call it exactly once); when ctx ends
// first it returns ctx's error and holds nothing.
func (l *Locker) Lock(ctx context.Context, key string) (func(), error) {
	l.mu.Lock()
	if l.keys == nil {
		l.keys = map[string]*entry{}
	}
	e := l.keys[key]
	if e == nil {
		e = &entry{sem: make(chan struct{}, 1)}
		l.keys[key] = e
	}
	e.refs++
	l.mu.Unlock()

	select {
	case e.sem <- struct{}{}:
		var once sync.Once
		return func() { once.Do(func() { <-e.sem; l.release(key, e) }) }, nil
	case <-ctx.Done():
		l.release(key, e)
		return nil, fmt.Errorf("waiting for lock %q: %w", key, ctx.Err())
	}
}

func (l *Locker) release(key string, e *entry) {
	l.mu.Lock()
	defer l.mu.Unlock()
	e.refs--
	if e.refs == 0 {
		delete(l.keys, key)
	}
}

// Len returns the number of keys held or waited for, for tests.
func (l *Locker) Len() int {
	l.mu.Lock()
	defer l.mu.Unlock()
	return len(l.keys)
}
