package forwardproxy_test

import (
	"bufio"
	"bytes"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"github.com/prometheus/client_golang/prometheus/testutil"

	"github.com/egress-proxies/egress-proxies-operator/internal/forwardproxy"
	"github.com/egress-proxies/egress-proxies-operator/internal/testing/poll"
)

// countingServer accepts connections, counts them and holds them open
// without reading, until the test ends.
type countingServer struct {
	addr     string
	accepted atomic.Int64
}

func newCountingServer(t *testing.T) *countingServer {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	s := &countingServer{addr: ln.Addr().String()}
	var (
		mu    sync.Mutex
		conns []net.Conn
		wg    sync.WaitGroup
	)
	wg.Go(func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			s.accepted.Add(1)
			mu.Lock()
			conns = append(conns, c)
			mu.Unlock()
		}
	})
	t.Cleanup(func() {
		_ = ln.Close()
		wg.Wait()
		mu.Lock()
		defer mu.Unlock()
		for _, c := range conns {
			_ = c.Close()
		}
	})
	return s
}

// A CONNECT head that parsers could read differently is refused before
// anything is dialed, and the connection is closed after the answer.
func TestConnectRefusesMalformedHeads(t *testing.T) {
	up := newCountingServer(t)
	h := start(t, withAuth, time.Second)
	auth := "Proxy-Authorization: " + basic(testUser, testPassword) + "\r\n"
	target := up.addr
	for _, tc := range []struct {
		name     string
		reason   string
		request  string
		wantCode int
		wantBody string
	}{
		{
			name: "extra token", reason: "a request line of four tokens",
			request:  "CONNECT " + target + " HTTP/1.1 x\r\n" + auth + "\r\n",
			wantCode: http.StatusBadRequest, wantBody: "malformed request line\n",
		},
		{
			name: "HTTP/2.0", reason: "only HTTP/1.0 and 1.1 heads are read",
			request:  "CONNECT " + target + " HTTP/2.0\r\n" + auth + "\r\n",
			wantCode: http.StatusHTTPVersionNotSupported, wantBody: "unsupported HTTP version\n",
		},
		{
			name: "userinfo", reason: "the target is host:port and nothing else",
			request:  "CONNECT user@" + target + " HTTP/1.1\r\n" + auth + "\r\n",
			wantCode: http.StatusBadRequest, wantBody: "CONNECT needs a host:port target\n",
		},
		{
			name: "no port", reason: "as on the net/http path",
			request:  "CONNECT 127.0.0.1 HTTP/1.1\r\n" + auth + "\r\n",
			wantCode: http.StatusBadRequest, wantBody: "CONNECT needs a host:port target\n",
		},
		{
			name: "space before colon", reason: "another parser could read another header name",
			request:  "CONNECT " + target + " HTTP/1.1\r\nProxy-Authorization : " + basic(testUser, testPassword) + "\r\n\r\n",
			wantCode: http.StatusBadRequest, wantBody: "malformed header line\n",
		},
		{
			name: "folded line", reason: "obsolete line folding hides a header in another",
			request:  "CONNECT " + target + " HTTP/1.1\r\nX-A: b\r\n " + auth + "\r\n",
			wantCode: http.StatusBadRequest, wantBody: "malformed header line\n",
		},
		{
			name: "bare CR", reason: "a CR alone may end a line for a parser behind",
			request:  "CONNECT " + target + " HTTP/1.1\r\nX-A: b\r" + auth + "\r\n",
			wantCode: http.StatusBadRequest, wantBody: "malformed header line\n",
		},
		{
			name: "two credentials", reason: "a good and a bad Proxy-Authorization: parsers disagree on which counts",
			request:  "CONNECT " + target + " HTTP/1.1\r\n" + auth + "Proxy-Authorization: Basic eDp5\r\n\r\n",
			wantCode: http.StatusBadRequest, wantBody: "duplicate Host or Proxy-Authorization header\n",
		},
		{
			name: "chunked body", reason: "a body would be tunnelled here and read as a request elsewhere",
			request:  "CONNECT " + target + " HTTP/1.1\r\n" + auth + "Transfer-Encoding: chunked\r\n\r\n0\r\n\r\n",
			wantCode: http.StatusBadRequest, wantBody: "a CONNECT request carries no body\n",
		},
		{
			name: "content length", reason: "as a chunked body",
			request:  "CONNECT " + target + " HTTP/1.1\r\n" + auth + "Content-Length: 5\r\n\r\nhello",
			wantCode: http.StatusBadRequest, wantBody: "a CONNECT request carries no body\n",
		},
		{
			name: "oversized headers", reason: "past 64 KiB of head: 431, as net/http answers",
			request:  "CONNECT " + target + " HTTP/1.1\r\n" + auth + strings.Repeat("X-Pad: "+strings.Repeat("p", 100)+"\r\n", 700) + "\r\n",
			wantCode: http.StatusRequestHeaderFieldsTooLarge, wantBody: "request header fields too large\n",
		},
	} {
		t.Run(tc.name, func(t *testing.T) {
			c, err := net.DialTimeout("tcp", h.addr, wait)
			if err != nil {
				t.Fatal(err)
			}
			defer func() { _ = c.Close() }()
			_ = c.SetDeadline(time.Now().Add(wait))
			// Written while the proxy reads: an oversized head is
			// answered before all of it was sent.
			go func() { _, _ = io.WriteString(c, tc.request) }()
			br := bufio.NewReader(c)
			resp, err := http.ReadResponse(br, &http.Request{Method: http.MethodConnect})
			if err != nil {
				t.Fatalf("%s: %v", tc.reason, err)
			}
			body, _ := io.ReadAll(resp.Body)
			_ = resp.Body.Close()
			if diff := cmp.Diff(tc.wantCode, resp.StatusCode); diff != "" {
				t.Errorf("%s: status (-want +got):\n%s", tc.reason, diff)
			}
			if diff := cmp.Diff(tc.wantBody, string(body)); diff != "" {
				t.Errorf("%s: body (-want +got):\n%s", tc.reason, diff)
			}
			if _, err := br.ReadByte(); err == nil {
				t.Errorf("%s: the connection stayed open after the refusal", tc.reason)
			}
		})
	}
	if n := up.accepted.Load(); n != 0 {
		t.Errorf("a refused head reached the upstream server %d times", n)
	}
	// The proxy counts a request when it has finished with it, which may be
	// just after the client read the refusal.
	poll.Until(t, wait, func() (bool, string) {
		got := testutil.ToFloat64(h.metrics.Requests.WithLabelValues(forwardproxy.MethodConnect, "400"))
		return got == 9, fmt.Sprintf("CONNECT 400 counted %v times, want 9", got)
	})
}

