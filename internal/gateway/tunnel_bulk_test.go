package gateway_test

import (
	"bufio"
	"bytes"
	"context"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"strconv"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/egress-proxies/egress-proxies-operator/internal/gateway"
	"github.com/egress-proxies/egress-proxies-operator/internal/testing/poll"
)

// A bulk transfer through a gateway tunnel (which the forward proxy's relay
// hands to splice(2) on Linux once a read fills its buffer, now that the
// member's connection shows its TCP connection) arrives whole and in order
// both ways, and the tunnel still carries bytes after it.
func TestTunnelCarriesBulkTransfers(t *testing.T) {
	ms := startMembers(t, 1)
	set := gateway.NewSet()
	set.Update("crawl", entries(ms))
	h := startGateway(t, gateway.Config{Members: set})
	resp, c, br := connect(t, h.addr, tcpEcho(t), basic(gwUser, gwPass), "")
	_ = resp.Body.Close() // a 200 to CONNECT has no body: the bytes after it are the tunnel's
	if resp.StatusCode != http.StatusOK {
		t.Fatalf("CONNECT: %s", resp.Status)
	}
	if line, err := br.ReadString('\n'); err != nil || strings.TrimSpace(line) != ms[0].egress {
		t.Fatalf("the echo server's first line = %q, %v; want the member's address %s", line, err, ms[0].egress)
	}
	payload := make([]byte, 4<<20)
	for i := range payload {
		payload[i] = byte(i * 7 % 251)
	}
	go func() { _, _ = c.Write(payload) }()
	got := make([]byte, len(payload))
	if _, err := io.ReadFull(br, got); err != nil {
		t.Fatalf("reading the echo of 4 MiB: %v", err)
	}
	if !bytes.Equal(payload, got) {
		t.Errorf("the echo of 4 MiB differs")
	}
	if _, err := io.WriteString(c, "after"); err != nil {
		t.Fatal(err)
	}
	after := make([]byte, 5)
	if _, err := io.ReadFull(br, after); err != nil || string(after) != "after" {
		t.Errorf("echo after the bulk transfer = %q, %v", after, err)
	}
}

// A plain answer of a few MiB through the gateway (whose transport to its
// members splices a body of known length to the client once it turns out
// bulky, docs/performance.md) arrives whole on a kept-alive client
// connection, three times, and is counted whole on its member's series.
func TestPlainAnswersCarryBulkBodies(t *testing.T) {
	const size = 3 << 20
	payload := make([]byte, size)
	for i := range payload {
		payload[i] = byte(i * 5 % 251)
	}
	origin := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
		w.Header().Set("Content-Length", strconv.Itoa(size))
		_, _ = w.Write(payload)
	}))
	t.Cleanup(origin.Close)
	ms := startMembers(t, 1)
	set := gateway.NewSet()
	set.Update("crawl", entries(ms))
	reg, gm := newMetrics(t)
	h := startGateway(t, gateway.Config{Members: set, Metrics: gm})
	var dials atomic.Int64
	tr := &http.Transport{Proxy: http.ProxyURL(h.url(gwUser)), DialContext: func(ctx context.Context, network, addr string) (net.Conn, error) {
		dials.Add(1)
		return (&net.Dialer{}).DialContext(ctx, network, addr)
	}}
	t.Cleanup(tr.CloseIdleConnections)
	c := &http.Client{Transport: tr, Timeout: wait}
	for i := range 3 {
		code, body, _, err := get(c, origin.URL+"/big", nil)
		if err != nil || code != http.StatusOK || body != string(payload) {
			t.Fatalf("answer %d: %d, %d bytes, %v; want 200 and the origin's %d bytes", i+1, code, len(body), err, size)
		}
	}
	if n := dials.Load(); n != 1 {
		t.Errorf("the client dialed the gateway %d times for three answers, want 1 kept-alive connection", n)
	}
	labels := map[string]string{"pool": "crawl", "member": ms[0].name, "direction": "down"}
	poll.Until(t, wait, func() (bool, string) {
		got := metric(t, reg, "egress_proxies_gateway_member_bytes_total", labels)
		return got == 3*size, fmt.Sprintf("%v bytes down on the member's series, want %d", got, 3*size)
	})
}

