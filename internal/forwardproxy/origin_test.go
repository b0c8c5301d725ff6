package forwardproxy_test

import (
	"bytes"
	"context"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"net/url"
	"strconv"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"github.com/prometheus/client_golang/prometheus/testutil"

	"github.com/egress-proxies/egress-proxies-operator/internal/forwardproxy"
)

type connCount struct{}

// countingOrigin answers each request with its own path and counts the
// connections it accepted. With dropSecond, it takes the second request
// of each connection and closes the connection without an answer, as an
// origin does that closed an idle keep-alive connection the moment the
// request arrived.
func countingOrigin(t *testing.T, dropSecond bool) (*httptest.Server, *atomic.Int64) {
	t.Helper()
	return countingOriginOf(t, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		n, _ := r.Context().Value(connCount{}).(*atomic.Int64)
		if dropSecond && n.Add(1) == 2 {
			if c, _, err := http.NewResponseController(w).Hijack(); err == nil {
				_ = c.Close()
			}
			return
		}
		_, _ = io.ReadAll(r.Body)
		_, _ = io.WriteString(w, "answer to "+r.Method+" "+r.URL.Path)
	}))
}

// countingOriginOf is an origin that serves h and counts the connections it
// accepted.
func countingOriginOf(t *testing.T, h http.Handler) (*httptest.Server, *atomic.Int64) {
	t.Helper()
	var conns atomic.Int64
	o := httptest.NewUnstartedServer(h)
	o.Config.ConnContext = func(ctx context.Context, _ net.Conn) context.Context {
		conns.Add(1)
		return context.WithValue(ctx, connCount{}, new(atomic.Int64))
	}
	o.Start()
	t.Cleanup(o.Close)
	return o, &conns
}

// send makes one request through the proxy and returns its status and body.
func send(t *testing.T, c *http.Client, method, url, body string) (int, string) {
	t.Helper()
	req, err := http.NewRequest(method, url, strings.NewReader(body))
	if err != nil {
		t.Fatal(err)
	}
	if body == "" {
		req.Body = http.NoBody
	}
	resp, err := c.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = resp.Body.Close() }()
	got, err := io.ReadAll(resp.Body)
	if err != nil {
		t.Fatal(err)
	}
	return resp.StatusCode, string(got)
}

// TestPlainRequestsKeepTheirOriginConnection: plain requests to one origin,
// one after the other, go over one kept-alive connection (the proxy's own
// transport, docs/performance.md), each with its own answer.
func TestPlainRequestsKeepTheirOriginConnection(t *testing.T) {
	o, conns := countingOrigin(t, false)
	h := start(t, withAuth, wait)
	c := h.client(t, testUser, testPassword)
	for i := range 20 {
		path := "/page" + string(rune('a'+i))
		status, body := send(t, c, http.MethodGet, o.URL+path, "")
		if diff := cmp.Diff(fmt.Sprintf("%d answer to GET %s", http.StatusOK, path), fmt.Sprintf("%d %s", status, body)); diff != "" {
			t.Fatalf("request %d (-want +got):\n%s", i+1, diff)
		}
	}
	if got := conns.Load(); got != 1 {
		t.Errorf("the origin accepted %d connections for 20 requests in a row, want 1 (kept alive)", got)
	}
}

// TestAKeptAliveConnectionTheOriginDroppedIsNoFailure: an origin that
// closes a kept-alive connection when the next request arrives on it,
// without an answer, costs a GET or a DELETE nothing: the request goes again
// on a new connection, as with http.Transport. A request with a body
// cannot be sent again (its body was read) and gets 502, as there.
func TestAKeptAliveConnectionTheOriginDroppedIsNoFailure(t *testing.T) {
	o, conns := countingOrigin(t, true)
	h := start(t, withAuth, wait)
	c := h.client(t, testUser, testPassword)
	for i, m := range []string{http.MethodGet, http.MethodGet, http.MethodDelete, http.MethodGet} {
		if status, body := send(t, c, m, o.URL+"/x", ""); status != http.StatusOK || body != "answer to "+m+" /x" {
			t.Fatalf("request %d (%s): %d %q, want 200 and its answer", i+1, m, status, body)
		}
	}
	if got := conns.Load(); got != 4 {
		t.Errorf("the origin accepted %d connections, want 4 (each second request on a connection was dropped and sent again)", got)
	}
	if status, _ := send(t, c, http.MethodPost, o.URL+"/form", "a=1"); status != http.StatusBadGateway {
		t.Errorf("a POST with a body on a dropped connection: %d, want 502", status)
	}
}

// TestAConnectionTheOriginClosedWhileIdleIsNotReused: an origin that
// closes its idle keep-alive connections (its idle timeout, here 50 ms)
// says so with the end of the stream; the proxy sees it before it reuses
// the connection, so even a POST with a body, which cannot be sent twice,
// goes on a new connection and gets its answer.
func TestAConnectionTheOriginClosedWhileIdleIsNotReused(t *testing.T) {
	var closed atomic.Int64
	o := httptest.NewUnstartedServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		b, _ := io.ReadAll(r.Body)
		_, _ = io.WriteString(w, r.Method+" "+string(b))
	}))
	o.Config.IdleTimeout = 50 * time.Millisecond
	o.Config.ConnState = func(_ net.Conn, s http.ConnState) {
		if s == http.StateClosed {
			closed.Add(1)
		}
	}
	o.Start()
	t.Cleanup(o.Close)
	h := start(t, withAuth, wait)
	c := h.client(t, testUser, testPassword)
	if status, body := send(t, c, http.MethodGet, o.URL+"/", ""); status != http.StatusOK || body != "GET " {
		t.Fatalf("the first request: %d %q", status, body)
	}
	eventually(t, "the origin closes the idle connection", func() bool { return closed.Load() == 1 })
	if status, body := send(t, c, http.MethodPost, o.URL+"/", "a=1"); status != http.StatusOK || body != "POST a=1" {
		t.Errorf("a POST after the origin closed the idle connection: %d %q, want 200 \"POST a=1\"", status, body)
	}
}

