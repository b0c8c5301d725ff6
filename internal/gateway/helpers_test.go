package gateway_test

import (
	"bufio"
	"context"
	"encoding/base64"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"net/netip"
	"net/url"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/go-logr/logr"
	"github.com/prometheus/client_golang/prometheus"

	"github.com/egress-proxies/egress-proxies-operator/api/v1alpha1/published"
	"github.com/egress-proxies/egress-proxies-operator/internal/egress"
	"github.com/egress-proxies/egress-proxies-operator/internal/forwardproxy"
	"github.com/egress-proxies/egress-proxies-operator/internal/gateway"
	"github.com/egress-proxies/egress-proxies-operator/internal/testing/logbuf"
	"github.com/egress-proxies/egress-proxies-operator/internal/testing/sentinel"
)

const (
	gwUser = "ugateway0001"
	gwPass = "gateway-password-0123456789abcdef"
	// wait bounds every wait in these tests; nothing waits it out when
	// things work.
	wait = 30 * time.Second
)

// member is a real forward proxy on loopback, one of a pool's members. It
// egresses from its own loopback address (127.0.0.<10+i>), which is how an
// origin tells members apart, as the world tells VMs apart by their egress
// addresses.
type member struct {
	name, addr, egress string
	user, pass         string
	stop               func()
}

func (m *member) entry() gateway.Entry {
	u := url.URL{Scheme: "http", Host: m.addr, User: url.UserPassword(m.user, m.pass)}
	return gateway.Entry{Name: m.name, URL: u.String(), Provider: "lab", Zone: "rack-a", EgressIP: m.egress, Engine: published.EngineForwardProxy}
}

func startMember(t *testing.T, i int) *member {
	t.Helper()
	m := &member{name: fmt.Sprintf("crawl-m%02d", i), egress: fmt.Sprintf("127.0.0.%d", 10+i),
		user: fmt.Sprintf("umember%05d", i), pass: fmt.Sprintf("member-%02d-secret-password-xyz", i)}
	p, err := forwardproxy.New(forwardproxy.Config{Username: m.user, Password: m.pass,
		LocalAddr: netip.MustParseAddr(m.egress),
		Egress:    egress.Policy{AllowCIDRs: []netip.Prefix{netip.MustParsePrefix("127.0.0.0/8")}, ConnectPorts: []egress.PortRange{{From: 1, To: 65535}}}})
	if err != nil {
		t.Fatal(err)
	}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	m.addr = ln.Addr().String()
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() {
		defer close(done)
		_ = forwardproxy.Serve(ctx, ln, p, 0)
	}()
	var once sync.Once
	m.stop = func() {
		once.Do(func() {
			cancel()
			<-done
			p.CloseIdleConnections()
		})
	}
	t.Cleanup(m.stop)
	return m
}

func startMembers(t *testing.T, n int) []*member {
	t.Helper()
	ms := make([]*member, n)
	for i := range ms {
		ms[i] = startMember(t, i)
	}
	return ms
}

func entries(ms []*member) []gateway.Entry {
	var out []gateway.Entry
	for _, m := range ms {
		out = append(out, m.entry())
	}
	return out
}

// gw is a gateway served on loopback, with its log captured.
type gw struct {
	addr string
	g    *gateway.Gateway
	logs *logbuf.Buffer
}

func startGateway(t *testing.T, cfg gateway.Config) *gw {
	t.Helper()
	return startGatewayWith(t, cfg, gateway.ProxyOptions{})
}

func startGatewayWith(t *testing.T, cfg gateway.Config, po gateway.ProxyOptions) *gw {
	t.Helper()
	if cfg.Username == "" && len(po.AllowedSourceRanges) == 0 {
		cfg.Username, cfg.Password = gwUser, gwPass
	}
	h := &gw{logs: &logbuf.Buffer{}}
	log := logr.New(&lineSink{b: h.logs})
	cfg.Log = log
	po.Log = log
	g, err := gateway.New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	h.g = g
	p, err := gateway.NewProxy(g, po)
	if err != nil {
		t.Fatal(err)
	}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	h.addr = ln.Addr().String()
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() {
		defer close(done)
		_ = forwardproxy.Serve(ctx, ln, p, time.Second)
	}()
	t.Cleanup(func() {
		cancel()
		<-done
		g.CloseIdleConnections()
		if t.Failed() {
			t.Logf("gateway logs:\n%s", h.logs)
		}
	})
	return h
}

