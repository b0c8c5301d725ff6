package forwardproxy

import (
	"bufio"
	"bytes"
	"context"
	"errors"
	"io"
	"net"
	"net/http"
	"strconv"
	"sync"
	"sync/atomic"
	"syscall"
	"time"
)

// connServer is Serve's accept loop for a Proxy. It reads the first
// request of each new connection itself: a CONNECT, which is how almost
// every tunnel begins (clients open a connection per tunnel), is served
// right there without net/http's per-connection machinery (a full
// http.Request, contexts, response writer, hijacking). Any other request
// goes to net/http with the bytes already read, through Accept: connServer
// is the net.Listener of Serve's http.Server.
type connServer struct {
	p                 *Proxy
	t                 *tracker
	ln                net.Listener
	readHeaderTimeout time.Duration
	// base ends with the drain period: it bounds upstream dials.
	base context.Context

	conns chan net.Conn // connections for net/http
	errs  chan error    // ln's Accept errors, for net/http
	done  chan struct{} // closed by Close
	loop  sync.WaitGroup

	// work hands new connections to idle workers (see worker); idle
	// counts the workers waiting on it.
	work chan net.Conn
	idle atomic.Int32

	mu     sync.Mutex
	closed bool
	fresh  map[net.Conn]struct{} // connections whose first request is being read
	once   sync.Once
}

func newConnServer(base context.Context, p *Proxy, t *tracker, ln net.Listener, readHeaderTimeout time.Duration) *connServer {
	s := &connServer{
		p: p, t: t, ln: ln, readHeaderTimeout: readHeaderTimeout, base: base,
		conns: make(chan net.Conn), errs: make(chan error), done: make(chan struct{}),
		work: make(chan net.Conn), fresh: map[net.Conn]struct{}{},
	}
	s.loop.Go(s.acceptLoop)
	return s
}

// acceptLoop accepts connections until Close. Accept errors go to net/http,
// one at a time: it backs off after temporary ones and stops at the others,
// so this loop waits for it to take each error before accepting again.
func (s *connServer) acceptLoop() {
	for {
		c, err := s.ln.Accept()
		if err != nil {
			select {
			case s.errs <- err:
				continue
			case <-s.done:
				return
			}
		}
		select {
		case s.work <- c:
		default:
			go s.worker(c)
		}
	}
}

// maxIdleWorkers bounds the workers that wait for a new connection: the
// peak of connections whose first request is being read at once, up to
// this many, with their grown stacks (about 8 KiB each).
const maxIdleWorkers = 64

// worker reads the first request of c, then of the next connections that
// the accept loop hands it, until more than maxIdleWorkers wait or the
// server is closed. A new goroutine per connection would start with a
// small stack and grow it, copying it each time, while reading the head
// and dialing: that copying was 7 % of the proxy's CPU under make
// bench-proxy's CONNECT load (docs/performance.md). A tunnel still runs on
// a fresh goroutine of its own (see serveConn), so that an idle one does
// not hold a grown stack.
func (s *connServer) worker(c net.Conn) {
	for {
		s.serveConn(c)
		if s.idle.Add(1) > maxIdleWorkers {
			s.idle.Add(-1)
			return
		}
		select {
		case c = <-s.work:
			s.idle.Add(-1)
		case <-s.done:
			s.idle.Add(-1)
			return
		}
	}
}

// Accept implements net.Listener for net/http.
func (s *connServer) Accept() (net.Conn, error) {
	select {
	case c := <-s.conns:
		return c, nil
	case err := <-s.errs:
		return nil, err
	case <-s.done:
		return nil, net.ErrClosed
	}
}

// Close implements net.Listener: it closes the real listener and the
// connections whose first request is still being read (a Shutdown closes
// idle connections too), and waits for the accept loop to end.
func (s *connServer) Close() error {
	var err error
	s.once.Do(func() {
		close(s.done)
		err = s.ln.Close()
		s.mu.Lock()
		s.closed = true
		for c := range s.fresh {
			_ = c.Close()
		}
		s.mu.Unlock()
		s.loop.Wait()
	})
	return err
}

// Addr implements net.Listener.
func (s *connServer) Addr() net.Addr { return s.ln.Addr() }

// setFresh adds c to the connections being read, unless the server is
// closed.
func (s *connServer) setFresh(c net.Conn) bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.closed {
		return false
	}
	s.fresh[c] = struct{}{}
	return true
}

