package forwardproxy

import (
	"errors"
	"fmt"
	"io"
	"net"
	"os"
	"sync"
	"sync/atomic"
	"time"
)

// errTunnelIdle ends a connection that carried no bytes for the idle
// timeout.
var errTunnelIdle = errors.New("tunnel idle")

// activity is the time of the latest bytes on a set of connections that end
// together when all of them are idle: both ends of a tunnel share one.
type activity struct {
	last    atomic.Int64 // UnixNano
	timeout time.Duration
}

func newActivity(timeout time.Duration) *activity {
	a := &activity{timeout: timeout}
	a.touch()
	return a
}

func (a *activity) touch() { a.last.Store(time.Now().UnixNano()) }

// deadline is when the connections become idle.
func (a *activity) deadline() time.Time { return time.Unix(0, a.last.Load()).Add(a.timeout) }

// idleConn is a net.Conn whose reads and writes fail with errTunnelIdle once
// its activity saw no bytes for the timeout. It moves deadlines only when
// they fire, not on every read, so a busy connection costs one atomic store
// per read or write.
type idleConn struct {
	net.Conn
	a   *activity
	raw *rawReader // nil when the connection has no socket
}

// IdleConn returns c with an inactivity bound: once it carried no bytes
// either way for timeout, its reads and writes fail (an error that says
// "tunnel idle for <timeout>"). It bounds an upstream connection whose peer
// stopped sending without closing it (a paused VM keeps its connections
// open), as the forward proxy's own connections to origins are bounded. It
// costs one atomic store per read or write; deadlines move only when they
// fire.
func IdleConn(c net.Conn, timeout time.Duration) net.Conn {
	return newIdleConn(c, newActivity(timeout))
}

func newIdleConn(c net.Conn, a *activity) *idleConn {
	_ = c.SetDeadline(a.deadline())
	ic := &idleConn{Conn: c, a: a}
	ic.raw = newRawReader(c)
	return ic
}

// readPooled waits for bytes on c and reads them into a buffer of
// relayBufs, which the caller puts back. The buffer is taken only once bytes
// are there: an idle tunnel waits in the runtime's poller without one (see
// rawReader). At the end of the stream it returns io.EOF.
func (c *idleConn) readPooled() (*[]byte, int, error) {
	for {
		bp, n, err := c.readOnce()
		if n > 0 {
			c.a.touch()
			return bp, n, nil
		}
		if err == nil || !errors.Is(err, os.ErrDeadlineExceeded) {
			return nil, 0, err
		}
		// The deadline fired: traffic on the other end (or a write) may
		// have moved it since it was set.
		d := c.a.deadline()
		if !time.Now().Before(d) {
			return nil, 0, fmt.Errorf("%w for %s", errTunnelIdle, c.a.timeout)
		}
		_ = c.SetReadDeadline(d)
	}
}

// readOnce is one read of readPooled: on the raw connection where there is
// one, through Read otherwise (the buffer is then held while waiting).
func (c *idleConn) readOnce() (*[]byte, int, error) {
	if c.raw != nil {
		return c.raw.read()
	}
	bp := getRelayBuf()
	n, err := c.Conn.Read(*bp)
	if n == 0 {
		relayBufs.Put(bp)
		if err == nil {
			err = io.ErrNoProgress
		}
		return nil, 0, err
	}
	return bp, n, nil
}

func (c *idleConn) Read(b []byte) (int, error) {
	for {
		n, err := c.Conn.Read(b)
		if n > 0 {
			c.a.touch()
		}
		if n > 0 || err == nil || !errors.Is(err, os.ErrDeadlineExceeded) {
			return n, err
		}
		// The deadline fired: traffic on the other end (or a write) may
		// have moved it since it was set.
		d := c.a.deadline()
		if !time.Now().Before(d) {
			return 0, fmt.Errorf("%w for %s", errTunnelIdle, c.a.timeout)
		}
		_ = c.SetReadDeadline(d)
	}
}

func (c *idleConn) Write(b []byte) (int, error) {
	written := 0
	for {
		n, err := c.Conn.Write(b[written:])
		written += n
		if n > 0 {
			c.a.touch()
		}
		if err == nil || !errors.Is(err, os.ErrDeadlineExceeded) {
			return written, err
		}
		d := c.a.deadline()
		if !time.Now().Before(d) {
			return written, fmt.Errorf("%w for %s", errTunnelIdle, c.a.timeout)
		}
		_ = c.SetWriteDeadline(d)
	}
}

