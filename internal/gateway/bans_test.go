package gateway_test

import (
	"fmt"
	"io"
	"net"
	"net/http"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"github.com/prometheus/client_golang/prometheus"

	"github.com/egress-proxies/egress-proxies-operator/internal/gateway"
)

// banningOrigin is an origin that answers code to the requests that come
// from the egress addresses in bans (all of them when bans holds "*"), and
// the caller's address to the others; it counts the requests from each
// address and keeps the methods and ban headers it saw.
type banningOrigin struct {
	url  string
	code int
	mu   sync.Mutex
	bans map[string]bool
	hits map[string]int
	seen []string // "<method> <egress> ban-header=<value>"
}

func startBanningOrigin(t *testing.T, ip string, code int, bans ...string) *banningOrigin {
	t.Helper()
	o := &banningOrigin{code: code, bans: map[string]bool{}, hits: map[string]int{}}
	for _, b := range bans {
		o.bans[b] = true
	}
	o.url = originOn(t, ip, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		_, _ = io.Copy(io.Discard, r.Body)
		host, _, _ := net.SplitHostPort(r.RemoteAddr)
		o.mu.Lock()
		o.hits[host]++
		o.seen = append(o.seen, r.Method+" "+host+" ban-header="+r.Header.Get(gateway.BanHeader))
		banned := o.bans[host] || o.bans["*"]
		o.mu.Unlock()
		if banned {
			http.Error(w, "banned", o.code)
			return
		}
		_, _ = io.WriteString(w, host)
	}))
	return o
}

func (o *banningOrigin) hitsFrom(addr string) int {
	o.mu.Lock()
	defer o.mu.Unlock()
	return o.hits[addr]
}

// bansTotal is the bans metric of member for cause.
func bansTotal(t *testing.T, reg *prometheus.Registry, member, cause string) float64 {
	t.Helper()
	labels := map[string]string{"cause": cause}
	if member != "" {
		labels["member"] = member
	}
	return metric(t, reg, "egress_proxies_gateway_bans_total", labels)
}

