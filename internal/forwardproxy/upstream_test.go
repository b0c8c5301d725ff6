package forwardproxy_test

import (
	"bufio"
	"context"
	"errors"
	"io"
	"net"
	"net/http"
	"net/url"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"

	"github.com/egress-proxies/egress-proxies-operator/internal/egress"
	"github.com/egress-proxies/egress-proxies-operator/internal/forwardproxy"
)

type routeKey struct{}

// recordingUpstream is an Upstream that accepts one Proxy-Authorization
// value, puts a route name in the context, and forwards to loopback
// destinations itself (which the Proxy's own egress policy would refuse):
// so a request that reaches a destination went through it.
type recordingUpstream struct {
	accept string
	refuse *forwardproxy.RefusedError // returned by DialTunnel and RoundTrip when set

	mu     sync.Mutex
	routes []string // the route each RoundTrip and DialTunnel saw
}

func (u *recordingUpstream) Authorize(ctx context.Context, value string) (context.Context, error) {
	switch value {
	case u.accept:
		return context.WithValue(ctx, routeKey{}, "route-a"), nil
	case "Basic bad-option":
		return ctx, &forwardproxy.RefusedError{Code: http.StatusBadRequest, Message: "unknown option; options are: session", Header: "X-Why", Value: "option"}
	}
	return ctx, errors.New("wrong credentials")
}

func (u *recordingUpstream) saw(ctx context.Context) {
	r, _ := ctx.Value(routeKey{}).(string)
	u.mu.Lock()
	u.routes = append(u.routes, r)
	u.mu.Unlock()
}

func (u *recordingUpstream) RoundTrip(req *http.Request) (*http.Response, error) {
	u.saw(req.Context())
	if u.refuse != nil {
		return nil, u.refuse
	}
	if req.Header.Get("Proxy-Authorization") != "" {
		return nil, errors.New("Proxy-Authorization reached the upstream")
	}
	return http.DefaultTransport.RoundTrip(req)
}

func (u *recordingUpstream) DialTunnel(ctx context.Context, target string) (net.Conn, error) {
	u.saw(ctx)
	if u.refuse != nil {
		return nil, u.refuse
	}
	var d net.Dialer
	return d.DialContext(ctx, "tcp", target)
}

func (u *recordingUpstream) seen() []string {
	u.mu.Lock()
	defer u.mu.Unlock()
	return append([]string(nil), u.routes...)
}