// lineSink is a logr sink at every verbosity that writes key=value lines.
type lineSink struct {
	b    *logbuf.Buffer
	name string
	kv   []any
}

func (s *lineSink) Init(logr.RuntimeInfo) {}
func (s *lineSink) Enabled(int) bool      { return true }
func (s *lineSink) WithName(n string) logr.LogSink {
	return &lineSink{b: s.b, name: s.name + "/" + n, kv: s.kv}
}
func (s *lineSink) WithValues(kv ...any) logr.LogSink {
	return &lineSink{b: s.b, name: s.name, kv: append(append([]any(nil), s.kv...), kv...)}
}
func (s *lineSink) Info(_ int, msg string, kv ...any) { s.write(msg, nil, kv) }
func (s *lineSink) Error(err error, msg string, kv ...any) {
	s.write(msg, err, kv)
}

func (s *lineSink) write(msg string, err error, kv []any) {
	var line strings.Builder
	fmt.Fprintf(&line, "%s %q", s.name, msg)
	for i := 0; i+1 < len(kv); i += 2 {
		fmt.Fprintf(&line, " %v=%v", kv[i], kv[i+1])
	}
	for i := 0; i+1 < len(s.kv); i += 2 {
		fmt.Fprintf(&line, " %v=%v", s.kv[i], s.kv[i+1])
	}
	if err != nil {
		fmt.Fprintf(&line, " error=%v", err)
	}
	line.WriteByte('\n')
	_, _ = s.b.WriteString(line.String())
}

// gatewayURL is the gateway's URL with a username (options included).
func (h *gw) url(user string) *url.URL {
	return &url.URL{Scheme: "http", Host: h.addr, User: url.UserPassword(user, gwPass)}
}

// client is an HTTP client through the gateway as user, without keep-alive
// to the gateway unless keepAlive.
func (h *gw) client(t *testing.T, user string) *http.Client {
	t.Helper()
	tr := &http.Transport{Proxy: http.ProxyURL(h.url(user)), DisableKeepAlives: true}
	t.Cleanup(tr.CloseIdleConnections)
	return &http.Client{Transport: tr, Timeout: wait}
}

// ipEcho is an origin on 127.0.0.1 that answers with the caller's address:
// through a member, the member's egress address.
func ipEcho(t *testing.T) *httptest.Server {
	t.Helper()
	s := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		host, _, _ := net.SplitHostPort(r.RemoteAddr)
		_, _ = io.WriteString(w, host)
	}))
	t.Cleanup(s.Close)
	return s
}

// ipEchoWith is ipEcho that shows each request to saw first; it returns
// the origin's URL.
func ipEchoWith(t *testing.T, saw func(*http.Request)) string {
	t.Helper()
	s := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		saw(r)
		host, _, _ := net.SplitHostPort(r.RemoteAddr)
		_, _ = io.WriteString(w, host)
	}))
	t.Cleanup(s.Close)
	return s.URL
}

// get sends a GET through c and returns the status and the body.
func get(c *http.Client, u string, header http.Header) (int, string, http.Header, error) {
	req, err := http.NewRequest(http.MethodGet, u, nil)
	if err != nil {
		return 0, "", nil, err
	}
	for k, v := range header {
		req.Header[k] = v
	}
	resp, err := c.Do(req)
	if err != nil {
		return 0, "", nil, err
	}
	defer func() { _ = resp.Body.Close() }()
	b, err := io.ReadAll(resp.Body)
	return resp.StatusCode, string(b), resp.Header, err
}

// originOn serves handler on ip (a loopback address): another destination
// host than 127.0.0.1's origins. It returns the origin's URL.
func originOn(t *testing.T, ip string, handler http.Handler) string {
	t.Helper()
	ln, err := net.Listen("tcp", net.JoinHostPort(ip, "0"))
	if err != nil {
		t.Fatal(err)
	}
	s := httptest.NewUnstartedServer(handler)
	_ = s.Listener.Close()
	s.Listener = ln
	s.Start()
	t.Cleanup(s.Close)
	return s.URL
}

// clock is a time the test moves.
type clock struct {
	mu  sync.Mutex
	now time.Time
}

// newMetrics registers the gateway's metrics in a registry of the test's.
func newMetrics(t *testing.T) (*prometheus.Registry, *gateway.Metrics) {
	t.Helper()
	reg := prometheus.NewRegistry()
	gm, err := gateway.NewMetrics(reg)
	if err != nil {
		t.Fatal(err)
	}
	return reg, gm
}

