package forwardproxy

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"strconv"
	"sync/atomic"
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
	isrc := newIdleConn(&countedConn{RelayConn: RelayConn{Conn: src}, l: &limitListener{}}, a)
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

// A tunnel opened by a CONNECT after another request runs on the
// connection Serve handed net/http, with the bytes it sniffed in front:
// the tunnel may splice its socket once those were read, never before
// (a splice from the socket would skip them).
func TestPrefixConnUnwrapsOnceItsPrefixWasRead(t *testing.T) {
	_, server := tcpPair(t)
	pc := newPrefixConn(&countedConn{RelayConn: RelayConn{Conn: server}, l: &limitListener{}}, []byte("GET"))
	if c := tcpConnOf(pc); c != nil {
		t.Fatal("a connection with unread prefix bytes unwraps to its socket")
	}
	buf := make([]byte, 3)
	if _, err := io.ReadFull(pc, buf); err != nil {
		t.Fatal(err)
	}
	if c := tcpConnOf(pc); c != server {
		t.Errorf("once its prefix was read, the connection unwraps to %v, want its socket", c)
	}
}

// recordingSink stands for the client's response writer: it keeps what it
// is handed, in the order of the body, and the readers it got. Until sent
// is set, the answer's head has not gone to the client.
type recordingSink struct {
	out     *bytes.Buffer
	spliced int64
	readers []string
	sent    bool
}

func (s *recordingSink) sending() bool { return s.sent }

func (s *recordingSink) ReadFrom(r io.Reader) (int64, error) {
	lr, ok := r.(*io.LimitedReader)
	if !ok {
		s.readers = append(s.readers, fmt.Sprintf("%T", r))
	} else {
		s.readers = append(s.readers, fmt.Sprintf("%T of %T", lr, lr.R))
	}
	n, err := s.out.ReadFrom(r)
	s.spliced += n
	return n, err
}

// A plain answer of known length is read by originBody itself: once a read
// fills ReverseProxy's buffer, what waits in the origin's socket goes to
// the client's response writer as a limited *net.TCPConn (which the
// writer splices), between the reads and in the body's order; the
// connection goes back to the pool at the body's end, and the next request
// uses it (docs/performance.md, "Plain answers spliced").
func TestOriginBodyHandsTheBulkToTheClientsWriter(t *testing.T) {
	const size = 4 << 20
	payload := make([]byte, size)
	for i := range payload {
		payload[i] = byte(i * 7 / 5)
	}
	var conns atomic.Int64
	o := httptest.NewUnstartedServer(http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
		w.Header().Set("Content-Length", strconv.Itoa(size))
		_, _ = w.Write(payload)
	}))
	o.Config.ConnState = func(_ net.Conn, s http.ConnState) {
		if s == http.StateNew {
			conns.Add(1)
		}
	}
	o.Start()
	t.Cleanup(o.Close)
	tr := &originTransport{
		dial: func(ctx context.Context, addr string) (*idleConn, error) {
			c, err := (&net.Dialer{}).DialContext(ctx, "tcp", addr)
			if err != nil {
				return nil, err
			}
			return newIdleConn(c, newActivity(time.Minute)), nil
		},
		responseHeaderTimeout: spliceWait,
		idleTimeout:           time.Minute,
	}
	t.Cleanup(tr.CloseIdleConnections)
	for round := range 3 {
		// The last round's head never went to the client: a gateway
		// reads and drops a failed attempt's answer so.
		dropped := round == 2
		sink := &recordingSink{out: &bytes.Buffer{}, sent: !dropped}
		ctx := context.WithValue(t.Context(), exchangeKey{}, &exchange{sink: sink})
		req, err := http.NewRequestWithContext(ctx, http.MethodGet, o.URL+"/big", http.NoBody)
		if err != nil {
			t.Fatal(err)
		}
		resp, err := tr.RoundTrip(req)
		if err != nil {
			t.Fatal(err)
		}
		buf := make([]byte, 32<<10) // ReverseProxy's, from bufferPool
		for {
			n, err := resp.Body.Read(buf)
			sink.out.Write(buf[:n])
			if errors.Is(err, io.EOF) {
				break
			}
			if err != nil {
				t.Fatalf("round %d: %v", round, err)
			}
		}
		_ = resp.Body.Close()
		if !bytes.Equal(sink.out.Bytes(), payload) {
			t.Fatalf("round %d: the body arrived altered: %d bytes, want %d", round, sink.out.Len(), size)
		}
		switch {
		case dropped && sink.spliced != 0:
			t.Errorf("round %d: %d bytes of an answer whose head was not sent went to the client's writer", round, sink.spliced)
		case !dropped && sink.spliced == 0:
			t.Errorf("round %d: nothing was handed to the client's writer: the bulk went through the process", round)
		}
		for _, r := range sink.readers {
			if r != "*io.LimitedReader of *net.TCPConn" {
				t.Errorf("round %d: the writer got a %s, which (*net.TCPConn).ReadFrom does not splice", round, r)
			}
		}
	}
	if n := conns.Load(); n != 1 {
		t.Errorf("the origin saw %d connections for three answers read whole, want 1 kept alive", n)
	}
}