// Whatever a client sends right behind its CONNECT head, before the 200,
// reaches the upstream server whole and in order, also when it is far more
// than the proxy reads at once.
func TestConnectForwardsPipelinedBytes(t *testing.T) {
	e := newEchoServer(t)
	h := start(t, withAuth, time.Second)
	payload := bytes.Repeat([]byte("0123456789abcdef"), 6<<10) // 96 KiB
	c, br := tunnel(t, h.addr, e.addr, basic(testUser, testPassword), string(payload))
	got := make([]byte, len(payload))
	if _, err := io.ReadFull(br, got); err != nil {
		t.Fatalf("reading the echo of the pipelined bytes: %v", err)
	}
	if !bytes.Equal(payload, got) {
		t.Errorf("the echo of %d pipelined bytes differs", len(payload))
	}
	if got, err := echo(c, br, "after"); err != nil || got != "after" {
		t.Errorf("echo after the pipelined bytes = %q, %v", got, err)
	}
}

// lateAnswer is the answer to a CONNECT sent after a GET (afterGet).
type lateAnswer struct {
	code  int
	close bool
	body  string // a refusal's; after a 200 the bytes are the tunnel's
}

// afterGet sends a GET and then request on one connection to the proxy at
// addr, and returns the answer to request, the connection and its reader:
// a CONNECT sent so is read by net/http, not by Serve's own parser.
func afterGet(t *testing.T, addr, originURL, request string) (lateAnswer, net.Conn, *bufio.Reader) {
	t.Helper()
	c, err := net.DialTimeout("tcp", addr, wait)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = c.Close() })
	_ = c.SetDeadline(time.Now().Add(wait))
	br := bufio.NewReader(c)
	get := "GET " + originURL + "/first HTTP/1.1\r\nHost: " + strings.TrimPrefix(originURL, "http://") +
		"\r\nProxy-Authorization: " + basic(testUser, testPassword) + "\r\n\r\n"
	if _, err := io.WriteString(c, get); err != nil {
		t.Fatal(err)
	}
	resp, err := http.ReadResponse(br, &http.Request{Method: http.MethodGet})
	if err != nil {
		t.Fatal(err)
	}
	_, _ = io.Copy(io.Discard, resp.Body)
	_ = resp.Body.Close()
	if resp.StatusCode != http.StatusOK || resp.Close {
		t.Fatalf("the GET before: %s, close %t", resp.Status, resp.Close)
	}
	if _, err := io.WriteString(c, request); err != nil {
		t.Fatal(err)
	}
	resp, err = http.ReadResponse(br, &http.Request{Method: http.MethodConnect})
	if err != nil {
		t.Fatal(err)
	}
	a := lateAnswer{code: resp.StatusCode, close: resp.Close}
	if resp.StatusCode != http.StatusOK {
		body, _ := io.ReadAll(resp.Body)
		a.body = string(body)
	}
	_ = resp.Body.Close()
	return a, c, br
}