// TestUpstreamCarriesRequestsAndTunnels: with an Upstream, plain requests
// and both CONNECT paths (Serve's parser, and net/http after another
// request) go through it with the context Authorize returned, to
// destinations the Proxy's own policy would refuse (loopback); wrong
// credentials get 407 and an Upstream's refusal its own answer.
func TestUpstreamCarriesRequestsAndTunnels(t *testing.T) {
	up := &recordingUpstream{accept: basic(testUser, testPassword)}
	h := start(t, forwardproxy.Config{Upstream: up, Egress: egress.Policy{ConnectPorts: []egress.PortRange{{From: 1, To: 65535}}}}, wait)
	o := newOrigin(t)

	resp, err := h.client(t, testUser, testPassword).Get(o.URL + "/x")
	if err != nil {
		t.Fatal(err)
	}
	body, _ := io.ReadAll(resp.Body)
	_ = resp.Body.Close()
	if resp.StatusCode != http.StatusOK || string(body) != "hello GET /x" {
		t.Fatalf("GET through the upstream: %s %q", resp.Status, body)
	}

	e := newEchoServer(t)
	c, br := tunnel(t, h.addr, e.addr, basic(testUser, testPassword), "")
	if got, err := echo(c, br, "ping"); err != nil || got != "ping" {
		t.Fatalf("tunnel through the upstream: %q, %v", got, err)
	}
	_ = c.Close()

	// A CONNECT after a plain request on one connection is read by
	// net/http: it goes through the Upstream as well, with the context
	// Authorize returned.
	conn, err := net.Dial("tcp", h.addr)
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = conn.Close() }()
	_ = conn.SetDeadline(time.Now().Add(wait))
	auth := "Proxy-Authorization: " + basic(testUser, testPassword) + "\r\n"
	_, _ = io.WriteString(conn, "GET "+o.URL+"/y HTTP/1.1\r\nHost: "+strings.TrimPrefix(o.URL, "http://")+"\r\n"+auth+"\r\n")
	cbr := bufio.NewReader(conn)
	r1, err := http.ReadResponse(cbr, nil)
	if err != nil {
		t.Fatal(err)
	}
	_, _ = io.Copy(io.Discard, r1.Body)
	_ = r1.Body.Close()
	_, _ = io.WriteString(conn, "CONNECT "+e.addr+" HTTP/1.1\r\nHost: "+e.addr+"\r\n"+auth+"\r\n")
	r2, err := http.ReadResponse(cbr, &http.Request{Method: http.MethodConnect})
	if err != nil {
		t.Fatal(err)
	}
	_ = r2.Body.Close()
	if r2.StatusCode != http.StatusOK {
		t.Fatalf("CONNECT after a request: %s; want 200", r2.Status)
	}
	if got, err := echo(conn, cbr, "pong"); err != nil || got != "pong" {
		t.Fatalf("tunnel after a request through the upstream: %q, %v", got, err)
	}
	_ = conn.Close()

	if got := up.seen(); len(got) != 4 || strings.Count(strings.Join(got, ","), "route-a") != 4 {
		t.Errorf("the upstream saw routes %q; want route-a for each of the 4 requests it was given", got)
	}

	resp, err = h.client(t, testUser, "wrong").Get(o.URL)
	if err != nil {
		t.Fatal(err)
	}
	_ = resp.Body.Close()
	if resp.StatusCode != http.StatusProxyAuthRequired {
		t.Errorf("wrong credentials: %s; want 407", resp.Status)
	}
	for _, path := range []string{"http", "connect"} {
		var code int
		var why string
		if path == "http" {
			req, _ := http.NewRequest(http.MethodGet, o.URL, nil)
			req.Header.Set("Proxy-Authorization", "Basic bad-option")
			tr := &http.Transport{Proxy: http.ProxyURL(&url.URL{Scheme: "http", Host: h.addr})}
			resp, err := tr.RoundTrip(req)
			if err != nil {
				t.Fatal(err)
			}
			_ = resp.Body.Close()
			code, why = resp.StatusCode, resp.Header.Get("X-Why")
		} else {
			code, why = connectAnswer(t, h.addr, e.addr, "Basic bad-option", "X-Why")
		}
		if code != http.StatusBadRequest || why != "option" {
			t.Errorf("%s with a refused option: %d %q; want the upstream's 400 with its header", path, code, why)
		}
	}

	up.refuse = &forwardproxy.RefusedError{Code: http.StatusTooManyRequests, Message: "every member is at its limit", Header: "Retry-After", Value: "1"}
	if code, retry := connectAnswer(t, h.addr, e.addr, basic(testUser, testPassword), "Retry-After"); code != http.StatusTooManyRequests || retry != "1" {
		t.Errorf("CONNECT the upstream refuses: %d Retry-After %q; want 429 with 1", code, retry)
	}
}

// connectAnswer sends one CONNECT on a new connection and returns the
// status of the proxy's answer and its header named header.
func connectAnswer(t *testing.T, proxyAddr, target, auth, header string) (int, string) {
	t.Helper()
	c, err := net.DialTimeout("tcp", proxyAddr, wait)
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = c.Close() }()
	_ = c.SetDeadline(time.Now().Add(wait))
	_, _ = io.WriteString(c, "CONNECT "+target+" HTTP/1.1\r\nHost: "+target+"\r\nProxy-Authorization: "+auth+"\r\n\r\n")
	resp, err := http.ReadResponse(bufio.NewReader(c), &http.Request{Method: http.MethodConnect})
	if err != nil {
		t.Fatal(err)
	}
	_ = resp.Body.Close()
	return resp.StatusCode, resp.Header.Get(header)
}

// headerUpstream is a recordingUpstream that reads X-Route on CONNECT: it
// records what TunnelHeader gave Authorize and DialTunnel.
type headerUpstream struct {
	recordingUpstream
	mu  sync.Mutex
	got []http.Header // Authorize's, then DialTunnel's, per tunnel
}

func (u *headerUpstream) TunnelHeaders() []string { return []string{"x-route"} }

func (u *headerUpstream) Authorize(ctx context.Context, value string) (context.Context, error) {
	u.mu.Lock()
	u.got = append(u.got, forwardproxy.TunnelHeader(ctx))
	u.mu.Unlock()
	return u.recordingUpstream.Authorize(ctx, value)
}

func (u *headerUpstream) DialTunnel(ctx context.Context, target string) (net.Conn, error) {
	u.mu.Lock()
	u.got = append(u.got, forwardproxy.TunnelHeader(ctx))
	u.mu.Unlock()
	return u.recordingUpstream.DialTunnel(ctx, target)
}

