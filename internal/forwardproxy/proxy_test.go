package forwardproxy_test

import (
	"bufio"
	"context"
	"encoding/base64"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"net/http/httptest"
	"net/netip"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/go-logr/logr/funcr"
	"github.com/google/go-cmp/cmp"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"
	"sigs.k8s.io/controller-runtime/pkg/log/zap"

	"github.com/egress-proxies/egress-proxies-operator/internal/egress"
	"github.com/egress-proxies/egress-proxies-operator/internal/forwardproxy"
	"github.com/egress-proxies/egress-proxies-operator/internal/testing/poll"
)

// onLoopback is the egress policy of tests whose origins listen on
// 127.0.0.1 on random ports: the default policy refuses both (see
// TestEgressPolicy).
var onLoopback = egress.Policy{
	AllowCIDRs:   []netip.Prefix{netip.MustParsePrefix("127.0.0.0/8")},
	ConnectPorts: []egress.PortRange{{From: 1, To: 65535}},
}

// withAuth is the usual configuration of these tests.
var withAuth = forwardproxy.Config{Username: testUser, Password: testPassword, Egress: onLoopback}

func TestNewChecksTheConfig(t *testing.T) {
	for _, tc := range []struct {
		name    string
		reason  string
		cfg     forwardproxy.Config
		wantErr string // empty: accepted
	}{
		{
			name:    "open",
			reason:  "no credentials and no ranges is an open proxy, which must never happen by accident",
			cfg:     forwardproxy.Config{},
			wantErr: "refusing to run an open proxy",
		},
		{
			name:   "open on purpose",
			reason: "AllowOpen is the explicit opt-in",
			cfg:    forwardproxy.Config{AllowOpen: true},
		},
		{
			name:   "credentials only",
			reason: "authentication alone closes the proxy",
			cfg:    withAuth,
		},
		{
			name:   "ranges only",
			reason: "an allow-list alone closes the proxy",
			cfg:    forwardproxy.Config{AllowedSourceRanges: []netip.Prefix{netip.MustParsePrefix("198.51.100.0/24")}},
		},
		{
			name:    "username without password",
			reason:  "half the credentials is a configuration mistake, not 'no authentication'",
			cfg:     forwardproxy.Config{Username: testUser, AllowOpen: true},
			wantErr: "username and password must be set together",
		},
		{
			name:    "password without username",
			reason:  "half the credentials is a configuration mistake, not 'no authentication'",
			cfg:     forwardproxy.Config{Password: testPassword, AllowOpen: true},
			wantErr: "username and password must be set together",
		},
		{
			name:    "colon in username",
			reason:  "Basic credentials split at the first colon, so such a user could never log in",
			cfg:     forwardproxy.Config{Username: "a:b", Password: testPassword},
			wantErr: "colon",
		},
		{
			name:    "invalid range",
			reason:  "a zero Prefix matches nothing and hides a parsing bug",
			cfg:     forwardproxy.Config{AllowedSourceRanges: []netip.Prefix{{}}},
			wantErr: "invalid allowed source range",
		},
		{
			name:    "negative timeout",
			reason:  "a negative timeout makes every dial fail",
			cfg:     forwardproxy.Config{Username: testUser, Password: testPassword, DialTimeout: -time.Second},
			wantErr: "must not be negative",
		},
	} {
		t.Run(tc.name, func(t *testing.T) {
			_, err := forwardproxy.New(tc.cfg)
			got := ""
			if err != nil {
				got = err.Error()
			}
			if tc.wantErr == "" && err != nil || tc.wantErr != "" && !strings.Contains(got, tc.wantErr) {
				t.Errorf("%s: New = %q, want an error containing %q", tc.reason, got, tc.wantErr)
			}
			if strings.Contains(got, testPassword) {
				t.Errorf("the error %q shows the password", got)
			}
		})
	}
}

