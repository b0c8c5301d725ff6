package gateway_test

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"net/url"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"github.com/prometheus/client_golang/prometheus"

	"github.com/egress-proxies/egress-proxies-operator/internal/gateway"
	"github.com/egress-proxies/egress-proxies-operator/internal/testing/poll"
)

// failingMember is a member proxy that answers every request, CONNECT
// included, with code, and counts them.
type failingMember struct {
	name string
	url  string
	hits atomic.Int64
}

func startFailingMember(t *testing.T, name string, code int) *failingMember {
	t.Helper()
	return startAnsweringMember(t, name, func(w http.ResponseWriter) {
		w.Header().Set("Connection", "close")
		http.Error(w, "member failing", code)
	})
}

// startAnsweringMember starts a member that reads each request, counts it
// and answers it with answer.
func startAnsweringMember(t *testing.T, name string, answer func(w http.ResponseWriter)) *failingMember {
	t.Helper()
	f := &failingMember{name: name}
	s := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		f.hits.Add(1)
		_, _ = io.Copy(io.Discard, r.Body)
		answer(w)
	}))
	t.Cleanup(s.Close)
	u := url.URL{Scheme: "http", Host: strings.TrimPrefix(s.URL, "http://"), User: url.UserPassword("ufailing", "failing-member-password-0xdead")}
	f.url = u.String()
	return f
}

func (f *failingMember) entry() gateway.Entry {
	return gateway.Entry{Name: f.name, URL: f.url, Provider: "lab", Zone: "rack-a", EgressIP: "127.0.0.99"}
}

// metric returns the value of the counter or gauge name with labels on
// reg (their sum over the other labels), 0 when no such series is there
// yet. A name reg does not define fails the test (seriesWith), so that a
// misspelt name cannot pass a check for 0.
func metric(t *testing.T, reg *prometheus.Registry, name string, labels map[string]string) float64 {
	t.Helper()
	var sum float64
	for _, v := range seriesWith(t, reg, name, labels) {
		sum += v.counter + v.gauge
	}
	return sum
}

// seriesValue is what a test reads of one series.
type seriesValue struct {
	counter, gauge float64
	samples        uint64 // a histogram's
}

// seriesWith returns the series of name on reg whose labels include labels.
func seriesWith(t *testing.T, reg *prometheus.Registry, name string, labels map[string]string) []seriesValue {
	t.Helper()
	mfs, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	var out []seriesValue
	found := false
	for _, mf := range mfs {
		if mf.GetName() != name {
			continue
		}
		found = true
	next:
		for _, m := range mf.GetMetric() {
			got := map[string]string{}
			for _, l := range m.GetLabel() {
				got[l.GetName()] = l.GetValue()
			}
			for k, v := range labels {
				if got[k] != v {
					continue next
				}
			}
			out = append(out, seriesValue{m.GetCounter().GetValue(), m.GetGauge().GetValue(), m.GetHistogram().GetSampleCount()})
		}
	}
	if !found {
		// A vector with no series is not gathered: tell it from a name
		// that nothing defines, which reg lets a new collector take.
		probe := prometheus.NewGauge(prometheus.GaugeOpts{Name: name, Help: "probe"})
		if reg.Register(probe) == nil {
			reg.Unregister(probe)
			t.Fatalf("no metric named %s is defined", name)
		}
	}
	return out
}

