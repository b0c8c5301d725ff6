package gateway

import (
	"context"
	"fmt"
	"net/http"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/egress-proxies/egress-proxies-operator/internal/forwardproxy"
)

// Bans: a destination that bans an egress address answers its requests
// with a ban status (429 by default, 403 when the administrator says so).
// The gateway sees that answer on a plain request: it keeps that member away
// from that destination host for BanFor, for every client, and sends the
// request, when it is idempotent and has no body, to another member (before
// any byte reached the client). Through a tunnel the gateway sees nothing,
// so the crawler reports the ban itself, with BanHeader or the ban username
// option, on a request or tunnel of the session that was banned.
//
// A report is the reporting client's word, and a client may lie: it keeps
// the session's member away from that host for the reporting client only
// (its TCP source address, forwardproxy.ClientAddr). Only when
// reportersForAll distinct clients reported the same member and host within
// the cool-down is it a ban for everyone, as a ban status the gateway saw
// itself. So no single client can make the gateway refuse another, and a
// flood of made-up reports from one client fills only its own share of the
// tables. A client's reports are also rate-limited (reportRate,
// reportBurst; past that they are ignored and the access log says so), and
// a session reports a host once per cool-down.
//
// A member banned for a host gets no request or tunnel to that host; it
// serves every other host as before. A session whose member is banned for a
// host moves, for that host only, to the member rendezvous gives it without
// the banned ones: the same member every replica picks once it knows the
// ban, and the old address is of no use there anyway. When every member a
// request may use is banned for its host, it is answered 429 with
// Retry-After until the first ban ends.
//
// Each replica keeps its own bans (a replica learns a ban from the answers
// it sees and the reports it gets). Every table a client feeds is bounded
// (maxBanKeys entries of fixed-size keys: a host, validated to at most
// maxHostLen bytes first, is kept as its keyOf, never as a string),
// forgets the oldest entry first when full, and sheds entries that are
// over as it is written to.

// Defaults of the bans' zero values in Config.
const (
	// DefaultBanFor is how long a banned member stays away from the host.
	DefaultBanFor = 5 * time.Minute
	// maxBanKeys bounds each of the tables a replica keeps of bans and
	// reports: (member, host) bans for everyone, a client's own (member,
	// host) bans, (client, session, host) reports and the clients that
	// reported a (member, host).
	maxBanKeys = 1 << 16
	// maxReportClients bounds the clients whose report rate is tracked.
	maxReportClients = 1 << 12
	// reportersForAll is how many distinct clients must report the same
	// member and host within the cool-down before it is banned for
	// everyone.
	reportersForAll = 3
	// reportRate and reportBurst bound a client's ban reports: a crawler
	// reports what it sees banned, a few a second at most even for a large
	// crawl; more is noise or an attack.
	reportRate  = 5.0
	reportBurst = 50
)

// DefaultBanStatuses are the destination answers that are a ban when
// Config.BanStatuses is empty.
var DefaultBanStatuses = []int{http.StatusTooManyRequests}

// BanHeader reports, on a plain request or a CONNECT of a session, that the
// destination host it names banned the session's member; the gateway
// removes it before forwarding.
const BanHeader = "X-Gateway-Ban"

// Values of the cause label of the bans metric.
const (
	causeReportHeader   = "report-header"
	causeReportUsername = "report-username"
	// causeReportsConfirmed is a ban for everyone: reportersForAll
	// distinct clients reported it.
	causeReportsConfirmed = "reports-confirmed"
)

// checkBanStatuses refuses a ban status that is not a 4xx or 5xx answer,
// or that is a member's own failure (407, 502, 503: failover's).
func checkBanStatuses(codes []int) error {
	for _, c := range codes {
		if c < 400 || c > 599 || memberStatus(c) {
			return fmt.Errorf("gateway: ban status %d is not a destination's 4xx or 5xx answer (407, 502 and 503 are a member's failures)", c)
		}
	}
	return nil
}

// banKey is one member's ban from one destination host.
type banKey struct {
	member uint64
	host   hostKey
}

// ban is a banKey's value: until when, and whom, for the gauge.
type ban struct {
	until      time.Time
	pool, name string
}

// clientBanKey is one client's own ban of a member from a host, from its
// reports.
type clientBanKey struct {
	client, member uint64
	host           hostKey
}

// reportKey is one session's ban report about one host.
type reportKey struct {
	client, session uint64
	host            hostKey
}

// reporters are the distinct clients that reported a member and host, and
// until when the last report counts.
type reporters struct {
	clients [reportersForAll]uint64
	n       int
	until   time.Time
}