// A request that asks for a protocol upgrade (WebSocket and the like) goes
// through a member to its origin, which switches: the client gets the 101
// and the connection carries bytes both ways after it, from the member's
// egress address.
func TestUpgradesGoThroughAMember(t *testing.T) {
	ms := startMembers(t, 1)
	set := gateway.NewSet()
	set.Update("crawl", entries(ms))
	h := startGateway(t, gateway.Config{Members: set})
	from := make(chan string, 1)
	origin := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.Header.Get("Upgrade") != "echo" {
			http.Error(w, "upgrade only", http.StatusBadRequest)
			return
		}
		host, _, _ := net.SplitHostPort(r.RemoteAddr)
		from <- host
		c, brw, err := http.NewResponseController(w).Hijack()
		if err != nil {
			return
		}
		defer func() { _ = c.Close() }()
		_, _ = io.WriteString(c, "HTTP/1.1 101 Switching Protocols\r\nConnection: Upgrade\r\nUpgrade: echo\r\n\r\n")
		_, _ = io.Copy(c, brw)
	}))
	t.Cleanup(origin.Close)
	c, err := net.DialTimeout("tcp", h.addr, wait)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = c.Close() })
	_ = c.SetDeadline(time.Now().Add(wait))
	host := strings.TrimPrefix(origin.URL, "http://")
	_, _ = io.WriteString(c, "GET "+origin.URL+"/ws HTTP/1.1\r\nHost: "+host+"\r\nConnection: Upgrade\r\nUpgrade: echo\r\nProxy-Authorization: "+basic(gwUser, gwPass)+"\r\n\r\n")
	br := bufio.NewReader(c)
	resp, err := http.ReadResponse(br, &http.Request{Method: http.MethodGet})
	if err != nil {
		t.Fatal(err)
	}
	_ = resp.Body.Close()
	if resp.StatusCode != http.StatusSwitchingProtocols {
		t.Fatalf("status %s, want 101", resp.Status)
	}
	if got := <-from; got != ms[0].egress {
		t.Errorf("the origin saw the upgrade from %s, want the member's egress address %s", got, ms[0].egress)
	}
	for _, msg := range []string{"ping", "pong"} {
		if _, err := io.WriteString(c, msg); err != nil {
			t.Fatal(err)
		}
		got := make([]byte, len(msg))
		if _, err := io.ReadFull(br, got); err != nil || string(got) != msg {
			t.Fatalf("echo of %q over the upgraded connection: %q, %v", msg, got, err)
		}
	}
}

// A member's ban answer with a large body is dropped when another member
// takes the request: not one byte of it reaches the client, although a
// member's body hands its bulk straight to the client's writer once the
// answer's head was sent (forwardproxy's readDirect), which a dropped
// answer's never was.
func TestADroppedLargeBanAnswerNeverReachesTheClient(t *testing.T) {
	const size = 1 << 20
	ms := startMembers(t, 2)
	refusal := bytes.Repeat([]byte("B"), size)
	origin := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		host, _, _ := net.SplitHostPort(r.RemoteAddr)
		if host == ms[0].egress {
			w.Header().Set("Content-Length", strconv.Itoa(size))
			w.WriteHeader(http.StatusTooManyRequests)
			_, _ = w.Write(refusal)
			return
		}
		_, _ = io.WriteString(w, host)
	}))
	t.Cleanup(origin.Close)
	set := gateway.NewSet()
	set.Update("crawl", entries(ms))
	h := startGateway(t, gateway.Config{Members: set})
	// Round-robin starts at ms[0], which gets the ban.
	code, body, _, err := get(h.client(t, gwUser), origin.URL, nil)
	if err != nil || code != http.StatusOK || body != ms[1].egress {
		t.Errorf("through the gateway: %d, %d bytes (%.40q), %v; want 200 and the other member's address %s only", code, len(body), body, err, ms[1].egress)
	}
}
