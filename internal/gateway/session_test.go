package gateway_test

import (
	"bufio"
	"fmt"
	"io"
	"net"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/egress-proxies/egress-proxies-operator/internal/gateway"
)

// TestSessionStaysOnOneMember: a session, by username option or header,
// keeps one egress address for all its plain requests and tunnels, while
// requests without one rotate; different sessions spread over the members.
func TestSessionStaysOnOneMember(t *testing.T) {
	ms := startMembers(t, 4)
	origin := ipEcho(t)
	target := tcpEcho(t)
	set := gateway.NewSet()
	set.Update("crawl", entries(ms))
	h := startGateway(t, gateway.Config{Members: set})

	user := gwUser + "-session-abc123"
	c := h.client(t, user)
	seen := map[string]int{}
	for range 20 {
		_, body, _, err := get(c, origin.URL, nil)
		if err != nil {
			t.Fatal(err)
		}
		seen[body]++
		seen[tunnelEgress(t, h.addr, target, user)]++
	}
	if len(seen) != 1 {
		t.Fatalf("session abc123 used %v; want one egress address for its 40 requests and tunnels", seen)
	}
	var where string
	for addr := range seen {
		where = addr
	}
	// The header form places the same id on the same member, on plain
	// requests and on CONNECT; a session in the username wins over the
	// header's.
	plain := h.client(t, gwUser)
	for range 5 {
		_, body, _, _ := get(plain, origin.URL, http.Header{gateway.SessionHeader: {"abc123"}})
		if body != where {
			t.Errorf("header session abc123 went to %s; the username form went to %s", body, where)
		}
		if got := tunnelEgressWith(t, h.addr, target, gwUser, gateway.SessionHeader+": abc123\r\n"); got != where {
			t.Errorf("CONNECT with header session abc123 went to %s; the username form went to %s", got, where)
		}
	}
	other := map[string]bool{}
	for i := range 16 {
		other[tunnelEgressWith(t, h.addr, target, user, fmt.Sprintf("%s: other%d\r\n", gateway.SessionHeader, i))] = true
	}
	if len(other) != 1 || !other[where] {
		t.Errorf("CONNECT as %s with other header sessions went to %v; want only %s, the username's session", user, other, where)
	}
	// Many sessions spread over every member.
	spread := map[string]bool{}
	for i := range 64 {
		_, body, _, _ := get(plain, origin.URL, http.Header{gateway.SessionHeader: {fmt.Sprintf("s%d", i)}})
		spread[body] = true
	}
	if len(spread) != len(ms) {
		t.Errorf("64 sessions used %d members; want all %d", len(spread), len(ms))
	}
}

// TestTwoGatewaysPlaceSessionsAlike: two gateway replicas with the same
// members, and no state in common, put each of 200 sessions on the same
// member, even when they learnt the members in another order.
func TestTwoGatewaysPlaceSessionsAlike(t *testing.T) {
	ms := startMembers(t, 5)
	origin := ipEcho(t)
	a, b := gateway.NewSet(), gateway.NewSet()
	a.Update("crawl", entries(ms))
	rev := entries(ms)
	for i, j := 0, len(rev)-1; i < j; i, j = i+1, j-1 {
		rev[i], rev[j] = rev[j], rev[i]
	}
	b.Update("crawl", rev)
	ga, gb := startGateway(t, gateway.Config{Members: a}), startGateway(t, gateway.Config{Members: b, Strategy: gateway.Random})
	ca, cb := ga.client(t, gwUser), gb.client(t, gwUser)
	for i := range 200 {
		hdr := http.Header{gateway.SessionHeader: {fmt.Sprintf("crawl_%d", i)}}
		_, x, _, _ := get(ca, origin.URL, hdr)
		_, y, _, _ := get(cb, origin.URL, hdr)
		if x != y || x == "" {
			t.Fatalf("session crawl_%d: replica a used %q, replica b %q", i, x, y)
		}
	}
}