func TestForwardsHTTP(t *testing.T) {
	h := start(t, withAuth, time.Second)
	for _, tc := range []struct {
		name       string
		reason     string
		user, pass string
		method     string
		body       string
		header     http.Header
		wantStatus int
		wantBody   string
		// wantOrigin is the body the origin received; nil: the request
		// must not reach the origin.
		wantOrigin *string
	}{
		{
			name: "GET", reason: "the basic case", user: testUser, pass: testPassword,
			method: http.MethodGet, wantStatus: http.StatusOK, wantBody: "hello GET /path", wantOrigin: ptr(""),
		},
		{
			name: "POST streams the body", reason: "request bodies are forwarded", user: testUser, pass: testPassword,
			method: http.MethodPost, body: strings.Repeat("x", 100_000), wantStatus: http.StatusOK, wantBody: "hello POST /path",
			wantOrigin: ptr(strings.Repeat("x", 100_000)),
		},
		{
			name: "hop-by-hop headers", reason: "headers named in Connection and Proxy-Connection are for the proxy only",
			user: testUser, pass: testPassword, method: http.MethodGet,
			header:     http.Header{"Connection": {"X-Hop"}, "X-Hop": {"1"}, "Proxy-Connection": {"keep-alive"}},
			wantStatus: http.StatusOK, wantBody: "hello GET /path", wantOrigin: ptr(""),
		},
		{
			name: "no credentials", reason: "the proxy asks for credentials and forwards nothing",
			method: http.MethodGet, wantStatus: http.StatusProxyAuthRequired, wantBody: "proxy authentication required\n",
		},
		{
			name: "wrong password", reason: "a wrong password is refused like a missing one", user: testUser, pass: "not-" + testPassword,
			method: http.MethodGet, wantStatus: http.StatusProxyAuthRequired, wantBody: "proxy authentication required\n",
		},
		{
			name: "wrong user", reason: "the username counts too", user: "someone", pass: testPassword,
			method: http.MethodGet, wantStatus: http.StatusProxyAuthRequired, wantBody: "proxy authentication required\n",
		},
		{
			name: "password prefix", reason: "a prefix of the password is not the password", user: testUser, pass: testPassword[:5],
			method: http.MethodGet, wantStatus: http.StatusProxyAuthRequired, wantBody: "proxy authentication required\n",
		},
	} {
		t.Run(tc.name, func(t *testing.T) {
			o := newOrigin(t)
			req, err := http.NewRequest(tc.method, o.URL+"/path", strings.NewReader(tc.body))
			if err != nil {
				t.Fatal(err)
			}
			for k, v := range tc.header {
				req.Header[k] = v
			}
			req.Header.Set("X-Kept", "kept")
			resp, err := h.client(t, tc.user, tc.pass).Do(req)
			if err != nil {
				t.Fatal(err)
			}
			defer func() { _ = resp.Body.Close() }()
			body, _ := io.ReadAll(resp.Body)
			if diff := cmp.Diff(tc.wantStatus, resp.StatusCode); diff != "" {
				t.Errorf("%s: status (-want +got):\n%s", tc.reason, diff)
			}
			if diff := cmp.Diff(tc.wantBody, string(body)); diff != "" {
				t.Errorf("%s: body (-want +got):\n%s", tc.reason, diff)
			}
			headers, bodies := o.received()
			if tc.wantOrigin == nil {
				if diff := cmp.Diff(0, len(headers)); diff != "" {
					t.Errorf("%s: requests that reached the origin (-want +got):\n%s", tc.reason, diff)
				}
				if diff := cmp.Diff(`Basic realm="egress-proxy"`, resp.Header.Get("Proxy-Authenticate")); diff != "" {
					t.Errorf("Proxy-Authenticate (-want +got):\n%s", diff)
				}
				return
			}
			if diff := cmp.Diff([]string{*tc.wantOrigin}, bodies); diff != "" {
				t.Fatalf("%s: bodies the origin received (-want +got):\n%s", tc.reason, diff)
			}
			got := map[string]string{}
			for _, k := range []string{"Proxy-Authorization", "Proxy-Connection", "Via", "X-Forwarded-For", "X-Hop", "X-Kept"} {
				got[k] = headers[0].Get(k)
			}
			want := map[string]string{"Proxy-Authorization": "", "Proxy-Connection": "", "Via": "", "X-Forwarded-For": "", "X-Hop": "", "X-Kept": "kept"}
			if diff := cmp.Diff(want, got); diff != "" {
				t.Errorf("headers the origin received (-want +got):\n%s", diff)
			}
			if diff := cmp.Diff("yes", resp.Header.Get("X-Origin")); diff != "" {
				t.Errorf("response header from the origin (-want +got):\n%s", diff)
			}
		})
	}
}