// TestBanKeepsMemberAwayFromHost: a destination that answers 429 to one
// member's address bans that member from that host: the request goes to
// another member (the client sees a 200), and for the cool-down the member
// gets no request or tunnel to that host, while it serves other hosts; a
// session on it moves for that host only. After the cool-down it gets
// traffic to that host again. Counted, in the gauge, in the access log,
// with no member credential anywhere.
func TestBanKeepsMemberAwayFromHost(t *testing.T) {
	ms := startMembers(t, 3)
	w := watchSecrets(t, ms)
	banner := startBanningOrigin(t, "127.0.0.1", http.StatusTooManyRequests, ms[0].egress)
	other := startBanningOrigin(t, "127.0.0.2", http.StatusTooManyRequests)
	target := tcpEcho(t) // on the banning host too
	set := gateway.NewSet()
	set.Update("crawl", entries(ms))
	reg, gm := newMetrics(t)
	clk := newClock()
	h := startGateway(t, gateway.Config{Members: set, Metrics: gm, Now: clk.Now})
	c := h.client(t, gwUser)
	record := func(code int, body string, hdr http.Header, err error) {
		w.Add("answers", fmt.Sprint(code, body, hdr, err))
	}

	// Round-robin starts at ms[0]: banned, and the client never sees it.
	code, body, hdr, err := get(c, banner.url, nil)
	record(code, body, hdr, err)
	if code != http.StatusOK || body == ms[0].egress {
		t.Fatalf("the first request: %d %q %v; want 200 through another member than %s", code, body, err, ms[0].egress)
	}
	for range 30 {
		code, body, hdr, err := get(c, banner.url, nil)
		record(code, body, hdr, err)
		if code != http.StatusOK {
			t.Errorf("a request to the banning host during the ban: %d %q %v", code, body, err)
		}
	}
	for range 6 {
		if got := tunnelEgress(t, h.addr, target, gwUser); got == ms[0].egress {
			t.Errorf("a tunnel to the banning host went through the banned member")
		}
	}
	if got := banner.hitsFrom(ms[0].egress); got != 1 {
		t.Errorf("the banned member sent %d requests to the banning host; want 1, the one that got the ban", got)
	}
	for range 6 {
		code, body, hdr, err := get(c, other.url, nil)
		record(code, body, hdr, err)
	}
	if got := other.hitsFrom(ms[0].egress); got != 2 {
		t.Errorf("the banned member sent %d of 6 round-robin requests to another host; want 2: the ban is for one host", got)
	}

	// A session on ms[0] (for the other host) moves, for the banning host
	// only, and stays where it moved.
	session := ""
	for i := range 64 {
		if _, body, _, _ := get(c, other.url, http.Header{gateway.SessionHeader: {fmt.Sprintf("s%d", i)}}); body == ms[0].egress {
			session = fmt.Sprintf("s%d", i)
			break
		}
	}
	if session == "" {
		t.Fatal("no session of 64 is on ms[0]; the test shows nothing")
	}
	sess := http.Header{gateway.SessionHeader: {session}}
	moved := map[string]int{}
	for range 5 {
		_, body, _, _ := get(c, banner.url, sess)
		moved[body]++
		_, body, _, _ = get(c, other.url, sess)
		moved["other host: "+body]++
	}
	if len(moved) != 2 || moved[ms[0].egress] != 0 || moved["other host: "+ms[0].egress] != 5 {
		t.Errorf("session %s during the ban: %v; want one member other than %s for the banning host, and %s for the other", session, moved, ms[0].egress, ms[0].egress)
	}

	if got := bansTotal(t, reg, ms[0].name, "status-429"); got != 1 {
		t.Errorf("bans of %s by status-429: %v; want 1", ms[0].name, got)
	}
	if got := metric(t, reg, "egress_proxies_gateway_bans_active", map[string]string{"pool": "crawl"}); got != 1 {
		t.Errorf("active bans: %v; want 1", got)
	}
	logs := h.logs.String()
	if !strings.Contains(logs, "ban=status-429 crawl/"+ms[0].name) {
		t.Errorf("no access log line names the ban:\n%s", logs)
	}

	// The cool-down ends: ms[0] gets requests to that host again (and,
	// the host still banning it, is banned again).
	clk.advance(gateway.DefaultBanFor)
	if got := metric(t, reg, "egress_proxies_gateway_bans_active", map[string]string{"pool": "crawl"}); got != 0 {
		t.Errorf("active bans after the cool-down: %v; want 0", got)
	}
	for range 6 {
		code, body, hdr, err := get(c, banner.url, nil)
		record(code, body, hdr, err)
	}
	if got := banner.hitsFrom(ms[0].egress); got != 2 {
		t.Errorf("after the cool-down the member sent %d requests to the banning host in all; want 2", got)
	}
	if got := bansTotal(t, reg, ms[0].name, "status-429"); got != 2 {
		t.Errorf("bans of %s after the cool-down: %v; want 2", ms[0].name, got)
	}
	w.Add("logs", h.logs.String())
	for _, f := range w.Findings() {
		t.Error(f)
	}
}

