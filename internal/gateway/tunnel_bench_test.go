package gateway_test

import (
	"context"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"net/netip"
	"net/url"
	"strings"
	"testing"

	"github.com/go-logr/logr"
	"github.com/prometheus/client_golang/prometheus"

	"github.com/egress-proxies/egress-proxies-operator/internal/egress"
	"github.com/egress-proxies/egress-proxies-operator/internal/forwardproxy"
	"github.com/egress-proxies/egress-proxies-operator/internal/gateway"
)

// serveForBench serves h on a loopback port until b ends and returns its
// address.
func serveForBench(b *testing.B, h http.Handler) string {
	b.Helper()
	ln, err := forwardproxy.Listen(context.Background(), "127.0.0.1:0")
	if err != nil {
		b.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	served := make(chan error, 1)
	go func() { served <- forwardproxy.ServeWith(ctx, ln, h, forwardproxy.ServeOptions{}) }()
	b.Cleanup(func() {
		cancel()
		if err := <-served; err != nil {
			b.Error(err)
		}
	})
	return ln.Addr().String()
}

// BenchmarkGatewayConnectGET measures a new CONNECT tunnel per small GET
// through the gateway and one member (a forward proxy in the same process),
// as make bench-gateway's CONNECT scenario does across processes: the
// allocations per tunnel are the figure to watch (both proxies' and the
// client's and origin's; BenchmarkConnectGET in internal/forwardproxy is the
// member's share).
func BenchmarkGatewayConnectGET(b *testing.B) {
	body := strings.Repeat("s", 1024)
	o := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) { _, _ = io.WriteString(w, body) }))
	b.Cleanup(o.Close)
	target := strings.TrimPrefix(o.URL, "http://")
	mp, err := forwardproxy.New(forwardproxy.Config{Username: "umember00001", Password: "member-bench-password",
		Egress: egress.Policy{AllowCIDRs: []netip.Prefix{netip.MustParsePrefix("127.0.0.0/8")}, ConnectPorts: []egress.PortRange{{From: 1, To: 65535}}},
		Log:    logr.Discard()})
	if err != nil {
		b.Fatal(err)
	}
	member := serveForBench(b, mp)
	set := gateway.NewSet()
	u := url.URL{Scheme: "http", Host: member, User: url.UserPassword("umember00001", "member-bench-password")}
	set.Update("bench", []gateway.Entry{{Name: "m0", URL: u.String()}})
	gm, err := gateway.NewMetrics(prometheus.NewRegistry())
	if err != nil {
		b.Fatal(err)
	}
	g, err := gateway.New(gateway.Config{Members: set, Username: gwUser, Password: gwPass, Metrics: gm, Log: logr.Discard()})
	if err != nil {
		b.Fatal(err)
	}
	gp, err := gateway.NewProxy(g, gateway.ProxyOptions{Log: logr.Discard()})
	if err != nil {
		b.Fatal(err)
	}
	addr := serveForBench(b, gp)
	req := "CONNECT " + target + " HTTP/1.1\r\nHost: " + target + "\r\nProxy-Authorization: " + basic(gwUser, gwPass) + "\r\n\r\n" +
		"GET / HTTP/1.1\r\nHost: " + target + "\r\nConnection: close\r\n\r\n"
	b.ReportAllocs()
	for b.Loop() {
		c, err := net.Dial("tcp", addr)
		if err != nil {
			b.Fatal(err)
		}
		if _, err := io.WriteString(c, req); err != nil {
			b.Fatal(err)
		}
		got, err := io.ReadAll(c)
		if err != nil || !strings.HasPrefix(string(got), "HTTP/1.1 200 ") || !strings.HasSuffix(string(got), body) {
			b.Fatalf("tunnel: %v, %q", err, got)
		}
		if tc, ok := c.(*net.TCPConn); ok {
			// A reset: no TIME_WAIT socket per iteration on this side.
			_ = tc.SetLinger(0)
		}
		_ = c.Close()
	}
}
