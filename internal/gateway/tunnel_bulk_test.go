package gateway_test

import (
	"bytes"
	"io"
	"net/http"
	"strings"
	"testing"

	"github.com/egress-proxies/egress-proxies-operator/internal/gateway"
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
