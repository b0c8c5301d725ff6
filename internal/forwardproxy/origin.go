package forwardproxy

import (
	"bufio"
	"cmp"
	"context"
	"errors"
	"io"
	"net"
	"net/http"
	"slices"
	"sync"
	"sync/atomic"
	"syscall"
	"time"
)

// originTransport forwards a plain request to its origin on the handler's
// own goroutine: it writes the request and reads the answer's head itself,
// and ReverseProxy reads the body on the same goroutine. http.Transport
// does the same through a writer and a reader goroutine per connection,
// two hand-offs per request, each a wake-up that waits for a core on a busy
// machine: a third of the plain path's CPU and part of its tail
// (docs/performance.md). The parsers are net/http's on both sides
// (Request.Write, ReadResponse), so the framing is what http.Transport
// would send and accept.
//
// A request that asks for a protocol upgrade goes to upgrades (an
// http.Transport), which hands ReverseProxy the connection it switches.
// The zero value is not usable: see Proxy's New.
type originTransport struct {
	// dial opens a connection to an origin within the egress policy.
	dial func(ctx context.Context, addr string) (*idleConn, error)
	// responseHeaderTimeout bounds the wait for an answer's head.
	responseHeaderTimeout time.Duration
	// idleTimeout closes a kept-alive connection unused for that long.
	idleTimeout time.Duration
	upgrades    http.RoundTripper
	// proxy, when set, names the proxy a request goes to, the
	// Proxy-Authorization for it and whether its connection may be kept:
	// requests are then written in absolute form to that proxy
	// (NewProxyTransport).
	proxy func(req *http.Request) (ProxyTarget, error)
	// maxIdle and maxIdlePerHost bound the kept-alive connections;
	// zero: maxIdleOrigin and maxIdleOriginPerHost.
	maxIdle, maxIdlePerHost int

	mu    sync.Mutex
	idle  map[string][]*originConn // by host:port, the most recently used last
	count int                      // connections in idle
}

// Bounds of the kept-alive connections: enough per host for a crawler's
// workers on one site (with fewer than its concurrent requests, every
// answer beyond them closes a connection that the next request dials
// again: the bench's 16 clients on one origin spent a tenth of the proxy's
// CPU in dials with 8), and no more than maxIdleOrigin sockets for a crawl
// over many sites.
const (
	maxIdleOrigin        = 256
	maxIdleOriginPerHost = 64
)

// originConn is a connection to an origin with its buffers.
type originConn struct {
	*idleConn
	br    *bufio.Reader
	bw    *bufio.Writer
	addr  string
	timer *time.Timer // closes it once idle for the idle timeout
	// headTimer closes it when an answer's head is late; headLate says
	// it did. A connection that timed out is closed, so headLate is never
	// reset.
	headTimer *time.Timer
	headLate  atomic.Bool
	// read counts the bytes br took from the connection: an exchange that
	// failed without any is one the origin never answered.
	read int64
}

func newOriginConn(c *idleConn, addr string) *originConn {
	oc := &originConn{idleConn: c, bw: bufio.NewWriter(c), addr: addr}
	oc.br = bufio.NewReader(readCounter{oc})
	return oc
}

// readCounter reads from its connection, counting the bytes.
type readCounter struct{ oc *originConn }

func (r readCounter) Read(p []byte) (int, error) {
	n, err := r.oc.Read(p)
	r.oc.read += int64(n)
	return n, err
}

// errResponseHeaderTimeout fails a request whose answer's head did not come
// within the response header timeout: a timeout (504, http-response-timeout).
var errResponseHeaderTimeout error = timeoutError("timeout awaiting the upstream response headers")

type timeoutError string

func (e timeoutError) Error() string { return string(e) }
func (timeoutError) Timeout() bool   { return true }
func (timeoutError) Temporary() bool { return true }

// RoundTrip implements http.RoundTripper.
func (t *originTransport) RoundTrip(req *http.Request) (*http.Response, error) {
	if req.Header.Get("Upgrade") != "" {
		return t.upgrades.RoundTrip(req)
	}
	addr, keepAlive := originAddr(req), true
	if t.proxy != nil {
		target, err := t.proxy(req)
		if err != nil {
			return nil, err
		}
		addr, keepAlive = target.Addr, target.KeepAlive
		if target.Authorization != "" {
			// On a copy: the caller's header map never holds the
			// proxy's credentials.
			r := *req
			r.Header = req.Header.Clone()
			r.Header.Set("Proxy-Authorization", target.Authorization)
			req = &r
		}
	}
	for {
		oc := t.take(addr)
		reused := oc != nil
		if oc == nil {
			c, err := t.dial(req.Context(), addr)
			if err != nil {
				return nil, err
			}
			oc = newOriginConn(c, addr)
		}
		before := oc.read
		resp, err := t.exchange(req, oc, keepAlive)
		if err == nil {
			return resp, nil
		}
		_ = oc.Close()
		// A kept-alive connection that the origin closed while it sat
		// idle (after the liveness check) fails before any answer: a
		// request that can be sent again goes on another connection, as
		// http.Transport does. Each pass takes another pooled connection
		// or dials, and a dialled one is never retried.
		if !reused || oc.read != before || !staleConnError(err) || !replayable(req) || req.Context().Err() != nil {
			return nil, err
		}
	}
}

