package gateway

import (
	"context"
	"fmt"
	"net/http"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/egress-proxies/egress-proxies-operator/internal/forwardproxy"
)

// Bans: a destination that bans an egress address answers its requests
// with a ban status (429 by default, 403 when the administrator says so).
// The gateway sees that answer on a plain request: it keeps that member away
// from that destination host for BanFor, and sends the request, when it is
// idempotent and has no body, to another member (before any byte reached
// the client). Through a tunnel the gateway sees nothing, so the crawler
// reports the ban itself, with BanHeader or the ban username option, on a
// request or tunnel of the session that was banned: the gateway bans the
// member that session is on for that host.
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
// it sees and the reports it gets), at most maxBanKeys (member, host) pairs:
// past that the oldest ban is forgotten first, the one closest to its end.

// Defaults of the bans' zero values in Config.
const (
	// DefaultBanFor is how long a banned member stays away from the host.
	DefaultBanFor = 5 * time.Minute
	// maxBanKeys bounds the (member, host) bans, and the (session, host)
	// reports, that a replica keeps.
	maxBanKeys = 1 << 16
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
	host   string
}

// ban is a banKey's value: until when, and whom, for the gauge.
type ban struct {
	until      time.Time
	pool, name string
}

// reportKey is one session's ban report about one host.
type reportKey struct {
	session uint64
	host    string
}

// banTable is a replica's bans, safe for concurrent use.
type banTable struct {
	mu      sync.RWMutex
	bans    *lru[banKey, ban]
	perHost map[string]int // bans per host: most requests go to hosts without any
	reports *lru[reportKey, time.Time]
	// admin are the administrator's bans (adminbans.go), replaced whole
	// as the ProxyGateway changes; adminHosts counts them per host.
	admin      map[banKey]ban
	adminHosts map[string]int
}

func newBanTable(size int) *banTable {
	t := &banTable{bans: newLRU[banKey, ban](size), perHost: map[string]int{}, reports: newLRU[reportKey, time.Time](size)}
	t.bans.onRemove = func(k banKey, _ ban) {
		if t.perHost[k.host]--; t.perHost[k.host] <= 0 {
			delete(t.perHost, k.host)
		}
	}
	return t
}

// add bans m from host until then (a ban already longer stays). A new ban
// is the most recent: the oldest are forgotten first.
func (t *banTable) add(m *Member, host string, until time.Time) {
	t.mu.Lock()
	defer t.mu.Unlock()
	k := banKey{m.id, host}
	if b, ok := t.bans.peek(k); ok {
		until = later(until, b.until)
	} else {
		t.perHost[host]++
	}
	t.bans.put(k, ban{until: until, pool: m.Pool, name: m.Name})
}

func later(a, b time.Time) time.Time {
	if a.After(b) {
		return a
	}
	return b
}

// allowed returns the candidates not banned from host at now, and, when
// none is left, when the first of their bans ends.
func (t *banTable) allowed(candidates []*Member, host string, now time.Time) ([]*Member, time.Time) {
	t.mu.RLock()
	defer t.mu.RUnlock()
	if t.perHost[host] == 0 && t.adminHosts[host] == 0 {
		return candidates, time.Time{}
	}
	var out []*Member
	var first time.Time
	for _, m := range candidates {
		k := banKey{m.id, host}
		until := time.Time{}
		if b, ok := t.bans.peek(k); ok {
			until = b.until
		}
		if b, ok := t.admin[k]; ok {
			until = later(until, b.until)
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
func (t *banTable) firstReport(session uint64, host string, now, until time.Time) bool {
	t.mu.Lock()
	defer t.mu.Unlock()
	k := reportKey{session, host}
	if end, ok := t.reports.peek(k); ok && now.Before(end) {
		return false
	}
	t.reports.put(k, until)
	return true
}

// active counts the bans in force at now, by pool.
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

// banned records that host banned m, for cause (a status or a report).
func (g *Gateway) banned(ctx context.Context, m *Member, host, cause string) {
	g.bans.add(m, host, g.now().Add(g.banFor))
	if g.metrics != nil {
		g.metrics.bans.WithLabelValues(m.Pool, m.Name, cause).Inc()
	}
	forwardproxy.AccessField(ctx, "ban", cause+" "+m.String())
	banEvent(ctx, m, cause)
	g.log.V(1).Info("member banned", "member", m.String(), "host", host, "cause", cause, "for", g.banFor.String())
}

// withoutBanned is candidates without the members banned from host: a 429
// until the first ban ends when none is left.
func (g *Gateway) withoutBanned(candidates []*Member, host string) ([]*Member, error) {
	now := g.now()
	out, first := g.bans.allowed(candidates, host, now)
	if len(out) > 0 {
		return out, nil
	}
	secs := max(1, int(first.Sub(now).Round(time.Second)/time.Second))
	return nil, &forwardproxy.RefusedError{Code: http.StatusTooManyRequests,
		Message: "every member proxy this request may use is banned by " + printable(host) + " for now; retry later",
		Header:  "Retry-After", Value: strconv.Itoa(secs), ProxyError: forwardproxy.ProxyErrorHTTPRequestDenied}
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

// applyReports bans, for each report, the member rt's session is on for
// the host it names, once per session, host and cool-down.
func (g *Gateway) applyReports(ctx context.Context, rt *route, reps []banReport) error {
	for _, r := range reps {
		candidates, err := g.eligible(rt)
		if err != nil {
			return err
		}
		if candidates, err = g.withoutBanned(candidates, r.host); err != nil {
			continue // every member is banned from it already
		}
		now := g.now()
		if !g.bans.firstReport(hash64(rt.session), r.host, now, now.Add(g.banFor)) {
			continue
		}
		g.banned(ctx, place(sessionKey(rt.session, rt.ttl, now), candidates), r.host, r.cause)
	}
	return nil
}
