package forwardproxy

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"sync"
	"time"
)

// Limits of the server that Serve runs. There is no ReadTimeout nor
// WriteTimeout: request and response bodies are streamed for as long as
// they last, and CONNECT tunnels have the Proxy's idle timeout.
const (
	// DefaultReadHeaderTimeout bounds reading a request's headers, so that
	// a client cannot hold a connection by sending them slowly.
	DefaultReadHeaderTimeout = 10 * time.Second
	// DefaultKeepAliveTimeout closes a client's keep-alive connection that
	// waits that long for its next request.
	DefaultKeepAliveTimeout = 2 * time.Minute
	// DefaultMaxConnections caps the client connections open at once.
	DefaultMaxConnections = 8192
	// maxHeaderBytes bounds the size of a request's headers.
	maxHeaderBytes = 64 << 10
	// closeGrace is how long Serve waits for handlers to return after it
	// closed their connections at the end of the drain period.
	closeGrace = 5 * time.Second
)

// Listen listens on address (tcp) for Serve: the connections it accepts
// have no TCP keep-alive, since the Proxy's idle and keep-alive timeouts
// already end silent connections, and the four socket options that
// keep-alive sets on each accepted connection were a tenth of a tunnel's
// system calls (docs/performance.md).
func Listen(ctx context.Context, address string) (net.Listener, error) {
	lc := net.ListenConfig{KeepAlive: -1}
	return lc.Listen(ctx, "tcp", address)
}

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
	return ServeWith(ctx, ln, h, ServeOptions{Drain: drain})
}

// ServeOptions are the limits of ServeWith; zero values mean the defaults.
type ServeOptions struct {
	// Drain is how long requests in flight may go on after ctx is done.
	Drain time.Duration
	// ReadHeaderTimeout bounds reading a request's headers; zero means
	// DefaultReadHeaderTimeout.
	ReadHeaderTimeout time.Duration
	// KeepAliveTimeout closes a client connection idle between requests;
	// zero means DefaultKeepAliveTimeout.
	KeepAliveTimeout time.Duration
	// MaxConnections caps the client connections open at once, tunnels
	// included; a connection past it is answered 503 and closed before
	// anything is read from it. Zero means DefaultMaxConnections.
	MaxConnections int
	// MaxConnectionsPerSource caps the connections of one client address,
	// as MaxConnections does the server's; zero means
	// DefaultMaxConnectionsPerSource.
	MaxConnectionsPerSource int
	// MaxUnauthenticated caps the connections whose first request is not
	// admitted yet; past it the oldest of them is closed to make room.
	// Zero means DefaultMaxUnauthenticated.
	MaxUnauthenticated int
	// MaxUnauthenticatedPerSource caps those of one client address; a new
	// one past it is answered 503. Zero means
	// DefaultMaxUnauthenticatedPerSource.
	MaxUnauthenticatedPerSource int
	// FirstRequestTimeout closes a connection whose first request is not
	// admitted that long after its accept; zero means
	// DefaultFirstRequestTimeout.
	FirstRequestTimeout time.Duration
	// DisableKeepAlives closes each connection after its first request,
	// for an admin server: a probe or a scrape then holds a slot only
	// while it is answered.
	DisableKeepAlives bool
	// WriteTimeout, when set, bounds writing a response (an admin
	// server's; a proxy streams bodies for as long as they last).
	WriteTimeout time.Duration
}

// admission returns o's admission limits, defaults filled in.
func (o ServeOptions) admission() admission {
	or := func(v, def int) int {
		if v <= 0 {
			return def
		}
		return v
	}
	a := admission{
		max:             or(o.MaxConnections, DefaultMaxConnections),
		perSource:       or(o.MaxConnectionsPerSource, DefaultMaxConnectionsPerSource),
		unauthenticated: or(o.MaxUnauthenticated, DefaultMaxUnauthenticated),
		unauthPer:       or(o.MaxUnauthenticatedPerSource, DefaultMaxUnauthenticatedPerSource),
		firstRequest:    o.FirstRequestTimeout,
	}
	if a.firstRequest <= 0 {
		a.firstRequest = DefaultFirstRequestTimeout
	}
	return a
}