// unsetFresh removes c from the connections being read; with begin, it
// starts tracking c as in flight. False: the server is closed (and c with
// it).
func (s *connServer) unsetFresh(c net.Conn, begin bool) bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	delete(s.fresh, c)
	if s.closed {
		return false
	}
	if begin {
		// Under the lock: once Close returned, the tracker's count
		// includes every request that will be served.
		s.t.begin(c)
	}
	return true
}

// headReader reads a connection's first request head; pooled, since a
// connection needs it only until its head is read.
type headReader struct {
	br      *bufio.Reader
	scratch []byte
}

var headReaders = sync.Pool{New: func() any {
	return &headReader{br: bufio.NewReaderSize(nil, 4<<10), scratch: make([]byte, 0, 1<<10)}
}}

func getHeadReader(c net.Conn) *headReader {
	hr, _ := headReaders.Get().(*headReader) // the pool holds only *headReader
	hr.br.Reset(c)
	return hr
}

func putHeadReader(hr *headReader) {
	hr.br.Reset(nil)
	if cap(hr.scratch) > 4<<10 {
		hr.scratch = make([]byte, 0, 1<<10) // a rare large head is not kept
	}
	headReaders.Put(hr)
}

// serveConn reads the first request of c: a CONNECT is served here,
// anything else goes to net/http.
func (s *connServer) serveConn(c net.Conn) {
	if !s.setFresh(c) {
		_ = c.Close()
		return
	}
	hr := getHeadReader(c)
	// Until its client is admitted, the connection's writes are bounded
	// as its reads: a client that never reads cannot hold it either.
	_ = c.SetDeadline(time.Now().Add(s.readHeaderTimeout))
	connect, err := sniff(hr.br)
	if err != nil {
		// Closed, timed out or ended before a request: nothing to answer.
		putHeadReader(hr)
		s.unsetFresh(c, false)
		_ = c.Close()
		return
	}
	if !connect {
		prefix := bytes.Clone(peekBuffered(hr.br))
		putHeadReader(hr)
		_ = c.SetDeadline(time.Time{})
		if s.unsetFresh(c, false) {
			s.handOff(&prefixConn{Conn: c, prefix: prefix})
		}
		return
	}
	var head connectHead
	// The scratch buffer is kept with the reader, grown or not.
	head, hr.scratch, err = readConnectHead(hr.br, hr.scratch, maxHeaderBytes, s.p.tunnelHeaders)
	var early []byte
	if err == nil {
		// A copy: the tunnel must not keep the pooled reader.
		early = bytes.Clone(peekBuffered(hr.br))
	}
	putHeadReader(hr)
	var he *headError
	if err != nil && !errors.As(err, &he) {
		s.unsetFresh(c, false)
		_ = c.Close()
		return
	}
	if !s.unsetFresh(c, true) {
		return
	}
	x := &exchange{start: time.Now(), method: MethodConnect, verb: http.MethodConnect, remote: c.RemoteAddr(), proxyStatus: s.p.proxyStatus}
	var tun *tunnel
	if he != nil {
		x.err = he
		x.refuseConn(c, refusal{code: he.code, msg: he.msg})
	} else {
		x.host = head.target
		tun = s.p.openConnect(s.base, c, head, early, x)
	}
	if tun == nil {
		s.p.finish(x)
		s.t.end(c)
		return
	}
	// The tunnel goes on in a goroutine of its own and this one ends: its
	// stack grew to read the head and dial, and an idle tunnel would keep
	// it.
	s.p.goTunnel(s.t, c, tun, x)
}

// goTunnel runs tun on a goroutine of its own, then gives back its slot
// and finishes x. t, when not nil, counts c as in flight already; it counts
// the tunnel's pair too until the tunnel ends, so that the end of Serve's
// drain closes both connections (closing the client's alone would leave a
// tunnel whose client shut its write side waiting on the upstream).
func (p *Proxy) goTunnel(t *tracker, c net.Conn, tun *tunnel, x *exchange) {
	t.begin(tun.pair)
	go func() {
		tun.run()
		p.release()
		p.finish(x)
		t.end(tun.pair)
		t.end(c)
	}()
}