// closeWriter is a connection whose write side can be closed alone
// (*net.TCPConn).
type closeWriter interface{ CloseWrite() error }

// relayBufs recycles the tunnels' copy buffers. A relay takes one only once
// bytes are waiting to be read and gives it back as soon as they are
// written, so an idle tunnel holds no buffer: its memory is its goroutines
// and sockets.
var relayBufs = sync.Pool{New: func() any { b := make([]byte, 32<<10); return &b }}

func getRelayBuf() *[]byte {
	bp, _ := relayBufs.Get().(*[]byte) // the pool holds only *[]byte
	return bp
}

// pair is the two connections of a tunnel. Close closes both, once: it is
// how either direction, the idle timeout or the end of Serve's drain ends
// the tunnel.
type pair struct {
	client, upstream net.Conn
	once             sync.Once
}

// Close closes both connections.
func (p *pair) Close() error {
	p.once.Do(func() {
		_ = p.client.Close()
		_ = p.upstream.Close()
	})
	return nil
}

// splice copies bytes both ways between the client and the upstream server.
// When one side ends its stream (EOF), the other side's write half is
// closed and the other direction goes on, so that a client that shut its
// write side still gets the answer. Both connections are closed once both
// directions ended, at the first error either way, or when the tunnel
// carried no bytes for the idle timeout. splice returns the first error that
// is not the expected end of a tunnel. One direction runs on the calling
// goroutine, which saves a goroutine stack per tunnel. ic and iu are the
// client and upstream connections of conns (see newTunnelConns).
func (p *Proxy) splice(conns *pair, ic, iu *idleConn, early []byte, x *exchange) error {
	run := func(dst, src *idleConn, early []byte, count func(int)) error {
		err := relay(dst, src, early, count)
		if err != nil {
			// Closing both ends is how the other direction is told to
			// stop: it fails with net.ErrClosed.
			_ = conns.Close()
		}
		return err
	}
	up := make(chan error, 1)
	go func() { up <- run(iu, ic, early, p.counter(x, true)) }()
	errDown := run(ic, iu, nil, p.counter(x, false))
	errUp := <-up
	_ = conns.Close()
	for _, err := range []error{errDown, errUp} {
		if err != nil && !errors.Is(err, net.ErrClosed) && !errors.Is(err, io.EOF) {
			return err
		}
	}
	return nil
}

// newTunnelConns returns the client and upstream ends of a tunnel, sharing
// one idle timeout. It runs before the tunnel's goroutine starts: setting
// their deadlines is the deepest call a tunnel makes, and on the tunnel's
// fresh goroutine it grew the stack (a copy) in every tunnel.
func (p *Proxy) newTunnelConns(conns *pair) (ic, iu *idleConn) {
	a := newActivity(p.idleTimeout)
	return newIdleConn(conns.client, a), newIdleConn(conns.upstream, a)
}

// relay writes early, then copies src to dst until src ends. At EOF it
// closes the write half of dst and returns nil; where the write half cannot
// be closed alone, it returns io.EOF so that splice ends the tunnel.
func relay(dst, src *idleConn, early []byte, count func(int)) error {
	if len(early) > 0 {
		// A client may send its first bytes (a TLS ClientHello) without
		// waiting for the 200; the server may already have read them.
		n, err := dst.Write(early)
		count(n)
		if err != nil {
			return err
		}
	}
	for {
		bp, n, err := src.readPooled()
		if n > 0 {
			full := n == len(*bp)
			written, werr := dst.Write((*bp)[:n])
			relayBufs.Put(bp)
			count(written)
			if werr != nil {
				return werr
			}
			if full {
				// A full buffer: a bulk transfer, whose bytes already
				// waiting go through splice(2) (Linux).
				m, serr := spliceWaiting(dst, src)
				count(int(m))
				if serr != nil {
					return serr
				}
			}
			continue
		}
		if !errors.Is(err, io.EOF) {
			return err
		}
		if cw, ok := dst.Conn.(closeWriter); ok && cw.CloseWrite() == nil {
			return nil
		}
		return io.EOF
	}
}

// bufferPool lends ReverseProxy the tunnels' buffers.
type bufferPool struct{}

func (bufferPool) Get() []byte { return *getRelayBuf() }

func (bufferPool) Put(b []byte) {
	if cap(b) >= 32<<10 {
		b = b[:32<<10]
		relayBufs.Put(&b)
	}
}