// A CONNECT that follows another request on a keep-alive connection, as
// Node.js keep-alive agents and proxy-chain send it, opens a tunnel like
// the first request of a connection does, bytes sent behind its head
// included. net/http reads it, and what it read is held to the strict
// parser's rules: where the two differ, it is refused before anything is
// dialed, and the connection ends.
func TestConnectAfterAnotherRequest(t *testing.T) {
	o := newOrigin(t)
	e := newEchoServer(t)
	up := newCountingServer(t)
	h := start(t, withAuth, time.Second)
	auth := "Proxy-Authorization: " + basic(testUser, testPassword) + "\r\n"

	t.Run("tunnel", func(t *testing.T) {
		a, c, br := afterGet(t, h.addr, o.URL, "CONNECT "+e.addr+" HTTP/1.1\r\nHost: "+e.addr+"\r\n"+auth+"\r\nearly")
		if a.code != http.StatusOK {
			t.Fatalf("CONNECT after a GET: %d %q, want 200", a.code, a.body)
		}
		buf := make([]byte, len("early"))
		if _, err := io.ReadFull(br, buf); err != nil || string(buf) != "early" {
			t.Errorf("the bytes sent behind the head came back as %q, %v", buf, err)
		}
		if got, err := echo(c, br, "through"); err != nil || got != "through" {
			t.Errorf("echo through the tunnel = %q, %v", got, err)
		}
		poll.Until(t, wait, func() (bool, string) {
			got := testutil.ToFloat64(h.metrics.ActiveConnections)
			return got == 1, fmt.Sprintf("open tunnels %v, want 1", got)
		})
		_ = c.Close()
		poll.Until(t, wait, func() (bool, string) {
			got := testutil.ToFloat64(h.metrics.Requests.WithLabelValues(forwardproxy.MethodConnect, "200"))
			return got == 1, fmt.Sprintf("CONNECT 200 counted %v times, want 1 once the tunnel ended", got)
		})
	})

	for _, tc := range []struct {
		name, reason, connect string
		wantCode              int
		// wantBody is the answer's body when the proxy answers itself; ""
		// where net/http refuses the head before the proxy sees it.
		wantBody string
	}{
		{
			name: "no credentials", reason: "checked as on the first request",
			connect:  "CONNECT " + up.addr + " HTTP/1.1\r\nHost: " + up.addr + "\r\n\r\n",
			wantCode: http.StatusProxyAuthRequired, wantBody: "proxy authentication required\n",
		},
		{
			name: "two credentials", reason: "net/http keeps both Proxy-Authorization values; parsers disagree on which counts",
			connect:  "CONNECT " + up.addr + " HTTP/1.1\r\nHost: " + up.addr + "\r\n" + auth + "Proxy-Authorization: Basic eDp5\r\n\r\n",
			wantCode: http.StatusBadRequest, wantBody: "duplicate Host or Proxy-Authorization header\n",
		},
		{
			name: "chunked body", reason: "net/http would read a body that another parser tunnels",
			connect:  "CONNECT " + up.addr + " HTTP/1.1\r\n" + auth + "Transfer-Encoding: chunked\r\n\r\n0\r\n\r\n",
			wantCode: http.StatusBadRequest, wantBody: "a CONNECT request carries no body\n",
		},
		{
			name: "content length", reason: "as a chunked body",
			connect:  "CONNECT " + up.addr + " HTTP/1.1\r\n" + auth + "Content-Length: 5\r\n\r\nhello",
			wantCode: http.StatusBadRequest, wantBody: "a CONNECT request carries no body\n",
		},
		{
			name: "userinfo", reason: "net/http parses user@host:port as a URL; the target is host:port and nothing else",
			connect:  "CONNECT user@" + up.addr + " HTTP/1.1\r\n" + auth + "\r\n",
			wantCode: http.StatusBadRequest, wantBody: "CONNECT needs a host:port target\n",
		},
		{
			name: "path", reason: "net/http takes a path as a CONNECT target (Go's RPC over HTTP)",
			connect:  "CONNECT /rpc HTTP/1.1\r\nHost: " + up.addr + "\r\n" + auth + "\r\n",
			wantCode: http.StatusBadRequest, wantBody: "CONNECT needs a host:port target\n",
		},
		{
			name: "folded credentials", reason: "net/http joins a folded line to the one before: the credentials are not there",
			connect:  "CONNECT " + up.addr + " HTTP/1.1\r\nX-A: b\r\n " + auth + "\r\n",
			wantCode: http.StatusProxyAuthRequired, wantBody: "proxy authentication required\n",
		},
		{
			name: "bare CR", reason: "net/http refuses it itself",
			connect:  "CONNECT " + up.addr + " HTTP/1.1\r\nX-A: b\r" + auth + "\r\n",
			wantCode: http.StatusBadRequest,
		},
	} {
		t.Run(tc.name, func(t *testing.T) {
			a, _, br := afterGet(t, h.addr, o.URL, tc.connect)
			got := fmt.Sprint(a.code, " ", closeWord(a.close))
			if diff := cmp.Diff(fmt.Sprint(tc.wantCode, " close"), got); diff != "" {
				t.Errorf("%s: answer (-want +got):\n%s", tc.reason, diff)
			}
			if tc.wantBody != "" {
				if diff := cmp.Diff(tc.wantBody, a.body); diff != "" {
					t.Errorf("%s: body (-want +got):\n%s", tc.reason, diff)
				}
			}
			if _, err := br.ReadByte(); err == nil {
				t.Errorf("%s: the connection stayed open after the refusal", tc.reason)
			}
		})
	}
	if n := up.accepted.Load(); n != 0 {
		t.Errorf("a refused CONNECT reached its target %d times", n)
	}
}

