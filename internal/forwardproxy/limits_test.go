package forwardproxy_test

import (
	"bufio"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"runtime"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"

	"github.com/egress-proxies/egress-proxies-operator/internal/forwardproxy"
)

// Past MaxConcurrent, requests and tunnels get 503 with Retry-After; a slot
// that frees up serves again.
func TestCapsConcurrentRequestsAndTunnels(t *testing.T) {
	e := newEchoServer(t)
	o := newOrigin(t)
	cfg := withAuth
	cfg.MaxConcurrent = 2
	h := start(t, cfg, time.Second)
	auth := basic(testUser, testPassword)
	first, _ := tunnel(t, h.addr, e.addr, auth, "")
	tunnel(t, h.addr, e.addr, auth, "")

	host := strings.TrimPrefix(o.URL, "http://")
	for name, req := range map[string]string{
		"CONNECT": "CONNECT " + e.addr + " HTTP/1.1\r\nHost: " + e.addr + "\r\n",
		"GET":     "GET " + o.URL + "/ HTTP/1.1\r\nHost: " + host + "\r\n",
	} {
		resp := raw(t, h.addr, req+"Proxy-Authorization: "+auth+"\r\n\r\n")
		if diff := cmp.Diff(http.StatusServiceUnavailable, resp.status); diff != "" {
			t.Errorf("%s past the cap: status (-want +got):\n%s", name, diff)
		}
		if diff := cmp.Diff("1", resp.header.Get("Retry-After")); diff != "" {
			t.Errorf("%s past the cap: Retry-After (-want +got):\n%s", name, diff)
		}
	}
	if headers, _ := o.received(); len(headers) != 0 {
		t.Errorf("a request past the cap reached the origin")
	}

	_ = first.Close()
	receive(t, "the first tunnel's upstream to end", e.ended)
	eventually(t, "a freed slot to serve a request", func() bool {
		return raw(t, h.addr, "GET "+o.URL+"/ HTTP/1.1\r\nHost: "+host+"\r\nProxy-Authorization: "+auth+"\r\n\r\n").status == http.StatusOK
	})
}

// Past MaxConnections, a new connection is answered 503 before it sends
// anything, so idle keep-alive connections cannot exhaust the proxy.
func TestCapsConnections(t *testing.T) {
	o := newOrigin(t)
	h := startWith(t, withAuth, forwardproxy.ServeOptions{Drain: time.Second, MaxConnections: 2})
	var held []net.Conn
	for range 2 {
		c, err := net.DialTimeout("tcp", h.addr, wait)
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { _ = c.Close() })
		held = append(held, c)
	}
	// Accepting is asynchronous: the third connection is refused once the
	// server has taken the first two.
	eventually(t, "a connection past the cap to be refused", func() bool {
		c, err := net.DialTimeout("tcp", h.addr, wait)
		if err != nil {
			t.Fatal(err)
		}
		defer func() { _ = c.Close() }()
		_ = c.SetDeadline(time.Now().Add(wait))
		resp, err := http.ReadResponse(bufio.NewReader(c), nil)
		if err != nil {
			return false
		}
		_ = resp.Body.Close()
		return resp.StatusCode == http.StatusServiceUnavailable
	})
	_ = held[0].Close()
	host := strings.TrimPrefix(o.URL, "http://")
	eventually(t, "a freed connection slot to serve", func() bool {
		c, err := net.DialTimeout("tcp", h.addr, wait)
		if err != nil {
			t.Fatal(err)
		}
		defer func() { _ = c.Close() }()
		_ = c.SetDeadline(time.Now().Add(wait))
		_, _ = io.WriteString(c, "GET "+o.URL+"/ HTTP/1.1\r\nHost: "+host+"\r\nProxy-Authorization: "+basic(testUser, testPassword)+"\r\n\r\n")
		resp, err := http.ReadResponse(bufio.NewReader(c), nil)
		if err != nil {
			return false
		}
		_ = resp.Body.Close()
		return resp.StatusCode == http.StatusOK
	})
}

