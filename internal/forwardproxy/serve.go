package forwardproxy

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
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
}

// ServeWith is Serve with limits other than the defaults.
func ServeWith(ctx context.Context, ln net.Listener, h http.Handler, o ServeOptions) error {
	if o.ReadHeaderTimeout <= 0 {
		o.ReadHeaderTimeout = DefaultReadHeaderTimeout
	}
	if o.KeepAliveTimeout <= 0 {
		o.KeepAliveTimeout = DefaultKeepAliveTimeout
	}
	if o.MaxConnections <= 0 {
		o.MaxConnections = DefaultMaxConnections
	}
	drain := o.Drain
	limited := &limitListener{Listener: ln, max: int64(o.MaxConnections), answer: tooMany}
	if p, ok := h.(*Proxy); ok && p.proxyStatus != "" {
		limited.answer = strings.Replace(tooMany, "\r\n\r\n", "\r\n"+ProxyStatusHeader+": "+p.proxyStatus+"; error="+ProxyErrorConnectionLimitReached+"\r\n\r\n", 1)
	}
	ln = limited
	// Requests are not cancelled when ctx is done, only when the drain
	// period ends.
	base, cancelBase := context.WithCancel(context.WithoutCancel(ctx))
	defer cancelBase()
	t := newTracker()
	// A Proxy's CONNECT requests that open a connection are read and
	// served by connServer, which hands net/http the other connections.
	hl := ln
	if p, ok := h.(*Proxy); ok {
		hl = newConnServer(base, p, t, ln, o.ReadHeaderTimeout)
	}
	srv := &http.Server{
		Handler:           t.wrap(h),
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

// serverKey holds, in a request's context, the context that ends when the
// server stops serving (the end of the drain): unlike the request's own
// context, it is not cancelled when the client half-closes its connection.
type serverKey struct{}

// trackerKey holds, in a request's context, Serve's tracker: a CONNECT that
// net/http read adds its tunnel to it (serveLateConnect).
type trackerKey struct{}

// limitListener answers 503 to the connections past max and closes them.
type limitListener struct {
	net.Listener
	max    int64
	answer string // tooMany, with the Proxy's Proxy-Status
	open   atomic.Int64
}

// tooMany is written, raw, to a connection over the limit: there is no
// request to answer yet, and reading one would already cost what the limit
// saves.
const tooMany = "HTTP/1.1 503 Service Unavailable\r\nRetry-After: 1\r\nConnection: close\r\nContent-Type: text/plain; charset=utf-8\r\nContent-Length: 52\r\n\r\nthe proxy is at its limit of concurrent connections\n"

func (l *limitListener) Accept() (net.Conn, error) {
	for {
		c, err := l.Listener.Accept()
		if err != nil {
			return nil, err
		}
		if l.open.Add(1) > l.max {
			l.open.Add(-1)
			_ = c.SetWriteDeadline(time.Now().Add(time.Second))
			_, _ = io.WriteString(c, l.answer)
			_ = c.Close()
			continue
		}
		return &countedConn{Conn: c, l: l}, nil
	}
}

// countedConn gives its slot back when closed, hijacked or not, or, once
// it was refused, when its write half is shut: the refused client has its
// answer, and the moment Serve lingers to read what it still sends (so that
// closing does not reset the answer away) is not taken from other clients.
// It keeps CloseWrite, which tunnels use for half-closes.
type countedConn struct {
	net.Conn
	l         *limitListener
	once      sync.Once
	isRefused atomic.Bool
}

// refusedConn is a client connection that was given a refusal and ends
// with it.
type refusedConn interface{ refused() }

func (c *countedConn) refused() { c.isRefused.Store(true) }

func (c *countedConn) release() { c.once.Do(func() { c.l.open.Add(-1) }) }

func (c *countedConn) Close() error {
	c.release()
	return c.Conn.Close()
}

// CloseWrite shuts the write half of a TCP connection.
func (c *countedConn) CloseWrite() error {
	if c.isRefused.Load() {
		c.release()
	}
	if cw, ok := c.Conn.(closeWriter); ok {
		return cw.CloseWrite()
	}
	return errors.ErrUnsupported
}

// ReadFrom is the accepted connection's own: net/http's response writer
// hands it a plain answer's body read from an origin's socket (see
// statusWriter.ReadFrom), which a *net.TCPConn splices.
func (c *countedConn) ReadFrom(r io.Reader) (int64, error) { return readFromWith(c.Conn, r) }

// readFromWith writes r's bytes to w with w's own ReadFrom when it has one
// (a *net.TCPConn's splices from a TCP connection), else through a buffer.
func readFromWith(w io.Writer, r io.Reader) (int64, error) {
	if rf, ok := w.(io.ReaderFrom); ok {
		return rf.ReadFrom(r)
	}
	return io.Copy(w, r)
}

// NetConn returns the accepted connection, for tunnels that splice(2) it.
func (c *countedConn) NetConn() net.Conn { return c.Conn }

// SyscallConn gives the tunnels the raw connection, to wait for bytes
// without holding a buffer.
func (c *countedConn) SyscallConn() (syscall.RawConn, error) {
	if sc, ok := c.Conn.(syscall.Conn); ok {
		return sc.SyscallConn()
	}
	return nil, errors.ErrUnsupported
}

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
