package gateway_test

import (
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"

	"github.com/egress-proxies/egress-proxies-operator/internal/forwardproxy"
	"github.com/egress-proxies/egress-proxies-operator/internal/gateway"
	"github.com/egress-proxies/egress-proxies-operator/internal/testing/poll"
)

// heldOrigin is an origin that holds every request until release is
// closed, and tells arrived of each.
func heldOrigin(t *testing.T) (url string, arrived chan struct{}, release func()) {
	t.Helper()
	arrived = make(chan struct{}, 64)
	hold := make(chan struct{})
	var once sync.Once
	release = func() { once.Do(func() { close(hold) }) }
	s := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		arrived <- struct{}{}
		<-hold
		host, _, _ := net.SplitHostPort(r.RemoteAddr)
		_, _ = io.WriteString(w, host)
	}))
	t.Cleanup(s.Close)
	t.Cleanup(release)
	return s.URL, arrived, release
}

// answer is what a client learns of a refusal: status, Retry-After and
// Proxy-Status.
func answer(code int, hdr http.Header) string {
	return fmt.Sprintf("%d Retry-After=%q Proxy-Status=%q", code, hdr.Get("Retry-After"), hdr.Get(forwardproxy.ProxyStatusHeader))
}

// TestEveryMemberAtItsLimitGets429: with a cap of two requests and tunnels
// per member, two members carry four held requests; the fifth request and
// a tunnel get 429 with Retry-After and Proxy-Status, a session whose
// member is full gets 429 rather than moving, and once the members have
// room again requests go through.
func TestEveryMemberAtItsLimitGets429(t *testing.T) {
	ms := startMembers(t, 2)
	w := watchSecrets(t, ms)
	origin, arrived, release := heldOrigin(t)
	target := tcpEcho(t)
	set := gateway.NewSet()
	set.Update("crawl", entries(ms))
	h := startGateway(t, gateway.Config{Members: set, MaxPerMember: 2})
	var wg sync.WaitGroup
	var held atomic.Int64
	for range 4 {
		c := h.client(t, gwUser)
		wg.Go(func() {
			if code, body, _, err := get(c, origin, nil); code == http.StatusOK {
				held.Add(1)
			} else {
				t.Errorf("a held request: %d %q %v", code, body, err)
			}
		})
	}
	for range 4 {
		poll.Receive(t, wait, "a held request at the origin", arrived)
	}
	limited := `429 Retry-After="1" Proxy-Status="egress-gateway; error=connection_limit_reached"`
	code, body, hdr, err := get(h.client(t, gwUser), origin, nil)
	w.Add("answers", fmt.Sprint(code, body, hdr, err))
	if diff := cmp.Diff(limited, answer(code, hdr)); diff != "" {
		t.Errorf("a request with every member at its limit (-want +got):\n%s", diff)
	}
	resp, _, br := connect(t, h.addr, target, basic(gwUser, gwPass), "")
	rest, _ := br.Peek(br.Buffered())
	w.Add("answers", fmt.Sprint(resp.Status, resp.Header, string(rest)))
	_ = resp.Body.Close()
	if diff := cmp.Diff(limited, answer(resp.StatusCode, resp.Header)); diff != "" {
		t.Errorf("a tunnel with every member at its limit (-want +got):\n%s", diff)
	}
	release()
	wg.Wait()
	if held.Load() != 4 {
		t.Fatalf("%d of the 4 held requests went through", held.Load())
	}
	// A member's place is given back when the gateway closed the
	// response, which may be just after the client read it.
	poll.Until(t, wait, func() (bool, string) {
		code, body, _, err := get(h.client(t, gwUser), origin, nil)
		return code == http.StatusOK, fmt.Sprintf("once the members have room: %d %q %v", code, body, err)
	})

	// A session stays on its member: at that member's limit it gets 429,
	// while a request without a session goes to the other one.
	// A set of its own: the counts are the members' in a set.
	own := gateway.NewSet()
	own.Update("crawl", entries(ms))
	single := startGateway(t, gateway.Config{Members: own, MaxPerMember: 1})
	sessOrigin, sessArrived, sessRelease := heldOrigin(t)
	sess := http.Header{gateway.SessionHeader: {"cart1"}}
	done := make(chan string, 1)
	sc := single.client(t, gwUser)
	go func() {
		_, body, _, _ := get(sc, sessOrigin, sess)
		done <- body
	}()
	poll.Receive(t, wait, "the session's request at the origin", sessArrived)
	code, body, hdr, err = get(single.client(t, gwUser), sessOrigin, sess)
	w.Add("answers", fmt.Sprint(code, body, hdr, err))
	if diff := cmp.Diff(limited, answer(code, hdr)); diff != "" {
		t.Errorf("a session whose member is at its limit (-want +got):\n%s", diff)
	}
	other := make(chan string, 1)
	go func() {
		_, body, _, _ := get(single.client(t, gwUser), sessOrigin, nil)
		other <- body
	}()
	poll.Receive(t, wait, "the request without a session at the origin", sessArrived)
	sessRelease()
	if a, b := <-done, <-other; a == b || a == "" || b == "" {
		t.Errorf("the session went through %q and the request without one through %q; want two members", a, b)
	}
	w.Add("logs", h.logs.String()+single.logs.String())
	for _, f := range w.Findings() {
		t.Error(f)
	}
}

// TestHostRateLimitsEachMemberAndHost: with a rate of 1 per second and
// bursts of 2 per (member, destination host), on a clock the test moves,
// two members take 4 requests to one host at once, the fifth gets 429 with
// the wait until the next token, another host is not limited, and a second
// later each member has a token again.
func TestHostRateLimitsEachMemberAndHost(t *testing.T) {
	ms := startMembers(t, 2)
	one := ipEcho(t)
	two := originOn(t, "127.0.0.2", one.Config.Handler)
	clk := newClock()
	set := gateway.NewSet()
	set.Update("crawl", entries(ms))
	h := startGateway(t, gateway.Config{Members: set, HostRate: 1, HostBurst: 2, Now: clk.Now})
	c := h.client(t, gwUser)
	var got []string
	step := func(u string) {
		code, body, hdr, _ := get(c, u, nil)
		switch {
		case code == http.StatusOK && u == two:
			got = append(got, "200 from either member") // its own bucket
		case code == http.StatusOK:
			got = append(got, "200 "+body)
		default:
			got = append(got, answer(code, hdr))
		}
	}
	for range 5 {
		step(one.URL)
	}
	step(two)
	clk.advance(time.Second)
	step(one.URL)
	step(one.URL)
	step(one.URL)
	limited := `429 Retry-After="1" Proxy-Status="egress-gateway; error=connection_limit_reached"`
	m0, m1 := "200 "+ms[0].egress, "200 "+ms[1].egress
	// Round-robin's turn moves with the members a limited request
	// looked at: which member of the two comes first after the second is
	// not the point.
	slices.Sort(got[6:8])
	want := []string{m0, m1, m0, m1, limited, "200 from either member", m0, m1, limited}
	if diff := cmp.Diff(want, got); diff != "" {
		t.Errorf("answers (-want +got):\n%s", diff)
	}
	if !strings.Contains(two, "127.0.0.2") {
		t.Fatalf("the second origin is on %s; want 127.0.0.2", two)
	}
}