// TestBanStatusesAndMethods: which answers are bans, and which requests
// go to another member after one.
func TestBanStatusesAndMethods(t *testing.T) {
	for _, tc := range []struct {
		reason   string
		code     int      // the destination's ban answer
		banned   []string // member indexes it answers code to, "*" for all
		statuses []int
		method   string
		want     []string // three requests
		wantBans float64
	}{
		{reason: "a 403 is not a ban by default: passed on, and the member keeps its turn",
			code: 403, banned: []string{"0"}, method: http.MethodGet, want: []string{"403", "200 m1", "403"}},
		{reason: "a 403 is a ban when the administrator says so",
			code: 403, banned: []string{"0"}, statuses: []int{429, 403}, method: http.MethodGet, want: []string{"200 m1", "200 m1", "200 m1"}, wantBans: 1},
		{reason: "a POST is not sent again, but its member is banned",
			code: 429, banned: []string{"0"}, method: http.MethodPost, want: []string{"429 received-status", "200 m1", "200 m1"}, wantBans: 1},
		{reason: "a POST without a body is not sent again either: the method is not idempotent",
			code: 429, banned: []string{"0"}, method: "POST-empty", want: []string{"429 received-status", "200 m1", "200 m1"}, wantBans: 1},
		{reason: "every member banned: the last ban answer, then the gateway's own 429 until the first ban ends",
			code: 429, banned: []string{"*"}, method: http.MethodGet, want: []string{"429 received-status", "429 Retry-After=300 error=http_request_denied", "429 Retry-After=300 error=http_request_denied"}, wantBans: 2},
	} {
		t.Run(tc.reason, func(t *testing.T) {
			ms := startMembers(t, 2)
			var bans []string
			for _, b := range tc.banned {
				if b == "*" {
					bans = append(bans, b)
				} else {
					bans = append(bans, ms[b[0]-'0'].egress)
				}
			}
			o := startBanningOrigin(t, "127.0.0.1", tc.code, bans...)
			set := gateway.NewSet()
			set.Update("crawl", entries(ms))
			reg := prometheus.NewRegistry()
			gm, err := gateway.NewMetrics(reg)
			if err != nil {
				t.Fatal(err)
			}
			h := startGateway(t, gateway.Config{Members: set, BanStatuses: tc.statuses, Metrics: gm, Now: newClock().Now})
			c := h.client(t, gwUser)
			var got []string
			for i := range 3 {
				method := http.MethodGet
				var body io.Reader
				if i == 0 {
					method = tc.method
					switch method {
					case http.MethodPost:
						body = strings.NewReader("order-1")
					case "POST-empty":
						method = http.MethodPost
					}
				}
				req, err := http.NewRequest(method, o.url, body)
				if err != nil {
					t.Fatal(err)
				}
				resp, err := c.Do(req)
				if err != nil {
					t.Fatal(err)
				}
				b, _ := io.ReadAll(resp.Body)
				_ = resp.Body.Close()
				ps := resp.Header.Get("Proxy-Status")
				switch {
				case resp.StatusCode == http.StatusOK:
					got = append(got, fmt.Sprintf("200 m%d", slices.Index(egresses(ms), string(b))))
				case strings.Contains(ps, "received-status"):
					got = append(got, fmt.Sprintf("%d received-status", resp.StatusCode))
				case strings.Contains(ps, "error="):
					_, errType, _ := strings.Cut(ps, "error=")
					got = append(got, fmt.Sprintf("%d Retry-After=%s error=%s", resp.StatusCode, resp.Header.Get("Retry-After"), errType))
				default:
					got = append(got, strconv.Itoa(resp.StatusCode))
				}
			}
			if diff := cmp.Diff(tc.want, got); diff != "" {
				t.Errorf("answers (-want +got):\n%s", diff)
			}
			var posts int
			for _, s := range o.seen {
				if strings.HasPrefix(s, "POST") {
					posts++
				}
			}
			if strings.HasPrefix(tc.method, http.MethodPost) && posts != 1 {
				t.Errorf("the origin got %d POSTs; want 1: a request with a body is not sent again (%v)", posts, o.seen)
			}
			if got := metric(t, reg, "egress_proxies_gateway_bans_total", nil); got != tc.wantBans {
				t.Errorf("bans: %v; want %v", got, tc.wantBans)
			}
		})
	}
}

func egresses(ms []*member) []string {
	var out []string
	for _, m := range ms {
		out = append(out, m.egress)
	}
	return out
}