// TestFailoverHidesMemberFailures: in front of three real member proxies
// and one that answers 502 to everything, with one of the real ones killed
// mid-run, every idempotent request and every tunnel succeeds; the 502
// member and the killed one are ejected once each, counted and logged, and
// the ejected 502 member gets nothing more during its cool-down.
func TestFailoverHidesMemberFailures(t *testing.T) {
	ms := startMembers(t, 3)
	bad := startFailingMember(t, "crawl-bad", http.StatusBadGateway)
	origin := ipEcho(t)
	target := tcpEcho(t)
	w := watchSecrets(t, ms)
	if err := w.AddSecret("password of the failing member", "failing-member-password-0xdead"); err != nil {
		t.Fatal(err)
	}
	set := gateway.NewSet()
	set.Update("crawl", append(entries(ms), bad.entry()))
	reg, gm := newMetrics(t)
	// The cool-down outlasts the test: an ejected member must not come
	// back within it.
	h := startGateway(t, gateway.Config{Members: set, EjectAfter: 2, EjectFor: 10 * wait, Metrics: gm})

	const n, workers = 120, 6
	// cut counts answers the killed member had begun (its 200 and the
	// first bytes of its body, and then its body ended): the gateway had
	// passed the answer on, so no other member may take it over. A member
	// that dies between its head and its first byte of body is a failed
	// attempt and goes to another member (primeBody;
	// TestMemberDyingBeforeTheBodyIsAFailedAttempt). The client of a cut
	// answer sees the 200 and a short body when the front had flushed the
	// head, and the connection closed with no answer when it had not. At
	// most one per worker is in flight at the kill. A missed failover is
	// never one of these: it is the gateway's own 502.
	var failed, cut atomic.Int64
	var mu sync.Mutex
	var answers strings.Builder
	jobs := make(chan int)
	var wg sync.WaitGroup
	for range workers {
		c := h.client(t, gwUser)
		wg.Go(func() {
			for i := range jobs {
				code, body, hdr, err := get(c, origin.URL, nil)
				switch {
				case code == http.StatusOK && errors.Is(err, io.ErrUnexpectedEOF),
					code == 0 && errors.Is(err, io.EOF):
					cut.Add(1)
				case err != nil || code != http.StatusOK:
					failed.Add(1)
					t.Errorf("request %d: %d %q %v", i, code, body, err)
				}
				mu.Lock()
				fmt.Fprintln(&answers, code, body, hdr, err)
				mu.Unlock()
			}
		})
	}
	for i := range n {
		if i == n/3 {
			ms[0].stop() // killed mid-run, still listed
		}
		jobs <- i
	}
	close(jobs)
	wg.Wait()
	// Tunnels not yet open when a member died all open.
	for range 12 {
		if got := tunnelEgress(t, h.addr, target, gwUser); got == ms[0].egress || got == "" {
			t.Errorf("a tunnel went through %q, the killed member", got)
		}
	}
	if failed.Load() != 0 || cut.Load() > workers {
		t.Errorf("%d of %d idempotent requests failed, %d were cut mid-answer; want 0, and at most %d cut (one in flight per worker at the kill)", failed.Load(), n, cut.Load(), workers)
	}
	hits := bad.hits.Load()
	for range 20 {
		if code, body, _, err := get(h.client(t, gwUser), origin.URL, nil); code != http.StatusOK {
			t.Errorf("after the ejections: %d %q %v", code, body, err)
		}
	}
	if got := bad.hits.Load(); got != hits {
		t.Errorf("the ejected member got %d more requests during its cool-down; want 0", got-hits)
	}
	gotEjections := map[string]float64{}
	for _, name := range []string{ms[0].name, ms[1].name, ms[2].name, bad.name} {
		gotEjections[name] = metric(t, reg, "egress_proxies_gateway_ejections_total", map[string]string{"pool": "crawl", "member": name})
	}
	if diff := cmp.Diff(map[string]float64{ms[0].name: 1, ms[1].name: 0, ms[2].name: 0, bad.name: 1}, gotEjections); diff != "" {
		t.Errorf("ejections by member (-want +got):\n%s", diff)
	}
	if got := metric(t, reg, "egress_proxies_gateway_retries_total", map[string]string{"member": bad.name}); got < 2 {
		t.Errorf("retries away from the failing member: %v; want at least its 2 failures before ejection", got)
	}
	logs := h.logs.String()
	for _, name := range []string{ms[0].name, bad.name} {
		if !strings.Contains(logs, `"member ejected" member=crawl/`+name) {
			t.Errorf("no ejection of %s was logged:\n%s", name, logs)
		}
	}
	w.Add("answers", answers.String())
	w.Add("logs", logs)
	for _, f := range w.Findings() {
		t.Error(f)
	}
}

