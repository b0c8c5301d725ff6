package forwardproxy_test

import (
	"bufio"
	"context"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"net/url"
	"strings"
	"testing"

	"github.com/go-logr/logr"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"

	"github.com/egress-proxies/egress-proxies-operator/internal/forwardproxy"
	"github.com/egress-proxies/egress-proxies-operator/internal/testing/poll"
)

// benchProxy is a Proxy served by ServeWith on 127.0.0.1 as a proxy pod
// runs it (Basic auth, metrics on, the default limits), with the egress
// policy widened to loopback: what every benchmark measures.
type benchProxy struct {
	addr    string
	metrics *forwardproxy.Metrics
}

// serveBench starts a benchProxy that stops when b ends.
func serveBench(b *testing.B) *benchProxy {
	b.Helper()
	m, err := forwardproxy.NewMetrics(prometheus.NewRegistry())
	if err != nil {
		b.Fatal(err)
	}
	p, err := forwardproxy.New(forwardproxy.Config{Username: testUser, Password: testPassword, Egress: onLoopback, Metrics: m, Log: logr.Discard()})
	if err != nil {
		b.Fatal(err)
	}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		b.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	served := make(chan error, 1)
	go func() { served <- forwardproxy.ServeWith(ctx, ln, p, forwardproxy.ServeOptions{}) }()
	b.Cleanup(func() {
		cancel()
		if err := <-served; err != nil {
			b.Error(err)
		}
		p.CloseIdleConnections()
	})
	return &benchProxy{addr: ln.Addr().String(), metrics: m}
}

// connectRequest is a CONNECT head to target with the bench's credentials.
func connectRequest(target string) string {
	return "CONNECT " + target + " HTTP/1.1\r\nHost: " + target + "\r\nProxy-Authorization: " + basic(testUser, testPassword) + "\r\n\r\n"
}

// BenchmarkForwardGET measures one small GET through the proxy on a
// keep-alive connection: the allocations per request are the figure to
// watch (hack/benchproxy measures the process).
func BenchmarkForwardGET(b *testing.B) {
	body := strings.Repeat("s", 1024)
	o := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) { _, _ = io.WriteString(w, body) }))
	b.Cleanup(o.Close)
	bp := serveBench(b)
	tr := &http.Transport{Proxy: http.ProxyURL(&url.URL{Scheme: "http", Host: bp.addr, User: url.UserPassword(testUser, testPassword)})}
	b.Cleanup(tr.CloseIdleConnections)
	c := &http.Client{Transport: tr}
	b.ReportAllocs()
	for b.Loop() {
		resp, err := c.Get(o.URL + "/")
		if err != nil {
			b.Fatal(err)
		}
		_, _ = io.Copy(io.Discard, resp.Body)
		_ = resp.Body.Close()
	}
}

// BenchmarkConnectGET measures a new CONNECT tunnel per small GET, as a
// crawler opens one per HTTPS host (without the TLS, which is the client's
// and the origin's cost, not the proxy's).
func BenchmarkConnectGET(b *testing.B) {
	body := strings.Repeat("s", 1024)
	o := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) { _, _ = io.WriteString(w, body) }))
	b.Cleanup(o.Close)
	target := strings.TrimPrefix(o.URL, "http://")
	bp := serveBench(b)
	req := connectRequest(target) + "GET / HTTP/1.1\r\nHost: " + target + "\r\nConnection: close\r\n\r\n"
	b.ReportAllocs()
	for b.Loop() {
		c, err := net.Dial("tcp", bp.addr)
		if err != nil {
			b.Fatal(err)
		}
		if _, err := io.WriteString(c, req); err != nil {
			b.Fatal(err)
		}
		got, err := io.ReadAll(c)
		if err != nil || !strings.HasSuffix(string(got), body) {
			b.Fatalf("tunnel: %v, %d bytes", err, len(got))
		}
		if tc, ok := c.(*net.TCPConn); ok {
			// A reset: no TIME_WAIT socket per iteration on this side.
			_ = tc.SetLinger(0)
		}
		_ = c.Close()
	}
}

// BenchmarkIdleTunnelMemory reports the heap and stack that one idle CONNECT
// tunnel holds in the process (the proxy's share, plus the two small
// net.Conn of the test's client and server): bytes/tunnel. The process RSS
// of the proxy alone is measured by hack/benchproxy.
func BenchmarkIdleTunnelMemory(b *testing.B) {
	idleTunnelMemory(b, "")
}

// BenchmarkIdleLateTunnelMemory is BenchmarkIdleTunnelMemory for tunnels
// whose CONNECT follows a GET on its connection, as Node.js keep-alive
// agents send it: net/http reads it, and the tunnel runs on net/http's
// connection goroutine.
func BenchmarkIdleLateTunnelMemory(b *testing.B) {
	// The origin closes its connection after each answer, so that no
	// kept origin connection is counted with the tunnels; the client's
	// connection to the proxy stays open (Connection is hop-by-hop).
	o := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
		w.Header().Set("Connection", "close")
		_, _ = io.WriteString(w, "ok")
	}))
	b.Cleanup(o.Close)
	idleTunnelMemory(b, "GET "+o.URL+"/ HTTP/1.1\r\nHost: "+strings.TrimPrefix(o.URL, "http://")+"\r\nProxy-Authorization: "+basic(testUser, testPassword)+"\r\n\r\n")
}

// idleTunnelMemory opens 500 idle tunnels per round, each on a connection
// that first sends before (a request to answer, or nothing), and reports
// what each holds.
func idleTunnelMemory(b *testing.B, before string) {
	b.Helper()
	const tunnels = 500
	hold := holdServer(b)
	bp := serveBench(b)
	req := connectRequest(hold.addr)
	var perTunnel float64
	for b.Loop() {
		conns := make([]net.Conn, 0, tunnels)
		inUseBefore := inUse()
		for range tunnels {
			c, err := net.Dial("tcp", bp.addr)
			if err != nil {
				b.Fatal(err)
			}
			br := bufio.NewReader(c)
			if before != "" {
				if _, err := io.WriteString(c, before); err != nil {
					b.Fatal(err)
				}
				resp, err := http.ReadResponse(br, nil)
				if err != nil {
					b.Fatal(err)
				}
				_, _ = io.Copy(io.Discard, resp.Body)
				_ = resp.Body.Close()
			}
			if _, err := io.WriteString(c, req); err != nil {
				b.Fatal(err)
			}
			// "HTTP/1.1 200 Connection established\r\n\r\n"
			buf := make([]byte, 39)
			if _, err := io.ReadFull(br, buf); err != nil || !strings.HasPrefix(string(buf), "HTTP/1.1 200") {
				b.Fatalf("CONNECT: %q, %v", buf, err)
			}
			conns = append(conns, c)
		}
		perTunnel = float64(inUse()-inUseBefore) / tunnels
		// Both ends closed, so that the tunnels end before the next
		// round instead of waiting for the idle timeout half-closed.
		for _, c := range conns {
			_ = c.Close()
		}
		hold.release()
		poll.Until(b, wait, func() (bool, string) {
			return testutil.ToFloat64(bp.metrics.ActiveConnections) == 0, "the tunnels to end"
		})
	}
	b.ReportMetric(perTunnel, "bytes/tunnel")
}