// TestBanReports: through a tunnel the gateway cannot see a ban, so a
// session reports it, with the header (on CONNECT or a plain request) or
// the username option: its member is banned from that host, the session
// moves for that host only, a report repeated does not ban the member it
// moved to, and after the cool-down it is back. The header is never
// forwarded.
func TestBanReports(t *testing.T) {
	ms := startMembers(t, 4)
	w := watchSecrets(t, ms)
	target := tcpEcho(t)                   // host 127.0.0.1
	elsewhere := tcpEchoOn(t, "127.0.0.2") // another host
	origin := startBanningOrigin(t, "127.0.0.1", http.StatusTooManyRequests)
	set := gateway.NewSet()
	set.Update("crawl", entries(ms))
	reg, gm := newMetrics(t)
	clk := newClock()
	h := startGateway(t, gateway.Config{Members: set, Metrics: gm, Now: clk.Now, BanFor: time.Minute})
	report := gateway.BanHeader + ": 127.0.0.1\r\n"

	for _, tc := range []struct {
		reason   string
		session  string
		reported func() string // a tunnel that reports the ban
		again    func() string // the same report sent again
	}{
		{"the header on CONNECT", "s1",
			func() string { return tunnelEgressWith(t, h.addr, target, gwUser+"-session-s1", report) },
			func() string { return tunnelEgressWith(t, h.addr, target, gwUser+"-session-s1", report) }},
		{"the username option on CONNECT", "s2",
			func() string { return tunnelEgress(t, h.addr, target, gwUser+"-session-s2-ban-127.0.0.1") },
			func() string { return tunnelEgress(t, h.addr, target, gwUser+"-session-s2-ban-127.0.0.1") }},
		{"the header on a plain request, the session in a header too", "s3",
			func() string {
				_, body, _, _ := get(h.client(t, gwUser), origin.url, http.Header{gateway.SessionHeader: {"s3"}, gateway.BanHeader: {"127.0.0.1"}})
				return body
			},
			func() string {
				return tunnelEgressWith(t, h.addr, target, gwUser, gateway.SessionHeader+": s3\r\n"+report)
			}},
	} {
		user := gwUser + "-session-" + tc.session
		before := tunnelEgress(t, h.addr, target, user)
		after := tc.reported()
		if after == before || after == "" {
			t.Errorf("%s: the session went from %s to %q after its report; want another member", tc.reason, before, after)
		}
		if again := tc.again(); again != after {
			t.Errorf("%s: the report sent again moved the session from %s to %s; want it to stay", tc.reason, after, again)
		}
		if got := tunnelEgress(t, h.addr, target, user); got != after {
			t.Errorf("%s: the session's next tunnel went through %s; want %s", tc.reason, got, after)
		}
		if got := tunnelEgress(t, h.addr, elsewhere, user); got != before {
			t.Errorf("%s: the session's tunnel to another host went through %s; want %s, its member", tc.reason, got, before)
		}
		clk.advance(time.Minute)
		if got := tunnelEgress(t, h.addr, target, user); got != before {
			t.Errorf("%s: after the cool-down the session went through %s; want %s, its member again", tc.reason, got, before)
		}
	}
	if diff := cmp.Diff([]float64{2, 1}, []float64{bansTotal(t, reg, "", "report-header"), bansTotal(t, reg, "", "report-username")}); diff != "" {
		t.Errorf("bans by report-header and report-username (-want +got):\n%s", diff)
	}
	for _, s := range origin.seen {
		if !strings.HasSuffix(s, "ban-header=") {
			t.Errorf("the origin saw the ban header: %s", s)
		}
	}
	w.Add("logs", h.logs.String())
	for _, f := range w.Findings() {
		t.Error(f)
	}
}