// serveLateConnect serves a CONNECT that net/http read: one that follows
// another request on its connection, as Node.js keep-alive agents (the
// default from Node 19 on) and proxy-chain send them, or any CONNECT when
// the Proxy runs under a server other than Serve. What net/http parsed is
// first held to the strict parser's rules (lateConnectHead); then the
// connection is hijacked and the tunnel opened and run as serveConn does.
func (p *Proxy) serveLateConnect(w http.ResponseWriter, r *http.Request, x *exchange) {
	head, herr := lateConnectHead(r, p.tunnelHeaders)
	if herr != nil {
		x.err = herr
		x.refuseWith(w, refusal{code: herr.code, msg: herr.msg})
		return
	}
	x.host = head.target
	c, brw, err := http.NewResponseController(w).Hijack()
	if err != nil {
		// Not an HTTP/1 connection (HTTP/2 has a CONNECT of its own,
		// which Serve does not speak).
		x.err = err
		x.refuseWith(w, refusal{code: http.StatusHTTPVersionNotSupported, msg: "CONNECT is served on HTTP/1.1 connections"})
		return
	}
	// Bytes the client sent behind its head, which net/http may have read
	// already, belong to the tunnel.
	early := bytes.Clone(peekBuffered(brw.Reader))
	// As for a CONNECT that Serve read, the tunnel's dial ends with the
	// server's drain, not with the request, which ends when the handler
	// returns (below), long before the tunnel. Under another server the
	// tunnel has no drain: it ends by its idle timeout or when either
	// side closes.
	ctx := context.WithoutCancel(r.Context()) //nolint:contextcheck // replaced by the server's context under Serve, on purpose (see above).
	if srv, ok := ctx.Value(serverKey{}).(context.Context); ok {
		ctx = srv
	}
	tun := p.openConnect(ctx, c, head, early, x)
	if tun == nil {
		return
	}
	// The tunnel goes on in a goroutine of its own and the handler
	// returns: net/http's connection goroutine, with its grown stack and
	// its buffers, would otherwise stay for the tunnel's life (three times
	// the memory per idle tunnel, BenchmarkIdleLateTunnelMemory). Counted
	// again before the handler's own count ends, so that a drain never
	// sees it gone.
	t, _ := r.Context().Value(trackerKey{}).(*tracker)
	t.begin(c)
	x.detached = true
	p.goTunnel(t, c, tun, x)
}

// handOff gives c to net/http, or closes it once the server is closed.
func (s *connServer) handOff(c net.Conn) {
	select {
	case s.conns <- c:
	case <-s.done:
		_ = c.Close()
	}
}

// sniff waits for a connection's first bytes and reports whether they begin
// a CONNECT request. It reads no further than needed to tell.
func sniff(br *bufio.Reader) (bool, error) {
	n := 1
	for {
		if _, err := br.Peek(n); err != nil {
			return false, err
		}
		first := peekBuffered(br)
		if !isConnect(first) {
			return false, nil
		}
		if len(first) >= len(connectPrefix) {
			return true, nil
		}
		n = len(first) + 1
	}
}

// peekBuffered returns the bytes br holds, without reading more.
func peekBuffered(br *bufio.Reader) []byte {
	b, _ := br.Peek(br.Buffered())
	return b
}

// openConnect answers a CONNECT request read by serveConn, with the checks
// of ServeHTTP in the same order: source, credentials, capacity, target,
// then the egress policy when the target is dialed. It returns the tunnel
// to run, holding a slot that the caller releases once it ended, or nil
// after a refusal.
func (p *Proxy) openConnect(ctx context.Context, c net.Conn, h connectHead, early []byte, x *exchange) *tunnel {
	ctx = context.WithValue(ctx, exchangeKey{}, x)
	if h.upstream != nil {
		ctx = context.WithValue(ctx, tunnelHeaderKey{}, h.upstream)
	}
	switch {
	case !sourceAddrAllowed(p.ranges, c.RemoteAddr()):
		x.refuseConn(c, refuseSource)
		return nil
	case !p.authorizeConn(&ctx, c, h.proxyAuthorization, x):
		return nil
	}
	// Admitted: the tunnel has its own idle timeout.
	_ = c.SetDeadline(time.Time{})
	if !p.acquire() {
		x.refuseConn(c, refuseFull)
		return nil
	}
	if ref, ok := p.checkTarget(h.target, x); !ok {
		p.release()
		x.refuseConn(c, ref)
		return nil
	}
	upstream, err := p.dialTarget(ctx, h.target)
	if err != nil {
		p.release()
		x.err = err
		x.refuseConn(c, upstreamRefusal(err))
		return nil
	}
	tun := p.established(c, upstream, early, x)
	if tun == nil {
		p.release()
	}
	return tun
}

// lingerTimeout bounds how long a refused connection's unread bytes are
// drained before it is closed.
const lingerTimeout = 500 * time.Millisecond

