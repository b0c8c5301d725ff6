package forwardproxy_test

import (
	"context"
	"errors"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"

	"github.com/egress-proxies/egress-proxies-operator/internal/forwardproxy"
)

// slowOrigin answers /slow only when release is closed, and tells arrived
// when a request is there; cancelled receives the requests whose context
// ended before that.
type slowOrigin struct {
	*httptest.Server
	arrived   chan struct{}
	release   chan struct{}
	cancelled chan struct{}
}

func newSlowOrigin(t *testing.T) *slowOrigin {
	t.Helper()
	o := &slowOrigin{arrived: make(chan struct{}, 4), release: make(chan struct{}), cancelled: make(chan struct{}, 4)}
	o.Server = httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		o.arrived <- struct{}{}
		select {
		case <-o.release:
			_, _ = io.WriteString(w, "slow answer")
		case <-r.Context().Done():
			o.cancelled <- struct{}{}
		}
	}))
	t.Cleanup(o.Close)
	return o
}

type result struct {
	status int
	body   string
	err    error
}

func get(c *http.Client, url string) <-chan result {
	ch := make(chan result, 1)
	go func() {
		resp, err := c.Get(url)
		if err != nil {
			ch <- result{err: err}
			return
		}
		defer func() { _ = resp.Body.Close() }()
		body, err := io.ReadAll(resp.Body)
		ch <- result{status: resp.StatusCode, body: string(body), err: err}
	}()
	return ch
}

// refused reports whether a new connection to addr is refused.
func refused(addr string) bool {
	c, err := net.DialTimeout("tcp", addr, time.Second)
	if err != nil {
		return true
	}
	_ = c.Close()
	return false
}

// stopAsync cancels Serve's context and returns where Serve's result will
// arrive.
func (h *harness) stopAsync() <-chan error {
	ch := make(chan error, 1)
	go func() { ch <- h.stop() }()
	return ch
}

func TestServeLetsInFlightRequestsFinish(t *testing.T) {
	o := newSlowOrigin(t)
	h := start(t, withAuth, time.Minute)
	inFlight := get(h.client(t, testUser, testPassword), o.URL+"/slow")
	receive(t, "the request at the origin", o.arrived)

	stopped := h.stopAsync()
	eventually(t, "new connections refused", func() bool { return refused(h.addr) })
	select {
	case r := <-inFlight:
		t.Fatalf("the in-flight request ended before the origin answered: %+v", r)
	case err := <-stopped:
		t.Fatalf("Serve returned %v with a request in flight", err)
	default:
	}
	close(o.release)
	if diff := cmp.Diff(result{status: http.StatusOK, body: "slow answer"}, receive(t, "the in-flight request", inFlight), cmp.AllowUnexported(result{})); diff != "" {
		t.Errorf("in-flight request (-want +got):\n%s", diff)
	}
	if err := receive(t, "Serve to return", stopped); err != nil {
		t.Errorf("Serve = %v, want nil", err)
	}
}

func TestServeCutsRequestsAtTheEndOfTheDrain(t *testing.T) {
	o := newSlowOrigin(t)
	h := start(t, withAuth, 300*time.Millisecond)
	inFlight := get(h.client(t, testUser, testPassword), o.URL+"/slow")
	receive(t, "the request at the origin", o.arrived)

	stopped := h.stopAsync()
	if r := receive(t, "the in-flight request", inFlight); r.err == nil && r.status == http.StatusOK {
		t.Errorf("a request longer than the drain period got %+v, want it cut", r)
	}
	receive(t, "the upstream request to be cancelled", o.cancelled)
	if err := receive(t, "Serve to return", stopped); err != nil {
		t.Errorf("Serve = %v, want nil", err)
	}
}

