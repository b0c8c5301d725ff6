package forwardproxy

import (
	"bufio"
	"context"
	"encoding/base64"
	"io"
	"net"
	"net/http"
	"net/netip"
	"testing"

	"github.com/google/go-cmp/cmp"
)

// TestAdmissionOrder: a plain request and a CONNECT are admitted by one
// function, in one order (source, credentials, slot), so each is refused
// for the first check it fails, whichever parser read it.
func TestAdmissionOrder(t *testing.T) {
	p, err := New(Config{Username: "u", Password: "order-password-123456", MaxConcurrent: 1,
		AllowedSourceRanges: []netip.Prefix{netip.MustParsePrefix("127.0.0.2/32")}})
	if err != nil {
		t.Fatal(err)
	}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(t.Context())
	done := make(chan struct{})
	go func() { defer close(done); _ = Serve(ctx, ln, p, 0) }()
	t.Cleanup(func() { cancel(); <-done })
	good := "Basic " + base64.StdEncoding.EncodeToString([]byte("u:order-password-123456"))
	bad := "Basic " + base64.StdEncoding.EncodeToString([]byte("u:wrong"))
	send := func(from, head string) int {
		d := net.Dialer{LocalAddr: &net.TCPAddr{IP: net.ParseIP(from)}, Timeout: admissionWait}
		c, err := d.Dial("tcp", ln.Addr().String())
		if err != nil {
			t.Fatal(err)
		}
		defer func() { _ = c.Close() }()
		if _, err := io.WriteString(c, head); err != nil {
			t.Fatal(err)
		}
		resp, err := http.ReadResponse(bufio.NewReader(c), nil)
		if err != nil {
			t.Fatal(err)
		}
		_ = resp.Body.Close()
		return resp.StatusCode
	}
	heads := map[string]func(auth string) string{
		"plain": func(auth string) string {
			return "GET http://127.0.0.1:9/ HTTP/1.1\r\nHost: 127.0.0.1:9\r\nProxy-Authorization: " + auth + "\r\n\r\n"
		},
		"CONNECT": func(auth string) string {
			return "CONNECT 127.0.0.1:9 HTTP/1.1\r\nHost: 127.0.0.1:9\r\nProxy-Authorization: " + auth + "\r\n\r\n"
		},
	}
	// Every slot taken: a request past its credentials gets 503.
	if !p.acquire() {
		t.Fatal("no slot to take")
	}
	defer p.release()
	for _, tc := range []struct {
		reason string
		from   string
		auth   string
		want   int
	}{
		{"a source outside the ranges is refused before its credentials are read", "127.0.0.3", bad, http.StatusForbidden},
		{"wrong credentials are refused before a slot is looked for", "127.0.0.2", bad, http.StatusProxyAuthRequired},
		{"an admitted client finds no slot", "127.0.0.2", good, http.StatusServiceUnavailable},
	} {
		got := map[string]int{}
		for path, head := range heads {
			got[path] = send(tc.from, head(tc.auth))
		}
		if diff := cmp.Diff(map[string]int{"plain": tc.want, "CONNECT": tc.want}, got); diff != "" {
			t.Errorf("%s: status by path (-want +got):\n%s", tc.reason, diff)
		}
	}
}