// TestFailoverBounds: which failures go to another member, and how many
// members one request or tunnel tries.
func TestFailoverBounds(t *testing.T) {
	origin := ipEchoWith(t, func(r *http.Request) {})
	target := tcpEcho(t)
	for _, tc := range []struct {
		reason      string
		codes       []int // the failing members' answers; a real member follows when good
		good        bool
		method      string
		body        string
		maxAttempts int
		wantCode    int
		wantHits    int64 // on the failing members, all together
	}{
		{reason: "every member answers 502: three attempts, then the last answer", codes: []int{502, 502, 502, 502}, method: http.MethodGet, wantCode: 502, wantHits: 3},
		{reason: "MaxAttempts bounds the attempts", codes: []int{503, 503, 503, 503}, method: http.MethodGet, maxAttempts: 2, wantCode: 503, wantHits: 2},
		{reason: "a member's 407 is the gateway's 502, never a request for credentials", codes: []int{407}, method: http.MethodGet, wantCode: 502, wantHits: 1},
		{reason: "a 407 then a good member: the client never sees it", codes: []int{407}, good: true, method: http.MethodGet, wantCode: 200, wantHits: 1},
		{reason: "a 503 then a good member, for a GET", codes: []int{503}, good: true, method: http.MethodGet, wantCode: 200, wantHits: 1},
		{reason: "a POST with a body that a member answered 502 is not sent again", codes: []int{502}, good: true, method: http.MethodPost, body: "order-1", wantCode: 502, wantHits: 1},
		{reason: "an answer that is not a member failure (404) is passed on, not retried", codes: []int{404}, good: true, method: http.MethodGet, wantCode: 404, wantHits: 1},
	} {
		t.Run(tc.reason, func(t *testing.T) {
			var es []gateway.Entry
			var fs []*failingMember
			for i, code := range tc.codes {
				f := startFailingMember(t, fmt.Sprintf("crawl-f%d", i), code)
				fs = append(fs, f)
				es = append(es, f.entry())
			}
			if tc.good {
				es = append(es, startMember(t, 0).entry())
			}
			set := gateway.NewSet()
			set.Update("crawl", es)
			h := startGateway(t, gateway.Config{Members: set, MaxAttempts: tc.maxAttempts})
			// Round-robin starts at the first member: a failing one.
			resp, err := h.client(t, gwUser).Do(newRequest(t, tc.method, origin, tc.body))
			if err != nil {
				t.Fatal(err)
			}
			_ = resp.Body.Close()
			var hits int64
			for _, f := range fs {
				hits += f.hits.Load()
			}
			got := fmt.Sprintf("%d, %d hits, Proxy-Authenticate %q", resp.StatusCode, hits, resp.Header.Get("Proxy-Authenticate"))
			if diff := cmp.Diff(fmt.Sprintf("%d, %d hits, Proxy-Authenticate \"\"", tc.wantCode, tc.wantHits), got); diff != "" {
				t.Errorf("plain request (-want +got):\n%s", diff)
			}
			if tc.method != http.MethodGet || tc.wantCode == 404 {
				return
			}
			// A tunnel is retried the same way.
			for _, f := range fs {
				f.hits.Store(0)
			}
			resp, _, _ = connect(t, h.addr, target, basic(gwUser, gwPass), "")
			_ = resp.Body.Close()
			hits = 0
			for _, f := range fs {
				hits += f.hits.Load()
			}
			wantCode := tc.wantCode
			if wantCode != 200 {
				wantCode = 502 // a member's refusal of a tunnel
			}
			if diff := cmp.Diff(fmt.Sprintf("%d, %d hits", wantCode, tc.wantHits), fmt.Sprintf("%d, %d hits", resp.StatusCode, hits)); diff != "" {
				t.Errorf("tunnel (-want +got):\n%s", diff)
			}
		})
	}
}