// refuseConn writes r on c as a complete response that closes the
// connection, and closes it. Bytes the client sent after its request are
// read and dropped for a moment first: closing a socket with unread bytes
// sends a reset, which can destroy the answer before the client reads it.
func (x *exchange) refuseConn(c net.Conn, r refusal) {
	x.status = r.code
	body := r.msg + "\n"
	b := make([]byte, 0, 256+len(body))
	b = append(b, "HTTP/1.1 "...)
	b = strconv.AppendInt(b, int64(r.code), 10)
	b = append(b, ' ')
	b = append(b, http.StatusText(r.code)...)
	b = append(b, "\r\n"...)
	if r.key != "" {
		b = append(b, r.key+": "+r.value+"\r\n"...)
	}
	if ps := proxyStatus(x.proxyStatus, r); ps != "" {
		b = append(b, ProxyStatusHeader+": "+ps+"\r\n"...)
	}
	b = append(b, "Content-Type: text/plain; charset=utf-8\r\nX-Content-Type-Options: nosniff\r\nConnection: close\r\nContent-Length: "...)
	b = strconv.AppendInt(b, int64(len(body)), 10)
	b = append(b, "\r\n\r\n"...)
	b = append(b, body...)
	_ = c.SetDeadline(time.Now().Add(lingerTimeout))
	if rc, ok := c.(refusedConn); ok {
		rc.refused()
	}
	if _, err := c.Write(b); err == nil {
		if cw, ok := c.(closeWriter); ok && cw.CloseWrite() == nil {
			_, _ = io.Copy(io.Discard, io.LimitReader(c, 256<<10))
		}
	}
	_ = c.Close()
}

// prefixConn is a connection handed to net/http: its reads return first
// the bytes read while looking at the first request.
type prefixConn struct {
	net.Conn
	mu     sync.Mutex
	prefix []byte
}

// refused bounds what is left of a refused connection: net/http reads the
// body of a refused request before it closes the connection, without a
// deadline of its own, so a client that announces a body and never sends it
// would keep its connection (and its slot) for as long as it likes. It gets
// the linger of a refusal on the CONNECT path instead.
func (c *prefixConn) refused() {
	_ = c.SetDeadline(time.Now().Add(lingerTimeout))
	if rc, ok := c.Conn.(refusedConn); ok {
		rc.refused()
	}
}

// authenticated passes the admission of the connection's client on to
// the connection under the prefix.
func (c *prefixConn) authenticated() { markAuthenticated(c.Conn) }

func (c *prefixConn) Read(b []byte) (int, error) {
	c.mu.Lock()
	if len(c.prefix) > 0 {
		n := copy(b, c.prefix)
		c.prefix = c.prefix[n:]
		c.mu.Unlock()
		return n, nil
	}
	c.mu.Unlock()
	return c.Conn.Read(b)
}

// ReadFrom writes r's bytes with the connection's own ReadFrom: net/http's
// response writer hands it a plain answer's body read from an origin's
// socket (statusWriter.ReadFrom), which the *net.TCPConn under it splices.
// Without it net/http would copy them through a buffer. The prefix is a
// read's business only.
func (c *prefixConn) ReadFrom(r io.Reader) (int64, error) { return readFromWith(c.Conn, r) }

// The connections Serve hands to net/http keep the socket's ReadFrom, which
// is how a plain answer's bulk reaches splice(2).
var (
	_ io.ReaderFrom = (*prefixConn)(nil)
	_ io.ReaderFrom = (*countedConn)(nil)
)

// CloseWrite shuts the write half of the connection, for tunnels.
func (c *prefixConn) CloseWrite() error {
	if cw, ok := c.Conn.(closeWriter); ok {
		return cw.CloseWrite()
	}
	return errors.ErrUnsupported
}

// NetConn returns the connection under the prefix once the prefix was
// read, for a tunnel that splices it (a CONNECT after another request);
// nil before, since reading the socket itself would skip the prefix.
func (c *prefixConn) NetConn() net.Conn {
	c.mu.Lock()
	defer c.mu.Unlock()
	if len(c.prefix) > 0 {
		return nil
	}
	return c.Conn
}

// SyscallConn gives tunnels the raw connection once the prefix was read:
// a raw read before would skip it.
func (c *prefixConn) SyscallConn() (syscall.RawConn, error) {
	c.mu.Lock()
	pending := len(c.prefix) > 0
	c.mu.Unlock()
	if sc, ok := c.Conn.(syscall.Conn); ok && !pending {
		return sc.SyscallConn()
	}
	return nil, errors.ErrUnsupported
}