// exchange writes req on oc and reads the answer's head; keepAlive false
// closes oc once the answer was read.
func (t *originTransport) exchange(req *http.Request, oc *originConn, keepAlive bool) (*http.Response, error) {
	ctx := req.Context()
	// The request's end (the client gone, the server stopping) closes the
	// connection, which ends a write, a read of the head or of the body.
	stop := context.AfterFunc(ctx, func() { _ = oc.Close() })
	// The connection's own timer, reused from one exchange to the next:
	// it closes the connection when the head is late.
	if oc.headTimer == nil {
		oc.headTimer = time.AfterFunc(t.responseHeaderTimeout, func() { oc.headLate.Store(true); _ = oc.Close() })
	} else {
		oc.headTimer.Reset(t.responseHeaderTimeout)
	}
	timer, timedOut := oc.headTimer, &oc.headLate
	fail := func(err error) (*http.Response, error) {
		timer.Stop()
		stop()
		switch {
		case timedOut.Load():
			return nil, errResponseHeaderTimeout
		case ctx.Err() != nil:
			return nil, ctx.Err()
		}
		return nil, err
	}
	write := req.Write
	if t.proxy != nil {
		write = req.WriteProxy
	}
	if err := write(oc.bw); err != nil {
		return fail(err)
	}
	if err := oc.bw.Flush(); err != nil {
		return fail(err)
	}
	var resp *http.Response
	for {
		var err error
		if resp, err = http.ReadResponse(oc.br, req); err != nil {
			return fail(err)
		}
		// An interim answer (100 Continue, 103 Early Hints) is not
		// passed on: the final one follows.
		if resp.StatusCode >= 200 || resp.StatusCode == http.StatusSwitchingProtocols {
			break
		}
	}
	timer.Stop()
	if timedOut.Load() {
		stop()
		return nil, errResponseHeaderTimeout
	}
	b := &originBody{ReadCloser: resp.Body, t: t, oc: oc, stop: stop,
		keep: keepAlive && !resp.Close && !req.Close && resp.StatusCode != http.StatusSwitchingProtocols}
	empty := resp.Body == http.NoBody
	if x, ok := ctx.Value(exchangeKey{}).(*exchange); ok && x.sink != nil && !empty &&
		resp.ContentLength > 0 && len(resp.TransferEncoding) == 0 && req.Method != http.MethodHead {
		// A body of known length, for a client on Serve's connection:
		// read here, so that its bulk can be spliced (readDirect). The
		// parser's own body reader is left unread and never closed.
		b.ReadCloser, b.sink, b.left = http.NoBody, x.sink, resp.ContentLength
	}
	resp.Body = b
	if empty {
		// Nothing to read: the connection is free now.
		b.eof = true
		b.release()
	}
	return resp, nil
}

// staleConnError reports whether err is how a connection that the origin
// closed shows itself when nothing was read from it: the end of the stream
// where an answer should start (ReadResponse says io.ErrUnexpectedEOF), or
// a reset.
func staleConnError(err error) bool {
	return errors.Is(err, io.EOF) || errors.Is(err, io.ErrUnexpectedEOF) || errors.Is(err, syscall.ECONNRESET) ||
		errors.Is(err, syscall.EPIPE) || errors.Is(err, net.ErrClosed)
}

// originBody is an answer's body. Read to its end, it gives its connection
// back for the next request to that origin at once, before the client got
// the last bytes (a client that sends its next request as soon as it has
// them finds the connection kept); closed before its end, it closes the
// connection, which would otherwise be drained of what no one wants.
type originBody struct {
	io.ReadCloser
	t    *originTransport
	oc   *originConn
	stop func() bool
	keep bool
	eof  bool
	done bool // the connection was given back or closed
	// sink is the client's response writer when the body is read here
	// (readDirect); left is what remains of it then.
	sink bodySink
	left int64
	bulk bool // the last read filled the caller's buffer
}

func (b *originBody) Read(p []byte) (int, error) {
	if b.done && b.eof {
		return 0, io.EOF
	}
	if b.sink != nil {
		return b.readDirect(p)
	}
	n, err := b.ReadCloser.Read(p)
	if errors.Is(err, io.EOF) {
		b.eof = true
		b.release()
	}
	return n, err
}

// bulkRead is the least read that says a body is bulky when it fills the
// caller's buffer: ReverseProxy reads 32 KiB at a time, and a gateway's
// first look at a body reads a few hundred bytes, which says nothing.
const bulkRead = 16 << 10