// TestTunnelGoesOnPastAMembers500: tinyproxy answers a CONNECT it could not
// open (or one in flight while it stops) with 500, so a tunnel tries the
// next member, and a tunnel every member answered so gets 502, the
// gateway's word for its members' failure; a plain request's 500 may be
// the origin's, so it is passed on and not sent again.
func TestTunnelGoesOnPastAMembers500(t *testing.T) {
	origin := ipEchoWith(t, func(r *http.Request) {})
	target := tcpEcho(t)
	for _, tc := range []struct {
		reason   string
		good     bool
		wantCode int
	}{
		{reason: "a 500 then a good member: the client never sees it", good: true, wantCode: http.StatusOK},
		{reason: "only the 500 member: the gateway's 502", wantCode: http.StatusBadGateway},
	} {
		t.Run(tc.reason, func(t *testing.T) {
			bad := startFailingMember(t, "crawl-500", http.StatusInternalServerError)
			es := []gateway.Entry{bad.entry()}
			if tc.good {
				es = append(es, startMember(t, 0).entry())
			}
			set := gateway.NewSet()
			set.Update("crawl", es)
			h := startGateway(t, gateway.Config{Members: set})
			// Round-robin starts at the first member: the failing one.
			resp, _, _ := connect(t, h.addr, target, basic(gwUser, gwPass), "")
			_ = resp.Body.Close()
			got := fmt.Sprintf("%d, %d hits", resp.StatusCode, bad.hits.Load())
			if diff := cmp.Diff(fmt.Sprintf("%d, 1 hits", tc.wantCode), got); diff != "" {
				t.Errorf("tunnel (-want +got):\n%s", diff)
			}
			if !tc.good {
				return
			}
			bad.hits.Store(0)
			// The next plain request starts at the failing member again
			// (round-robin, the tunnel took one turn each).
			var codes []int
			for range 2 {
				resp, err := h.client(t, gwUser).Get(origin)
				if err != nil {
					t.Fatal(err)
				}
				_ = resp.Body.Close()
				codes = append(codes, resp.StatusCode)
			}
			slices.Sort(codes)
			if diff := cmp.Diff("[200 500], 1 hits", fmt.Sprintf("%v, %d hits", codes, bad.hits.Load())); diff != "" {
				t.Errorf("two plain GETs, one on each member (-want +got):\n%s", diff)
			}
		})
	}
}

// tinyproxyUnableToConnect is what tinyproxy 1.11.1 answered on loopback to
// a GET for a closed port (2026-12-02), headers and the start of its page.
const tinyproxyUnableToConnect = "HTTP/1.1 500 Unable to connect\r\nServer: tinyproxy/1.11.1\r\nContent-Type: text/html\r\nConnection: close\r\n\r\n" +
	"<?xml version=\"1.0\" encoding=\"UTF-8\" ?>\n<html><head><title>500 Unable to connect</title></head></html>\n"

// startRawMember starts a member that answers every request with answer,
// byte for byte (net/http's server cannot write a reason phrase of its
// own), and counts the requests.
func startRawMember(t *testing.T, name, answer string) *failingMember {
	t.Helper()
	return startAnsweringMember(t, name, func(w http.ResponseWriter) {
		conn, buf, err := http.NewResponseController(w).Hijack()
		if err != nil {
			t.Errorf("hijacking the member's connection: %v", err)
			return
		}
		defer func() { _ = conn.Close() }()
		_, _ = buf.WriteString(answer)
		_ = buf.Flush()
	})
}