// ServeWith is Serve with limits other than the defaults.
func ServeWith(ctx context.Context, ln net.Listener, h http.Handler, o ServeOptions) error {
	if o.ReadHeaderTimeout <= 0 {
		o.ReadHeaderTimeout = DefaultReadHeaderTimeout
	}
	if o.KeepAliveTimeout <= 0 {
		o.KeepAliveTimeout = DefaultKeepAliveTimeout
	}
	drain := o.Drain
	lim := o.admission()
	proxy, isProxy := h.(*Proxy)
	var proxyStatus string
	if isProxy {
		proxyStatus = proxy.proxyStatus
		lim.refused = proxy.metrics.connectionRefused
	}
	ln = newLimitListener(ln, lim, proxyStatus)
	// Requests are not cancelled when ctx is done, only when the drain
	// period ends.
	base, cancelBase := context.WithCancel(context.WithoutCancel(ctx))
	defer cancelBase()
	t := newTracker()
	// A Proxy's CONNECT requests that open a connection are read and
	// served by connServer, which hands net/http the other connections.
	hl := ln
	handler := t.wrap(h)
	if isProxy {
		// A Proxy says itself when a client is admitted (after its
		// credentials); any other handler admits every request it reads.
		hl = newConnServer(base, proxy, t, ln, o.ReadHeaderTimeout)
	} else {
		handler = authenticating(handler)
	}
	srv := &http.Server{
		Handler:           handler,
		WriteTimeout:      o.WriteTimeout,
		ReadHeaderTimeout: o.ReadHeaderTimeout,
		IdleTimeout:       o.KeepAliveTimeout,
		MaxHeaderBytes:    maxHeaderBytes,
		BaseContext:       func(net.Listener) context.Context { return base },
		ConnContext: func(ctx context.Context, c net.Conn) context.Context {
			ctx = context.WithValue(ctx, connKey{}, c)
			ctx = context.WithValue(ctx, trackerKey{}, t)
			return context.WithValue(ctx, serverKey{}, base)
		},
	}
	srv.SetKeepAlivesEnabled(!o.DisableKeepAlives)
	served := make(chan error, 1)
	go func() { served <- srv.Serve(hl) }()
	select {
	case err := <-served:
		// The server stopped by itself (the listener failed).
		cancelBase()
		_ = srv.Close()
		_ = hl.Close()
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

// authenticating marks the connection of every request h is given as
// admitted.
func authenticating(h http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if c, ok := r.Context().Value(connKey{}).(net.Conn); ok {
			markAuthenticated(c)
		}
		h.ServeHTTP(w, r)
	})
}

// serverKey holds, in a request's context, the context that ends when the
// server stops serving (the end of the drain): unlike the request's own
// context, it is not cancelled when the client half-closes its connection.
type serverKey struct{}

// trackerKey holds, in a request's context, Serve's tracker: a CONNECT that
// net/http read adds its tunnel to it (serveLateConnect).
type trackerKey struct{}

// tracker counts the handler calls and tunnels in flight and remembers what
// closes each: its connection, hijacked or not, or both connections of a
// tunnel.
type tracker struct {
	mu    sync.Mutex
	conns map[io.Closer]int // calls in flight per closer
	n     int               // calls in flight
	idle  chan struct{}     // closed when n drops to zero
}

func newTracker() *tracker {
	idle := make(chan struct{})
	close(idle)
	return &tracker{conns: map[io.Closer]int{}, idle: idle}
}

func (t *tracker) wrap(h http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		c, _ := r.Context().Value(connKey{}).(net.Conn)
		t.begin(c)
		defer t.end(c)
		h.ServeHTTP(w, r)
	})
}

// begin counts a call in flight; c, when not nil, is closed by closeAll.
// A nil tracker (a Proxy under another server than Serve) counts nothing.
func (t *tracker) begin(c io.Closer) {
	if t == nil {
		return
	}
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

func (t *tracker) end(c io.Closer) {
	if t == nil {
		return
	}
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

// closeAll closes the connections of the calls in flight.
func (t *tracker) closeAll() {
	t.mu.Lock()
	defer t.mu.Unlock()
	for c := range t.conns {
		_ = c.Close()
	}
}
