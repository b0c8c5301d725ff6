package forwardproxy

import (
	"errors"
	"io"
	"net"
	"sync"
	"syscall"
)

// RelayConn is the one connection wrapper of the data path: it keeps what
// a tunnel's relay uses of the connection under it, the half-close
// (CloseWrite), the socket for splice(2) (NetConn, and ReadFrom, which
// splices into it) and the raw connection that lets an idle tunnel wait for
// bytes without a buffer (SyscallConn). A wrapper embeds it and overrides
// only what it changes: Serve's counted connections, the connections it
// hands net/http with the bytes it sniffed, the pool gateway's member
// tunnels.
type RelayConn struct {
	net.Conn
	// Ahead, when set, reports whether bytes read ahead of the socket are
	// still to be returned by the wrapper's Read: until they are, NetConn
	// is nil and SyscallConn unsupported, since a relay that reads the
	// socket itself would skip them.
	Ahead func() bool
}

func (c RelayConn) ahead() bool { return c.Ahead != nil && c.Ahead() }

// CloseWrite shuts the write half of the connection, for a tunnel whose
// other side ended its stream.
func (c RelayConn) CloseWrite() error {
	if cw, ok := c.Conn.(closeWriter); ok {
		return cw.CloseWrite()
	}
	return errors.ErrUnsupported
}

// ReadFrom writes r's bytes with the connection's own ReadFrom, which a
// *net.TCPConn splices from a TCP connection (net/http's response writer
// hands it a plain answer's body read from an origin's socket). Bytes read
// ahead are a read's business only.
func (c RelayConn) ReadFrom(r io.Reader) (int64, error) { return readFromWith(c.Conn, r) }

// NetConn returns the connection under the wrapper, for a relay that
// splices it; nil while bytes are read ahead.
func (c RelayConn) NetConn() net.Conn {
	if c.ahead() {
		return nil
	}
	return c.Conn
}

// SyscallConn gives a relay the raw connection, unless bytes are read
// ahead.
func (c RelayConn) SyscallConn() (syscall.RawConn, error) {
	if sc, ok := c.Conn.(syscall.Conn); ok && !c.ahead() {
		return sc.SyscallConn()
	}
	return nil, errors.ErrUnsupported
}

// readFromWith writes r's bytes to w with w's own ReadFrom when it has one
// (a *net.TCPConn's splices from a TCP connection), else through a buffer.
func readFromWith(w io.Writer, r io.Reader) (int64, error) {
	if rf, ok := w.(io.ReaderFrom); ok {
		return rf.ReadFrom(r)
	}
	return io.Copy(w, r)
}

// AheadConn is a RelayConn whose reads return first bytes read ahead of
// the socket (while looking at a first request, or with a member's answer
// to CONNECT), then the socket's: a relay may splice the socket once those
// were read, never before (RelayConn.Ahead). Wrappers embed it by value and
// Init it in place, as its Ahead refers to it.
type AheadConn struct {
	RelayConn
	mu    sync.Mutex
	ahead []byte
}

// Init makes c read ahead first, then from conn; c must not be copied
// afterwards.
func (c *AheadConn) Init(conn net.Conn, ahead []byte) {
	c.ahead = ahead
	c.RelayConn = RelayConn{Conn: conn, Ahead: c.pending}
}

// pending reports whether bytes read ahead are still to be read.
func (c *AheadConn) pending() bool {
	c.mu.Lock()
	defer c.mu.Unlock()
	return len(c.ahead) > 0
}

// Read returns the bytes read ahead first, then the connection's.
func (c *AheadConn) Read(b []byte) (int, error) {
	c.mu.Lock()
	if len(c.ahead) > 0 {
		n := copy(b, c.ahead)
		c.ahead = c.ahead[n:]
		c.mu.Unlock()
		return n, nil
	}
	c.mu.Unlock()
	return c.Conn.Read(b)
}
