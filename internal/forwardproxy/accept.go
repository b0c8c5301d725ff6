package forwardproxy

import (
	"bufio"
	"bytes"
	"context"
	"errors"
	"net"
	"net/http"
	"sync"
	"sync/atomic"
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
			s.handOff(newPrefixConn(c, prefix))
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