// A client that sends its headers slowly loses its connection after the
// header read timeout.
func TestHeaderReadTimeout(t *testing.T) {
	h := startWith(t, withAuth, forwardproxy.ServeOptions{Drain: time.Second, ReadHeaderTimeout: 200 * time.Millisecond})
	c, err := net.DialTimeout("tcp", h.addr, wait)
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = c.Close() }()
	if _, err := io.WriteString(c, "GET http://198.51.100.7/ HTTP/1.1\r\nHo"); err != nil {
		t.Fatal(err)
	}
	// Far longer than the 200 ms configured, far shorter than the 10 s
	// default: the connection ends in between.
	_ = c.SetReadDeadline(time.Now().Add(5 * time.Second))
	got, err := io.ReadAll(c)
	if err != nil {
		t.Fatalf("the connection was not closed after the header read timeout: %v", err)
	}
	// net/http either closes silently or says 400; the request is never
	// forwarded.
	if len(got) != 0 && !strings.HasPrefix(string(got), "HTTP/1.1 400 ") {
		t.Errorf("answered %q to a request whose headers never ended", got)
	}
}

// An upstream server that takes the request and never answers gets 504
// after the response header timeout.
func TestResponseHeaderTimeout(t *testing.T) {
	release := make(chan struct{})
	o := httptest.NewServer(http.HandlerFunc(func(_ http.ResponseWriter, r *http.Request) {
		select {
		case <-release:
		case <-r.Context().Done():
		}
	}))
	t.Cleanup(o.Close)
	t.Cleanup(func() { close(release) })
	cfg := withAuth
	cfg.ResponseHeaderTimeout = 200 * time.Millisecond
	h := start(t, cfg, time.Second)
	host := strings.TrimPrefix(o.URL, "http://")
	resp := raw(t, h.addr, "GET "+o.URL+"/ HTTP/1.1\r\nHost: "+host+"\r\nProxy-Authorization: "+basic(testUser, testPassword)+"\r\n\r\n")
	if diff := cmp.Diff(http.StatusGatewayTimeout, resp.status); diff != "" {
		t.Errorf("status (-want +got):\n%s", diff)
	}
}

// upgradeOrigin answers an Upgrade request with 101 and echoes the bytes
// that follow; ended receives a value when its connection ends.
func upgradeOrigin(t *testing.T) (*httptest.Server, chan struct{}) {
	t.Helper()
	ended := make(chan struct{}, 4)
	o := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.Header.Get("Upgrade") != "echo" {
			http.Error(w, "upgrade only", http.StatusBadRequest)
			return
		}
		c, brw, err := http.NewResponseController(w).Hijack()
		if err != nil {
			return
		}
		defer func() { _ = c.Close() }()
		_, _ = io.WriteString(c, "HTTP/1.1 101 Switching Protocols\r\nConnection: Upgrade\r\nUpgrade: echo\r\n\r\n")
		_, _ = io.Copy(c, brw)
		ended <- struct{}{}
	}))
	t.Cleanup(o.Close)
	return o, ended
}

// An upgraded connection (WebSocket and the like) is a tunnel too: busy it
// stays open, silent for the idle timeout it is closed on both sides.
func TestUpgradeIdleTimeout(t *testing.T) {
	o, ended := upgradeOrigin(t)
	cfg := withAuth
	cfg.IdleTimeout = 300 * time.Millisecond
	h := start(t, cfg, time.Second)
	c, err := net.DialTimeout("tcp", h.addr, wait)
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = c.Close() }()
	_ = c.SetDeadline(time.Now().Add(wait))
	host := strings.TrimPrefix(o.URL, "http://")
	_, _ = io.WriteString(c, "GET "+o.URL+"/ws HTTP/1.1\r\nHost: "+host+"\r\nConnection: Upgrade\r\nUpgrade: echo\r\nProxy-Authorization: "+basic(testUser, testPassword)+"\r\n\r\n")
	br := bufio.NewReader(c)
	resp, err := http.ReadResponse(br, &http.Request{Method: http.MethodGet})
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = resp.Body.Close() }()
	if resp.StatusCode != http.StatusSwitchingProtocols {
		t.Fatalf("status %s, want 101", resp.Status)
	}
	tick := time.NewTicker(30 * time.Millisecond)
	defer tick.Stop()
	until := time.Now().Add(3 * cfg.IdleTimeout)
	for time.Now().Before(until) {
		select {
		case <-tick.C:
		case <-t.Context().Done():
			t.Fatal(t.Context().Err())
		}
		if got, err := echo(c, br, "x"); err != nil || got != "x" {
			t.Fatalf("a busy upgraded connection closed: echo = %q, %v", got, err)
		}
	}
	if _, err := br.ReadByte(); !errors.Is(err, io.EOF) {
		t.Errorf("read on an idle upgraded connection = %v, want EOF", err)
	}
	receive(t, "the upstream side to end", ended)
}

