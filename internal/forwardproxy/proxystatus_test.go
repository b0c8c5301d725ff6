package forwardproxy_test

import (
	"fmt"
	"io"
	"net"
	"net/netip"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"

	"github.com/egress-proxies/egress-proxies-operator/internal/egress"
	"github.com/egress-proxies/egress-proxies-operator/internal/forwardproxy"
)

// TestProxyStatusOnEveryRefusal: with a ProxyStatus name, every answer the
// proxy gives itself, on both paths, carries RFC 9209's Proxy-Status with
// that name and the error type of what went wrong; a relayed answer and a
// proxy without a name carry none.
func TestProxyStatusOnEveryRefusal(t *testing.T) {
	closed, err := net.Listen("tcp", "127.0.0.2:0")
	if err != nil {
		t.Fatal(err)
	}
	closedAddr := closed.Addr().String()
	_ = closed.Close()
	o := newOrigin(t)
	originHost := strings.TrimPrefix(o.URL, "http://")
	cfg := forwardproxy.Config{
		Username: testUser, Password: testPassword, ProxyStatus: "egress-gateway",
		Egress: egress.Policy{
			AllowCIDRs:   []netip.Prefix{netip.MustParsePrefix("127.0.0.1/32"), netip.MustParsePrefix("127.0.0.2/32")},
			ConnectPorts: []egress.PortRange{{From: 1, To: 65535}},
		},
	}
	h := start(t, cfg, time.Second)
	plain := start(t, forwardproxy.Config{Username: testUser, Password: testPassword}, time.Second)
	auth := "Proxy-Authorization: " + basic(testUser, testPassword) + "\r\n"
	get := func(hostport, extra string) string {
		return "GET http://" + hostport + "/ HTTP/1.1\r\nHost: " + hostport + "\r\n" + extra + "\r\n"
	}
	connect := func(hostport, extra string) string {
		return "CONNECT " + hostport + " HTTP/1.1\r\nHost: " + hostport + "\r\n" + extra + "\r\n"
	}
	for _, tc := range []struct {
		reason, request string
		plain           bool // to the proxy without a name
		want            string
	}{
		{reason: "no credentials, plain", request: get(originHost, ""), want: "407 egress-gateway; error=http_request_denied"},
		{reason: "no credentials, CONNECT", request: connect(originHost, ""), want: "407 egress-gateway; error=http_request_denied"},
		{reason: "a malformed CONNECT head", request: connect(originHost, auth+"Bad Header: x\r\n"), want: "400 egress-gateway; error=http_request_error"},
		{reason: "not a proxy request", request: "GET / HTTP/1.1\r\nHost: x\r\n" + auth + "\r\n", want: "400 egress-gateway; error=http_request_error"},
		{reason: "a destination the policy refuses", request: get("10.0.0.1:80", auth), want: "403 egress-gateway; error=destination_ip_prohibited"},
		{reason: "a destination that refuses the connection, plain", request: get(closedAddr, auth), want: "502 egress-gateway; error=connection_refused"},
		{reason: "a destination that refuses the connection, CONNECT", request: connect(closedAddr, auth), want: "502 egress-gateway; error=connection_refused"},
		{reason: "an answer relayed from the destination is not the proxy's", request: get(originHost, auth), want: "200 "},
		{reason: "a proxy without a name sends none", request: get(originHost, ""), plain: true, want: "407 "},
	} {
		addr := h.addr
		if tc.plain {
			addr = plain.addr
		}
		resp := raw(t, addr, tc.request)
		if diff := cmp.Diff(tc.want, fmt.Sprintf("%d %s", resp.status, resp.header.Get(forwardproxy.ProxyStatusHeader))); diff != "" {
			t.Errorf("%s (-want +got):\n%s", tc.reason, diff)
		}
	}

	// A connection past the cap is answered before anything is read.
	capped := startWith(t, cfg, forwardproxy.ServeOptions{Drain: time.Second, MaxConnections: 1})
	first, err := net.DialTimeout("tcp", capped.addr, wait)
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = first.Close() }()
	if _, err := io.WriteString(first, "GET "); err != nil { // counted, not done
		t.Fatal(err)
	}
	resp := raw(t, capped.addr, get(originHost, auth))
	if diff := cmp.Diff("503 egress-gateway; error=connection_limit_reached", fmt.Sprintf("%d %s", resp.status, resp.header.Get(forwardproxy.ProxyStatusHeader))); diff != "" {
		t.Errorf("past the connection cap (-want +got):\n%s", diff)
	}
	if _, err := forwardproxy.New(forwardproxy.Config{Username: testUser, Password: testPassword, ProxyStatus: "bad name"}); err == nil {
		t.Error("a Proxy-Status name that is not a token was accepted")
	}
}
