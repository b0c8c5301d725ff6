package forwardproxy_test

import (
	"bufio"
	"context"
	"encoding/base64"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"net/url"
	"sync"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/egress-proxies/egress-proxies-operator/internal/forwardproxy"
	"github.com/egress-proxies/egress-proxies-operator/internal/testing/logbuf"
	"github.com/egress-proxies/egress-proxies-operator/internal/testing/poll"
)

const (
	testUser = "crawler"
	// testPassword is the sentinel: it must never appear in logs or
	// responses.
	testPassword = "S3ntinel-pw-7f3a91"
	// wait bounds every wait on a condition in these tests.
	wait = 20 * time.Second
)

// harness is a Proxy served by Serve on 127.0.0.1, with its own metrics
// registry and a V(2) log buffer that is printed when the test fails.
type harness struct {
	addr     string // host:port of the proxy
	reg      *prometheus.Registry
	metrics  *forwardproxy.Metrics
	logs     *logbuf.Buffer
	cancel   context.CancelFunc
	served   chan error
	stopOnce sync.Once
	stopErr  error
}

func start(t *testing.T, cfg forwardproxy.Config, drain time.Duration) *harness {
	t.Helper()
	return startWith(t, cfg, forwardproxy.ServeOptions{Drain: drain})
}

// startWith is start with the server's limits.
func startWith(t *testing.T, cfg forwardproxy.Config, opts forwardproxy.ServeOptions) *harness {
	t.Helper()
	h := &harness{reg: prometheus.NewRegistry(), logs: &logbuf.Buffer{}, served: make(chan error, 1)}
	var err error
	if h.metrics, err = forwardproxy.NewMetrics(h.reg); err != nil {
		t.Fatal(err)
	}
	cfg.Metrics = h.metrics
	cfg.Log = h.logs.Logger(2)
	p, err := forwardproxy.New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	h.addr = ln.Addr().String()
	ctx, cancel := context.WithCancel(context.Background())
	h.cancel = cancel
	go func() { h.served <- forwardproxy.ServeWith(ctx, ln, p, opts) }()
	t.Cleanup(func() {
		if err := h.stop(); err != nil {
			t.Errorf("Serve: %v", err)
		}
		p.CloseIdleConnections()
		if t.Failed() {
			t.Logf("proxy logs:\n%s", h.logs)
		}
	})
	return h
}

// stop cancels Serve's context and returns what Serve returned.
func (h *harness) stop() error {
	h.stopOnce.Do(func() {
		h.cancel()
		timer := time.NewTimer(wait)
		defer timer.Stop()
		select {
		case h.stopErr = <-h.served:
		case <-timer.C:
			h.stopErr = errors.New("serve did not return")
		}
	})
	return h.stopErr
}

// client returns an HTTP client that uses the proxy, with credentials when
// user is not empty.
func (h *harness) client(t *testing.T, user, pass string) *http.Client {
	t.Helper()
	u := &url.URL{Scheme: "http", Host: h.addr}
	if user != "" {
		u.User = url.UserPassword(user, pass)
	}
	tr := &http.Transport{Proxy: http.ProxyURL(u), DisableKeepAlives: true}
	t.Cleanup(tr.CloseIdleConnections)
	return &http.Client{Transport: tr, Timeout: wait}
}

// basic returns a Proxy-Authorization value.
func basic(user, pass string) string {
	return "Basic " + base64.StdEncoding.EncodeToString([]byte(user+":"+pass))
}

// origin is an httptest server that records the headers it received.
type origin struct {
	*httptest.Server
	mu      sync.Mutex
	headers []http.Header
	bodies  []string
}

func newOrigin(t *testing.T) *origin {
	t.Helper()
	o := &origin{}
	o.Server = httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		body, _ := io.ReadAll(r.Body)
		o.mu.Lock()
		o.headers = append(o.headers, r.Header.Clone())
		o.bodies = append(o.bodies, string(body))
		o.mu.Unlock()
		w.Header().Set("X-Origin", "yes")
		_, _ = fmt.Fprintf(w, "hello %s %s", r.Method, r.URL.Path)
	}))
	t.Cleanup(o.Close)
	return o
}

func (o *origin) received() ([]http.Header, []string) {
	o.mu.Lock()
	defer o.mu.Unlock()
	return append([]http.Header(nil), o.headers...), append([]string(nil), o.bodies...)
}

// echoServer is a TCP server on 127.0.0.1 that echoes what it reads; ended
// receives one value each time a connection's read side ends (EOF or
// closed), which shows that the proxy closed the upstream connection.
type echoServer struct {
	addr  string
	ended chan struct{}
}

func newEchoServer(t *testing.T) *echoServer {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	e := &echoServer{addr: ln.Addr().String(), ended: make(chan struct{}, 16)}
	var (
		wg    sync.WaitGroup
		mu    sync.Mutex
		conns []net.Conn
	)
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
				_, _ = io.Copy(c, c)
				e.ended <- struct{}{}
			})
		}
	})
	return e
}

// tunnel opens a CONNECT tunnel through the proxy at proxyAddr to target,
// sending early right after the request, before reading the answer. It
// returns the connection and the reader to read the tunnel from.
func tunnel(t *testing.T, proxyAddr, target, auth, early string) (net.Conn, *bufio.Reader) {
	t.Helper()
	c, err := net.DialTimeout("tcp", proxyAddr, wait)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = c.Close() })
	_ = c.SetDeadline(time.Now().Add(wait))
	req := "CONNECT " + target + " HTTP/1.1\r\nHost: " + target + "\r\n"
	if auth != "" {
		req += "Proxy-Authorization: " + auth + "\r\n"
	}
	if _, err := io.WriteString(c, req+"\r\n"+early); err != nil {
		t.Fatal(err)
	}
	br := bufio.NewReader(c)
	resp, err := http.ReadResponse(br, &http.Request{Method: http.MethodConnect})
	if err != nil {
		t.Fatal(err)
	}
	// The body of a CONNECT 200 is empty; the tunnel is read from br.
	_ = resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		t.Fatalf("CONNECT %s: %s", target, resp.Status)
	}
	return c, br
}

// echo sends msg through a tunnel to an echo server and reads it back.
func echo(c net.Conn, br *bufio.Reader, msg string) (string, error) {
	if _, err := io.WriteString(c, msg); err != nil {
		return "", err
	}
	buf := make([]byte, len(msg))
	_, err := io.ReadFull(br, buf)
	return string(buf), err
}

// eventually polls cond until it holds or wait passes.
func eventually(t *testing.T, what string, cond func() bool) {
	t.Helper()
	poll.Until(t, wait, func() (bool, string) { return cond(), what })
}

// receive waits for a value on ch, for at most wait.
func receive[T any](t *testing.T, what string, ch <-chan T) T {
	t.Helper()
	return poll.Receive(t, wait, what, ch)
}
