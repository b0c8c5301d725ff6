package probe_test

import (
	"context"
	"encoding/base64"
	"fmt"
	"net"
	"net/http"
	"net/http/httptest"
	"net/netip"
	"strings"
	"testing"
	"time"

	"github.com/egress-proxies/egress-proxies-operator/internal/egress"
	"github.com/egress-proxies/egress-proxies-operator/internal/forwardproxy"
	"github.com/egress-proxies/egress-proxies-operator/internal/probe"
)

const (
	user = "probeuser"
	pass = "s3cret-probe-password"
)

// ipEcho answers every request with the caller's address, as an IP-echo
// service does.
func ipEcho(t *testing.T) *httptest.Server {
	t.Helper()
	s := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		host, _, _ := net.SplitHostPort(r.RemoteAddr)
		_, _ = fmt.Fprintln(w, host)
	}))
	t.Cleanup(s.Close)
	return s
}

// realProxy runs the product's forward proxy on loopback.
func realProxy(t *testing.T) string {
	t.Helper()
	// The check URL listens on loopback, which the proxy's default egress
	// policy refuses.
	p, err := forwardproxy.New(forwardproxy.Config{Username: user, Password: pass,
		Egress: egress.Policy{AllowCIDRs: []netip.Prefix{netip.MustParsePrefix("127.0.0.0/8")}}})
	if err != nil {
		t.Fatal(err)
	}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() {
		defer close(done)
		_ = forwardproxy.Serve(ctx, ln, p, time.Second)
	}()
	t.Cleanup(func() { cancel(); <-done })
	return ln.Addr().String()
}

// stubProxy is a proxy that answers each request with what answer says,
// after checking credentials like a proxy would when checkAuth is set.
func stubProxy(t *testing.T, checkAuth bool, answer func(r *http.Request) (int, string)) string {
	t.Helper()
	want := "Basic " + base64.StdEncoding.EncodeToString([]byte(user+":"+pass))
	s := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if checkAuth && r.Header.Get("Proxy-Authorization") != want {
			w.WriteHeader(http.StatusProxyAuthRequired)
			return
		}
		code, body := answer(r)
		w.WriteHeader(code)
		_, _ = fmt.Fprint(w, body)
	}))
	t.Cleanup(s.Close)
	return strings.TrimPrefix(s.URL, "http://")
}

func TestHTTPProbeThroughTheForwardProxy(t *testing.T) {
	echo := ipEcho(t)
	addr := realProxy(t)
	h := &probe.HTTP{Timeout: 5 * time.Second}
	res, err := h.Probe(context.Background(), probe.Target{Address: addr, Username: user, Password: pass, CheckURL: echo.URL + "/ip"})
	if err != nil {
		t.Fatalf("probe of a working proxy failed: %v", err)
	}
	if res.EgressIP != netip.MustParseAddr("127.0.0.1") {
		t.Errorf("egress address = %v, want 127.0.0.1 (what the echo service saw)", res.EgressIP)
	}
	if res.Latency <= 0 {
		t.Errorf("latency = %v, want > 0", res.Latency)
	}
	// Without a check URL the probe needs no site outside the proxy.
	res, err = h.Probe(context.Background(), probe.Target{Address: addr, Username: user, Password: pass})
	if err != nil || res.EgressIP.IsValid() {
		t.Errorf("probe without a check URL: %+v, %v; want a pass without an egress address", res, err)
	}
}