// TestLosingAMemberMovesOnlyItsSessions: when a member leaves the list,
// the sessions on the others stay where they were and only its own move.
func TestLosingAMemberMovesOnlyItsSessions(t *testing.T) {
	ms := startMembers(t, 4)
	origin := ipEcho(t)
	set := gateway.NewSet()
	set.Update("crawl", entries(ms))
	h := startGateway(t, gateway.Config{Members: set})
	c := h.client(t, gwUser)
	const n = 120
	before := make([]string, n)
	for i := range n {
		_, before[i], _, _ = get(c, origin.URL, http.Header{gateway.SessionHeader: {fmt.Sprintf("s%d", i)}})
	}
	set.Update("crawl", entries(append(append([]*member(nil), ms[:1]...), ms[2:]...))) // ms[1] leaves
	moved, own := 0, 0
	for i := range n {
		_, after, _, _ := get(c, origin.URL, http.Header{gateway.SessionHeader: {fmt.Sprintf("s%d", i)}})
		switch {
		case before[i] == ms[1].egress:
			own++
			if after == ms[1].egress {
				t.Errorf("session s%d still on the member that left", i)
			}
		case after != before[i]:
			moved++
		}
	}
	if moved != 0 {
		t.Errorf("%d sessions on members that stayed moved; want 0", moved)
	}
	if own == 0 {
		t.Errorf("no session was on %s: the test shows nothing", ms[1].name)
	}
}

// TestBadOptionsAreRefused: malformed usernames, unknown options, unknown
// zones or providers, a session id over the bound and header injection get
// a 400 that says what is wrong (and what exists), on plain requests and
// tunnels, without echoing more than a short quoted piece.
func TestBadOptionsAreRefused(t *testing.T) {
	ms := startMembers(t, 2)
	origin := ipEcho(t)
	target := tcpEcho(t)
	set := gateway.NewSet()
	es := entries(ms)
	es[1].Zone, es[1].Provider = "rack-b", "colo"
	set.Update("crawl", es)
	h := startGateway(t, gateway.Config{Members: set})
	for _, tc := range []struct {
		reason, user, want string
	}{
		{"an unknown option", gwUser + "-country-us", `unknown option "country"; options are session, sesstime, zone, provider and ban (last)`},
		{"an option without a value", gwUser + "-session", "has no value"},
		{"an empty value", gwUser + "-session--zone-rack-a", "has no value"},
		{"an unknown zone", gwUser + "-zone-rack-z", `no member in zone "rack-z"; zones are rack-a, rack-b`},
		{"an unknown provider", gwUser + "-provider-aws", `no member on provider "aws"; providers are colo, lab`},
		{"a zone and provider no member has together", gwUser + "-zone-rack-a-provider-colo", "no member in zone"},
		{"a session id over the bound", gwUser + "-session-" + strings.Repeat("a", gateway.MaxSessionID+1), "1 to 64 letters"},
		{"a session id with other characters", gwUser + "-session-a.b", "1 to 64 letters"},
		{"sesstime out of range", gwUser + "-session-a-sesstime-99999", "sesstime is a number of minutes"},
		{"sesstime without a session", gwUser + "-sesstime-5", "sesstime needs a session"},
		{"an option twice", gwUser + "-session-a-session-b", "given twice"},
		{"header injection in an option", gwUser + "-session-a\r\nX-Evil", "1 to 64 letters"},
		{"a huge username", gwUser + strings.Repeat("-zone-a", 100), "longer than 256"},
	} {
		code, body, _, err := get(h.client(t, tc.user), origin.URL, nil)
		if err != nil || code != http.StatusBadRequest || !strings.Contains(body, tc.want) || len(body) > 300 {
			t.Errorf("%s: %d %q %v; want 400 with %q", tc.reason, code, body, err, tc.want)
		}
		resp, _, _ := connect(t, h.addr, target, basic(tc.user, gwPass), "")
		b, _ := io.ReadAll(resp.Body)
		_ = resp.Body.Close()
		if resp.StatusCode != http.StatusBadRequest || !strings.Contains(string(b), tc.want) {
			t.Errorf("%s, CONNECT: %s %q; want 400 with %q", tc.reason, resp.Status, b, tc.want)
		}
	}
	// A bad session header, and a wrong password with bad options: the
	// credentials come first.
	for _, tc := range []struct {
		reason string
		values []string
		want   string
	}{
		{"a session id over the bound", []string{strings.Repeat("x", gateway.MaxSessionID+1)}, "1 to 64 letters"},
		{"two session headers", []string{"a", "b"}, "one X-Gateway-Session header at most"},
		{"an empty session id", []string{""}, "1 to 64 letters"},
		{"other characters", []string{"a.b"}, "1 to 64 letters"},
	} {
		if code, body, _, _ := get(h.client(t, gwUser), origin.URL, http.Header{gateway.SessionHeader: tc.values}); code != http.StatusBadRequest || !strings.Contains(body, tc.want) {
			t.Errorf("%s: %d %q; want 400 with %q", tc.reason, code, body, tc.want)
		}
		var extra strings.Builder
		for _, v := range tc.values {
			extra.WriteString(gateway.SessionHeader + ": " + v + "\r\n")
		}
		resp, _, _ := connect(t, h.addr, target, basic(gwUser, gwPass), extra.String())
		b, _ := io.ReadAll(resp.Body)
		_ = resp.Body.Close()
		if resp.StatusCode != http.StatusBadRequest || !strings.Contains(string(b), tc.want) {
			t.Errorf("%s, CONNECT: %s %q; want 400 with %q", tc.reason, resp.Status, b, tc.want)
		}
	}
	u := h.url(gwUser + "-country-us")
	u.User = nil
	if code, _, _, _ := get(&http.Client{Transport: &http.Transport{Proxy: http.ProxyURL(u)}}, origin.URL, nil); code != http.StatusProxyAuthRequired {
		t.Errorf("no credentials: %d; want 407 before any option is read", code)
	}
	// Good options route: zone rack-b is member 1 only.
	for range 4 {
		if _, body, _, _ := get(h.client(t, gwUser+"-zone-rack-b"), origin.URL, nil); body != ms[1].egress {
			t.Errorf("zone rack-b went to %s; want %s", body, ms[1].egress)
		}
	}
}