func ptr[T any](v T) *T { return &v }

// The source check comes first and works on the connection's address.
func TestChecksTheSourceAddress(t *testing.T) {
	ranges := []netip.Prefix{netip.MustParsePrefix("198.51.100.0/24"), netip.MustParsePrefix("2001:db8::/32")}
	for _, tc := range []struct {
		name       string
		reason     string
		remote     string
		auth       string
		wantStatus int
	}{
		{name: "in range", reason: "an allowed client reaches the next check (origin-form: 400)", remote: "198.51.100.7:40000", auth: basic(testUser, testPassword), wantStatus: http.StatusBadRequest},
		{name: "IPv4-mapped", reason: "a dual-stack listener reports IPv4 clients as ::ffff:a.b.c.d", remote: "[::ffff:198.51.100.7]:40000", auth: basic(testUser, testPassword), wantStatus: http.StatusBadRequest},
		{name: "IPv6 in range", reason: "IPv6 ranges work", remote: "[2001:db8::1]:40000", auth: basic(testUser, testPassword), wantStatus: http.StatusBadRequest},
		{name: "out of range", reason: "a client outside the ranges is refused", remote: "192.0.2.1:40000", auth: basic(testUser, testPassword), wantStatus: http.StatusForbidden},
		{name: "out of range without credentials", reason: "the source check comes before authentication", remote: "192.0.2.1:40000", wantStatus: http.StatusForbidden},
		{name: "in range without credentials", reason: "both checks apply when both are configured", remote: "198.51.100.7:40000", wantStatus: http.StatusProxyAuthRequired},
		{name: "unparsable", reason: "an address that does not parse fails closed", remote: "somewhere", auth: basic(testUser, testPassword), wantStatus: http.StatusForbidden},
	} {
		t.Run(tc.name, func(t *testing.T) {
			p, err := forwardproxy.New(forwardproxy.Config{Username: testUser, Password: testPassword, AllowedSourceRanges: ranges})
			if err != nil {
				t.Fatal(err)
			}
			req := httptest.NewRequest(http.MethodGet, "/", nil)
			req.RemoteAddr = tc.remote
			if tc.auth != "" {
				req.Header.Set("Proxy-Authorization", tc.auth)
			}
			rec := httptest.NewRecorder()
			p.ServeHTTP(rec, req)
			if diff := cmp.Diff(tc.wantStatus, rec.Code); diff != "" {
				t.Errorf("%s: status (-want +got):\n%s", tc.reason, diff)
			}
			if tc.wantStatus == http.StatusForbidden {
				if diff := cmp.Diff("source address not allowed\n", rec.Body.String()); diff != "" {
					t.Errorf("body (-want +got):\n%s", diff)
				}
			}
		})
	}
}

// The same check on a real connection from 127.0.0.1.
func TestChecksTheSourceAddressOnLoopback(t *testing.T) {
	for _, tc := range []struct {
		name       string
		reason     string
		allowed    string
		wantStatus int
	}{
		{name: "other address", reason: "127.0.0.1 is not 127.0.0.2", allowed: "127.0.0.2/32", wantStatus: http.StatusForbidden},
		{name: "loopback range", reason: "127.0.0.1 is in 127.0.0.0/8", allowed: "127.0.0.0/8", wantStatus: http.StatusOK},
	} {
		t.Run(tc.name, func(t *testing.T) {
			h := start(t, forwardproxy.Config{AllowedSourceRanges: []netip.Prefix{netip.MustParsePrefix(tc.allowed)}, Egress: onLoopback}, time.Second)
			o := newOrigin(t)
			resp, err := h.client(t, "", "").Get(o.URL)
			if err != nil {
				t.Fatal(err)
			}
			_ = resp.Body.Close()
			if diff := cmp.Diff(tc.wantStatus, resp.StatusCode); diff != "" {
				t.Errorf("%s: status (-want +got):\n%s", tc.reason, diff)
			}
			// CONNECT on a new connection, which Serve reads itself.
			e := newEchoServer(t)
			got := raw(t, h.addr, "CONNECT "+e.addr+" HTTP/1.1\r\nHost: "+e.addr+"\r\n\r\n")
			if diff := cmp.Diff(tc.wantStatus, got.status); diff != "" {
				t.Errorf("%s: CONNECT status (-want +got):\n%s", tc.reason, diff)
			}
		})
	}
}

