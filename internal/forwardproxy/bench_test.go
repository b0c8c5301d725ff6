package forwardproxy_test

import (
	"context"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"net/url"
	"strings"
	"testing"
	"time"

	"github.com/go-logr/logr"
	"github.com/prometheus/client_golang/prometheus"

	"github.com/egress-proxies/egress-proxies-operator/internal/forwardproxy"
)

// BenchmarkForwardGET measures one small GET through the proxy on a
// keep-alive connection, metrics on as in a proxy pod: the allocations per
// request are the figure to watch (hack/benchproxy measures the process).
func BenchmarkForwardGET(b *testing.B) {
	body := strings.Repeat("s", 1024)
	o := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) { _, _ = io.WriteString(w, body) }))
	b.Cleanup(o.Close)
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
	srv := &http.Server{Handler: p, ReadHeaderTimeout: time.Minute}
	go func() { _ = srv.Serve(ln) }()
	b.Cleanup(func() { _ = srv.Close(); p.CloseIdleConnections() })
	tr := &http.Transport{Proxy: http.ProxyURL(&url.URL{Scheme: "http", Host: ln.Addr().String(), User: url.UserPassword(testUser, testPassword)})}
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
	})
	req := "CONNECT " + target + " HTTP/1.1\r\nHost: " + target + "\r\nProxy-Authorization: " + basic(testUser, testPassword) + "\r\n\r\n" +
		"GET / HTTP/1.1\r\nHost: " + target + "\r\nConnection: close\r\n\r\n"
	b.ReportAllocs()
	for b.Loop() {
		c, err := net.Dial("tcp", ln.Addr().String())
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
