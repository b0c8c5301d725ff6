package forwardproxy

import (
	"io"
	"math"
	"net"
	"syscall"
	"unsafe"
)

// spliceWaiting moves the bytes already waiting in src's socket to dst with
// splice(2), through (*net.TCPConn).ReadFrom, without copying them through
// the process: the relay calls it after a read filled its whole buffer,
// which is what a bulk transfer looks like. Only what is waiting is moved
// (FIONREAD), so that the splice never waits for more with a pipe taken:
// an idle tunnel still waits in the poller with nothing but its sockets.
// It moves nothing when either side is not a TCP connection (zero, nil).
func spliceWaiting(dst, src *idleConn) (int64, error) {
	d := tcpConnOf(dst.Conn)
	if d == nil {
		return 0, nil
	}
	// A splice that fails part way drops what its pipe holds, so its
	// deadlines must not be left over from an earlier moment: a whole
	// idle timeout from now, as a read or a write would have.
	_ = d.SetWriteDeadline(src.a.deadline())
	return moveWaiting(d, src, math.MaxInt64)
}

// moveWaiting hands dst the bytes already waiting in src's socket, at most
// limit, as an io.LimitedReader of src's *net.TCPConn: the reader that
// (*net.TCPConn).ReadFrom splices from, directly or through net/http's
// response writer on a TCP connection. It moves nothing when src is not a
// TCP connection or nothing waits (zero, nil).
func moveWaiting(dst io.ReaderFrom, src *idleConn, limit int64) (int64, error) {
	s := tcpConnOf(src.Conn)
	if s == nil {
		return 0, nil
	}
	n := min(int64(waitingBytes(s)), limit)
	if n <= 0 {
		return 0, nil
	}
	_ = s.SetReadDeadline(src.a.deadline())
	m, err := dst.ReadFrom(&io.LimitedReader{R: s, N: n})
	if m > 0 {
		src.a.touch()
	}
	return m, err
}

// waitingBytes is how many bytes c's socket holds to be read; 0 when it
// cannot tell.
func waitingBytes(c *net.TCPConn) int {
	raw, err := c.SyscallConn()
	if err != nil {
		return 0
	}
	n := 0
	_ = raw.Control(func(fd uintptr) {
		//nolint:gosec // G103: ioctl(FIONREAD) writes one int where the pointer says, and n outlives the call.
		if _, _, errno := syscall.Syscall(syscall.SYS_IOCTL, fd, syscall.TIOCINQ, uintptr(unsafe.Pointer(&n))); errno != 0 {
			n = 0
		}
	})
	return n
}

// tcpConnOf returns the *net.TCPConn under c (a client connection of Serve
// wraps one), or nil.
func tcpConnOf(c net.Conn) *net.TCPConn {
	for {
		switch v := c.(type) {
		case *net.TCPConn:
			return v
		case interface{ NetConn() net.Conn }:
			c = v.NetConn()
		default:
			return nil
		}
	}
}
