package forwardproxy_test

import (
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"net/netip"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"

	"github.com/egress-proxies/egress-proxies-operator/internal/egress"
	"github.com/egress-proxies/egress-proxies-operator/internal/forwardproxy"
)

// The cases, end to end: each refused request gets 403 with the
// policy's reason, never reaches anything, and the answer names no address
// nor credential; the same destinations work once the policy is widened.
func TestEgressPolicy(t *testing.T) {
	o := newOrigin(t)
	e := newEchoServer(t)
	originHost := strings.TrimPrefix(o.URL, "http://")
	_, originPort, _ := net.SplitHostPort(originHost)
	_, echoPort, _ := net.SplitHostPort(e.addr)
	resolver := &fakeResolver{hosts: map[string][]netip.Addr{
		// Names whose DNS answers point inside: the check must be on
		// the resolved address.
		"rebound.test":  {netip.MustParseAddr("127.0.0.1")},
		"internal.test": {netip.MustParseAddr("fd12:3456::1")},
		"cgnat.test":    {netip.MustParseAddr("100.64.0.1")},
	}}
	auth := "Proxy-Authorization: " + basic(testUser, testPassword) + "\r\n\r\n"
	connect := func(target string) string {
		return "CONNECT " + target + " HTTP/1.1\r\nHost: " + target + "\r\n" + auth
	}
	get := func(url, host string) string {
		return "GET " + url + " HTTP/1.1\r\nHost: " + host + "\r\n" + auth
	}
	widePorts := []egress.PortRange{{From: 1, To: 65535}}
	for _, tc := range []struct {
		name       string
		reason     string
		policy     egress.Policy
		request    string
		wantStatus int
		wantDenied string // the X-Egress-Denied header
	}{
		{
			name: "CONNECT loopback", reason: "the default refuses a tunnel to the proxy's own host (and its port)",
			request: connect(e.addr), wantStatus: http.StatusForbidden, wantDenied: "port",
		},
		{
			name: "CONNECT loopback, any port", reason: "with every port allowed, the address alone is refused",
			policy:  egress.Policy{ConnectPorts: widePorts},
			request: connect(e.addr), wantStatus: http.StatusForbidden, wantDenied: "loopback",
		},
		{
			name: "GET metadata", reason: "the cloud metadata service is link-local",
			request:    get("http://169.254.169.254/latest/meta-data/", "169.254.169.254"),
			wantStatus: http.StatusForbidden, wantDenied: "link-local",
		},
		{
			name: "GET loopback", reason: "plain HTTP to the proxy's host is refused like a tunnel",
			request: get(o.URL+"/", originHost), wantStatus: http.StatusForbidden, wantDenied: "loopback",
		},
		{
			name: "CONNECT port 25", reason: "CONNECT goes to port 443 only by default, even where the address is allowed",
			policy:     egress.Policy{AllowCIDRs: []netip.Prefix{netip.MustParsePrefix("127.0.0.0/8")}},
			request:    connect("127.0.0.1:25"),
			wantStatus: http.StatusForbidden, wantDenied: "port",
		},
		{
			name: "name resolving to loopback", reason: "a public-looking name whose answer is internal is refused at dial time",
			request:    get("http://rebound.test:"+originPort+"/", "rebound.test:"+originPort),
			wantStatus: http.StatusForbidden, wantDenied: "loopback",
		},
		{
			name: "name resolving to a private address", reason: "fc00::/7 is private",
			request:    get("http://internal.test/", "internal.test"),
			wantStatus: http.StatusForbidden, wantDenied: "private",
		},
		{
			name: "tunnel to a name resolving to CGNAT", reason: "tunnels resolve and check the same way",
			request:    connect("cgnat.test:443"),
			wantStatus: http.StatusForbidden, wantDenied: "cgnat",
		},
		{
			name: "deny beats allow", reason: "denyCIDRs win over allowCIDRs",
			policy: egress.Policy{
				AllowCIDRs: []netip.Prefix{netip.MustParsePrefix("127.0.0.0/8")},
				DenyCIDRs:  []netip.Prefix{netip.MustParsePrefix("127.0.0.1/32")},
			},
			request: get(o.URL+"/", originHost), wantStatus: http.StatusForbidden, wantDenied: "deny-list",
		},
		{
			name: "GET allowed", reason: "the widened policy lets the loopback origin through",
			policy:  egress.Policy{AllowCIDRs: []netip.Prefix{netip.MustParsePrefix("127.0.0.0/8")}},
			request: get(o.URL+"/", originHost), wantStatus: http.StatusOK,
		},
		{
			name: "name allowed", reason: "a name resolving into an allowed range works",
			policy:  egress.Policy{AllowCIDRs: []netip.Prefix{netip.MustParsePrefix("127.0.0.0/8")}},
			request: get("http://rebound.test:"+originPort+"/", "rebound.test:"+originPort), wantStatus: http.StatusOK,
		},
		{
			name: "CONNECT allowed", reason: "the widened policy and ports let the tunnel through",
			policy: egress.Policy{
				AllowCIDRs:   []netip.Prefix{netip.MustParsePrefix("127.0.0.0/8")},
				ConnectPorts: []egress.PortRange{{From: 443, To: 443}, {From: 1024, To: 65535}},
			},
			request: connect("127.0.0.1:" + echoPort), wantStatus: http.StatusOK,
		},
	} {
		t.Run(tc.name, func(t *testing.T) {
			cfg := forwardproxy.Config{Username: testUser, Password: testPassword, Egress: tc.policy, Resolver: resolver, DialTimeout: wait}
			h := start(t, cfg, time.Second)
			before, _ := o.received()
			resp := raw(t, h.addr, tc.request)
			if diff := cmp.Diff(tc.wantStatus, resp.status); diff != "" {
				t.Errorf("%s: status (-want +got):\n%s", tc.reason, diff)
			}
			if diff := cmp.Diff(tc.wantDenied, resp.header.Get("X-Egress-Denied")); diff != "" {
				t.Errorf("%s: X-Egress-Denied (-want +got):\n%s", tc.reason, diff)
			}
			if tc.wantStatus != http.StatusForbidden {
				return
			}
			if !strings.HasPrefix(resp.body, "forbidden by the egress policy: ") {
				t.Errorf("body %q does not say the egress policy refused", resp.body)
			}
			for _, secret := range []string{testPassword, "127.0.0.1", "fd12", "100.64", "169.254"} {
				if strings.Contains(resp.body, secret) {
					t.Errorf("the refusal %q shows %q", resp.body, secret)
				}
			}
			if after, _ := o.received(); len(after) != len(before) {
				t.Errorf("a refused request reached the origin")
			}
		})
	}
}

