//go:build unix

package forwardproxy

import (
	"errors"
	"io"
	"os"
	"syscall"
)

// rawReader reads a socket into buffers of relayBufs. Its callback runs
// read(2) directly: when the socket is empty (EAGAIN) it gives the buffer
// back and returns false, and the runtime's poller waits for bytes before
// calling it again. So an idle tunnel waits without a buffer, and bytes
// cost one read, as with net.Conn's Read, rather than a peek and a read.
// The callback is bound once, so that a read allocates nothing.
type rawReader struct {
	raw      syscall.RawConn
	callback func(fd uintptr) bool
	// What the callback read.
	bp  *[]byte
	n   int
	err error
}

// newRawReader returns a rawReader for c, or nil when c has no socket.
func newRawReader(c any) *rawReader {
	sc, ok := c.(syscall.Conn)
	if !ok {
		return nil
	}
	raw, err := sc.SyscallConn()
	if err != nil {
		return nil
	}
	r := &rawReader{raw: raw}
	r.callback = r.readFD
	return r
}

func (r *rawReader) readFD(fd uintptr) bool {
	b := getRelayBuf()
	for {
		r.n, r.err = syscall.Read(int(fd), *b)
		if !errors.Is(r.err, syscall.EINTR) {
			break
		}
	}
	if errors.Is(r.err, syscall.EAGAIN) {
		relayBufs.Put(b)
		return false
	}
	r.bp = b
	return true
}

// read waits for bytes and returns them in a pooled buffer, which the
// caller puts back; io.EOF at the end of the stream.
func (r *rawReader) read() (*[]byte, int, error) {
	r.bp, r.n, r.err = nil, 0, nil
	err := r.raw.Read(r.callback)
	bp, n := r.bp, r.n
	r.bp = nil
	switch {
	case err != nil:
		// The poller's error (closed, deadline): the callback kept no
		// buffer, or its read is dropped with the connection.
		if bp != nil {
			relayBufs.Put(bp)
		}
		return nil, 0, err
	case r.err != nil:
		relayBufs.Put(bp)
		return nil, 0, os.NewSyscallError("read", r.err)
	case n == 0:
		relayBufs.Put(bp)
		return nil, 0, io.EOF
	}
	return bp, n, nil
}
