//go:build unix

package forwardproxy

import (
	"errors"
	"net"
	"syscall"
)

// alive reports whether a kept-alive connection to an origin can carry the
// next request: nothing is waiting on it, neither the end of the stream
// (the origin closed it while it sat idle) nor bytes no request asked for.
// One recv(2) that peeks without waiting; http.Transport learns the same
// from its reader goroutine, which this transport does without.
func alive(c net.Conn) bool {
	sc, ok := c.(syscall.Conn)
	if !ok {
		return true
	}
	rc, err := sc.SyscallConn()
	if err != nil {
		return true
	}
	ok = false
	var b [1]byte
	// Control, not Read: the connection's read deadline (idleConn moves
	// it only when it fires) must not stand in the way of a peek.
	err = rc.Control(func(fd uintptr) {
		_, _, rerr := syscall.Recvfrom(int(fd), b[:], syscall.MSG_PEEK|syscall.MSG_DONTWAIT)
		ok = errors.Is(rerr, syscall.EAGAIN)
	})
	return ok && err == nil
}