// TestTunnelHeadersReachTheUpstream: the CONNECT header fields an Upstream
// names reach its Authorize and DialTunnel, every value of a repeated
// field, whatever their case; other fields do not, and a CONNECT without
// them gives nil.
func TestTunnelHeadersReachTheUpstream(t *testing.T) {
	up := &headerUpstream{recordingUpstream: recordingUpstream{accept: basic(testUser, testPassword)}}
	h := start(t, forwardproxy.Config{Upstream: up, Egress: egress.Policy{ConnectPorts: []egress.PortRange{{From: 1, To: 65535}}}}, wait)
	e := newEchoServer(t)
	for _, tc := range []struct {
		reason, extra string
		want          http.Header
	}{
		{"no field of the upstream's", "X-Other: c\r\n", nil},
		{"one field, in another case", "x-ROUTE: s1\r\nX-Other: c\r\n", http.Header{"X-Route": {"s1"}}},
		{"a repeated field keeps every value, for the upstream to refuse", "X-Route: a\r\nX-Route:  b \r\n", http.Header{"X-Route": {"a", "b"}}},
	} {
		up.mu.Lock()
		up.got = nil
		up.mu.Unlock()
		c, br := tunnel(t, h.addr, e.addr, basic(testUser, testPassword)+"\r\n"+strings.TrimSuffix(tc.extra, "\r\n"), "")
		if got, err := echo(c, br, "ping"); err != nil || got != "ping" {
			t.Fatalf("%s: tunnel: %q, %v", tc.reason, got, err)
		}
		_ = c.Close()
		up.mu.Lock()
		got := up.got
		up.mu.Unlock()
		if diff := cmp.Diff([]http.Header{tc.want, tc.want}, got); diff != "" {
			t.Errorf("%s: what Authorize and DialTunnel saw (-want +got):\n%s", tc.reason, diff)
		}
	}
}

// TestProxyTransportSpeaksToAProxy: a ProxyTransport writes each request in
// absolute form with the Proxy-Authorization that Proxy named, on a copy of
// the header (the caller's map never holds the proxy's credentials), keeps
// the connection for the next request, and returns Dial's error as it is,
// so that a gateway can tell a request that was never sent.
func TestProxyTransportSpeaksToAProxy(t *testing.T) {
	type seen struct{ URI, Auth string }
	var got []seen
	next, conns := countingOriginOf(t, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		got = append(got, seen{r.RequestURI, r.Header.Get("Proxy-Authorization")})
		_, _ = io.WriteString(w, "relayed")
	}))
	errRefused := errors.New("no dial to this proxy")
	tr, err := forwardproxy.NewProxyTransport(forwardproxy.ProxyTransportConfig{
		Proxy: func(*http.Request) (forwardproxy.ProxyTarget, error) {
			return forwardproxy.ProxyTarget{Addr: next.Listener.Addr().String(), Authorization: "Basic bWVtYmVyOnNlY3JldA==", KeepAlive: true}, nil
		},
		Dial: func(ctx context.Context, addr string) (net.Conn, error) {
			if addr != next.Listener.Addr().String() {
				return nil, errRefused
			}
			return (&net.Dialer{}).DialContext(ctx, "tcp", addr)
		},
		Upgrades: http.DefaultTransport,
	})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(tr.CloseIdleConnections)
	for _, path := range []string{"/a", "/b?q=1"} {
		req, err := http.NewRequest(http.MethodGet, "http://origin.invalid"+path, http.NoBody)
		if err != nil {
			t.Fatal(err)
		}
		resp, err := tr.RoundTrip(req)
		if err != nil {
			t.Fatal(err)
		}
		body, err := io.ReadAll(resp.Body)
		_ = resp.Body.Close()
		if err != nil || string(body) != "relayed" {
			t.Fatalf("%s: %q, %v", path, body, err)
		}
		if v := req.Header.Get("Proxy-Authorization"); v != "" {
			t.Errorf("%s: the caller's header now holds the proxy's credentials", path)
		}
	}
	want := []seen{{"http://origin.invalid/a", "Basic bWVtYmVyOnNlY3JldA=="}, {"http://origin.invalid/b?q=1", "Basic bWVtYmVyOnNlY3JldA=="}}
	if diff := cmp.Diff(want, got); diff != "" {
		t.Errorf("what the next proxy received (-want +got):\n%s", diff)
	}
	if n := conns.Load(); n != 1 {
		t.Errorf("%d connections to the next proxy for two requests, want 1 kept alive", n)
	}

	off, err := forwardproxy.NewProxyTransport(forwardproxy.ProxyTransportConfig{
		Proxy: func(*http.Request) (forwardproxy.ProxyTarget, error) {
			return forwardproxy.ProxyTarget{Addr: "127.0.0.1:1"}, nil
		},
		Dial: func(context.Context, string) (net.Conn, error) {
			return nil, errRefused
		},
		Upgrades: http.DefaultTransport,
	})
	if err != nil {
		t.Fatal(err)
	}
	req, err := http.NewRequest(http.MethodGet, "http://origin.invalid/", http.NoBody)
	if err != nil {
		t.Fatal(err)
	}
	resp, err := off.RoundTrip(req)
	if err == nil {
		_ = resp.Body.Close()
	}
	if !errors.Is(err, errRefused) {
		t.Errorf("a failed dial: %v, want Dial's own error", err)
	}
}

