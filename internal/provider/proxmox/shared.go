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
}

// flight is one read shared by its callers.
type flight[T any] struct {
	done    chan struct{}
	started time.Time
	val     T
	err     error
}

// get returns an answer whose read started at or after notBefore (the
// cached one, the one in flight, or a new read) and when its read started.
// p.listMu guards s.
func (s *sharedRead[T]) get(ctx context.Context, p *Provider, notBefore time.Time) (T, time.Time, error) {
	p.listMu.Lock()
	if s.have && !s.at.Before(notBefore) {
		v, at := s.val, s.at
		p.listMu.Unlock()
		return v, at, nil
	}
	f := s.flight
	if f == nil || f.started.Before(notBefore) {
		f = &flight[T]{done: make(chan struct{}), started: p.now()}
		s.flight = f
		// The read outlives a caller whose context ends: others wait for it.
		fctx := context.WithoutCancel(ctx)
		go func() {
			v, err := s.read(fctx)
			p.listMu.Lock()
			if err == nil && (!s.have || !f.started.Before(s.at)) {
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
		return f.val, f.started, f.err
	case <-ctx.Done():
		var zero T
		return zero, time.Time{}, fmt.Errorf("waiting for a shared read: %w", ctx.Err())
	}
}