func TestTunnelsCONNECTToTLS(t *testing.T) {
	var mu sync.Mutex
	var sawProxyAuth []string
	o := httptest.NewTLSServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		mu.Lock()
		sawProxyAuth = append(sawProxyAuth, r.Header.Get("Proxy-Authorization"))
		mu.Unlock()
		_, _ = io.WriteString(w, "secure hello")
	}))
	t.Cleanup(o.Close)
	h := start(t, withAuth, time.Second)
	for _, tc := range []struct {
		name       string
		reason     string
		user, pass string
		wantBody   string
		wantErr    string
	}{
		{name: "credentials", reason: "HTTPS through the tunnel works end to end", user: testUser, pass: testPassword, wantBody: "secure hello"},
		{name: "no credentials", reason: "CONNECT needs credentials too", wantErr: "Proxy Authentication Required"},
		{name: "wrong password", reason: "CONNECT checks the password", user: testUser, pass: "nope", wantErr: "Proxy Authentication Required"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			c := h.client(t, tc.user, tc.pass)
			tr, ok := c.Transport.(*http.Transport)
			if !ok {
				t.Fatal("not an *http.Transport")
			}
			originTransport, ok := o.Client().Transport.(*http.Transport)
			if !ok {
				t.Fatal("not an *http.Transport")
			}
			tr.TLSClientConfig = originTransport.TLSClientConfig.Clone()
			resp, err := c.Get(o.URL + "/secure")
			if tc.wantErr != "" {
				if err == nil {
					_ = resp.Body.Close()
					t.Fatalf("%s: the request succeeded", tc.reason)
				}
				if !strings.Contains(err.Error(), tc.wantErr) {
					t.Errorf("%s: error %q lacks %q", tc.reason, err, tc.wantErr)
				}
				return
			}
			if err != nil {
				t.Fatalf("%s: %v", tc.reason, err)
			}
			defer func() { _ = resp.Body.Close() }()
			body, _ := io.ReadAll(resp.Body)
			if diff := cmp.Diff(tc.wantBody, string(body)); diff != "" {
				t.Errorf("%s: body (-want +got):\n%s", tc.reason, diff)
			}
			if resp.TLS == nil {
				t.Errorf("the response did not come over TLS")
			}
		})
	}
	mu.Lock()
	defer mu.Unlock()
	if diff := cmp.Diff([]string{""}, sawProxyAuth); diff != "" {
		t.Errorf("requests and Proxy-Authorization headers the origin saw (-want +got):\n%s", diff)
	}
}

// A client may send its first bytes together with the CONNECT request; the
// server has then read them already, and they must still reach upstream.
func TestConnectForwardsEarlyBytes(t *testing.T) {
	e := newEchoServer(t)
	h := start(t, withAuth, time.Second)
	c, br := tunnel(t, h.addr, e.addr, basic(testUser, testPassword), "early")
	buf := make([]byte, len("early"))
	if _, err := io.ReadFull(br, buf); err != nil {
		t.Fatalf("reading the echo of the early bytes: %v", err)
	}
	if diff := cmp.Diff("early", string(buf)); diff != "" {
		t.Errorf("echo (-want +got):\n%s", diff)
	}
	got, err := echo(c, br, "later")
	if err != nil {
		t.Fatal(err)
	}
	if diff := cmp.Diff("later", got); diff != "" {
		t.Errorf("echo (-want +got):\n%s", diff)
	}
}

// Either side's end closes both: the client closing closes upstream, and
// upstream closing closes the client.
func TestTunnelClosesBothSides(t *testing.T) {
	e := newEchoServer(t)
	h := start(t, withAuth, time.Second)

	c, _ := tunnel(t, h.addr, e.addr, basic(testUser, testPassword), "")
	_ = c.Close()
	receive(t, "the upstream connection to end after the client closed", e.ended)

	// An upstream server that closes at once.
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = ln.Close() })
	go func() {
		if c, err := ln.Accept(); err == nil {
			_ = c.Close()
		}
	}()
	c, br := tunnel(t, h.addr, ln.Addr().String(), basic(testUser, testPassword), "")
	if _, err := br.ReadByte(); !errors.Is(err, io.EOF) {
		t.Errorf("client read after upstream closed = %v, want EOF", err)
	}
	_ = c.Close()
}

