package forwardproxy

import (
	"errors"
	"fmt"
	"io"
	"net"
	"os"
	"sync"
	"sync/atomic"
	"syscall"
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
	raw syscall.RawConn // nil when the connection has no file descriptor
}

func newIdleConn(c net.Conn, a *activity) *idleConn {
	d := a.deadline()
	_ = c.SetReadDeadline(d)
	_ = c.SetWriteDeadline(d)
	ic := &idleConn{Conn: c, a: a}
	if sc, ok := c.(syscall.Conn); ok {
		ic.raw, _ = sc.SyscallConn()
	}
	return ic
}

// waitReadable returns once c has bytes to read, has ended or has failed,
// without a buffer: see readable. Without a raw connection it returns at
// once, and the next Read waits instead.
func (c *idleConn) waitReadable() error {
	if c.raw == nil {
		return nil
	}
	for {
		err := c.raw.Read(peekReadable)
		if err == nil || !errors.Is(err, os.ErrDeadlineExceeded) {
			return err
		}
		d := c.a.deadline()
		if !time.Now().Before(d) {
			return fmt.Errorf("%w for %s", errTunnelIdle, c.a.timeout)
		}
		_ = c.SetReadDeadline(d)
	}
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
// bytes are waiting to be read and gives it back as soon as the socket is
// drained, so an idle tunnel holds no buffer: its memory is its goroutines
// and sockets.
var relayBufs = sync.Pool{New: func() any { b := make([]byte, 32<<10); return &b }}

// splice copies bytes both ways between the client and the upstream server.
// When one side ends its stream (EOF), the other side's write half is
// closed and the other direction goes on, so that a client that shut its
// write side still gets the answer. Both connections are closed once both
// directions ended, at the first error either way, or when the tunnel
// carried no bytes for the idle timeout. splice returns the first error that
// is not the expected end of a tunnel. One direction runs on the calling
// goroutine, which saves a goroutine stack per tunnel.
func (p *Proxy) splice(client net.Conn, early []byte, upstream net.Conn, x *exchange) error {
	a := newActivity(p.idleTimeout)
	ic, iu := newIdleConn(client, a), newIdleConn(upstream, a)
	var once sync.Once
	closeBoth := func() {
		once.Do(func() {
			_ = client.Close()
			_ = upstream.Close()
		})
	}
	run := func(dst, src *idleConn, early []byte, count func(int)) error {
		err := relay(dst, src, early, count)
		if err != nil {
			// Closing both ends is how the other direction is told to
			// stop: it fails with net.ErrClosed.
			closeBoth()
		}
		return err
	}
	up := make(chan error, 1)
	go func() { up <- run(iu, ic, early, p.counter(x, true)) }()
	errDown := run(ic, iu, nil, p.counter(x, false))
	errUp := <-up
	closeBoth()
	for _, err := range []error{errDown, errUp} {
		if err != nil && !errors.Is(err, net.ErrClosed) && !errors.Is(err, io.EOF) {
			return err
		}
	}
	return nil
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
		if err := src.waitReadable(); err != nil {
			return err
		}
		eof, err := drain(dst, src, count)
		if err != nil {
			return err
		}
		if eof {
			if cw, ok := dst.Conn.(closeWriter); ok && cw.CloseWrite() == nil {
				return nil
			}
			return io.EOF
		}
	}
}

// drain copies what src has to dst with a pooled buffer, until a read would
// wait (src is not readable any more) or src ends.
func drain(dst, src *idleConn, count func(int)) (eof bool, err error) {
	bp, _ := relayBufs.Get().(*[]byte) // the pool holds only *[]byte
	defer relayBufs.Put(bp)
	buf := *bp
	for {
		n, rerr := src.Read(buf)
		if n > 0 {
			written, werr := dst.Write(buf[:n])
			count(written)
			if werr != nil {
				return false, werr
			}
		}
		if errors.Is(rerr, io.EOF) {
			return true, nil
		}
		if rerr != nil {
			return false, rerr
		}
		if n < len(buf) {
			// A short read emptied the socket's buffer; wait for more
			// without holding this one.
			return false, nil
		}
	}
}

// bufferPool lends ReverseProxy the tunnels' buffers.
type bufferPool struct{}

func (bufferPool) Get() []byte {
	bp, _ := relayBufs.Get().(*[]byte) // the pool holds only *[]byte
	return *bp
}

func (bufferPool) Put(b []byte) {
	if cap(b) >= 32<<10 {
		b = b[:32<<10]
		relayBufs.Put(&b)
	}
}
