package gateway

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/http"
	"strconv"
	"strings"
	"sync/atomic"
	"time"

	"github.com/egress-proxies/egress-proxies-operator/internal/forwardproxy"
)

// The tunnel path: a CONNECT through one member, the gateway writing its
// own CONNECT with the member's credentials, with failover to another
// member while the tunnel is not open yet.

// dialTunnel is DialTunnel once the span started.
func (g *Gateway) dialTunnel(ctx context.Context, target string) (*route, net.Conn, error) {
	if strings.ContainsFunc(target, func(r rune) bool { return r <= ' ' || r == 0x7f }) {
		return nil, nil, &forwardproxy.RefusedError{Code: http.StatusBadRequest, Message: "CONNECT needs a host:port target"}
	}
	rt, _ := ctx.Value(routeKey{}).(*route)
	th := forwardproxy.TunnelHeader(ctx)
	rt, reps, err := withHeaders(rt, th.Values(SessionHeader), th.Values(BanHeader))
	if err != nil {
		return rt, nil, err
	}
	if err := g.applyReports(ctx, rt, reps); err != nil {
		return rt, nil, err
	}
	// The client gets no byte before the tunnel is open, so every failed
	// attempt may go to another member.
	c, err := attempts(ctx, g, rt, target, MethodConnect, func(m *Member, release func()) (attempt[net.Conn], error) {
		start := time.Now()
		c, err := g.connect(ctx, m, target)
		if err == nil {
			if h := g.metrics.handlesOf(m); h != nil {
				h.latencyTun.Observe(time.Since(start).Seconds())
				c.ctx, c.handles = ctx, h
			}
			return attempt[net.Conn]{val: c.withRelease(release)}, nil
		}
		release()
		f, ok := errors.AsType[*attemptError](err)
		if !ok {
			return attempt[net.Conn]{}, err
		}
		return attempt[net.Conn]{fail: f, answer: func() (net.Conn, error) { return nil, err }, again: f.member && ctx.Err() == nil}, nil
	})
	return rt, c, err
}

// connect opens a tunnel to target through m: it dials the member, sends
// CONNECT with the member's credentials and reads its answer.
func (g *Gateway) connect(ctx context.Context, m *Member, target string) (*tunnelConn, error) {
	ctx, cancel := context.WithTimeout(ctx, g.dial)
	defer cancel()
	c, err := memberDialer.DialContext(ctx, "tcp", m.target.host)
	if err != nil {
		return nil, &attemptError{cause: causeOf(err), member: true, err: fmt.Errorf("member %s: %w", m, err)}
	}
	deadline, _ := ctx.Deadline()
	_ = c.SetDeadline(deadline)
	a, err := memberConnect(c, target, m.target.auth)
	if err != nil {
		_ = c.Close()
		return nil, &attemptError{cause: causeOf(err), member: true, sent: true, err: fmt.Errorf("member %s: CONNECT: %w", m, err)}
	}
	if resp := a.resp; resp != nil {
		_ = resp.Body.Close()
		_ = c.Close()
		return nil, &attemptError{cause: "status-" + strconv.Itoa(resp.StatusCode), member: memberTunnelStatus(resp.StatusCode), sent: true,
			err: memberRefusal(m, resp)}
	}
	_ = c.SetDeadline(time.Time{})
	// early: bytes the destination sent right after the member's answer.
	return newTunnelConn(c, a.early), nil
}

// memberRefusal is the answer to a tunnel the member refused: its status,
// and the egress policy's reason when it gives one.
func memberRefusal(m *Member, resp *http.Response) error {
	re := &forwardproxy.RefusedError{Code: resp.StatusCode, Message: "the member proxy refused the tunnel: " + resp.Status,
		Err: fmt.Errorf("member %s answered %s", m, resp.Status)}
	switch resp.StatusCode {
	case http.StatusProxyAuthRequired, http.StatusInternalServerError, http.StatusServiceUnavailable, http.StatusGatewayTimeout:
		re.Code = http.StatusBadGateway
	}
	if why := resp.Header.Get("X-Egress-Denied"); why != "" && isToken(why) {
		re.Header, re.Value = "X-Egress-Denied", why
	}
	return re
}

// isToken reports whether s is a short word safe to repeat in a header.
func isToken(s string) bool {
	if len(s) > 32 {
		return false
	}
	for _, r := range s {
		if r != '-' && (r < 'a' || r > 'z') && (r < 'A' || r > 'Z') && (r < '0' || r > '9') {
			return false
		}
	}
	return true
}

// tunnelConn is the upstream end of a tunnel through a member. It keeps
// what the forward proxy's relay uses of the TCP connection
// (forwardproxy.RelayConn), reads first the bytes the destination sent
// right after the member's answer (forwardproxy.AheadConn), and ends the
// tunnel's count on its member when closed.
type tunnelConn struct {
	forwardproxy.AheadConn
	release func()
	ctx     context.Context
	handles *memberHandles // nil: no metrics
	closed  atomic.Bool
}

func newTunnelConn(c net.Conn, early []byte) *tunnelConn {
	tc := &tunnelConn{}
	tc.Init(c, early)
	return tc
}

func (c *tunnelConn) withRelease(release func()) net.Conn {
	c.release = release
	return c
}

func (c *tunnelConn) Close() error {
	err := c.Conn.Close()
	if c.release != nil {
		c.release()
	}
	if c.closed.CompareAndSwap(false, true) {
		countBytes(c.ctx, c.handles)
	}
	return err
}