func TestRefusesWhatIsNotAProxyRequest(t *testing.T) {
	h := start(t, withAuth, time.Second)
	for _, tc := range []struct {
		name     string
		reason   string
		request  string
		wantCode int
		wantBody string
	}{
		{
			name: "origin-form", reason: "a plain request to the proxy itself is not a proxy request",
			request: "GET /index.html HTTP/1.1\r\nHost: example.test\r\n", wantCode: http.StatusBadRequest,
			wantBody: "not a proxy request: the request target must be an absolute http:// URL\n",
		},
		{
			name: "https absolute-form", reason: "TLS to the origin goes through CONNECT, not through the proxy's own client",
			request: "GET https://127.0.0.1:1/ HTTP/1.1\r\nHost: 127.0.0.1:1\r\n", wantCode: http.StatusBadRequest,
			wantBody: "only http:// URLs are forwarded; use CONNECT for anything else\n",
		},
		{
			name: "CONNECT without port", reason: "a tunnel needs a port",
			request: "CONNECT 127.0.0.1 HTTP/1.1\r\nHost: 127.0.0.1\r\n", wantCode: http.StatusBadRequest,
			wantBody: "CONNECT needs a host:port target\n",
		},
	} {
		t.Run(tc.name, func(t *testing.T) {
			resp := raw(t, h.addr, tc.request+"Proxy-Authorization: "+basic(testUser, testPassword)+"\r\n\r\n")
			if diff := cmp.Diff(tc.wantCode, resp.status); diff != "" {
				t.Errorf("%s: status (-want +got):\n%s", tc.reason, diff)
			}
			if diff := cmp.Diff(tc.wantBody, resp.body); diff != "" {
				t.Errorf("%s: body (-want +got):\n%s", tc.reason, diff)
			}
		})
	}
}

// rawResponse is what raw read.
type rawResponse struct {
	status int
	header http.Header
	body   string
}

// raw sends request on a new connection to addr and reads one response.
func raw(t *testing.T, addr, request string) rawResponse {
	t.Helper()
	c, err := net.DialTimeout("tcp", addr, wait)
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = c.Close() }()
	_ = c.SetDeadline(time.Now().Add(wait))
	if _, err := io.WriteString(c, request); err != nil {
		t.Fatal(err)
	}
	method, _, _ := strings.Cut(request, " ")
	resp, err := http.ReadResponse(bufio.NewReader(c), &http.Request{Method: method})
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = resp.Body.Close() }()
	if method == http.MethodConnect && resp.StatusCode == http.StatusOK {
		// A tunnel's body never ends.
		return rawResponse{status: resp.StatusCode, header: resp.Header}
	}
	body, err := io.ReadAll(resp.Body)
	if err != nil {
		t.Fatal(err)
	}
	return rawResponse{status: resp.StatusCode, header: resp.Header, body: string(body)}
}

// fakeResolver answers host names from a map and records the lookups.
type fakeResolver struct {
	mu      sync.Mutex
	hosts   map[string][]netip.Addr
	lookups []string
}

func (r *fakeResolver) LookupNetIP(_ context.Context, _, host string) ([]netip.Addr, error) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.lookups = append(r.lookups, host)
	if ips, ok := r.hosts[host]; ok {
		return ips, nil
	}
	return nil, &net.DNSError{Err: "no such host", Name: host, IsNotFound: true}
}

