package proxmox

import (
	"context"
	"fmt"
	"time"
)

// sharedRead is one API read whose answer is shared by every caller: the
// last answer is kept with the time its read started, and at most one read
// is in flight at a time. The cluster-wide VM listing and each node's VM
// listing are sharedReads, so that polling many instances costs one call per
// poll interval rather than one per instance.
//
// The zero value is ready to use once read is set; its fields are guarded by
// the mutex of the Provider that owns it (listMu).
type sharedRead[T any] struct {
	read   func(context.Context) (T, error)
	val    T
	have   bool
	at     time.Time // when the read of val started
	flight *flight[T]
	gen    int // bumped when the cached answer is dropped
}

// flight is one read shared by its callers.
type flight[T any] struct {
	done    chan struct{}
	started time.Time
	gen     int
	val     T
	err     error
}

// get returns an answer whose read started at or after notBefore: the
// cached one, the one in flight, or a new read. p.listMu guards s.
func (s *sharedRead[T]) get(ctx context.Context, p *Provider, notBefore time.Time) (T, error) {
	p.listMu.Lock()
	if s.have && !s.at.Before(notBefore) {
		v := s.val
		p.listMu.Unlock()
		return v, nil
	}
	f := s.flight
	if f == nil || f.started.Before(notBefore) {
		f = &flight[T]{done: make(chan struct{}), started: p.now(), gen: s.gen}
		s.flight = f
		// The read outlives a caller whose context ends: others wait for it.
		fctx := context.WithoutCancel(ctx)
		go func() {
			v, err := s.read(fctx)
			p.listMu.Lock()
			if err == nil && f.gen == s.gen && (!s.have || !f.started.Before(s.at)) {
				s.val, s.have, s.at = v, true, f.started
			}
			if s.flight == f {
				s.flight = nil
			}
			f.val, f.err = v, err
			p.listMu.Unlock()
			close(f.done)
		}()
	}
	p.listMu.Unlock()
	select {
	case <-f.done:
		return f.val, f.err
	case <-ctx.Done():
		var zero T
		return zero, fmt.Errorf("waiting for a shared read: %w", ctx.Err())
	}
}

// drop forgets the cached answer (after a change this process made); a read
// in flight that started before is not cached either. The caller holds
// listMu.
func (s *sharedRead[T]) drop() {
	var zero T
	s.val, s.have, s.at = zero, false, time.Time{}
	s.gen++
}
