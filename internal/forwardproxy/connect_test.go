package forwardproxy_test

import (
	"bufio"
	"bytes"
	"fmt"
	"io"
	"net"
	"net/http"
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

// A CONNECT that follows another request on a keep-alive connection would
// be read by net/http, whose parser is laxer than the proxy's (folded or
// duplicate Proxy-Authorization, Transfer-Encoding): it is refused, with or
// without valid credentials, nothing is dialed, and the connection ends.
func TestConnectAfterAnotherRequestIsRefused(t *testing.T) {
	o := newOrigin(t)
	up := newCountingServer(t)
	h := start(t, withAuth, time.Second)
	host := strings.TrimPrefix(o.URL, "http://")
	auth := "Proxy-Authorization: " + basic(testUser, testPassword) + "\r\n"
	get := "GET " + o.URL + "/first HTTP/1.1\r\nHost: " + host + "\r\n" + auth + "\r\n"
	for _, tc := range []struct {
		name, reason, connect string
	}{
		{name: "credentials", reason: "a well-formed CONNECT is not read by net/http either", connect: "CONNECT " + up.addr + " HTTP/1.1\r\nHost: " + up.addr + "\r\n" + auth + "\r\n"},
		{name: "no credentials", reason: "refused before the credentials, which net/http parsed", connect: "CONNECT " + up.addr + " HTTP/1.1\r\nHost: " + up.addr + "\r\n\r\n"},
		{
			name: "duplicate credentials", reason: "net/http would take the first of two Proxy-Authorization headers",
			connect: "CONNECT " + up.addr + " HTTP/1.1\r\nHost: " + up.addr + "\r\n" + auth + "Proxy-Authorization: Basic eDp5\r\n\r\n",
		},
	} {
		t.Run(tc.name, func(t *testing.T) {
			c, err := net.DialTimeout("tcp", h.addr, wait)
			if err != nil {
				t.Fatal(err)
			}
			defer func() { _ = c.Close() }()
			_ = c.SetDeadline(time.Now().Add(wait))
			br := bufio.NewReader(c)
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
			if _, err := io.WriteString(c, tc.connect+"early"); err != nil {
				t.Fatal(err)
			}
			resp, err = http.ReadResponse(br, &http.Request{Method: http.MethodConnect})
			if err != nil {
				t.Fatal(err)
			}
			body, _ := io.ReadAll(resp.Body)
			_ = resp.Body.Close()
			want := "400 close CONNECT must be the first request on its connection: open a new connection for each tunnel\n"
			if diff := cmp.Diff(want, fmt.Sprint(resp.StatusCode, " ", closeWord(resp.Close), " ", string(body))); diff != "" {
				t.Errorf("%s: answer (-want +got):\n%s", tc.reason, diff)
			}
			if _, err := br.ReadByte(); err == nil {
				t.Errorf("%s: the connection stayed open after the refusal", tc.reason)
			}
		})
	}
	if n := up.accepted.Load(); n != 0 {
		t.Errorf("a CONNECT read by net/http reached its target %d times", n)
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
