package gateway_test

import (
	"fmt"
	"math"
	"net/http"
	"net/url"
	"strings"
	"sync"
	"testing"

	"github.com/google/go-cmp/cmp"

	"github.com/egress-proxies/egress-proxies-operator/internal/gateway"
)

// spread sends n plain GETs through the gateway, from workers clients at
// once, and counts the egress addresses the origin saw.
func spread(t *testing.T, h *gw, origin string, n, workers int) map[string]int {
	t.Helper()
	var mu sync.Mutex
	counts := map[string]int{}
	var wg sync.WaitGroup
	jobs := make(chan struct{})
	for range workers {
		c := h.client(t, gwUser)
		wg.Go(func() {
			for range jobs {
				code, body, _, err := get(c, origin, nil)
				mu.Lock()
				if err != nil || code != http.StatusOK {
					counts[fmt.Sprintf("failed %d %v", code, err)]++
				} else {
					counts[body]++
				}
				mu.Unlock()
			}
		})
	}
	for range n {
		jobs <- struct{}{}
	}
	close(jobs)
	wg.Wait()
	return counts
}

// TestRotationSpreadsRequestsOverMembers: 1000 plain requests through the
// gateway in front of four real forward proxies. Round-robin gives each
// member exactly a quarter, whatever the concurrency; random and
// least-connections give each a share within 5 standard deviations of a
// quarter (binomial, n=1000, p=1/4: sd 13.7, bound ±69), which a correct
// gateway misses with a probability under 1e-5 per run.
func TestRotationSpreadsRequestsOverMembers(t *testing.T) {
	ms := startMembers(t, 4)
	origin := ipEcho(t)
	const n = 1000
	bound := 5 * math.Sqrt(n*0.25*0.75)
	for _, tc := range []struct {
		strategy gateway.Strategy
		exact    bool
	}{
		{gateway.RoundRobin, true},
		{gateway.Random, false},
		{gateway.LeastConnections, false},
	} {
		t.Run(string(tc.strategy), func(t *testing.T) {
			set := gateway.NewSet()
			set.Update("crawl", entries(ms))
			h := startGateway(t, gateway.Config{Members: set, Strategy: tc.strategy})
			counts := spread(t, h, origin.URL, n, 8)
			want := map[string]int{}
			for _, m := range ms {
				want[m.egress] = n / len(ms)
			}
			if tc.exact {
				if diff := cmp.Diff(want, counts); diff != "" {
					t.Errorf("requests per egress address (-want +got):\n%s", diff)
				}
				return
			}
			if len(counts) != len(ms) {
				t.Fatalf("egress addresses seen: %v; want the %d members'", counts, len(ms))
			}
			for addr, c := range counts {
				if _, ok := want[addr]; !ok || math.Abs(float64(c-n/len(ms))) > bound {
					t.Errorf("%s got %d of %d requests; want %d ± %.0f (all: %v)", addr, c, n, n/len(ms), bound, counts)
				}
			}
		})
	}
}

// TestTunnelsRotateAndCarryBytes: CONNECT tunnels through the gateway are
// spread over the members in turn and carry bytes both ways.
func TestTunnelsRotateAndCarryBytes(t *testing.T) {
	ms := startMembers(t, 3)
	set := gateway.NewSet()
	set.Update("crawl", entries(ms))
	h := startGateway(t, gateway.Config{Members: set})
	target := tcpEcho(t)
	counts := map[string]int{}
	for range 9 {
		counts[tunnelEgress(t, h.addr, target, gwUser)]++
	}
	want := map[string]int{}
	for _, m := range ms {
		want[m.egress] = 3
	}
	if diff := cmp.Diff(want, counts); diff != "" {
		t.Errorf("tunnels per egress address (-want +got):\n%s", diff)
	}
}

