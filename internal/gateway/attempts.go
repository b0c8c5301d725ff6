package gateway

import (
	"context"

	"github.com/egress-proxies/egress-proxies-operator/internal/forwardproxy"
)

// The attempt loop, shared by both paths (plain.go, tunnel.go): a path
// says how one attempt through a member goes (its try), and the loop does
// the rest, once for both, so that failover, bans and limits keep the same
// books whichever path a client takes: the members a request may use and
// the next one to try, admitted (choose.go, limits.go), a success or a
// failure on the member (failover.go), a ban the answer said (bans.go),
// and when to give up (MaxAttempts, or an attempt that no other member may
// take over).

// attempt is how one attempt through a member went, as a path's try says.
type attempt[R any] struct {
	// val is what the client gets when the attempt succeeded.
	val R
	// fail is the member's failure; nil when the member answered.
	fail *attemptError
	// ban, when set, is the cause of the ban the destination's answer
	// said ("status-429"): the member works, the destination refuses its
	// address.
	ban string
	// again says whether another member may take the request over after a
	// failure or a ban.
	again bool
	// answer is what the client gets when this failed attempt is the last;
	// drop, when set, lets the attempt go when another member takes over.
	answer func() (R, error)
	drop   func()
}

// tryFunc makes one attempt through m, which holds a place on m (release
// gives it back). A non-nil error ends the loop at once with that error:
// a failure that is no attempt's, neither counted nor retried.
type tryFunc[R any] func(m *Member, release func()) (attempt[R], error)

// attempts sends a request or tunnel to target (host or host:port) through
// the members rt may use, one attempt at a time, until one succeeds or
// failover gives up: then the last attempt's answer; 429 when every member
// it may use is at its limit. method is MethodHTTP or MethodConnect, for
// the metrics; ctx is the request's or tunnel's.
func attempts[R any](ctx context.Context, g *Gateway, rt *route, target, method string, try tryFunc[R]) (R, error) {
	var zero R
	host, err := destHost(target)
	if err != nil {
		return zero, err
	}
	candidates, err := g.candidates(rt, host)
	if err != nil {
		return zero, err
	}
	var tried []*Member
	// last is the last failed attempt, when n > 0; held by value, so that
	// an attempt that succeeds costs no allocation.
	var last attempt[R]
	var lastMember *Member
	for n := 0; ; {
		m, release, wait := g.admitNext(rt, candidates, &tried, host, method)
		if m == nil {
			if n > 0 {
				return last.answer()
			}
			return zero, limitRefusal(wait)
		}
		if n > 0 {
			if last.drop != nil {
				last.drop()
			}
			g.retried(lastMember, method)
		}
		a, err := try(m, release)
		if err != nil {
			return zero, err
		}
		switch {
		case a.fail != nil:
			attemptEvent(ctx, m, a.fail.cause)
			g.failed(m, a.fail)
		case a.ban != "":
			g.succeeded(m)
			attemptEvent(ctx, m, "ban-"+a.ban)
			g.banned(ctx, m, host, a.ban)
		default:
			g.succeeded(m)
			attemptEvent(ctx, m, "ok")
			forwardproxy.AccessField(ctx, "member", m.String())
			return a.val, nil
		}
		n++
		last, lastMember = a, m
		if n >= g.maxAttempts || !a.again {
			return a.answer()
		}
	}
}