// banTable is a replica's bans, safe for concurrent use.
type banTable struct {
	mu             sync.RWMutex
	bans           *lru[banKey, ban]
	perHost        map[hostKey]int // bans per host: most requests go to hosts without any
	clients        *lru[clientBanKey, time.Time]
	perHostClients map[hostKey]int // clients' own bans per host
	reports        *lru[reportKey, time.Time]
	// reporters count, per (member, host), the clients that reported it.
	reporters *lru[banKey, *reporters]
	// budgets are the clients' report rates.
	budgets *lru[uint64, *bucket]
	// admin are the administrator's bans (adminbans.go), replaced whole
	// as the ProxyGateway changes; adminHosts counts them per host.
	admin      map[banKey]adminEntry
	adminHosts map[hostKey]int
}

func newBanTable(size int) *banTable {
	t := &banTable{bans: newLRU[banKey, ban](size), perHost: map[hostKey]int{}, clients: newLRU[clientBanKey, time.Time](size),
		perHostClients: map[hostKey]int{}, reports: newLRU[reportKey, time.Time](size), reporters: newLRU[banKey, *reporters](size),
		budgets: newLRU[uint64, *bucket](min(size, maxReportClients))}
	t.bans.onRemove = func(k banKey, _ ban) { uncount(t.perHost, k.host) }
	t.clients.onRemove = func(k clientBanKey, _ time.Time) { uncount(t.perHostClients, k.host) }
	return t
}

func uncount(m map[hostKey]int, host hostKey) {
	if m[host]--; m[host] <= 0 {
		delete(m, host)
	}
}

// add bans m from host, for everyone, until then (a ban already longer
// stays). A new ban is the most recent: the oldest are forgotten first.
func (t *banTable) add(m *Member, host string, now, until time.Time) {
	t.mu.Lock()
	defer t.mu.Unlock()
	k := banKey{m.id, keyOf(host)}
	if b, ok := t.bans.peek(k); ok {
		until = later(until, b.until)
	} else {
		t.bans.expire(func(_ banKey, b ban) bool { return !now.Before(b.until) })
		t.perHost[k.host]++
	}
	t.bans.put(k, ban{until: until, pool: m.Pool, name: m.Name})
}

// addReported records client's report that host banned m, until then: m is
// banned from host for client's requests. It reports whether that makes
// reportersForAll distinct clients within the cool-down, when the caller
// bans m for everyone.
func (t *banTable) addReported(client uint64, m *Member, host string, now, until time.Time) bool {
	t.mu.Lock()
	defer t.mu.Unlock()
	hk := keyOf(host)
	ck := clientBanKey{client, m.id, hk}
	if _, ok := t.clients.peek(ck); !ok {
		t.clients.expire(func(_ clientBanKey, end time.Time) bool { return !now.Before(end) })
		t.perHostClients[hk]++
	}
	t.clients.put(ck, until)
	k := banKey{m.id, hk}
	r, ok := t.reporters.get(k)
	if !ok || !now.Before(r.until) {
		if !ok {
			t.reporters.expire(func(_ banKey, r *reporters) bool { return !now.Before(r.until) })
		}
		r = &reporters{}
		t.reporters.put(k, r)
	}
	r.until = until
	if slices.Contains(r.clients[:r.n], client) {
		return false
	}
	r.clients[r.n] = client
	r.n++
	if r.n < reportersForAll {
		return false
	}
	// Banned for everyone now: the count starts again.
	*r = reporters{until: until}
	return true
}

func later(a, b time.Time) time.Time {
	if a.After(b) {
		return a
	}
	return b
}

// allowed returns the candidates not banned from host at now, for client's
// requests, and, when none is left, when the first of their bans ends.
func (t *banTable) allowed(candidates []*Member, client uint64, host string, now time.Time) ([]*Member, time.Time) {
	t.mu.RLock()
	defer t.mu.RUnlock()
	hk := keyOf(host)
	if t.perHost[hk] == 0 && t.adminHosts[hk] == 0 && t.perHostClients[hk] == 0 {
		return candidates, time.Time{}
	}
	var out []*Member
	var first time.Time
	for _, m := range candidates {
		k := banKey{m.id, hk}
		until := time.Time{}
		if b, ok := t.bans.peek(k); ok {
			until = b.until
		}
		if b, ok := t.admin[k]; ok {
			until = later(until, b.until)
		}
		if end, ok := t.clients.peek(clientBanKey{client, m.id, hk}); ok {
			until = later(until, end)
		}
		switch {
		case !now.Before(until):
			out = append(out, m)
		case first.IsZero() || until.Before(first):
			first = until
		}
	}
	return out, first
}

// firstReport records session's report about host until then, and
// reports whether it is the first within that time: a session that keeps
// the ban option in its username, or sends the header again, bans its
// member once, not the member it moved to after.
func (t *banTable) firstReport(client, session uint64, host string, now, until time.Time) bool {
	t.mu.Lock()
	defer t.mu.Unlock()
	k := reportKey{client, session, keyOf(host)}
	if end, ok := t.reports.peek(k); ok && now.Before(end) {
		return false
	}
	t.reports.expire(func(_ reportKey, end time.Time) bool { return !now.Before(end) })
	t.reports.put(k, until)
	return true
}