func TestUpstreamDialing(t *testing.T) {
	closed, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	closedAddr := closed.Addr().String()
	_ = closed.Close()
	o := newOrigin(t)
	_, originPort, _ := net.SplitHostPort(strings.TrimPrefix(o.URL, "http://"))
	named := "origin.test:" + originPort
	auth := "Proxy-Authorization: " + basic(testUser, testPassword) + "\r\n\r\n"
	for _, tc := range []struct {
		name        string
		reason      string
		request     string
		wantStatus  int
		wantLookups []string
	}{
		{
			name: "HTTP to a closed port", reason: "an unreachable upstream is a bad gateway",
			request: "GET http://" + closedAddr + "/ HTTP/1.1\r\nHost: " + closedAddr + "\r\n", wantStatus: http.StatusBadGateway,
		},
		{
			name: "CONNECT to a closed port", reason: "an unreachable tunnel target is a bad gateway",
			request: "CONNECT " + closedAddr + " HTTP/1.1\r\nHost: " + closedAddr + "\r\n", wantStatus: http.StatusBadGateway,
		},
		{
			name: "HTTP to an unknown name", reason: "a name that does not resolve is refused like an internal one",
			request: "GET http://nowhere.test/ HTTP/1.1\r\nHost: nowhere.test\r\n", wantStatus: http.StatusForbidden, wantLookups: []string{"nowhere.test"},
		},
		{
			name: "CONNECT to an unknown name", reason: "a tunnel to a name that does not resolve is refused like an internal one",
			request: "CONNECT nowhere.test:443 HTTP/1.1\r\nHost: nowhere.test:443\r\n", wantStatus: http.StatusForbidden, wantLookups: []string{"nowhere.test"},
		},
		{
			name: "HTTP through the resolver", reason: "names are resolved with Config.Resolver, and its addresses are dialed",
			request: "GET http://" + named + "/ HTTP/1.1\r\nHost: " + named + "\r\n", wantStatus: http.StatusOK, wantLookups: []string{"origin.test"},
		},
		{
			name: "CONNECT through the resolver", reason: "tunnels resolve with Config.Resolver too",
			request: "CONNECT " + named + " HTTP/1.1\r\nHost: " + named + "\r\n", wantStatus: http.StatusOK, wantLookups: []string{"origin.test"},
		},
	} {
		t.Run(tc.name, func(t *testing.T) {
			r := &fakeResolver{hosts: map[string][]netip.Addr{"origin.test": {netip.MustParseAddr("127.0.0.1")}}}
			cfg := withAuth
			cfg.Resolver = r
			h := start(t, cfg, time.Second)
			resp := raw(t, h.addr, tc.request+auth)
			if diff := cmp.Diff(tc.wantStatus, resp.status); diff != "" {
				t.Errorf("%s: status (-want +got):\n%s", tc.reason, diff)
			}
			if resp.status == http.StatusBadGateway {
				if diff := cmp.Diff("refused bad gateway: the upstream server could not be reached\n", resp.header.Get("X-Upstream-Error")+" "+resp.body); diff != "" {
					t.Errorf("X-Upstream-Error and body (-want +got):\n%s", diff)
				}
			}
			r.mu.Lock()
			defer r.mu.Unlock()
			if diff := cmp.Diff(tc.wantLookups, r.lookups); diff != "" {
				t.Errorf("%s: lookups (-want +got):\n%s", tc.reason, diff)
			}
		})
	}
}

