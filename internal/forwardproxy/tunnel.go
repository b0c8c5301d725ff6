package forwardproxy

import (
	"errors"
	"fmt"
	"io"
	"net"
	"sync/atomic"
	"time"
)

// errTunnelIdle ends a tunnel that carried no bytes for the idle timeout.
var errTunnelIdle = errors.New("tunnel idle")

// splice copies bytes both ways between the client and the upstream server
// until either side ends (EOF or an error) or the tunnel stays idle for the
// idle timeout; then it closes both connections and waits for both copies.
// It returns the first error that is not the expected end of a tunnel.
func (p *Proxy) splice(client net.Conn, fromClient io.Reader, upstream net.Conn, x *exchange) error {
	var last atomic.Int64 // UnixNano of the latest bytes either way
	touch := func() { last.Store(time.Now().UnixNano()) }
	touch()
	done := make(chan error, 2)
	go func() { done <- relay(upstream, fromClient, p.counter(x, true), touch) }()
	go func() { done <- relay(client, upstream, p.counter(x, false), touch) }()

	closed := false
	closeBoth := func() {
		if !closed {
			closed = true
			_ = client.Close()
			_ = upstream.Close()
		}
	}
	idle := time.NewTimer(p.idleTimeout)
	defer idle.Stop()
	var first error
	for pending := 2; pending > 0; {
		select {
		case err := <-done:
			pending--
			// Once both ends are closed, the other copy fails with
			// net.ErrClosed: that is how it is told to stop.
			if first == nil && err != nil && !closed && !errors.Is(err, net.ErrClosed) {
				first = err
			}
			closeBoth()
		case <-idle.C:
			if since := time.Since(time.Unix(0, last.Load())); since < p.idleTimeout {
				idle.Reset(p.idleTimeout - since)
				continue
			}
			if first == nil && !closed {
				first = fmt.Errorf("%w for %s", errTunnelIdle, p.idleTimeout)
			}
			closeBoth()
		}
	}
	return first
}

// relay copies src to dst until src ends; EOF is a clean end.
func relay(dst io.Writer, src io.Reader, count func(int), touch func()) error {
	buf := make([]byte, 32<<10)
	for {
		n, err := src.Read(buf)
		if n > 0 {
			touch()
			written, werr := dst.Write(buf[:n])
			count(written)
			if werr != nil {
				return werr
			}
		}
		if errors.Is(err, io.EOF) {
			return nil
		}
		if err != nil {
			return err
		}
	}
}