// readDirect reads a body of known length from the connection. Once a read
// filled the caller's buffer (a bulk transfer) and the answer's head went
// to the client, each read first hands the client's response writer what
// already waits in the origin's socket (moveWaiting), which splices it
// (Linux) from socket to socket: ReverseProxy, the caller, has written
// every byte read before, so the order holds, and the writer counts what it
// sent against the answer's Content-Length. What the head's read left
// buffered goes the ordinary way first. A body read before the head was
// sent (a gateway drops a failed attempt's) is only read.
func (b *originBody) readDirect(p []byte) (int, error) {
	if b.bulk && b.sink.sending() && b.oc.br.Buffered() == 0 {
		m, err := moveWaiting(b.sink, b.oc.idleConn, b.left)
		b.left -= m
		if err != nil {
			b.release()
			return 0, err
		}
		if b.left == 0 {
			b.eof = true
			b.release()
			return 0, io.EOF
		}
	}
	if int64(len(p)) > b.left {
		p = p[:b.left]
	}
	n, err := b.oc.br.Read(p)
	b.left -= int64(n)
	b.bulk = n == len(p) && n >= bulkRead
	if b.left == 0 {
		// The end, told with the last bytes, gives the connection back
		// before the client has them, as the parser's reader does.
		b.eof = true
		b.release()
		return n, io.EOF
	}
	if errors.Is(err, io.EOF) {
		err = io.ErrUnexpectedEOF
	}
	if err != nil {
		b.release()
	}
	return n, err
}

// release gives the connection back, or closes it when it cannot carry
// another request: the answer was not read to its end, the origin or the
// client said to close, the request's end closed it already (stop reports
// false then), or bytes came after the answer's end. Those bytes are no
// answer to any request yet sent: kept, they would be read as the answer
// to the next request on the connection, another client's perhaps
// (response splitting, docs/security.md).
func (b *originBody) release() {
	if b.done {
		return
	}
	b.done = true
	if live := b.stop(); b.eof && b.keep && live && b.oc.br.Buffered() == 0 {
		b.t.put(b.oc)
		return
	}
	_ = b.oc.Close()
}

// Close implements io.Closer.
func (b *originBody) Close() error {
	if !b.eof {
		b.release()
	}
	return b.ReadCloser.Close()
}

// take returns a kept-alive connection to addr that is still open, or nil.
func (t *originTransport) take(addr string) *originConn {
	for {
		t.mu.Lock()
		l := t.idle[addr]
		if len(l) == 0 {
			t.mu.Unlock()
			return nil
		}
		oc := l[len(l)-1]
		t.idle[addr] = l[:len(l)-1]
		if len(t.idle[addr]) == 0 {
			delete(t.idle, addr)
		}
		t.count--
		t.mu.Unlock()
		oc.timer.Stop()
		// The socket under the idle tracking: a peek moves no bytes.
		// Bytes that came while it sat idle answer no request of ours;
		// release let none be kept in the buffer.
		if alive(oc.Conn) {
			return oc
		}
		_ = oc.Close()
	}
}

// put keeps oc for the next request to its origin, within the bounds, for
// the idle timeout.
func (t *originTransport) put(oc *originConn) {
	t.mu.Lock()
	defer t.mu.Unlock()
	maxIdle, maxPerHost := cmp.Or(t.maxIdle, maxIdleOrigin), cmp.Or(t.maxIdlePerHost, maxIdleOriginPerHost)
	if t.count >= maxIdle || len(t.idle[oc.addr]) >= maxPerHost {
		_ = oc.Close()
		return
	}
	if t.idle == nil {
		t.idle = map[string][]*originConn{}
	}
	t.idle[oc.addr] = append(t.idle[oc.addr], oc)
	t.count++
	if oc.timer == nil {
		oc.timer = time.AfterFunc(t.idleTimeout, func() { t.expire(oc) })
	} else {
		oc.timer.Reset(t.idleTimeout)
	}
}

// expire closes oc if it is still idle: a request may have taken it
// between the timer's firing and this.
func (t *originTransport) expire(oc *originConn) {
	t.mu.Lock()
	l := t.idle[oc.addr]
	i := slices.Index(l, oc)
	if i < 0 {
		t.mu.Unlock()
		return
	}
	t.idle[oc.addr] = slices.Delete(l, i, i+1)
	if len(t.idle[oc.addr]) == 0 {
		delete(t.idle, oc.addr)
	}
	t.count--
	t.mu.Unlock()
	_ = oc.Close()
}

// CloseIdleConnections closes the kept-alive connections.
func (t *originTransport) CloseIdleConnections() {
	t.mu.Lock()
	idle := t.idle
	t.idle, t.count = nil, 0
	t.mu.Unlock()
	for _, l := range idle {
		for _, oc := range l {
			oc.timer.Stop()
			_ = oc.Close()
		}
	}
}

// originAddr is the request's host:port, port 80 when the URL names none.
func originAddr(req *http.Request) string {
	if req.URL.Port() != "" {
		return req.URL.Host
	}
	return net.JoinHostPort(req.URL.Hostname(), "80")
}

// replayable reports whether req can be sent again on another connection:
// it has no body to have been consumed and its method is idempotent (RFC
// 9110, 9.2.2), as http.Transport requires.
func replayable(req *http.Request) bool {
	if req.Body != nil && req.Body != http.NoBody {
		return false
	}
	switch req.Method {
	case http.MethodGet, http.MethodHead, http.MethodOptions, http.MethodTrace, http.MethodPut, http.MethodDelete:
		return true
	}
	return false
}