// answerAtEOF is a TCP server that reads until the client shuts its write
// side and then answers how many bytes it read.
func answerAtEOF(t *testing.T) string {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	var wg sync.WaitGroup
	t.Cleanup(func() { _ = ln.Close(); wg.Wait() })
	wg.Go(func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			wg.Go(func() {
				defer func() { _ = c.Close() }()
				_ = c.SetDeadline(time.Now().Add(wait))
				n, _ := io.Copy(io.Discard, c)
				_, _ = fmt.Fprintf(c, "read %d bytes", n)
			})
		}
	})
	return ln.Addr().String()
}

// A client that closes its write side still gets the answer, through a
// tunnel and for a plain request.
func TestHalfClose(t *testing.T) {
	t.Run("CONNECT", func(t *testing.T) {
		target := answerAtEOF(t)
		h := start(t, withAuth, time.Second)
		c, br := tunnel(t, h.addr, target, basic(testUser, testPassword), "")
		if _, err := io.WriteString(c, "hello"); err != nil {
			t.Fatal(err)
		}
		if err := closeWrite(c); err != nil {
			t.Fatal(err)
		}
		got, err := io.ReadAll(br)
		if err != nil {
			t.Fatal(err)
		}
		if diff := cmp.Diff("read 5 bytes", string(got)); diff != "" {
			t.Errorf("answer after the client's half-close (-want +got):\n%s", diff)
		}
	})
	t.Run("HTTP", func(t *testing.T) {
		o := newOrigin(t)
		h := start(t, withAuth, time.Second)
		c, err := net.DialTimeout("tcp", h.addr, wait)
		if err != nil {
			t.Fatal(err)
		}
		defer func() { _ = c.Close() }()
		_ = c.SetDeadline(time.Now().Add(wait))
		host := strings.TrimPrefix(o.URL, "http://")
		_, _ = io.WriteString(c, "GET "+o.URL+"/half HTTP/1.1\r\nHost: "+host+"\r\nConnection: close\r\nProxy-Authorization: "+basic(testUser, testPassword)+"\r\n\r\n")
		if err := closeWrite(c); err != nil {
			t.Fatal(err)
		}
		resp, err := http.ReadResponse(bufio.NewReader(c), &http.Request{Method: http.MethodGet})
		if err != nil {
			t.Fatalf("no answer after the client's half-close: %v", err)
		}
		body, _ := io.ReadAll(resp.Body)
		_ = resp.Body.Close()
		if diff := cmp.Diff("200 hello GET /half", fmt.Sprint(resp.StatusCode, " ", string(body))); diff != "" {
			t.Errorf("answer after the client's half-close (-want +got):\n%s", diff)
		}
	})
}

// holdServer accepts connections and keeps them without a goroutine or a
// buffer each, so that a measurement of the proxy's memory is not the
// server's; release closes the connections held so far.
type heldConns struct {
	addr  string
	mu    sync.Mutex
	conns []net.Conn
}

func holdServer(b *testing.B) *heldConns {
	b.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		b.Fatal(err)
	}
	h := &heldConns{addr: ln.Addr().String()}
	done := make(chan struct{})
	go func() {
		defer close(done)
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			h.mu.Lock()
			h.conns = append(h.conns, c)
			h.mu.Unlock()
		}
	}()
	b.Cleanup(func() {
		_ = ln.Close()
		<-done
		h.release()
	})
	return h
}

func (h *heldConns) release() {
	h.mu.Lock()
	defer h.mu.Unlock()
	for _, c := range h.conns {
		_ = c.Close()
	}
	h.conns = nil
}

// inUse is the heap and goroutine stack memory in use after a collection.
func inUse() int64 {
	runtime.GC()
	var m runtime.MemStats
	runtime.ReadMemStats(&m)
	return int64(m.HeapInuse + m.StackInuse)
}

// closeWrite shuts the write side of a TCP connection.
func closeWrite(c net.Conn) error {
	tc, ok := c.(*net.TCPConn)
	if !ok {
		return fmt.Errorf("%T is not a TCP connection", c)
	}
	return tc.CloseWrite()
}