func TestServeClosesTunnelsAfterTheDrain(t *testing.T) {
	const drain = time.Second
	e := newEchoServer(t)
	h := start(t, withAuth, drain)
	c, br := tunnel(t, h.addr, e.addr, basic(testUser, testPassword), "")
	if _, err := echo(c, br, "before"); err != nil {
		t.Fatal(err)
	}

	begin := time.Now()
	stopped := h.stopAsync()
	eventually(t, "new connections refused", func() bool { return refused(h.addr) })
	if got, err := echo(c, br, "during"); err != nil || got != "during" {
		t.Fatalf("the tunnel stopped working when the drain began: echo = %q, %v", got, err)
	}
	if _, err := br.ReadByte(); err == nil {
		t.Errorf("the tunnel sent a byte, want it closed")
	}
	receive(t, "the upstream connection to end", e.ended)
	if err := receive(t, "Serve to return", stopped); err != nil {
		t.Errorf("Serve = %v, want nil", err)
	}
	if elapsed := time.Since(begin); elapsed < drain {
		t.Errorf("Serve returned after %s, before the drain period of %s", elapsed, drain)
	}
}

func TestServeReturnsOnceTunnelsEnd(t *testing.T) {
	e := newEchoServer(t)
	// The drain period is longer than the test's wait: Serve must return
	// because the tunnel ended, not because the drain ran out.
	h := start(t, withAuth, time.Hour)
	c, br := tunnel(t, h.addr, e.addr, basic(testUser, testPassword), "")
	if _, err := echo(c, br, "ping"); err != nil {
		t.Fatal(err)
	}
	stopped := h.stopAsync()
	eventually(t, "new connections refused", func() bool { return refused(h.addr) })
	select {
	case err := <-stopped:
		t.Fatalf("Serve returned %v with a tunnel open", err)
	default:
	}
	_ = c.Close()
	if err := receive(t, "Serve to return", stopped); err != nil {
		t.Errorf("Serve = %v, want nil", err)
	}
}

// A hijacked handler that waits on its request's context, rather than on
// its connection, is stopped too when the drain period ends.
func TestServeCancelsHijackedHandlersAfterTheDrain(t *testing.T) {
	hijacked := make(chan struct{}, 1)
	h := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		c, _, err := http.NewResponseController(w).Hijack()
		if err != nil {
			t.Error(err)
			return
		}
		defer func() { _ = c.Close() }()
		hijacked <- struct{}{}
		<-r.Context().Done()
	})
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	done := make(chan error, 1)
	go func() { done <- forwardproxy.Serve(ctx, ln, h, 100*time.Millisecond) }()
	resp := get(&http.Client{Timeout: wait}, "http://"+ln.Addr().String()+"/")
	receive(t, "the handler to hijack", hijacked)
	cancel()
	if err := receive(t, "Serve to return", done); err != nil {
		t.Errorf("Serve = %v, want nil", err)
	}
	if r := receive(t, "the client", resp); r.err == nil {
		t.Errorf("the client got %+v from a handler that never answered", r)
	}
}

func TestServeReportsAFailedListener(t *testing.T) {
	p, err := forwardproxy.New(withAuth)
	if err != nil {
		t.Fatal(err)
	}
	// A Proxy is served through Serve's own accept loop, any other
	// handler by net/http alone: both report the listener's error.
	for name, h := range map[string]http.Handler{"handler": http.NotFoundHandler(), "proxy": p} {
		t.Run(name, func(t *testing.T) {
			ln, err := net.Listen("tcp", "127.0.0.1:0")
			if err != nil {
				t.Fatal(err)
			}
			_ = ln.Close()
			done := make(chan error, 1)
			go func() {
				done <- forwardproxy.Serve(context.Background(), ln, h, time.Second)
			}()
			err = receive(t, "Serve to return", done)
			if err == nil || !errors.Is(err, net.ErrClosed) && !strings.Contains(err.Error(), "closed") {
				t.Errorf("Serve on a closed listener = %v, want the listener's error", err)
			}
		})
	}
}