// TestMembershipFollowsTheList: a member added to the list is used at the
// next request; one removed gets none; no member at all is a 503 with
// Retry-After, for plain requests and tunnels alike.
func TestMembershipFollowsTheList(t *testing.T) {
	ms := startMembers(t, 3)
	origin := ipEcho(t)
	target := tcpEcho(t)
	set := gateway.NewSet()
	h := startGateway(t, gateway.Config{Members: set})
	c := h.client(t, gwUser)

	code, body, hdr, err := get(c, origin.URL, nil)
	if err != nil || code != http.StatusServiceUnavailable || hdr.Get("Retry-After") == "" {
		t.Fatalf("no members: %d %q %v; want 503 with Retry-After", code, body, err)
	}
	resp, _, _ := connect(t, h.addr, target, basic(gwUser, gwPass), "")
	_ = resp.Body.Close()
	if resp.StatusCode != http.StatusServiceUnavailable {
		t.Errorf("CONNECT with no members: %s; want 503", resp.Status)
	}

	set.Update("crawl", entries(ms[:2]))
	seen := map[string]bool{}
	for range 4 {
		_, body, _, _ := get(c, origin.URL, nil)
		seen[body] = true
	}
	if diff := cmp.Diff(map[string]bool{ms[0].egress: true, ms[1].egress: true}, seen); diff != "" {
		t.Errorf("with two members listed (-want +got):\n%s", diff)
	}

	// ms[0] leaves, ms[2] joins.
	set.Update("crawl", entries(ms[1:]))
	seen = map[string]bool{}
	for range 4 {
		_, body, _, _ := get(c, origin.URL, nil)
		seen[body] = true
		seen[tunnelEgress(t, h.addr, target, gwUser)] = true
	}
	if diff := cmp.Diff(map[string]bool{ms[1].egress: true, ms[2].egress: true}, seen); diff != "" {
		t.Errorf("after the list changed (-want +got):\n%s", diff)
	}
}

// TestGatewayCredentials: the gateway's own credentials are required (407
// otherwise), and with auth None the source ranges decide; an open gateway
// is refused.
func TestGatewayCredentials(t *testing.T) {
	ms := startMembers(t, 1)
	origin := ipEcho(t)
	set := gateway.NewSet()
	set.Update("crawl", entries(ms))
	h := startGateway(t, gateway.Config{Members: set})
	for _, tc := range []struct {
		reason, user, pass string
		want               int
	}{
		{"the right credentials", gwUser, gwPass, http.StatusOK},
		{"a wrong password", gwUser, "nope", http.StatusProxyAuthRequired},
		{"another user", "uother", gwPass, http.StatusProxyAuthRequired},
		{"a member's credentials", ms[0].user, ms[0].pass, http.StatusProxyAuthRequired},
	} {
		u := h.url(tc.user)
		u.User = url.UserPassword(tc.user, tc.pass)
		tr := &http.Transport{Proxy: http.ProxyURL(u)}
		code, _, _, err := get(&http.Client{Transport: tr}, origin.URL, nil)
		tr.CloseIdleConnections()
		if err != nil || code != tc.want {
			t.Errorf("%s: %d %v; want %d", tc.reason, code, err, tc.want)
		}
	}
	if _, err := gateway.NewProxy(mustGateway(t, gateway.Config{Members: set}), gateway.ProxyOptions{}); err == nil || !strings.Contains(err.Error(), "open gateway") {
		t.Errorf("a gateway without credentials or source ranges: %v; want it refused", err)
	}
}

// TestMemberCredentialsNeverLeak: a member's password appears in no answer
// the client gets (success, refusal, member failure) and in no log line,
// at any verbosity.
func TestMemberCredentialsNeverLeak(t *testing.T) {
	ms := startMembers(t, 2)
	origin := ipEcho(t)
	target := tcpEcho(t)
	w := watchSecrets(t, ms)
	set := gateway.NewSet()
	set.Update("crawl", entries(ms))
	h := startGateway(t, gateway.Config{Members: set})
	c := h.client(t, gwUser)
	for range 4 {
		code, body, hdr, err := get(c, origin.URL, nil)
		w.Add("answers", fmt.Sprint(code, body, hdr, err))
		w.Add("answers", tunnelEgress(t, h.addr, target, gwUser))
	}
	// A member that refuses (its credentials are wrong in the list) and
	// one that is gone: the answers and the log lines say so without them.
	broken := entries(ms)
	broken[0].URL = strings.Replace(broken[0].URL, ms[0].pass, ms[0].pass+"x", 1)
	ms[1].stop()
	set.Update("crawl", broken)
	for range 4 {
		code, body, hdr, err := get(c, origin.URL, nil)
		w.Add("answers", fmt.Sprint(code, body, hdr, err))
		resp, _, br := connect(t, h.addr, target, basic(gwUser, gwPass), "")
		rest, _ := br.Peek(br.Buffered())
		_ = resp.Body.Close()
		w.Add("answers", fmt.Sprint(resp.Status, resp.Header, string(rest)))
	}
	w.Add("logs", h.logs.String())
	if !strings.Contains(h.logs.String(), "member failed") {
		t.Errorf("no member failure was logged:\n%s", h.logs)
	}
	for _, f := range w.Findings() {
		t.Error(f)
	}
}

func mustGateway(t *testing.T, cfg gateway.Config) *gateway.Gateway {
	t.Helper()
	g, err := gateway.New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	return g
}