// TestAKeptAliveConnectionEndsAfterTheIdleTimeout: a kept-alive connection
// to an origin that no request uses is closed after the proxy's idle
// timeout, so a crawl over many sites leaves no sockets behind.
func TestAKeptAliveConnectionEndsAfterTheIdleTimeout(t *testing.T) {
	var closed atomic.Int64
	o := httptest.NewUnstartedServer(http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
		_, _ = io.WriteString(w, "ok")
	}))
	o.Config.ConnState = func(_ net.Conn, s http.ConnState) {
		if s == http.StateClosed {
			closed.Add(1)
		}
	}
	o.Start()
	t.Cleanup(o.Close)
	cfg := withAuth
	cfg.IdleTimeout = 100 * time.Millisecond
	h := start(t, cfg, wait)
	if status, _ := send(t, h.client(t, testUser, testPassword), http.MethodGet, o.URL+"/", ""); status != http.StatusOK {
		t.Fatalf("status %d", status)
	}
	eventually(t, "the proxy closes its idle connection to the origin", func() bool { return closed.Load() == 1 })
}

// TestLargeAnswersArriveWholeOnKeptConnections: answers of a few MiB with a
// Content-Length, which the proxy splices from the origin's socket to the
// client's (docs/performance.md, "Plain answers spliced"), arrive byte for
// byte, leave both kept-alive connections usable (three answers, one
// connection on each side), and are counted whole in the proxy's
// metrics; a HEAD gets the length without a body; an answer the origin cuts
// short fails for the client and costs the next request nothing.
func TestLargeAnswersArriveWholeOnKeptConnections(t *testing.T) {
	const size = 3 << 20
	payload := make([]byte, size)
	for i := range payload {
		payload[i] = byte(i % 251)
	}
	o, originConns := countingOriginOf(t, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Length", strconv.Itoa(size))
		if r.URL.Path == "/cut" {
			// Half the body, then the connection ends.
			w.WriteHeader(http.StatusOK)
			_, _ = w.Write(payload[:size/2])
			if c, _, err := http.NewResponseController(w).Hijack(); err == nil {
				_ = c.Close()
			}
			return
		}
		_, _ = w.Write(payload)
	}))
	h := start(t, withAuth, wait)
	var clientConns atomic.Int64
	u := &url.URL{Scheme: "http", Host: h.addr, User: url.UserPassword(testUser, testPassword)}
	tr := &http.Transport{Proxy: http.ProxyURL(u), DialContext: func(ctx context.Context, network, addr string) (net.Conn, error) {
		clientConns.Add(1)
		return (&net.Dialer{}).DialContext(ctx, network, addr)
	}}
	t.Cleanup(tr.CloseIdleConnections)
	c := &http.Client{Transport: tr, Timeout: wait}
	// get returns the answer's status, its declared length and its body.
	get := func(method, path string) (int, int64, []byte, error) {
		req, err := http.NewRequest(method, o.URL+path, http.NoBody)
		if err != nil {
			t.Fatal(err)
		}
		resp, err := c.Do(req)
		if err != nil {
			return 0, 0, nil, err
		}
		defer func() { _ = resp.Body.Close() }()
		b, err := io.ReadAll(resp.Body)
		return resp.StatusCode, resp.ContentLength, b, err
	}
	for i := range 3 {
		code, _, body, err := get(http.MethodGet, "/big")
		if err != nil {
			t.Fatalf("answer %d: %v", i+1, err)
		}
		if code != http.StatusOK || !bytes.Equal(body, payload) {
			t.Fatalf("answer %d: %d with %d bytes, want 200 with the origin's %d", i+1, code, len(body), size)
		}
	}
	if _, length, body, err := get(http.MethodHead, "/big"); err != nil || length != size || len(body) != 0 {
		t.Errorf("HEAD: %v, length %d and %d bytes of body, want length %d and none", err, length, len(body), size)
	}
	if diff := cmp.Diff([2]int64{1, 1}, [2]int64{clientConns.Load(), originConns.Load()}); diff != "" {
		t.Errorf("connections [client's, origin's] (-want +got):\n%s", diff)
	}
	// Counted as they flow: the client may have the last bytes a moment
	// before the proxy counted them.
	eventually(t, "the answers' bytes counted whole", func() bool {
		return testutil.ToFloat64(h.metrics.Bytes.WithLabelValues(forwardproxy.DirectionDown)) == 3*size
	})
	if _, _, body, err := get(http.MethodGet, "/cut"); err == nil {
		t.Errorf("an answer cut at %d of %d bytes reached the client as whole", len(body), size)
	}
	if code, _, body, err := get(http.MethodGet, "/big"); err != nil || code != http.StatusOK || !bytes.Equal(body, payload) {
		t.Errorf("after a cut answer: %d, %v, %d bytes, want 200 and the whole answer", code, err, len(body))
	}
}
