package gateway

import (
	"errors"
	"net"
	"net/http"
	"syscall"
	"time"
)

// Failover: an attempt through a member that fails before any byte reached
// the client (the member cannot be dialed, times out, or answers 407, 502,
// 503, or tinyproxy's own 500 "Unable to connect") is tried again through
// another member the request may use, up to MaxAttempts in all; the client
// sees only the last attempt. A member whose attempts fail EjectAfter times
// in a row sits out EjectFor: it gets no new request or tunnel (a session
// on it moves, by rendezvous, to its next member; the others stay), and
// comes back when the time is up. The pool's probe still decides whether it
// stays a member.

// Defaults of failover's zero values in Config.
const (
	// DefaultMaxAttempts is how many members one request or tunnel may
	// try.
	DefaultMaxAttempts = 3
	// DefaultEjectAfter is how many failures in a row eject a member.
	DefaultEjectAfter = 3
	// DefaultEjectFor is how long an ejected member sits out.
	DefaultEjectFor = 30 * time.Second
)

// attemptError is a failed attempt through a member: what the failures
// metric calls it, and whether it says the member failed (and so may be
// retried elsewhere and counts towards ejection) rather than the request
// (a refusal by the member's egress policy, which any member would give).
type attemptError struct {
	cause  string
	member bool
	// sent is false when nothing of the request reached the member (the
	// dial failed): then even a request with a body may be retried.
	sent bool
	err  error
}

func (e *attemptError) Error() string { return e.err.Error() }
func (e *attemptError) Unwrap() error { return e.err }

// dialError marks a failed dial to a member in the Transport's errors.
type dialError struct{ err error }

func (e *dialError) Error() string { return e.err.Error() }
func (e *dialError) Unwrap() error { return e.err }

// memberStatus reports whether a member's answer is its own failure, worth
// another member: 407 (it refused the gateway's credentials for it), 502 and
// 503 (it could not reach the destination, or serve now).
func memberStatus(code int) bool {
	return code == http.StatusProxyAuthRequired || code == http.StatusBadGateway || code == http.StatusServiceUnavailable
}

// memberTunnelStatus reports whether a member's answer to CONNECT is its own
// failure: memberStatus's, and 500, which tinyproxy (every VM guest's
// proxy) answers when it could not open the connection ("Unable to
// connect"; also while it is being stopped). A destination never answers a
// CONNECT in HTTP, so no answer to one is the destination's; a plain
// request's 500 may be, and is passed on.
func memberTunnelStatus(code int) bool {
	return memberStatus(code) || code == http.StatusInternalServerError
}

// succeeded ends m's run of failures.
func (g *Gateway) succeeded(m *Member) { m.state.failures.Store(0) }

// failed records a failed attempt on m and ejects m when it is the
// EjectAfter-th member failure in a row.
func (g *Gateway) failed(m *Member, f *attemptError) {
	if g.metrics != nil {
		g.metrics.failures.WithLabelValues(m.Pool, m.Name, f.cause).Inc()
	}
	g.log.V(1).Info("member failed", "member", m.String(), "cause", f.cause, "error", f.err.Error())
	if !f.member {
		return
	}
	if m.state.failures.Add(1) != int64(g.ejectAfter) {
		return
	}
	// Exactly one of the failures that reach the bound ejects.
	m.state.failures.Store(0)
	until := g.now().Add(g.ejectFor)
	m.state.ejectedUntil.Store(until.UnixNano())
	if g.metrics != nil {
		g.metrics.ejections.WithLabelValues(m.Pool, m.Name).Inc()
	}
	g.log.Info("member ejected", "member", m.String(), "cause", f.cause, "failuresInARow", g.ejectAfter, "for", g.ejectFor.String())
	if g.onEject != nil {
		g.onEject(m, f.cause, until)
	}
}

// retried counts an attempt on m that another member takes over.
func (g *Gateway) retried(m *Member, method string) {
	if g.metrics != nil {
		g.metrics.retries.WithLabelValues(m.Pool, m.Name, method).Inc()
	}
}

// causeOf names the kind of a failed attempt, for the failures metric.
func causeOf(err error) string {
	if ne, ok := errors.AsType[net.Error](err); ok && ne.Timeout() {
		return "timeout"
	}
	if errors.Is(err, syscall.ECONNREFUSED) {
		return "refused"
	}
	return "error"
}
