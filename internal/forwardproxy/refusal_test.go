package forwardproxy_test

import (
	"fmt"
	"net"
	"net/http"
	"net/netip"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"

	"github.com/egress-proxies/egress-proxies-operator/internal/egress"
	"github.com/egress-proxies/egress-proxies-operator/internal/forwardproxy"
)

// A refusal does not tell a client whether an internal name exists, nor
// what it resolves to: every destination that the policy refuses or that
// does not resolve to an allowed address gets one answer, byte for byte
// but the Date, for plain HTTP and for CONNECT alike (the issue: localhost
// gave 403 and localhost. 502). Only a destination the policy allows and
// that fails says why, in X-Upstream-Error.
func TestRefusalsDoNotTellWhetherANameExists(t *testing.T) {
	closed, err := net.Listen("tcp", "127.0.0.2:0")
	if err != nil {
		t.Fatal(err)
	}
	_, closedPort, _ := net.SplitHostPort(closed.Addr().String())
	_ = closed.Close()
	resolver := &fakeResolver{hosts: map[string][]netip.Addr{
		"localhost":        {netip.MustParseAddr("127.0.0.1"), netip.MustParseAddr("::1")},
		"metadata.test":    {netip.MustParseAddr("169.254.169.254")},
		"internal.test":    {netip.MustParseAddr("10.1.2.3")},
		"denied.test":      {netip.MustParseAddr("127.0.0.3")},
		"closed-port.test": {netip.MustParseAddr("127.0.0.2")},
		"empty.test":       {},
	}}
	cfg := forwardproxy.Config{
		Username: testUser, Password: testPassword, Resolver: resolver, DialTimeout: wait,
		Egress: egress.Policy{
			// 127.0.0.2 is allowed (its port is closed); the rest of
			// loopback is not, 127.0.0.3 by the deny list.
			AllowCIDRs:   []netip.Prefix{netip.MustParsePrefix("127.0.0.2/32")},
			DenyCIDRs:    []netip.Prefix{netip.MustParsePrefix("127.0.0.3/32")},
			ConnectPorts: []egress.PortRange{{From: 1, To: 65535}},
		},
	}
	h := start(t, cfg, time.Second)
	auth := "Proxy-Authorization: " + basic(testUser, testPassword) + "\r\n\r\n"
	answer := func(method, hostport string) string {
		req := "CONNECT " + hostport + " HTTP/1.1\r\nHost: " + hostport + "\r\n" + auth
		if method == http.MethodGet {
			req = "GET http://" + hostport + "/ HTTP/1.1\r\nHost: " + hostport + "\r\n" + auth
		}
		resp := raw(t, h.addr, req)
		resp.header.Del("Date")
		var b strings.Builder
		fmt.Fprintf(&b, "%d\n", resp.status)
		for _, k := range slices.Sorted(func(yield func(string) bool) {
			for k := range resp.header {
				if !yield(k) {
					return
				}
			}
		}) {
			fmt.Fprintf(&b, "%s: %s\n", k, strings.Join(resp.header[k], ", "))
		}
		b.WriteString(resp.body)
		return b.String()
	}
	port := "443"
	for _, method := range []string{http.MethodGet, http.MethodConnect} {
		t.Run(method, func(t *testing.T) {
			want := answer(method, "localhost:"+port)
			if !strings.HasPrefix(want, "403\n") || strings.Contains(want, "X-Egress-Denied") || strings.Contains(want, "X-Upstream-Error") {
				t.Fatalf("the refusal of localhost is not a plain 403:\n%s", want)
			}
			for _, tc := range []struct{ host, reason string }{
				{"localhost.", "the issue's case: the absolute name does not resolve here (502 before)"},
				{"nowhere.test", "a name that does not exist"},
				{"empty.test", "a name without addresses"},
				{"metadata.test", "a name of a link-local address"},
				{"internal.test", "a name of a private address"},
				{"denied.test", "a name of an address on the deny list"},
				{"127.0.0.1", "a loopback address"},
				{"169.254.169.254", "the metadata service's address"},
				{"[fd00::1]", "a private IPv6 address"},
			} {
				if diff := cmp.Diff(want, answer(method, tc.host+":"+port)); diff != "" {
					t.Errorf("%s (%s): answer differs from localhost's (-localhost +this):\n%s", tc.host, tc.reason, diff)
				}
			}
			got := answer(method, "closed-port.test:"+closedPort)
			if !strings.HasPrefix(got, "502\n") || !strings.Contains(got, "X-Upstream-Error: refused\n") {
				t.Errorf("an allowed destination whose port is closed: want 502 with X-Upstream-Error: refused, got\n%s", got)
			}
		})
	}
}