func TestHTTPProbeFailures(t *testing.T) {
	closed := func() string {
		ln, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			t.Fatal(err)
		}
		a := ln.Addr().String()
		_ = ln.Close()
		return a
	}
	tests := []struct {
		name    string
		reason  string
		target  func() probe.Target
		wantErr string
	}{
		{
			name:   "nothing listens",
			reason: "a proxy that does not answer is not Serving",
			target: func() probe.Target {
				return probe.Target{Address: closed(), Username: user, Password: pass}
			},
			wantErr: "wrong-password check: dialling the proxy",
		},
		{
			name:   "wrong password accepted",
			reason: "a proxy that lets anyone in is an open proxy: never Serving",
			target: func() probe.Target {
				return probe.Target{Address: stubProxy(t, false, func(*http.Request) (int, string) { return 200, "" }), Username: user, Password: pass}
			},
			wantErr: "wrong-password check: the proxy answered 200 instead of 407",
		},
		{
			name:   "denied destination reached",
			reason: "a proxy whose egress policy lets a client reach link-local or private addresses is not safe to hand out",
			target: func() probe.Target {
				return probe.Target{Address: stubProxy(t, true, func(*http.Request) (int, string) { return 200, "" }), Username: user, Password: pass,
					DeniedURL: probe.DefaultDeniedURL}
			},
			wantErr: "denied-destination check: the proxy answered 200 instead of 403",
		},
		{
			name:   "right password refused",
			reason: "the credentials in the published list must work",
			target: func() probe.Target {
				return probe.Target{Address: stubProxy(t, true, nil), Username: user, Password: "other", CheckURL: "http://203.0.113.9/ip"}
			},
			wantErr: "check URL: the proxy answered 407",
		},
		{
			name:   "check URL answers no address",
			reason: "an egress address must be an address, not an error page",
			target: func() probe.Target {
				return probe.Target{Address: stubProxy(t, true, func(*http.Request) (int, string) { return 200, "<html>hi</html>" }), Username: user, Password: pass,
					CheckURL: "http://203.0.113.9/ip"}
			},
			wantErr: "did not answer with an IP address",
		},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			target := tc.target()
			_, err := (&probe.HTTP{Timeout: 2 * time.Second}).Probe(context.Background(), target)
			if err == nil || !strings.Contains(err.Error(), tc.wantErr) {
				t.Fatalf("Probe() error = %v, want one containing %q\nwhy this matters: %s", err, tc.wantErr, tc.reason)
			}
			if strings.Contains(err.Error(), pass) || strings.Contains(err.Error(), "other") {
				t.Errorf("the error carries the password: %v", err)
			}
		})
	}
}

func TestHTTPProbePassesThePolicyChecks(t *testing.T) {
	// A proxy that refuses the denied destination with 403, as the egress
	// policy does, and echoes the client otherwise.
	addr := stubProxy(t, true, func(r *http.Request) (int, string) {
		if r.URL.Host == "169.254.169.254" {
			return http.StatusForbidden, "denied"
		}
		return http.StatusOK, "203.0.113.77\n"
	})
	res, err := (&probe.HTTP{}).Probe(context.Background(), probe.Target{Address: addr, Username: user, Password: pass,
		DeniedURL: probe.DefaultDeniedURL, CheckURL: "http://203.0.113.9/ip"})
	if err != nil {
		t.Fatal(err)
	}
	if res.EgressIP != netip.MustParseAddr("203.0.113.77") {
		t.Errorf("egress = %v, want 203.0.113.77", res.EgressIP)
	}
}

func TestHTTPProbeOfAProxyWithoutAuthenticationSendsARequest(t *testing.T) {
	requests := 0
	addr := stubProxy(t, false, func(r *http.Request) (int, string) {
		requests++
		return http.StatusBadRequest, ""
	})
	if _, err := (&probe.HTTP{}).Probe(context.Background(), probe.Target{Address: addr}); err != nil {
		t.Fatalf("a proxy without authentication that answers failed the probe: %v", err)
	}
	if requests != 1 {
		t.Errorf("the proxy got %d requests, want 1: a probe must talk to the proxy even with nothing to check", requests)
	}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	closed := ln.Addr().String()
	_ = ln.Close()
	if _, err := (&probe.HTTP{}).Probe(context.Background(), probe.Target{Address: closed}); err == nil || !strings.Contains(err.Error(), "answer check") {
		t.Errorf("a proxy without authentication that does not answer: error %v, want an answer check failure", err)
	}
}
