package gateway_test

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"net"
	"os"
	"os/exec"
	"strings"
	"testing"

	"github.com/egress-proxies/egress-proxies-operator/internal/gateway"
)

// nodeBinary returns the path of node. Without it the test skips, except
// in CI (CI=true), where make test installs it (hack/node/install.sh): there
// a missing binary fails rather than silently dropping the check.
func nodeBinary(t *testing.T) string {
	t.Helper()
	path, err := exec.LookPath("node")
	if err == nil {
		return path
	}
	if os.Getenv("CI") == "true" {
		t.Fatalf("node is not installed (CI=true): run hack/node/install.sh; %v", err)
	}
	t.Skipf("node is not installed, so the gateway is not driven by a real Node.js client (hack/node/install.sh installs it): %v", err)
	return ""
}

// nodeRound is what testdata/keepalive-client.js saw for one session.
type nodeRound struct {
	Session string `json:"session"`
	Plain   struct {
		Status int    `json:"status"`
		Body   string `json:"body"`
		Port   int    `json:"port"`
	} `json:"plain"`
	Tunnel struct {
		Status int    `json:"status"`
		Port   int    `json:"port"`
		Line   string `json:"line"`
		Echo   string `json:"echo"`
	} `json:"tunnel"`
}

// TestNodeKeepAliveAgent: Node.js's http.Agent with keepAlive, the global
// agent's setting from Node 19 on and what crawler frameworks on Node use,
// sends a CONNECT on the socket its plain request left open. Through the
// gateway the tunnel opens, and the session header on that CONNECT places
// it on the member of the session's plain request. (The forward proxy and
// the gateway answered such a CONNECT with 400 until 2026-12-06.)
func TestNodeKeepAliveAgent(t *testing.T) {
	node := nodeBinary(t)
	ms := startMembers(t, 4)
	origin := ipEcho(t)
	target := tcpEcho(t)
	set := gateway.NewSet()
	set.Update("crawl", entries(ms))
	h := startGateway(t, gateway.Config{Members: set})
	host, port, err := net.SplitHostPort(h.addr)
	if err != nil {
		t.Fatal(err)
	}
	// Eight sessions: were the CONNECT's header lost, each tunnel would
	// rotate, and land with its session's plain request by chance once in
	// 4^8.
	sessions := make([]string, 8)
	for i := range sessions {
		sessions[i] = fmt.Sprintf("node%d", i)
	}
	ctx, cancel := context.WithTimeout(t.Context(), wait)
	defer cancel()
	args := append([]string{"testdata/keepalive-client.js", host, port, basic(gwUser, gwPass), origin.URL + "/", target, gateway.SessionHeader}, sessions...)
	var stdout, stderr bytes.Buffer
	cmd := exec.CommandContext(ctx, node, args...)
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	if err := cmd.Run(); err != nil {
		t.Fatalf("node: %v\n%s", err, stderr.String())
	}
	sc := bufio.NewScanner(&stdout)
	rounds := 0
	for sc.Scan() {
		var r nodeRound
		if err := json.Unmarshal(sc.Bytes(), &r); err != nil {
			t.Fatalf("node printed %q: %v", sc.Text(), err)
		}
		rounds++
		switch {
		case r.Plain.Status != 200:
			t.Errorf("session %s: the plain GET got %d", r.Session, r.Plain.Status)
		case r.Tunnel.Port != r.Plain.Port:
			t.Fatalf("session %s: Node opened a new socket for its CONNECT (port %d, the GET's %d): the test no longer sends a CONNECT after another request", r.Session, r.Tunnel.Port, r.Plain.Port)
		case r.Tunnel.Status != 200:
			t.Errorf("session %s: the CONNECT on the kept socket got %d, want 200", r.Session, r.Tunnel.Status)
		case r.Tunnel.Echo != "ping":
			t.Errorf("session %s: the tunnel echoed %q, want ping", r.Session, r.Tunnel.Echo)
		case strings.TrimSpace(r.Tunnel.Line) != r.Plain.Body:
			t.Errorf("session %s: the tunnel went out from %s, its plain request from %s", r.Session, r.Tunnel.Line, r.Plain.Body)
		}
	}
	if rounds != len(sessions) {
		t.Errorf("node reported %d sessions, want %d\n%s", rounds, len(sessions), stderr.String())
	}
}