func TestCountsMetrics(t *testing.T) {
	release := make(chan struct{})
	arrived := make(chan struct{}, 1)
	o := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		body, _ := io.ReadAll(r.Body)
		if r.URL.Path == "/slow" {
			arrived <- struct{}{}
			<-release
		}
		_, _ = fmt.Fprintf(w, "got %d bytes", len(body)) // "got 1000 bytes": 14 bytes
	}))
	t.Cleanup(o.Close)
	e := newEchoServer(t)
	h := start(t, withAuth, time.Second)
	c := h.client(t, testUser, testPassword)

	// A slow request is an active connection while it runs.
	slow := make(chan error, 1)
	go func() {
		resp, err := c.Post(o.URL+"/slow", "text/plain", strings.NewReader(strings.Repeat("a", 1000)))
		if err == nil {
			_, _ = io.Copy(io.Discard, resp.Body)
			err = resp.Body.Close()
		}
		slow <- err
	}()
	receive(t, "the slow request at the origin", arrived)
	if diff := cmp.Diff(1.0, testutil.ToFloat64(h.metrics.ActiveConnections)); diff != "" {
		t.Errorf("active connections during a request (-want +got):\n%s", diff)
	}
	close(release)
	if err := receive(t, "the slow request", slow); err != nil {
		t.Fatal(err)
	}

	// A refused request.
	resp, err := h.client(t, "", "").Get(o.URL)
	if err != nil {
		t.Fatal(err)
	}
	_ = resp.Body.Close()

	// A tunnel: 4 bytes up, 4 down.
	tc, br := tunnel(t, h.addr, e.addr, basic(testUser, testPassword), "")
	if _, err := echo(tc, br, "ping"); err != nil {
		t.Fatal(err)
	}
	_ = tc.Close()

	// Metrics are recorded when a request's handler returns, which can be
	// after the client saw the response.
	eventually(t, "three requests counted", func() bool {
		return testutil.CollectAndCount(h.metrics.Requests) == 3 &&
			testutil.ToFloat64(h.metrics.Requests.WithLabelValues("CONNECT", "200")) == 1
	})
	want := `
# HELP egress_proxies_forward_requests_total Requests handled by the forward proxy, by method (CONNECT or HTTP) and status code.
# TYPE egress_proxies_forward_requests_total counter
egress_proxies_forward_requests_total{code="200",method="CONNECT"} 1
egress_proxies_forward_requests_total{code="200",method="HTTP"} 1
egress_proxies_forward_requests_total{code="407",method="HTTP"} 1
# HELP egress_proxies_forward_bytes_total Body bytes relayed by the forward proxy, by direction (up: client to upstream, down: upstream to client).
# TYPE egress_proxies_forward_bytes_total counter
egress_proxies_forward_bytes_total{direction="down"} 18
egress_proxies_forward_bytes_total{direction="up"} 1004
# HELP egress_proxies_forward_active_connections Requests being forwarded and CONNECT tunnels open now.
# TYPE egress_proxies_forward_active_connections gauge
egress_proxies_forward_active_connections 0
`
	if err := testutil.GatherAndCompare(h.reg, strings.NewReader(want),
		"egress_proxies_forward_requests_total", "egress_proxies_forward_bytes_total", "egress_proxies_forward_active_connections"); err != nil {
		t.Error(err)
	}
	if diff := cmp.Diff(map[string]uint64{"CONNECT": 1, "HTTP": 2}, durationCounts(t, h.reg)); diff != "" {
		t.Errorf("duration observations by method (-want +got):\n%s", diff)
	}
}

// durationCounts returns the sample count of the duration histogram by
// method.
func durationCounts(t *testing.T, reg prometheus.Gatherer) map[string]uint64 {
	t.Helper()
	families, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	got := map[string]uint64{}
	for _, f := range families {
		if f.GetName() != "egress_proxies_forward_request_duration_seconds" {
			continue
		}
		for _, m := range f.GetMetric() {
			for _, l := range m.GetLabel() {
				if l.GetName() == "method" {
					got[l.GetValue()] = m.GetHistogram().GetSampleCount()
				}
			}
		}
	}
	return got
}

func TestTunnelIdleTimeout(t *testing.T) {
	e := newEchoServer(t)
	cfg := withAuth
	// The timeout follows the machine's pace: on a loaded one a goroutine
	// can stall for longer than a quiet machine's 300 ms between two ticks.
	cfg.IdleTimeout = poll.Paced(300 * time.Millisecond)
	h := start(t, cfg, time.Second)

	// Traffic every 30 ms keeps the tunnel open well past the timeout.
	c, br := tunnel(t, h.addr, e.addr, basic(testUser, testPassword), "")
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
			t.Fatalf("a busy tunnel closed: echo = %q, %v", got, err)
		}
	}
	// Silence closes it, upstream too.
	if _, err := br.ReadByte(); !errors.Is(err, io.EOF) {
		t.Errorf("read on an idle tunnel = %v, want EOF", err)
	}
	receive(t, "the upstream connection to end", e.ended)
	eventually(t, "the idle error logged", func() bool { return strings.Contains(h.logs.String(), "tunnel idle") })
}

