package gateway

import (
	"math"
	"math/rand/v2"
	"net/http"
	"slices"
	"strconv"
	"time"

	"github.com/egress-proxies/egress-proxies-operator/internal/forwardproxy"
)

// Choosing a member is done here, in one order for every request and
// tunnel; eligibility (the route), ejections (failover.go), bans (bans.go,
// adminbans.go), sessions (session.go) and limits (limits.go) feed it and
// choose nothing themselves.
//
// Once per request or tunnel, memberFilters narrow the members to those it
// may use, in this order:
//
//  1. route: the members the client's options allow (zone, provider:
//     route.restrict); none at all is a 503 with Retry-After.
//  2. ejection: those that sit out no cool-down; when every one of them
//     does, all of them: trying a member that failed beats refusing every
//     request while the probes still say the members serve.
//  3. bans: those not banned from the destination host for the client
//     (learned, reported or the administrator's); none left is a 429
//     until the first ban ends.
//
// Then, once per attempt (admitNext):
//
//  4. tried: those the request has not tried yet; none left ends it.
//  5. session or strategy: the session's member by rendezvous, so that a
//     failed member's session goes to its next member, or the strategy's
//     choice.
//  6. limits: the member's admission; a member at a limit is tried no
//     more and the next one is chosen, except for a session, which stops
//     at its own member's limit (a 429: moving would change its egress
//     address).

// Strategy is how a request or tunnel picks its member among those it may
// use.
type Strategy string

// The strategies.
const (
	// RoundRobin takes the members in turn (the default).
	RoundRobin Strategy = "roundRobin"
	// Random takes a member at random.
	Random Strategy = "random"
	// LeastConnections takes a member with the fewest requests and tunnels
	// in flight through this gateway, the earliest in turn among equals.
	LeastConnections Strategy = "leastConnections"
)

// choose applies the strategy to candidates (not empty).
func (g *Gateway) choose(candidates []*Member) *Member {
	switch g.strategy {
	case Random:
		return candidates[rand.IntN(len(candidates))] //nolint:gosec // G404: spreading load, not a secret.
	case LeastConnections:
		start := int(g.next.Add(1) % uint64(len(candidates))) //nolint:gosec // G115: below len(candidates).
		best := candidates[start]
		for i := 1; i < len(candidates); i++ {
			m := candidates[(start+i)%len(candidates)]
			if m.state.active.Load() < best.state.active.Load() {
				best = m
			}
		}
		return best
	case RoundRobin:
	}
	return candidates[int((g.next.Add(1)-1)%uint64(len(candidates)))] //nolint:gosec // G115: below len(candidates).
}

// filterStep is one of memberFilters: it keeps, of ms, the members a
// request or tunnel of rt to host may use, or refuses it.
type filterStep struct {
	name string
	keep func(g *Gateway, rt *route, host string, ms []*Member) ([]*Member, error)
}

// Names of the filter steps.
const (
	stepRoute    = "route"
	stepEjection = "ejection"
	stepBans     = "bans"
)

// memberFilters are steps 1 to 3 of the order above, in that order.
var memberFilters = []filterStep{
	{name: stepRoute, keep: byRoute},
	{name: stepEjection, keep: notEjected},
	{name: stepBans, keep: notBanned},
}

// candidates are the members a request or tunnel of rt to host may use.
func (g *Gateway) candidates(rt *route, host string) ([]*Member, error) {
	ms, _, err := g.filter(rt, host)
	return ms, err
}

// filter applies memberFilters to the gateway's members: the members left,
// or the name of the step that refused and its refusal.
func (g *Gateway) filter(rt *route, host string) ([]*Member, string, error) {
	ms := g.members.Members()
	for _, s := range memberFilters {
		var err error
		if ms, err = s.keep(g, rt, host, ms); err != nil {
			return nil, s.name, err
		}
	}
	return ms, "", nil
}

// byRoute is step 1: the members rt allows, a 503 when there are none.
func byRoute(_ *Gateway, rt *route, _ string, ms []*Member) ([]*Member, error) {
	all, err := rt.restrict(ms)
	if err != nil {
		return nil, err
	}
	if len(all) == 0 {
		return nil, &forwardproxy.RefusedError{Code: http.StatusServiceUnavailable,
			Message: "the gateway has no member proxy to send to; retry later", Header: "Retry-After", Value: "1",
			ProxyError: forwardproxy.ProxyErrorDestinationUnavailable}
	}
	return all, nil
}

// notEjected is step 2: the members that sit out no cool-down, or all of
// them when every one does.
func notEjected(g *Gateway, _ *route, _ string, ms []*Member) ([]*Member, error) {
	now := g.now()
	out := make([]*Member, 0, len(ms))
	for _, m := range ms {
		if !m.state.ejected(now) {
			out = append(out, m)
		}
	}
	if len(out) == 0 {
		return ms, nil
	}
	return out, nil
}

// notBanned is step 3: the members not banned from host for rt's client,
// a 429 until the first ban ends when none is left.
func notBanned(g *Gateway, rt *route, host string, ms []*Member) ([]*Member, error) {
	now := g.now()
	out, first := g.bans.allowed(ms, rt.clientKey(), host, now)
	if len(out) > 0 {
		return out, nil
	}
	secs := max(1, int(first.Sub(now).Round(time.Second)/time.Second))
	return nil, &forwardproxy.RefusedError{Code: http.StatusTooManyRequests,
		Message: "every member proxy this request may use is banned by " + printable(host) + " for now; retry later",
		Header:  "Retry-After", Value: strconv.Itoa(secs), ProxyError: forwardproxy.ProxyErrorHTTPRequestDenied}
}

// admitNext does steps 4 to 6: it picks and admits the member of the next
// attempt among candidates, adding every member it looks at to *tried:
// nil, with when to retry, when none can take it (all tried or at a
// limit; a session stops at its own member's limit).
func (g *Gateway) admitNext(rt *route, candidates []*Member, tried *[]*Member, host, method string) (*Member, func(), time.Duration) {
	wait := time.Duration(math.MaxInt64)
	for {
		m := g.nextMember(rt, candidates, *tried)
		if m == nil {
			return nil, nil, wait
		}
		*tried = append(*tried, m)
		release, limit, w, ok := g.admit(m, host)
		if ok {
			if g.metrics != nil {
				g.metrics.requests.WithLabelValues(m.Pool, m.Name, method).Inc()
				if rt != nil && rt.session != "" {
					g.metrics.handlesOf(m).sessions.Inc()
				}
			}
			return m, release, 0
		}
		wait = min(wait, w)
		if g.metrics != nil {
			g.metrics.limited.WithLabelValues(m.Pool, m.Name, limit).Inc()
		}
		if rt != nil && rt.session != "" {
			return nil, nil, wait
		}
	}
}

// nextMember does steps 4 and 5: the member of the next attempt among
// candidates, leaving out those tried; nil when every candidate was tried.
func (g *Gateway) nextMember(rt *route, candidates, tried []*Member) *Member {
	if len(tried) > 0 {
		rest := make([]*Member, 0, len(candidates))
		for _, m := range candidates {
			if !slices.Contains(tried, m) {
				rest = append(rest, m)
			}
		}
		candidates = rest
	}
	if len(candidates) == 0 {
		return nil
	}
	if rt != nil && rt.session != "" {
		return sessionMember(rt, candidates, g.now())
	}
	return g.choose(candidates)
}

// sessionMember is the member of candidates (not empty) that rt's session
// is on at now, by rendezvous.
func sessionMember(rt *route, candidates []*Member, now time.Time) *Member {
	return place(sessionKey(rt.session, rt.ttl, now), candidates)
}
