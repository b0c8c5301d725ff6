package sharedread

import (
	"context"
	"fmt"
	"sync"
	"time"
)

// Read is one read whose answer is shared by its callers. Build it with New;
// it is safe for concurrent use.
type Read[T any] struct {
	read  func(context.Context) (T, error)
	now   func() time.Time
	bound time.Duration

	mu     sync.Mutex
	val    T
	have   bool
	at     time.Time // when the read of val started
	gen    int       // bumped by Invalidate
	flight *flight[T]
}

// flight is one read shared by its callers.
type flight[T any] struct {
	done    chan struct{}
	started time.Time
	gen     int
	val     T
	err     error
}

// Options tune a Read.
type Options struct {
	// Now is the clock reads are timed by; nil is time.Now.
	Now func() time.Time
	// Bound, when positive, is a deadline on each read. A read outlives the
	// caller that started it (the others wait for it), so a source that can
	// hang needs one.
	Bound time.Duration
}

// New returns a Read of read.
func New[T any](read func(context.Context) (T, error), o Options) *Read[T] {
	if o.Now == nil {
		o.Now = time.Now
	}
	return &Read[T]{read: read, now: o.Now, bound: o.Bound}
}

// Get returns an answer whose read started at or after notBefore (the kept
// one, the one in flight, or a new read) and when its read started. A caller
// whose context ends stops waiting; the read goes on for the others.
func (r *Read[T]) Get(ctx context.Context, notBefore time.Time) (T, time.Time, error) {
	r.mu.Lock()
	if r.have && !r.at.Before(notBefore) {
		v, at := r.val, r.at
		r.mu.Unlock()
		return v, at, nil
	}
	f := r.flight
	if f == nil || f.started.Before(notBefore) {
		f = &flight[T]{done: make(chan struct{}), started: r.now(), gen: r.gen}
		r.flight = f
		go r.run(context.WithoutCancel(ctx), f)
	}
	r.mu.Unlock()
	select {
	case <-f.done:
		return f.val, f.started, f.err
	case <-ctx.Done():
		var zero T
		return zero, time.Time{}, fmt.Errorf("waiting for a shared read: %w", ctx.Err())
	}
}

// Newest returns when the newest read started, the kept one or the one in
// flight, and false when there is neither. A Get whose notBefore is no later
// makes no read of its own; it lets a caller choose between sources by what
// each would cost, without reading.
func (r *Read[T]) Newest() (time.Time, bool) {
	r.mu.Lock()
	defer r.mu.Unlock()
	switch {
	case r.flight != nil && (!r.have || r.flight.started.After(r.at)):
		return r.flight.started, true
	case r.have:
		return r.at, true
	}
	return time.Time{}, false
}

// run makes the read of f and keeps its answer unless a newer one is kept
// or Invalidate came since f started.
func (r *Read[T]) run(ctx context.Context, f *flight[T]) {
	if r.bound > 0 {
		var cancel context.CancelFunc
		ctx, cancel = context.WithTimeout(ctx, r.bound)
		defer cancel()
	}
	v, err := r.read(ctx)
	r.mu.Lock()
	if err == nil && f.gen == r.gen && (!r.have || !f.started.Before(r.at)) {
		r.val, r.have, r.at = v, true, f.started
	}
	if r.flight == f {
		r.flight = nil
	}
	f.val, f.err = v, err
	r.mu.Unlock()
	close(f.done)
}

// Invalidate drops the kept answer after a change the caller made, and keeps
// the answer of a read in flight from being kept (it may predate the
// change); its waiters still get it.
func (r *Read[T]) Invalidate() {
	r.mu.Lock()
	defer r.mu.Unlock()
	var zero T
	r.val, r.have, r.at = zero, false, time.Time{}
	r.gen++
}