// TestBytesPastAnAnswerNeverAnswerTheNextRequest (#38 item 1): even to a
// proxy whose connections may be kept (KeepAlive), a connection on which
// bytes came past the answer's framing, with the answer or while it sat
// idle, is closed, never reused: those bytes answer no request yet sent,
// and would be read as the answer to the next one, another client's
// perhaps. Each case's second request must get its own answer on a new
// connection. It fails without the buffer check in release (the first two
// cases) or the socket's in take (the third).
func TestBytesPastAnAnswerNeverAnswerTheNextRequest(t *testing.T) {
	const injected = "HTTP/1.1 200 OK\r\nContent-Length: 8\r\n\r\nINJECTED"
	for _, tc := range []struct {
		reason string
		// first is written as the first answer on every connection;
		// late, after the client read it and before its next request.
		first, late string
	}{
		{reason: "a second answer in the same write as a sized body",
			first: "HTTP/1.1 200 OK\r\nContent-Length: 5\r\n\r\nfirst" + injected},
		{reason: "a second answer in the same write as the last chunk",
			first: "HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n5\r\nfirst\r\n0\r\n\r\n" + injected},
		{reason: "a second answer while the connection sat idle",
			first: "HTTP/1.1 200 OK\r\nContent-Length: 5\r\n\r\nfirst", late: injected},
	} {
		t.Run(tc.reason, func(t *testing.T) {
			ln, err := net.Listen("tcp", "127.0.0.1:0")
			if err != nil {
				t.Fatal(err)
			}
			var wg sync.WaitGroup
			conns := make(chan net.Conn, 4)
			t.Cleanup(func() {
				_ = ln.Close()
				close(conns)
				for c := range conns {
					_ = c.Close()
				}
				wg.Wait()
			})
			// Every connection: the first answer, then, once told,
			// the late bytes; a request after the first is answered
			// "own page".
			readFirst, lateWritten := make(chan struct{}), make(chan struct{})
			wg.Go(func() {
				for {
					c, err := ln.Accept()
					if err != nil {
						return
					}
					conns <- c
					wg.Go(func() {
						br := bufio.NewReader(c)
						for i := 0; ; i++ {
							req, err := http.ReadRequest(br)
							if err != nil {
								return
							}
							if i > 0 {
								_, _ = io.WriteString(c, "HTTP/1.1 200 OK\r\nContent-Length: 8\r\n\r\nown page")
								continue
							}
							_, _ = io.WriteString(c, tc.first)
							if tc.late != "" && req.URL.Path == "/first" {
								// Once the client has read the first
								// answer whole: the connection is idle
								// in the transport's pool by then. A
								// write on loopback has reached the
								// peer's socket when it returns.
								<-readFirst
								_, _ = io.WriteString(c, tc.late)
								close(lateWritten)
							}
						}
					})
				}
			})
			dials := 0
			tr, err := forwardproxy.NewProxyTransport(forwardproxy.ProxyTransportConfig{
				Proxy: func(*http.Request) (forwardproxy.ProxyTarget, error) {
					return forwardproxy.ProxyTarget{Addr: ln.Addr().String(), KeepAlive: true}, nil
				},
				Dial: func(ctx context.Context, addr string) (net.Conn, error) {
					dials++
					return (&net.Dialer{}).DialContext(ctx, "tcp", addr)
				},
				Upgrades: http.DefaultTransport,
			})
			if err != nil {
				t.Fatal(err)
			}
			t.Cleanup(tr.CloseIdleConnections)
			var got []string
			for _, path := range []string{"/first", "/second"} {
				req, err := http.NewRequest(http.MethodGet, "http://origin.invalid"+path, http.NoBody)
				if err != nil {
					t.Fatal(err)
				}
				resp, err := tr.RoundTrip(req)
				if err != nil {
					t.Fatal(err)
				}
				body, err := io.ReadAll(resp.Body)
				_ = resp.Body.Close()
				got = append(got, path+" "+string(body))
				if err != nil {
					t.Fatal(err)
				}
				if tc.late != "" && path == "/first" {
					close(readFirst)
					<-lateWritten
				}
			}
			want := []string{"/first first", "/second first"}
			if diff := cmp.Diff(want, got); diff != "" {
				t.Errorf("answers (-want +got):\n%s", diff)
			}
			if dials != 2 {
				t.Errorf("%d dials, want 2: the connection with bytes past its answer was reused", dials)
			}
		})
	}
}