// TestPlainRequestGoesOnPastTinyproxysUnableToConnect: tinyproxy answers a
// plain request it could not connect onwards (and one in flight while it
// stops: the real-guest tier's kill phase saw 2 of 278 so) with its own
// "500 Unable to connect": it forwarded nothing, so the request goes to the
// next member. A 500 that is not tinyproxy's own (an origin's, or one that
// only borrows the phrase) is the destination's answer: passed on, not
// sent again.
func TestPlainRequestGoesOnPastTinyproxysUnableToConnect(t *testing.T) {
	origin := ipEchoWith(t, func(r *http.Request) {})
	for _, tc := range []struct {
		reason   string
		answer   string
		wantCode int
	}{
		{reason: "tinyproxy's own 500: the next member serves", answer: tinyproxyUnableToConnect, wantCode: http.StatusOK},
		{reason: "an origin's 500 through the member: passed on",
			answer:   "HTTP/1.1 500 Internal Server Error\r\nServer: nginx\r\nContent-Length: 0\r\nConnection: close\r\n\r\n",
			wantCode: http.StatusInternalServerError},
		{reason: "the phrase without tinyproxy's Server header: the origin's",
			answer:   "HTTP/1.1 500 Unable to connect\r\nServer: app\r\nContent-Length: 0\r\nConnection: close\r\n\r\n",
			wantCode: http.StatusInternalServerError},
	} {
		t.Run(tc.reason, func(t *testing.T) {
			bad := startRawMember(t, "crawl-0raw", tc.answer)
			set := gateway.NewSet()
			set.Update("crawl", []gateway.Entry{bad.entry(), startMember(t, 0).entry()})
			h := startGateway(t, gateway.Config{Members: set})
			// Round-robin starts at the first member: the raw one.
			resp, err := h.client(t, gwUser).Get(origin)
			if err != nil {
				t.Fatal(err)
			}
			_ = resp.Body.Close()
			// One hit on the raw member either way: a 500 is never sent
			// to it twice.
			if diff := cmp.Diff(fmt.Sprintf("%d, 1 hits", tc.wantCode), fmt.Sprintf("%d, %d hits", resp.StatusCode, bad.hits.Load())); diff != "" {
				t.Errorf("GET (-want +got):\n%s", diff)
			}
		})
	}
}

// TestPostToADeadMemberGoesToAnother: a request with a body whose member
// cannot be dialed reached nobody, so it goes to another member, body
// intact.
func TestPostToADeadMemberGoesToAnother(t *testing.T) {
	ms := startMembers(t, 2)
	got := make(chan string, 4)
	origin := ipEchoWith(t, func(r *http.Request) {
		b, _ := io.ReadAll(r.Body)
		got <- r.Method + " " + string(b)
	})
	set := gateway.NewSet()
	set.Update("crawl", entries(ms))
	ms[0].stop()
	h := startGateway(t, gateway.Config{Members: set})
	resp, err := h.client(t, gwUser).Post(origin, "text/plain", strings.NewReader("order-1"))
	if err != nil {
		t.Fatal(err)
	}
	body, _ := io.ReadAll(resp.Body)
	_ = resp.Body.Close()
	if resp.StatusCode != http.StatusOK || string(body) != ms[1].egress {
		t.Fatalf("POST: %s %q; want 200 through %s", resp.Status, body, ms[1].egress)
	}
	if diff := cmp.Diff("POST order-1", <-got); diff != "" {
		t.Errorf("what the origin got (-want +got):\n%s", diff)
	}
}

// TestEjectionMovesOnlyItsSessions: when a member dies and is ejected, its
// sessions move to the member rendezvous gives them without it (the one a
// gateway that never had it picks), and every other session stays.
func TestEjectionMovesOnlyItsSessions(t *testing.T) {
	ms := startMembers(t, 4)
	origin := ipEcho(t)
	set, without := gateway.NewSet(), gateway.NewSet()
	set.Update("crawl", entries(ms))
	without.Update("crawl", entries([]*member{ms[0], ms[2], ms[3]}))
	h := startGateway(t, gateway.Config{Members: set, EjectAfter: 1, EjectFor: 10 * wait})
	ref := startGateway(t, gateway.Config{Members: without})
	c, rc := h.client(t, gwUser), ref.client(t, gwUser)
	const n = 80
	before := make([]string, n)
	for i := range n {
		_, before[i], _, _ = get(c, origin.URL, http.Header{gateway.SessionHeader: {fmt.Sprintf("s%d", i)}})
	}
	ms[1].stop()
	own := 0
	for i := range n {
		hdr := http.Header{gateway.SessionHeader: {fmt.Sprintf("s%d", i)}}
		code, after, _, err := get(c, origin.URL, hdr)
		if code != http.StatusOK {
			t.Errorf("session s%d after its member died: %d %v", i, code, err)
			continue
		}
		want := before[i]
		if before[i] == ms[1].egress {
			own++
			_, want, _, _ = get(rc, origin.URL, hdr)
		}
		if after != want {
			t.Errorf("session s%d went from %s to %s; want %s", i, before[i], after, want)
		}
	}
	if own == 0 {
		t.Fatalf("no session was on %s; the test shows nothing", ms[1].egress)
	}
}

