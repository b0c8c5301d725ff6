package forwardproxy

import (
	"context"
	"net"
	"runtime"
	"testing"
	"time"

	"github.com/go-logr/logr"

	"github.com/egress-proxies/egress-proxies-operator/internal/testing/poll"
)

// The workers that read first requests are reused, but no more than
// maxIdleWorkers of them wait once a burst of connections is over, and none
// is left once the server is closed.
func TestIdleWorkersAreBounded(t *testing.T) {
	p, err := New(Config{AllowOpen: true, Log: logr.Discard()})
	if err != nil {
		t.Fatal(err)
	}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	base := runtime.NumGoroutine()
	s := newConnServer(context.Background(), p, newTracker(), ln, time.Minute)
	closed := false
	defer func() {
		if !closed {
			_ = s.Close()
		}
	}()
	// A burst of connections that send nothing: each holds a worker
	// waiting for its head until the client closes it.
	const burst = maxIdleWorkers + 40
	conns := make([]net.Conn, 0, burst)
	for range burst {
		c, err := net.Dial("tcp", ln.Addr().String())
		if err != nil {
			t.Fatal(err)
		}
		conns = append(conns, c)
	}
	const wait = 30 * time.Second
	poll.Until(t, wait, func() (bool, string) {
		s.mu.Lock()
		defer s.mu.Unlock()
		return len(s.fresh) == burst, "every connection of the burst to wait for its head"
	})
	for _, c := range conns {
		_ = c.Close()
	}
	// The accept loop, and at most maxIdleWorkers workers.
	poll.Until(t, wait, func() (bool, string) {
		return runtime.NumGoroutine()-base <= 1+maxIdleWorkers && s.idle.Load() == maxIdleWorkers,
			"the workers past maxIdleWorkers to end"
	})
	_ = s.Close()
	closed = true
	poll.Until(t, wait, func() (bool, string) {
		return runtime.NumGoroutine() <= base && s.idle.Load() == 0, "the idle workers to end with the server"
	})
}