// Clients without credentials, or with wrong ones, never keep a connection
// slot: every refusal says Connection: close and ends its connection within
// a moment, on both paths (CONNECT read by Serve, anything else by
// net/http), so that with a small MaxConnections an authenticated client
// that comes after them is served at once, not answered 503. The header
// read timeout is longer than the test's wait, so that it cannot be what
// ends a refused connection.
func TestRefusedClientsDoNotHoldConnectionSlots(t *testing.T) {
	const slots = 3
	o := newOrigin(t)
	h := startWith(t, withAuth, forwardproxy.ServeOptions{Drain: time.Second, MaxConnections: slots, ReadHeaderTimeout: 2 * wait})
	host := strings.TrimPrefix(o.URL, "http://")
	wrong := "Proxy-Authorization: " + basic(testUser, "wrong") + "\r\n"
	for _, tc := range []struct {
		name, reason, request string
		wantStatus            int
	}{
		{
			name: "GET without credentials", reason: "a 407 used to leave the connection in keep-alive for two minutes",
			request: "GET " + o.URL + "/ HTTP/1.1\r\nHost: " + host + "\r\n\r\n", wantStatus: http.StatusProxyAuthRequired,
		},
		{
			name: "GET with wrong credentials", reason: "as without credentials",
			request: "GET " + o.URL + "/ HTTP/1.1\r\nHost: " + host + "\r\n" + wrong + "\r\n", wantStatus: http.StatusProxyAuthRequired,
		},
		{
			name: "POST whose body never comes", reason: "net/http reads the body of a refused request before it closes, with no deadline of its own",
			request: "POST " + o.URL + "/ HTTP/1.1\r\nHost: " + host + "\r\nContent-Length: 100\r\n\r\nonly a part", wantStatus: http.StatusProxyAuthRequired,
		},
		{
			name: "CONNECT without credentials", reason: "the CONNECT path closes after its refusals too",
			request: "CONNECT " + host + " HTTP/1.1\r\nHost: " + host + "\r\n\r\n", wantStatus: http.StatusProxyAuthRequired,
		},
		{
			name: "origin-form with credentials", reason: "a 400 ends the connection like any refusal",
			request: "GET / HTTP/1.1\r\nHost: " + host + "\r\nProxy-Authorization: " + basic(testUser, testPassword) + "\r\n\r\n", wantStatus: http.StatusBadRequest,
		},
	} {
		t.Run(tc.name, func(t *testing.T) {
			// Twice as many refused clients as there are slots, each
			// keeping its end open: they would hold every slot if the
			// proxy kept theirs.
			for range 2 * slots {
				c, err := net.DialTimeout("tcp", h.addr, wait)
				if err != nil {
					t.Fatal(err)
				}
				t.Cleanup(func() { _ = c.Close() })
				_ = c.SetDeadline(time.Now().Add(wait))
				if _, err := io.WriteString(c, tc.request); err != nil {
					t.Fatal(err)
				}
				method, _, _ := strings.Cut(tc.request, " ")
				br := bufio.NewReader(c)
				resp, err := http.ReadResponse(br, &http.Request{Method: method})
				if err != nil {
					t.Fatalf("%s: %v", tc.reason, err)
				}
				_, _ = io.Copy(io.Discard, resp.Body)
				_ = resp.Body.Close()
				if diff := cmp.Diff(fmt.Sprint(tc.wantStatus, " close"), fmt.Sprint(resp.StatusCode, " ", closeWord(resp.Close))); diff != "" {
					t.Errorf("%s: status and Connection header (-want +got):\n%s", tc.reason, diff)
				}
				if _, err := br.ReadByte(); !errors.Is(err, io.EOF) {
					t.Fatalf("%s: read after the refusal = %v, want the proxy to close the connection (EOF)", tc.reason, err)
				}
			}
			// Not eventually: the slots are free once the refused
			// clients saw their connections end.
			resp := raw(t, h.addr, "GET "+o.URL+"/ HTTP/1.1\r\nHost: "+host+"\r\nProxy-Authorization: "+basic(testUser, testPassword)+"\r\n\r\n")
			if diff := cmp.Diff(http.StatusOK, resp.status); diff != "" {
				t.Errorf("%s: the authenticated client after them (-want +got):\n%s", tc.reason, diff)
			}
		})
	}
}

// closeWord is "close" when a response said Connection: close (which
// http.ReadResponse turns into its Close field).
func closeWord(closed bool) string {
	if closed {
		return "close"
	}
	return "keep-alive"
}