// gatewayBefore starts a gateway with cfg, its metrics on the registry it
// returns, in front of f and, when good, a real member after it (f sorts
// first: round-robin starts at it).
func gatewayBefore(t *testing.T, f *failingMember, good bool, cfg gateway.Config) (*prometheus.Registry, *gw) {
	t.Helper()
	es := []gateway.Entry{f.entry()}
	if good {
		es = append(es, startMember(t, 0).entry())
	}
	set := gateway.NewSet()
	set.Update("crawl", es)
	reg, gm := newMetrics(t)
	cfg.Members, cfg.Metrics = set, gm
	return reg, startGateway(t, cfg)
}

// newRequest is a request of method to target, with body when it is not
// empty and with no body at all (not an empty one) when it is.
func newRequest(t *testing.T, method, target, body string) *http.Request {
	t.Helper()
	req, err := http.NewRequest(method, target, strings.NewReader(body))
	if err != nil {
		t.Fatal(err)
	}
	if body == "" {
		req.Body = nil
	}
	return req
}

// startHeadThenDieMember starts a member that answers each request with a
// 200 head promising a body and then drops the connection before any byte
// of it, as a member stopped or killed between the two does.
func startHeadThenDieMember(t *testing.T, name string) *failingMember {
	t.Helper()
	return startAnsweringMember(t, name, func(w http.ResponseWriter) {
		w.Header().Set("Content-Length", "100")
		w.WriteHeader(http.StatusOK)
		if f, ok := w.(http.Flusher); ok {
			f.Flush()
		}
		panic(http.ErrAbortHandler) // the connection is closed, the body never sent
	})
}

// TestMemberDyingBeforeTheBodyIsAFailedAttempt: a member that sent its
// answer's head and died before the first byte of body has given the
// client nothing yet (the gateway reads that byte before passing the head
// on), so the attempt fails like a member that did not answer: an
// idempotent request goes to another member and the client never sees it;
// one that may not be sent again gets the gateway's 502 with Proxy-Status,
// not a connection closed without an answer.
func TestMemberDyingBeforeTheBodyIsAFailedAttempt(t *testing.T) {
	origin := ipEcho(t)
	for _, tc := range []struct {
		reason   string
		method   string
		body     string
		good     bool
		wantCode int
		wantBody bool // the good member's whole answer
	}{
		{reason: "a GET goes on to the next member, whose whole answer the client gets", method: http.MethodGet, good: true, wantCode: 200, wantBody: true},
		{reason: "a POST with a body may have reached the destination: the gateway's 502, not a cut connection", method: http.MethodPost, body: "order-1", good: true, wantCode: 502},
		{reason: "a GET that no other member can take: the gateway's 502", method: http.MethodGet, wantCode: 502},
	} {
		t.Run(tc.reason, func(t *testing.T) {
			dying := startHeadThenDieMember(t, "crawl-dying")
			reg, h := gatewayBefore(t, dying, tc.good, gateway.Config{})
			// Round-robin starts at the first member: the dying one.
			resp, err := h.client(t, gwUser).Do(newRequest(t, tc.method, origin.URL, tc.body))
			if err != nil {
				t.Fatalf("%v: %s", err, tc.reason)
			}
			body, err := io.ReadAll(resp.Body)
			_ = resp.Body.Close()
			if err != nil {
				t.Errorf("reading the answer: %v: %s", err, tc.reason)
			}
			if resp.StatusCode != tc.wantCode {
				t.Errorf("status %d, want %d: %s", resp.StatusCode, tc.wantCode, tc.reason)
			}
			if tc.wantBody && !strings.HasPrefix(string(body), "127.") {
				t.Errorf("body %q, want the good member's egress address: %s", body, tc.reason)
			}
			if tc.wantCode == 502 && !strings.Contains(resp.Header.Get("Proxy-Status"), "error=") {
				t.Errorf("a 502 without the gateway's Proxy-Status error (%q): %s", resp.Header.Get("Proxy-Status"), tc.reason)
			}
			if got := metric(t, reg, "egress_proxies_gateway_member_failures_total", map[string]string{"member": dying.name, "cause": "body-cut"}); got != 1 {
				t.Errorf("failures with cause body-cut on the dying member: %v, want 1: %s", got, tc.reason)
			}
		})
	}
}

