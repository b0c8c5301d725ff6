package forwardproxy

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/http"
	"sync"
	"time"
)

// Limits of the server that Serve runs. There is no ReadTimeout nor
// WriteTimeout: request and response bodies are streamed for as long as
// they last, and CONNECT tunnels have the Proxy's idle timeout.
const (
	// readHeaderTimeout bounds reading a request's headers.
	readHeaderTimeout = 10 * time.Second
	// serverIdleTimeout closes a client's keep-alive connection that waits
	// that long for its next request.
	serverIdleTimeout = 2 * time.Minute
	// maxHeaderBytes bounds the size of a request's headers.
	maxHeaderBytes = 64 << 10
	// closeGrace is how long Serve waits for handlers to return after it
	// closed their connections at the end of the drain period.
	closeGrace = 5 * time.Second
)

// Serve serves h on ln until ctx is done, then shuts down gracefully: it
// closes ln at once, so that new connections are refused, and lets the
// requests in flight finish for up to drain. Hijacked connections, such as
// a Proxy's CONNECT tunnels, count as in flight until their handler returns:
// Serve tracks every handler call itself, which http.Server.Shutdown does
// not do for hijacked connections. When drain runs out, Serve closes the
// connections of the handlers still running, cancels their requests'
// contexts and waits for them to return.
//
// Serve returns nil after a shutdown, drained or cut short, and the error
// that stopped the server otherwise. It closes ln in every case.
func Serve(ctx context.Context, ln net.Listener, h http.Handler, drain time.Duration) error {
	// Requests are not cancelled when ctx is done, only when the drain
	// period ends.
	base, cancelBase := context.WithCancel(context.WithoutCancel(ctx))
	defer cancelBase()
	t := newTracker()
	srv := &http.Server{
		Handler:           t.wrap(h),
		ReadHeaderTimeout: readHeaderTimeout,
		IdleTimeout:       serverIdleTimeout,
		MaxHeaderBytes:    maxHeaderBytes,
		BaseContext:       func(net.Listener) context.Context { return base },
		ConnContext: func(ctx context.Context, c net.Conn) context.Context {
			return context.WithValue(ctx, connKey{}, c)
		},
	}
	served := make(chan error, 1)
	go func() { served <- srv.Serve(ln) }()
	select {
	case err := <-served:
		// The server stopped by itself (the listener failed).
		cancelBase()
		_ = srv.Close()
		t.closeAll()
		return err
	case <-ctx.Done():
	}

	drainCtx, cancel := context.WithTimeout(context.WithoutCancel(ctx), drain)
	defer cancel()
	// Shutdown closes ln, closes idle connections and waits for the
	// requests in flight on the others; once it returned, no handler call
	// starts any more. The tracker then waits for the hijacked ones.
	err := srv.Shutdown(drainCtx)
	if err == nil {
		err = t.wait(drainCtx)
	}
	if err != nil {
		cancelBase()
		_ = srv.Close()
		t.closeAll()
		graceCtx, cancelGrace := context.WithTimeout(context.WithoutCancel(ctx), closeGrace)
		defer cancelGrace()
		if err := t.wait(graceCtx); err != nil {
			return fmt.Errorf("%d handlers still running %s after their connections were closed", t.running(), closeGrace)
		}
	}
	if err := <-served; !errors.Is(err, http.ErrServerClosed) {
		return err
	}
	return nil
}

type connKey struct{}

// tracker counts the handler calls in flight and remembers the connection
// of each, hijacked or not.
type tracker struct {
	mu    sync.Mutex
	conns map[net.Conn]int // handler calls in flight per connection
	n     int              // handler calls in flight
	idle  chan struct{}    // closed when n drops to zero
}

func newTracker() *tracker {
	idle := make(chan struct{})
	close(idle)
	return &tracker{conns: map[net.Conn]int{}, idle: idle}
}

func (t *tracker) wrap(h http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		c, _ := r.Context().Value(connKey{}).(net.Conn)
		t.begin(c)
		defer t.end(c)
		h.ServeHTTP(w, r)
	})
}

func (t *tracker) begin(c net.Conn) {
	t.mu.Lock()
	defer t.mu.Unlock()
	if t.n == 0 {
		t.idle = make(chan struct{})
	}
	t.n++
	if c != nil {
		t.conns[c]++
	}
}

func (t *tracker) end(c net.Conn) {
	t.mu.Lock()
	defer t.mu.Unlock()
	t.n--
	if t.n == 0 {
		close(t.idle)
	}
	if c != nil {
		if t.conns[c]--; t.conns[c] <= 0 {
			delete(t.conns, c)
		}
	}
}

func (t *tracker) running() int {
	t.mu.Lock()
	defer t.mu.Unlock()
	return t.n
}

// wait returns nil once no handler call is in flight, or ctx's error.
func (t *tracker) wait(ctx context.Context) error {
	t.mu.Lock()
	idle := t.idle
	t.mu.Unlock()
	select {
	case <-idle:
		return nil
	case <-ctx.Done():
		return ctx.Err()
	}
}

// closeAll closes the connections of the handler calls in flight.
func (t *tracker) closeAll() {
	t.mu.Lock()
	defer t.mu.Unlock()
	for c := range t.conns {
		_ = c.Close()
	}
}