// A Proxy is an http.Handler: under a server other than Serve, every
// CONNECT is read by net/http and opens its tunnel as a late one does.
func TestConnectUnderAnotherServer(t *testing.T) {
	e := newEchoServer(t)
	p, err := forwardproxy.New(withAuth)
	if err != nil {
		t.Fatal(err)
	}
	srv := httptest.NewServer(p)
	t.Cleanup(srv.Close)
	c, br := tunnel(t, strings.TrimPrefix(srv.URL, "http://"), e.addr, basic(testUser, testPassword), "early")
	buf := make([]byte, len("early"))
	if _, err := io.ReadFull(br, buf); err != nil || string(buf) != "early" {
		t.Errorf("the bytes sent behind the head came back as %q, %v", buf, err)
	}
	if got, err := echo(c, br, "ping"); err != nil || got != "ping" {
		t.Errorf("echo through the tunnel = %q, %v", got, err)
	}
}

// A tunnel opened by a CONNECT after another request is Serve's to end at
// the end of the drain like any other: also when its client has shut its
// write side, so that closing the client's connection alone would leave
// the upstream direction waiting.
func TestServeClosesLateTunnelsAfterTheDrain(t *testing.T) {
	o := newOrigin(t)
	up := newCountingServer(t)
	h := start(t, withAuth, 100*time.Millisecond)
	auth := "Proxy-Authorization: " + basic(testUser, testPassword) + "\r\n"
	a, c, br := afterGet(t, h.addr, o.URL, "CONNECT "+up.addr+" HTTP/1.1\r\nHost: "+up.addr+"\r\n"+auth+"\r\n")
	if a.code != http.StatusOK {
		t.Fatalf("CONNECT after a GET: %d %q", a.code, a.body)
	}
	if err := closeWrite(c); err != nil {
		t.Fatal(err)
	}
	eventually(t, "the tunnel to be open", func() bool { return testutil.ToFloat64(h.metrics.ActiveConnections) == 1 })
	if err := h.stop(); err != nil {
		t.Errorf("Serve = %v, want nil after closing the tunnel", err)
	}
	if _, err := br.ReadByte(); err == nil {
		t.Errorf("the client's connection is still open after the drain")
	}
}