// TestBadBanReportsAreRefused: a ban report without a session, twice, with
// a host over the bound or with other characters (header injection in the
// username included) gets a 400 that says what is wrong, on CONNECT and
// plain requests, without echoing the input raw (a port of thousands of
// digits included, which a table would otherwise keep); a client that
// reports thousands of distinct hosts gets its report rate's burst, all of
// them its own (none is a ban for everyone).
func TestBadBanReportsAreRefused(t *testing.T) {
	ms := startMembers(t, 2)
	w := watchSecrets(t, ms)
	origin := ipEcho(t)
	target := tcpEcho(t)
	set := gateway.NewSet()
	set.Update("crawl", entries(ms))
	reg, gm := newMetrics(t)
	clk := newClock()
	h := startGateway(t, gateway.Config{Members: set, Metrics: gm, Now: clk.Now})
	long := strings.Repeat("a", 250) + ".example"
	for _, tc := range []struct {
		reason, user string
		header       []string
		want         string
	}{
		{"a report without a session", gwUser, []string{"example.org"}, "a ban report needs a session"},
		{"two ban headers", gwUser + "-session-a", []string{"example.org", "example.com"}, "one X-Gateway-Ban header at most"},
		{"a host over the bound", gwUser + "-session-a", []string{long}, "longer than 253 characters"},
		{"a username over its bound, which is below the host's", gwUser + "-session-a-ban-" + strings.Repeat("b", 245), nil, "longer than 256 characters"},
		{"other characters", gwUser + "-session-a", []string{"exa mple.org/x"}, `a ban names a host`},
		{"header injection in the username", gwUser + "-session-a-ban-x.org\r\nX-Injected 1\r\n\r\nGET /evil HTTP/1.1", nil, `not "x.org\r\nX-Injected 1\r\n`},
		{"an empty ban option", gwUser + "-session-a-ban-", nil, `a ban names a host`},
		{"a port of 6000 digits", gwUser + "-session-a", []string{"example.org:" + strings.Repeat("9", 6000)}, "not a number from 1 to 65535"},
	} {
		var extra strings.Builder
		for _, v := range tc.header {
			extra.WriteString(gateway.BanHeader + ": " + v + "\r\n")
		}
		resp, _, _ := connect(t, h.addr, target, basic(tc.user, gwPass), extra.String())
		body, _ := io.ReadAll(resp.Body)
		_ = resp.Body.Close()
		w.Add("answers", fmt.Sprint(resp.Status, resp.Header, string(body)))
		if resp.StatusCode != http.StatusBadRequest || !strings.Contains(string(body), tc.want) || strings.Contains(string(body), "\r\n\r\nGET") {
			t.Errorf("CONNECT, %s: %s %q; want 400 saying %q", tc.reason, resp.Status, body, tc.want)
		}
		if strings.ContainsAny(tc.user, "\r\n") {
			continue // net/http will not send it
		}
		code, got, hdr, err := get(h.client(t, tc.user), origin.URL, http.Header{gateway.BanHeader: tc.header})
		w.Add("answers", fmt.Sprint(code, got, hdr, err))
		if code != http.StatusBadRequest || !strings.Contains(got, tc.want) {
			t.Errorf("plain, %s: %d %q %v; want 400 saying %q", tc.reason, code, got, err, tc.want)
		}
	}
	const hosts = 2000
	tr := &http.Transport{Proxy: http.ProxyURL(h.url(gwUser + "-session-many"))}
	t.Cleanup(tr.CloseIdleConnections)
	c := &http.Client{Transport: tr, Timeout: wait}
	for i := range hosts {
		if code, body, _, err := get(c, origin.URL, http.Header{gateway.BanHeader: {fmt.Sprintf("h%d.example", i)}}); code != http.StatusOK {
			t.Fatalf("report %d: %d %q %v", i, code, body, err)
		}
	}
	// The clock stands still: no token comes back during the run.
	if got := bansTotal(t, reg, "", "report-header"); got != 50 {
		t.Errorf("bans by %d reports of distinct hosts from one client: %v; want its report burst, 50", hosts, got)
	}
	if got := metric(t, reg, "egress_proxies_gateway_bans_active", nil); got != 0 {
		t.Errorf("bans for everyone after one client's %d reports: %v; want none", hosts, got)
	}
	w.Add("logs", h.logs.String())
	for _, f := range w.Findings() {
		t.Error(f)
	}
}

// clientFrom is an HTTP client through the gateway as user whose
// connections come from src, a loopback address: to the gateway, another
// client.
func (h *gw) clientFrom(t *testing.T, src, user string) *http.Client {
	t.Helper()
	d := &net.Dialer{LocalAddr: &net.TCPAddr{IP: net.ParseIP(src)}}
	tr := &http.Transport{Proxy: http.ProxyURL(h.url(user)), DisableKeepAlives: true, DialContext: d.DialContext}
	t.Cleanup(tr.CloseIdleConnections)
	return &http.Client{Transport: tr, Timeout: wait}
}