// spend takes one of client's report tokens at now: false when its reports
// come faster than reportRate, past reportBurst.
func (t *banTable) spend(client uint64, now time.Time) bool {
	t.mu.Lock()
	defer t.mu.Unlock()
	ok, _ := takeFrom(t.budgets, client, reportRate, reportBurst, now)
	return ok
}

// active counts the bans for everyone in force at now, by pool.
func (t *banTable) active(now time.Time) map[string]int {
	t.mu.RLock()
	defer t.mu.RUnlock()
	out := map[string]int{}
	t.bans.each(func(_ banKey, b ban) {
		if now.Before(b.until) {
			out[b.pool]++
		}
	})
	for k, b := range t.admin {
		// A pair banned both ways is one ban in force.
		if lb, ok := t.bans.peek(k); now.Before(b.until) && (!ok || !now.Before(lb.until)) {
			out[b.pool]++
		}
	}
	return out
}

// isBanStatus reports whether a destination's answer code is a ban.
func (g *Gateway) isBanStatus(code int) bool { return slices.Contains(g.banStatuses, code) }

// banned records that host banned m, for everyone, for cause (a status,
// or reports confirmed by distinct clients).
func (g *Gateway) banned(ctx context.Context, m *Member, host, cause string) {
	now := g.now()
	g.bans.add(m, host, now, now.Add(g.banFor))
	g.countBan(ctx, m, host, cause)
}

// countBan counts, logs and traces a ban of m from host.
func (g *Gateway) countBan(ctx context.Context, m *Member, host, cause string) {
	if g.metrics != nil {
		g.metrics.bans.WithLabelValues(m.Pool, m.Name, cause).Inc()
	}
	forwardproxy.AccessField(ctx, "ban", cause+" "+m.String())
	banEvent(ctx, m, cause)
	g.log.V(1).Info("member banned", "member", m.String(), "host", host, "cause", cause, "for", g.banFor.String())
}

// banReport is a crawler's report that host banned its session.
type banReport struct {
	host, cause string
}

// parseBanHost reads the host of a ban report: a host name or address,
// with a port or not, at most maxHostLen characters once the port is gone.
func parseBanHost(value string) (string, error) {
	if value == "" || strings.ContainsFunc(value, func(r rune) bool {
		return r != '.' && r != '-' && r != ':' && r != '[' && r != ']' && (r < '0' || r > '9') && (r < 'a' || r > 'z') && (r < 'A' || r > 'Z')
	}) {
		return "", badOption("a ban names a host: letters, digits, dots, dashes (an IPv6 address in the %s header), not %s", BanHeader, printable(value))
	}
	host, err := destHost(value)
	if err != nil {
		return "", err
	}
	return strings.TrimSuffix(strings.TrimPrefix(host, "["), "]"), nil
}

// reports are the ban reports of a request or tunnel: the username's and
// the header's (one at most).
func reports(rt *route, header []string) ([]banReport, error) {
	var out []banReport
	if rt != nil && rt.ban != "" {
		out = append(out, banReport{rt.ban, causeReportUsername})
	}
	switch {
	case len(header) > 1:
		return nil, badOption("one %s header at most", BanHeader)
	case len(header) == 1:
		host, err := parseBanHost(header[0])
		if err != nil {
			return nil, err
		}
		out = append(out, banReport{host, causeReportHeader})
	}
	if len(out) > 0 && (rt == nil || rt.session == "") {
		return nil, badOption("a ban report needs a session (the gateway bans the member the session is on; without one it cannot tell which member the crawler saw)")
	}
	return out, nil
}

// applyReports bans, for each report, the member rt's session is on from
// the host it names, for rt's client, once per session, host and
// cool-down and within the client's report rate; reportersForAll distinct
// clients make it a ban for everyone.
func (g *Gateway) applyReports(ctx context.Context, rt *route, reps []banReport) error {
	for _, r := range reps {
		candidates, step, err := g.filter(rt, r.host)
		if step == stepBans {
			continue // every member is banned from it already
		}
		if err != nil {
			return err
		}
		now := g.now()
		client := rt.clientKey()
		if !g.bans.firstReport(client, hash64(rt.session), r.host, now, now.Add(g.banFor)) {
			continue
		}
		if !g.bans.spend(client, now) {
			forwardproxy.AccessField(ctx, "ban", "report ignored: over the client's report rate")
			continue
		}
		m := sessionMember(rt, candidates, now)
		if g.bans.addReported(client, m, r.host, now, now.Add(g.banFor)) {
			g.banned(ctx, m, r.host, causeReportsConfirmed)
			continue
		}
		g.countBan(ctx, m, r.host, r.cause)
	}
	return nil
}
