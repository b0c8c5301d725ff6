package forwardproxy

import (
	"bytes"
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
	a *activity
}

func newIdleConn(c net.Conn, a *activity) *idleConn {
	d := a.deadline()
	_ = c.SetReadDeadline(d)
	_ = c.SetWriteDeadline(d)
	return &idleConn{Conn: c, a: a}
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
		_ = c.Conn.SetReadDeadline(d)
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
		_ = c.Conn.SetWriteDeadline(d)
	}
}

// closeWriter is a connection whose write side can be closed alone
// (*net.TCPConn).
type closeWriter interface{ CloseWrite() error }

// relayBufs recycles the tunnels' copy buffers: an idle tunnel holds none,
// which keeps its memory to the two goroutines and the sockets.
var relayBufs = sync.Pool{New: func() any { b := make([]byte, 32<<10); return &b }}

// splice copies bytes both ways between the client and the upstream server.
// When one side ends its stream (EOF), the other side's write half is
// closed and the other direction goes on, so that a client that shut its
// write side still gets the answer. Both connections are closed once both
// directions ended, at the first error either way, or when the tunnel
// carried no bytes for the idle timeout. splice returns the first error that
// is not the expected end of a tunnel.
func (p *Proxy) splice(client net.Conn, early []byte, upstream net.Conn, x *exchange) error {
	a := newActivity(p.idleTimeout)
	ic, iu := newIdleConn(client, a), newIdleConn(upstream, a)
	var fromClient io.Reader = ic
	if len(early) > 0 {
		// A client may send its first bytes (a TLS ClientHello) without
		// waiting for the 200; the server may already have read them.
		fromClient = io.MultiReader(bytes.NewReader(early), ic)
	}
	done := make(chan error, 2)
	go func() { done <- relay(iu, fromClient, upstream, p.counter(x, true)) }()
	go func() { done <- relay(ic, iu, client, p.counter(x, false)) }()

	closed := false
	var first error
	for range 2 {
		err := <-done
		if err == nil {
			continue // one direction ended cleanly; the other goes on
		}
		if first == nil && !closed && !errors.Is(err, net.ErrClosed) {
			first = err
		}
		if !closed {
			// Closing both ends is how the other copy is told to stop:
			// it fails with net.ErrClosed.
			closed = true
			_ = client.Close()
			_ = upstream.Close()
		}
	}
	if !closed {
		_ = client.Close()
		_ = upstream.Close()
	}
	return first
}

// relay copies src to dst until src ends. At EOF it closes the write half
// of dstConn (the raw connection behind dst) and returns nil; where the
// write half cannot be closed alone, it returns io.EOF so that splice ends
// the tunnel.
func relay(dst io.Writer, src io.Reader, dstConn net.Conn, count func(int)) error {
	bp := relayBufs.Get().(*[]byte) //nolint:forcetypeassert // the pool holds only *[]byte.
	defer relayBufs.Put(bp)
	buf := *bp
	for {
		n, err := src.Read(buf)
		if n > 0 {
			written, werr := dst.Write(buf[:n])
			count(written)
			if werr != nil {
				return werr
			}
		}
		if errors.Is(err, io.EOF) {
			if cw, ok := dstConn.(closeWriter); ok && cw.CloseWrite() == nil {
				return nil
			}
			return io.EOF
		}
		if err != nil {
			return err
		}
	}
}