// TestOneClientsReportsLeaveOthersServed (#38 item 3): a client (one
// source address) that reports, with a new session each time, that a host
// banned every member is answered 429 for that host, and every other client
// is still served there through every member. Only reports of the same
// member and host from three distinct clients ban it for everyone. It
// fails with reports banning for everyone at once.
func TestOneClientsReportsLeaveOthersServed(t *testing.T) {
	ms := startMembers(t, 3)
	set := gateway.NewSet()
	set.Update("crawl", entries(ms))
	reg, gm := newMetrics(t)
	h := startGateway(t, gateway.Config{Members: set, Metrics: gm, Now: newClock().Now})
	site := originOn(t, "127.0.0.20", http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		host, _, _ := net.SplitHostPort(r.RemoteAddr)
		_, _ = io.WriteString(w, host)
	}))
	const banned = "127.0.0.20"

	liar := "127.0.0.2"
	for i := range ms {
		code, body, _, err := get(h.clientFrom(t, liar, fmt.Sprintf("%s-session-liar%d", gwUser, i)), site, http.Header{gateway.BanHeader: {banned}})
		// The last report bans the last member before its own request
		// goes on: that request is the first 429.
		if code != http.StatusOK && (i < len(ms)-1 || code != http.StatusTooManyRequests) {
			t.Fatalf("report %d: %d %q %v", i, code, body, err)
		}
	}
	if code, _, _, _ := get(h.clientFrom(t, liar, gwUser), site, nil); code != http.StatusTooManyRequests {
		t.Errorf("the reporting client after banning every member: %d; want 429", code)
	}
	seen := map[string]bool{}
	other := h.clientFrom(t, "127.0.0.3", gwUser)
	for i := range 3 * len(ms) {
		code, body, _, err := get(other, site, nil)
		if code != http.StatusOK {
			t.Fatalf("another client's request %d: %d %q %v; want it served", i, code, body, err)
		}
		seen[body] = true
	}
	if len(seen) != len(ms) {
		t.Errorf("another client went through %d members; want all %d (a report bans for its client only)", len(seen), len(ms))
	}
	if got := metric(t, reg, "egress_proxies_gateway_bans_active", nil); got != 0 {
		t.Errorf("bans for everyone after one client's reports: %v; want none", got)
	}

	// The same session's member, reported by three distinct clients
	// (another host: the first client reported every member for the
	// first, and counts among its reporters).
	site = originOn(t, "127.0.0.21", http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		host, _, _ := net.SplitHostPort(r.RemoteAddr)
		_, _ = io.WriteString(w, host)
	}))
	const session, second = "-session-shared", "127.0.0.21"
	_, before, _, err := get(h.clientFrom(t, "127.0.0.9", gwUser+session), site, nil)
	if err != nil {
		t.Fatal(err)
	}
	for i, src := range []string{"127.0.0.4", "127.0.0.5", "127.0.0.6"} {
		if i == 2 {
			if _, got, _, _ := get(h.clientFrom(t, "127.0.0.9", gwUser+session), site, nil); got != before {
				t.Errorf("after two clients' reports a third client's session moved from %s to %s; want it kept", before, got)
			}
		}
		if code, body, _, err := get(h.clientFrom(t, src, gwUser+session), site, http.Header{gateway.BanHeader: {second}}); code != http.StatusOK {
			t.Fatalf("report from %s: %d %q %v", src, code, body, err)
		}
	}
	if _, got, _, _ := get(h.clientFrom(t, "127.0.0.9", gwUser+session), site, nil); got == before {
		t.Errorf("after three clients' reports the session still goes through %s; want another member", before)
	}
	if diff := cmp.Diff([]float64{1, 1}, []float64{bansTotal(t, reg, "", "reports-confirmed"), metric(t, reg, "egress_proxies_gateway_bans_active", nil)}); diff != "" {
		t.Errorf("confirmed bans and bans for everyone (-want +got):\n%s", diff)
	}
}