func TestNewChecksTheEgressPolicy(t *testing.T) {
	for _, tc := range []struct {
		name   string
		policy egress.Policy
	}{
		{name: "zero allow prefix", policy: egress.Policy{AllowCIDRs: []netip.Prefix{{}}}},
		{name: "zero deny prefix", policy: egress.Policy{DenyCIDRs: []netip.Prefix{{}}}},
		{name: "port 0", policy: egress.Policy{ConnectPorts: []egress.PortRange{{From: 0, To: 10}}}},
		{name: "reversed range", policy: egress.Policy{ConnectPorts: []egress.PortRange{{From: 10, To: 9}}}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if _, err := forwardproxy.New(forwardproxy.Config{Username: testUser, Password: testPassword, Egress: tc.policy}); err == nil {
				t.Error("New accepted a policy that cannot be right")
			}
		})
	}
}

// Config.LocalAddr is the source of upstream connections, for plain HTTP
// and tunnels alike (a simulated guest egresses from its own address).
func TestDialsFromLocalAddr(t *testing.T) {
	seen := make(chan string, 2)
	o := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		host, _, _ := net.SplitHostPort(r.RemoteAddr)
		seen <- host
	}))
	t.Cleanup(o.Close)
	cfg := withAuth
	cfg.LocalAddr = netip.MustParseAddr("127.0.0.7")
	h := start(t, cfg, time.Second)
	host := strings.TrimPrefix(o.URL, "http://")
	if resp := raw(t, h.addr, "GET "+o.URL+"/ HTTP/1.1\r\nHost: "+host+"\r\nProxy-Authorization: "+basic(testUser, testPassword)+"\r\n\r\n"); resp.status != http.StatusOK {
		t.Fatalf("GET: %d", resp.status)
	}
	if diff := cmp.Diff("127.0.0.7", receive(t, "the origin's request", seen)); diff != "" {
		t.Errorf("source of the upstream connection (-want +got):\n%s", diff)
	}
	c, br := tunnel(t, h.addr, host, basic(testUser, testPassword), "")
	if _, err := io.WriteString(c, "GET / HTTP/1.1\r\nHost: "+host+"\r\n\r\n"); err != nil {
		t.Fatal(err)
	}
	resp, err := http.ReadResponse(br, nil)
	if err != nil {
		t.Fatal(err)
	}
	_ = resp.Body.Close()
	if diff := cmp.Diff("127.0.0.7", receive(t, "the tunnelled request", seen)); diff != "" {
		t.Errorf("source of the tunnel's upstream connection (-want +got):\n%s", diff)
	}
}