// One line per request at V(1), with what an operator needs and nothing
// secret.
func TestLogsOneLinePerRequest(t *testing.T) {
	o := newOrigin(t)
	h := start(t, withAuth, time.Second)
	resp, err := h.client(t, testUser, testPassword).Get(o.URL + "/logged")
	if err != nil {
		t.Fatal(err)
	}
	_ = resp.Body.Close()
	host := strings.TrimPrefix(o.URL, "http://")
	eventually(t, "the log line", func() bool { return strings.Contains(h.logs.String(), `"msg"="request"`) })
	lines := strings.Split(strings.TrimSpace(h.logs.String()), "\n")
	if diff := cmp.Diff(1, len(lines)); diff != "" {
		t.Fatalf("log lines (-want +got):\n%s\n%s", diff, h.logs)
	}
	for _, want := range []string{`"level"=1`, `"time"="20`, `"client"="127.0.0.1:`, `"user"="` + testUser + `"`, `"method"="GET"`,
		`"destination"="` + host + `"`, `"status"=200`, `"bytesUp"=0`, `"bytesDown"=17`, `"duration"=`} {
		if !strings.Contains(lines[0], want) {
			t.Errorf("log line %q lacks %s", lines[0], want)
		}
	}
}

// Sentinel: the password (and the Basic token that carries it) never shows
// in logs, responses or the printed Config, on any path.
func TestCredentialsNeverLeak(t *testing.T) {
	o := newOrigin(t)
	e := newEchoServer(t)
	const wrongPassword = "Wr0ng-sentinel-c4e2"
	h := start(t, withAuth, time.Second)
	var responses strings.Builder
	record := func(resp rawResponse) {
		_ = resp.header.Write(&responses)
		responses.WriteString(resp.body)
	}
	for _, pass := range []string{testPassword, wrongPassword} {
		record(raw(t, h.addr, "GET "+o.URL+"/x?q=1 HTTP/1.1\r\nHost: "+strings.TrimPrefix(o.URL, "http://")+"\r\nProxy-Authorization: "+basic(testUser, pass)+"\r\n\r\n"))
	}
	record(raw(t, h.addr, "GET / HTTP/1.1\r\nHost: x\r\nProxy-Authorization: "+basic(testUser, testPassword)+"\r\n\r\n"))
	record(raw(t, h.addr, "GET http://127.0.0.1:1/ HTTP/1.1\r\nHost: 127.0.0.1:1\r\nProxy-Authorization: "+basic(testUser, testPassword)+"\r\n\r\n"))
	c, br := tunnel(t, h.addr, e.addr, basic(testUser, testPassword), "")
	if _, err := echo(c, br, "hi"); err != nil {
		t.Fatal(err)
	}
	_ = c.Close()
	eventually(t, "five requests logged", func() bool { return strings.Count(h.logs.String(), `"msg"="request"`) == 5 })

	cfg := withAuth
	var printed strings.Builder
	for _, verb := range []string{"%v", "%+v", "%#v", "%s", "%q", "%x"} {
		_, _ = fmt.Fprintf(&printed, verb+"\n", cfg)
	}
	funcr.New(func(prefix, args string) { printed.WriteString(prefix + args + "\n") }, funcr.Options{}).Info("config", "config", cfg)
	// The operator's own logger (zap through logr) encodes structs as JSON
	// by reflection unless the value is a logr.Marshaler.
	zap.New(zap.WriteTo(&printed)).Info("config", "config", cfg)
	slog.New(slog.NewJSONHandler(&printed, nil)).Info("config", "config", cfg)
	slog.New(slog.NewTextHandler(&printed, nil)).Info("config", "config", cfg)
	if b, err := json.Marshal(cfg); err != nil {
		t.Errorf("json.Marshal(Config): %v", err)
	} else {
		printed.Write(b)
	}

	for name, out := range map[string]string{"logs": h.logs.String(), "responses": responses.String(), "printed config": printed.String()} {
		if out == "" {
			t.Errorf("%s: nothing was produced, so the check proves nothing", name)
		}
		for _, secret := range []string{
			testPassword, wrongPassword,
			base64.StdEncoding.EncodeToString([]byte(testUser + ":" + testPassword)),
			base64.StdEncoding.EncodeToString([]byte(testUser + ":" + wrongPassword)),
			fmt.Sprintf("%x", testPassword), fmt.Sprintf("%q", testPassword),
		} {
			if strings.Contains(out, secret) {
				t.Errorf("%s contain %q:\n%s", name, secret, out)
			}
		}
	}
	if !strings.Contains(printed.String(), "[redacted]") {
		t.Errorf("the printed config does not say the credentials are redacted:\n%s", printed.String())
	}
}
