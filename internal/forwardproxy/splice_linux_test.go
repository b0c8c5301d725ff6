package forwardproxy

import (
	"bytes"
	"io"
	"net"
	"testing"
	"time"

	"github.com/egress-proxies/egress-proxies-operator/internal/testing/poll"
)

// spliceWait bounds the waits of these tests.
const spliceWait = 20 * time.Second

// tcpPair returns the two ends of a loopback TCP connection.
func tcpPair(t *testing.T) (*net.TCPConn, *net.TCPConn) {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = ln.Close() }()
	a, err := net.Dial("tcp", ln.Addr().String())
	if err != nil {
		t.Fatal(err)
	}
	b, err := ln.Accept()
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = a.Close(); _ = b.Close() })
	ta, okA := a.(*net.TCPConn)
	tb, okB := b.(*net.TCPConn)
	if !okA || !okB {
		t.Fatalf("not TCP connections: %T, %T", a, b)
	}
	return ta, tb
}

// spliceWaiting moves, with splice(2), exactly the bytes waiting in the
// source socket, and they arrive whole; through a wrapper that unwraps to a
// *net.TCPConn too, as Serve's client connections do.
func TestSpliceWaitingMovesWhatIsWaiting(t *testing.T) {
	const timeout = time.Minute
	sender, src := tcpPair(t)
	dst, receiver := tcpPair(t)
	payload := bytes.Repeat([]byte("0123456789abcdef"), 2<<10) // 32 KiB: what a loopback socket takes at once
	if _, err := sender.Write(payload); err != nil {
		t.Fatal(err)
	}
	a := newActivity(timeout)
	isrc := newIdleConn(&countedConn{Conn: src, l: &limitListener{max: 1}}, a)
	idst := newIdleConn(dst, a)
	poll.Until(t, spliceWait, func() (bool, string) {
		return waitingBytes(src) == len(payload), "the payload waiting in the source socket"
	})
	moved, err := spliceWaiting(idst, isrc)
	if err != nil {
		t.Fatal(err)
	}
	if moved != int64(len(payload)) {
		t.Fatalf("spliceWaiting moved %d bytes, want the %d waiting", moved, len(payload))
	}
	_ = receiver.SetReadDeadline(time.Now().Add(spliceWait))
	got := make([]byte, len(payload))
	if _, err := io.ReadFull(receiver, got); err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(payload, got) {
		t.Error("the spliced bytes differ")
	}
	if n := waitingBytes(src); n != 0 {
		t.Errorf("%d bytes left in the source", n)
	}
	// Nothing waiting: nothing moved, and no wait.
	if moved, err := spliceWaiting(idst, isrc); moved != 0 || err != nil {
		t.Errorf("spliceWaiting on an empty socket = %d, %v", moved, err)
	}
}