func newClock() *clock { return &clock{now: time.Unix(1_700_000_000, 0)} }

func (c *clock) Now() time.Time {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.now
}

func (c *clock) advance(d time.Duration) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.now = c.now.Add(d)
}

// tcpEcho is a TCP server on 127.0.0.1 that first writes the caller's
// address and a newline, then echoes: through a tunnel, it names the member.
func tcpEcho(t *testing.T) string {
	t.Helper()
	return tcpEchoOn(t, "127.0.0.1")
}

// tcpEchoOn is tcpEcho on ip.
func tcpEchoOn(t *testing.T, ip string) string {
	t.Helper()
	ln, err := net.Listen("tcp", net.JoinHostPort(ip, "0"))
	if err != nil {
		t.Fatal(err)
	}
	var wg sync.WaitGroup
	var mu sync.Mutex
	var conns []net.Conn
	t.Cleanup(func() {
		_ = ln.Close()
		mu.Lock()
		for _, c := range conns {
			_ = c.Close()
		}
		mu.Unlock()
		wg.Wait()
	})
	wg.Go(func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			mu.Lock()
			conns = append(conns, c)
			mu.Unlock()
			wg.Go(func() {
				defer func() { _ = c.Close() }()
				host, _, _ := net.SplitHostPort(c.RemoteAddr().String())
				_, _ = io.WriteString(c, host+"\n")
				_, _ = io.Copy(c, c)
			})
		}
	})
	return ln.Addr().String()
}

// connect opens a CONNECT tunnel through the gateway to target with the
// given Proxy-Authorization and extra header lines. It returns the answer;
// on 200, the connection and its reader.
func connect(t *testing.T, addr, target, auth, extra string) (*http.Response, net.Conn, *bufio.Reader) {
	t.Helper()
	c, err := net.DialTimeout("tcp", addr, wait)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = c.Close() })
	_ = c.SetDeadline(time.Now().Add(wait))
	req := "CONNECT " + target + " HTTP/1.1\r\nHost: " + target + "\r\n"
	if auth != "" {
		req += "Proxy-Authorization: " + auth + "\r\n"
	}
	if _, err := io.WriteString(c, req+extra+"\r\n"); err != nil {
		t.Fatal(err)
	}
	br := bufio.NewReader(c)
	resp, err := http.ReadResponse(br, &http.Request{Method: http.MethodConnect})
	if err != nil {
		t.Fatal(err)
	}
	return resp, c, br
}

// tunnelEgress opens a tunnel to a tcpEcho server and returns the address
// it saw, after checking that bytes go both ways.
func tunnelEgress(t *testing.T, addr, target, user string) string {
	t.Helper()
	return tunnelEgressWith(t, addr, target, user, "")
}

// tunnelEgressWith is tunnelEgress with extra header lines on the CONNECT.
func tunnelEgressWith(t *testing.T, addr, target, user, extra string) string {
	t.Helper()
	resp, c, br := connect(t, addr, target, basic(user, gwPass), extra)
	if resp.StatusCode != http.StatusOK {
		// Only a refusal has a body: after a 200 the bytes are the tunnel's.
		body, _ := io.ReadAll(io.LimitReader(resp.Body, 512))
		_ = resp.Body.Close()
		t.Fatalf("CONNECT %s as %s: %s %q", target, user, resp.Status, body)
	}
	line, err := br.ReadString('\n')
	if err != nil {
		t.Fatal(err)
	}
	if _, err := io.WriteString(c, "ping"); err != nil {
		t.Fatal(err)
	}
	buf := make([]byte, 4)
	if _, err := io.ReadFull(br, buf); err != nil || string(buf) != "ping" {
		t.Fatalf("echo through the tunnel: %q %v", buf, err)
	}
	_ = c.Close()
	return strings.TrimSpace(line)
}

func basic(user, pass string) string {
	return "Basic " + base64.StdEncoding.EncodeToString([]byte(user+":"+pass))
}

// watchSecrets returns a sentinel watch that knows the members' passwords
// and the gateway's.
func watchSecrets(t *testing.T, ms []*member) *sentinel.Watch {
	t.Helper()
	w := sentinel.NewWatch()
	for _, m := range ms {
		if err := w.AddSecret("password of member "+m.name, m.pass); err != nil {
			t.Fatal(err)
		}
	}
	return w
}
