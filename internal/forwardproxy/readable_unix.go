//go:build unix

package forwardproxy

import "syscall"

// peekReadable is a syscall.RawConn Read callback that peeks at one byte
// without taking it: false (the socket is empty) makes the runtime's poller
// wait for bytes and ask again; true (bytes, end of stream or an error)
// lets the caller's Read see them. It is how an idle tunnel waits without a
// read buffer.
func peekReadable(fd uintptr) bool {
	var b [1]byte
	_, _, err := syscall.Recvfrom(int(fd), b[:], syscall.MSG_PEEK|syscall.MSG_DONTWAIT)
	return err != syscall.EAGAIN && err != syscall.EINTR
}