// TestSessionHeaderIsNotForwarded: the session header is the gateway's and
// never reaches the destination.
func TestSessionHeaderIsNotForwarded(t *testing.T) {
	ms := startMembers(t, 1)
	got := make(chan string, 1)
	origin := ipEchoWith(t, func(r *http.Request) { got <- r.Header.Get(gateway.SessionHeader) })
	set := gateway.NewSet()
	set.Update("crawl", entries(ms))
	h := startGateway(t, gateway.Config{Members: set})
	if code, _, _, err := get(h.client(t, gwUser), origin, http.Header{gateway.SessionHeader: {"abc"}}); err != nil || code != http.StatusOK {
		t.Fatalf("%d %v", code, err)
	}
	if v := <-got; v != "" {
		t.Errorf("the destination got %s: %q", gateway.SessionHeader, v)
	}
}

// TestSessionHoldsOnAKeptConnection: a crawler whose client keeps its
// connection to the gateway alive (Node.js agents, proxy-chain) sends a
// CONNECT after plain requests on it; the tunnel opens, and the session
// header on that CONNECT places it where the session's plain requests go.
func TestSessionHoldsOnAKeptConnection(t *testing.T) {
	ms := startMembers(t, 4)
	origin := ipEcho(t)
	target := tcpEcho(t)
	set := gateway.NewSet()
	set.Update("crawl", entries(ms))
	h := startGateway(t, gateway.Config{Members: set})
	auth := "Proxy-Authorization: " + basic(gwUser, gwPass) + "\r\n"
	// Eight sessions: were the CONNECT's header lost, its tunnel would
	// rotate, and land with every session's plain request by chance once
	// in 4^8.
	for i := range 8 {
		session := fmt.Sprintf("kept%d", i)
		c, err := net.DialTimeout("tcp", h.addr, wait)
		if err != nil {
			t.Fatal(err)
		}
		_ = c.SetDeadline(time.Now().Add(wait))
		br := bufio.NewReader(c)
		host := strings.TrimPrefix(origin.URL, "http://")
		get := "GET " + origin.URL + "/ HTTP/1.1\r\nHost: " + host + "\r\n" + auth + gateway.SessionHeader + ": " + session + "\r\n\r\n"
		if _, err := io.WriteString(c, get); err != nil {
			t.Fatal(err)
		}
		resp, err := http.ReadResponse(br, &http.Request{Method: http.MethodGet})
		if err != nil {
			t.Fatal(err)
		}
		plain, _ := io.ReadAll(resp.Body)
		_ = resp.Body.Close()
		if resp.StatusCode != http.StatusOK || resp.Close {
			t.Fatalf("session %s: GET %s, close %t", session, resp.Status, resp.Close)
		}
		connect := "CONNECT " + target + " HTTP/1.1\r\nHost: " + target + "\r\n" + auth + gateway.SessionHeader + ": " + session + "\r\n\r\n"
		if _, err := io.WriteString(c, connect); err != nil {
			t.Fatal(err)
		}
		resp, err = http.ReadResponse(br, &http.Request{Method: http.MethodConnect})
		if err != nil {
			t.Fatal(err)
		}
		_ = resp.Body.Close()
		if resp.StatusCode != http.StatusOK {
			t.Fatalf("session %s: CONNECT after a GET on one connection: %s, want 200", session, resp.Status)
		}
		line, err := br.ReadString('\n')
		if err != nil {
			t.Fatal(err)
		}
		if got := strings.TrimSpace(line); got != string(plain) {
			t.Errorf("session %s: the tunnel went out from %s, its plain request from %s", session, got, plain)
		}
		_ = c.Close()
	}
}
