package gateway

import (
	"math/rand/v2"
	"net/http"
	"slices"

	"github.com/egress-proxies/egress-proxies-operator/internal/forwardproxy"
)

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

// eligible returns the members a request or tunnel may use: those the
// route allows that sit out no cool-down. When every one of them is
// ejected, all of them: trying a member that failed beats refusing every
// request while the probes still say the members serve.
func (g *Gateway) eligible(rt *route) ([]*Member, error) {
	all, err := rt.restrict(g.members.Members())
	if err != nil {
		return nil, err
	}
	if len(all) == 0 {
		return nil, &forwardproxy.RefusedError{Code: http.StatusServiceUnavailable,
			Message: "the gateway has no member proxy to send to; retry later", Header: "Retry-After", Value: "1",
			ProxyError: forwardproxy.ProxyErrorDestinationUnavailable}
	}
	now := g.now()
	candidates := make([]*Member, 0, len(all))
	for _, m := range all {
		if !m.state.ejected(now) {
			candidates = append(candidates, m)
		}
	}
	if len(candidates) == 0 {
		return all, nil
	}
	return candidates, nil
}

// nextMember picks the member of the next attempt among candidates, leaving
// out those tried: the session's place (so a failed member's session goes
// to its next member by rendezvous), or the strategy's choice. Nil when
// every candidate was tried.
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
		return place(sessionKey(rt.session, rt.ttl, g.now()), candidates)
	}
	return g.choose(candidates)
}

// candidates are the members a request or tunnel to host may use.
func (g *Gateway) candidates(rt *route, host string) ([]*Member, error) {
	candidates, err := g.eligible(rt)
	if err != nil {
		return nil, err
	}
	return g.withoutBanned(candidates, rt, host)
}