// TestStalledMemberIsBounded: a member that stops sending without closing
// its connection (a paused VM keeps its connections open) holds a plain
// request only for the stall timeout: before its answer's first bytes, the
// attempt fails and the next member answers; after them, the answer is cut
// and the member's place is freed. Without the bound both were still
// waiting at the test's own limit.
func TestStalledMemberIsBounded(t *testing.T) {
	origin := ipEcho(t)
	for _, tc := range []struct {
		reason  string
		partial string // body bytes the member sends before it stalls
		good    bool
	}{
		{reason: "a head, then nothing: the attempt fails and another member answers", good: true},
		{reason: "a head and part of the body, then nothing: the answer is cut, not held", partial: "0123456789"},
	} {
		t.Run(tc.reason, func(t *testing.T) {
			done := make(chan struct{})
			// Named to sort first: round-robin starts at it.
			stalled := startAnsweringMember(t, "crawl-a-stalled", func(w http.ResponseWriter) {
				w.Header().Set("Content-Length", "100")
				w.WriteHeader(http.StatusOK)
				_, _ = io.WriteString(w, tc.partial)
				_ = http.NewResponseController(w).Flush()
				<-done
			})
			t.Cleanup(func() { close(done) }) // before the member's server closes
			// Long enough that the good member's own answer never looks
			// stalled, on a loaded machine too.
			reg, h := gatewayBefore(t, stalled, tc.good, gateway.Config{StallTimeout: poll.Paced(time.Second)})
			ctx, cancel := context.WithTimeout(t.Context(), wait)
			defer cancel()
			resp, err := h.client(t, gwUser).Do(newRequest(t, http.MethodGet, origin.URL, "").WithContext(ctx))
			if err != nil {
				t.Fatalf("%v: %s", err, tc.reason)
			}
			body, err := io.ReadAll(resp.Body)
			_ = resp.Body.Close()
			if ctx.Err() != nil {
				t.Fatalf("the request was still held after %s: %s", wait, tc.reason)
			}
			labels := map[string]string{"member": stalled.name}
			if tc.good {
				if err != nil || resp.StatusCode != http.StatusOK || !strings.HasPrefix(string(body), "127.") {
					t.Errorf("%d %q %v, want the good member's whole answer: %s", resp.StatusCode, body, err, tc.reason)
				}
				if got := metric(t, reg, "egress_proxies_gateway_member_failures_total", map[string]string{"member": stalled.name, "cause": "body-cut"}); got != 1 {
					t.Errorf("body-cut failures of the stalled member: %v, want 1: %s", got, tc.reason)
				}
			} else if err == nil || string(body) != tc.partial {
				t.Errorf("body %q, end %v; want the part sent, then an error: %s", body, err, tc.reason)
			}
			poll.Until(t, wait, func() (bool, string) {
				n := metric(t, reg, "egress_proxies_gateway_member_in_flight", labels)
				return n == 0, fmt.Sprintf("%v requests still in flight on the stalled member", n)
			})
		})
	}
}