// At the end of the drain, Serve closes tunnels whose client has shut its
// write side and whose server never answers: both connections, not just
// the client's (which would leave the upstream direction waiting until
// the idle timeout, and Serve reporting handlers still running).
func TestServeClosesHalfClosedTunnelsAfterTheDrain(t *testing.T) {
	up := newCountingServer(t)
	h := start(t, withAuth, 100*time.Millisecond)
	c, err := net.DialTimeout("tcp", h.addr, wait)
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = c.Close() }()
	_ = c.SetDeadline(time.Now().Add(wait))
	br := bufio.NewReader(c)
	auth := "Proxy-Authorization: " + basic(testUser, testPassword) + "\r\n"
	_, _ = io.WriteString(c, "CONNECT "+up.addr+" HTTP/1.1\r\nHost: "+up.addr+"\r\n"+auth+"\r\n")
	resp, err := http.ReadResponse(br, &http.Request{Method: http.MethodConnect})
	if err != nil {
		t.Fatal(err)
	}
	// The body of a CONNECT 200 is empty; the tunnel is read from br.
	_ = resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		t.Fatalf("CONNECT: %s", resp.Status)
	}
	if err := closeWrite(c); err != nil {
		t.Fatal(err)
	}
	eventually(t, "the tunnel to be open", func() bool { return testutil.ToFloat64(h.metrics.ActiveConnections) == 1 })
	if err := h.stop(); err != nil {
		t.Errorf("Serve = %v, want nil after closing the tunnel", err)
	}
	if _, err := br.ReadByte(); err == nil {
		t.Errorf("the client's connection is still open after the drain")
	}
}

// A client that sends its first bytes, or nothing, and then waits loses its
// connection after the header read timeout, whatever its method.
func TestConnectHeaderReadTimeout(t *testing.T) {
	h := startWith(t, withAuth, forwardproxy.ServeOptions{Drain: time.Second, ReadHeaderTimeout: 200 * time.Millisecond})
	for _, tc := range []struct {
		name, reason, partial string
	}{
		{name: "nothing", reason: "a connection that never sends a byte", partial: ""},
		{name: "method", reason: "a method cut short, CONNECT or not yet known", partial: "CONN"},
		{name: "headers", reason: "a CONNECT head that never ends", partial: "CONNECT 198.51.100.7:443 HTTP/1.1\r\nHo"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			c, err := net.DialTimeout("tcp", h.addr, wait)
			if err != nil {
				t.Fatal(err)
			}
			defer func() { _ = c.Close() }()
			if _, err := io.WriteString(c, tc.partial); err != nil {
				t.Fatal(err)
			}
			// Far longer than the 200 ms configured, far shorter than
			// the 10 s default.
			_ = c.SetReadDeadline(time.Now().Add(5 * time.Second))
			got, err := io.ReadAll(c)
			if err != nil {
				t.Fatalf("%s: the connection was not closed after the header read timeout: %v", tc.reason, err)
			}
			if len(got) != 0 {
				t.Errorf("%s: answered %q to a request whose head never ended", tc.reason, got)
			}
		})
	}
}

// A bulk transfer through a tunnel (what splice(2) carries on Linux once a
// read fills the relay's buffer) arrives whole and in order both ways, and
// the tunnel still works after it.
func TestTunnelCarriesBulkTransfers(t *testing.T) {
	e := newEchoServer(t)
	h := start(t, withAuth, time.Second)
	c, br := tunnel(t, h.addr, e.addr, basic(testUser, testPassword), "")
	payload := make([]byte, 4<<20)
	for i := range payload {
		payload[i] = byte(i * 7 % 251)
	}
	go func() { _, _ = c.Write(payload) }()
	got := make([]byte, len(payload))
	if _, err := io.ReadFull(br, got); err != nil {
		t.Fatalf("reading the echo of 4 MiB: %v", err)
	}
	if !bytes.Equal(payload, got) {
		t.Errorf("the echo of 4 MiB differs")
	}
	if got, err := echo(c, br, "after"); err != nil || got != "after" {
		t.Errorf("echo after the bulk transfer = %q, %v", got, err)
	}
	_ = c.Close()
	eventually(t, "the tunnel's bytes counted", func() bool {
		return testutil.ToFloat64(h.metrics.Bytes.WithLabelValues(forwardproxy.DirectionUp)) == float64(len(payload)+5) &&
			testutil.ToFloat64(h.metrics.Bytes.WithLabelValues(forwardproxy.DirectionDown)) == float64(len(payload)+5)
	})
}
