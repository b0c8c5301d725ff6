package gateway

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net/http"
	"strconv"
	"strings"
	"sync/atomic"
	"time"

	"github.com/egress-proxies/egress-proxies-operator/internal/forwardproxy"
)

// The plain path: a request in absolute form (and an upgrade, WebSocket)
// through one member, with failover to another while nothing reached the
// client.

// roundTripWithHeaders is RoundTrip once the span started: the gateway's
// headers, the ban reports, then the members.
func (g *Gateway) roundTripWithHeaders(req *http.Request) (*route, *http.Response, error) {
	rt, _ := req.Context().Value(routeKey{}).(*route)
	sessions, banValues := req.Header.Values(SessionHeader), req.Header.Values(BanHeader)
	if len(sessions) > 0 || len(banValues) > 0 {
		// The headers are the gateway's: they never reach the
		// destination.
		req = req.Clone(req.Context())
		req.Header.Del(SessionHeader)
		req.Header.Del(BanHeader)
	}
	rt, reps, err := withHeaders(rt, sessions, banValues)
	if err != nil {
		return rt, nil, err
	}
	if err := g.applyReports(req.Context(), rt, reps); err != nil {
		return rt, nil, err
	}
	resp, err := g.roundTrip(req, rt)
	return rt, resp, err
}

// roundTrip sends req through members until one answers, or failover gives
// up: then the last attempt's answer (a member's 502 or 503 as it is, its
// 407 as a 502 of the gateway's) or error; 429 when every member it may use
// is at its limit.
func (g *Gateway) roundTrip(req *http.Request, rt *route) (*http.Response, error) {
	if req.Body != nil && req.Body != http.NoBody {
		// The Transport closes the body of a request whose dial failed;
		// the server closes it when the request ends, so that the next
		// member gets it untouched.
		req.Body = keepOpen{req.Body}
	}
	ctx := req.Context()
	return attempts(ctx, g, rt, req.URL.Host, MethodHTTP, func(m *Member, release func()) (attempt[*http.Response], error) {
		start := time.Now()
		resp, err := g.transport.RoundTrip(req.WithContext(withMember(ctx, m)))
		f := classify(resp, err)
		if f == nil && !g.isBanStatus(resp.StatusCode) {
			if f = primeBody(req, resp); f != nil {
				resp, err = nil, f.err
			}
		}
		h := g.metrics.handlesOf(m)
		if f == nil && h != nil {
			h.latencyHTTP.Observe(time.Since(start).Seconds())
		}
		if f == nil && !g.isBanStatus(resp.StatusCode) {
			resp.Body = releasing(resp, &releasingBody{ReadCloser: resp.Body, release: release, ctx: ctx, handles: h})
			return attempt[*http.Response]{val: resp}, nil
		}
		// Kept until another member takes the request or failover gives
		// up.
		fa := &failedAttempt{m: m, resp: resp, err: err, release: release}
		a := attempt[*http.Response]{fail: f, answer: func() (*http.Response, error) { return g.giveUp(ctx, fa) }, drop: fa.discard}
		if f != nil {
			a.again = retryable(req, f)
			return a, nil
		}
		// A ban status: the member works; the destination refuses its
		// address. Another member may take an idempotent request without a
		// body: nothing reached the client yet.
		a.ban = "status-" + strconv.Itoa(resp.StatusCode)
		a.again = idempotent(req) && (req.Body == nil || req.Body == http.NoBody)
		return a, nil
	})
}

// tinyproxyUnreached reports whether resp is tinyproxy's own answer to a
// plain request it could not connect onwards ("500 Unable to connect",
// with tinyproxy's Server header; also what a request in flight gets while
// tinyproxy stops, its connect interrupted). Unlike an origin's 500 it
// says the member forwarded nothing. tinyproxy is every VM guest's proxy,
// and configured without Via, so the reason phrase and Server are what
// tell its answer from a destination's.
func tinyproxyUnreached(resp *http.Response) bool {
	return resp.StatusCode == http.StatusInternalServerError &&
		strings.EqualFold(strings.TrimSpace(strings.TrimPrefix(resp.Status, "500")), "Unable to connect") &&
		strings.HasPrefix(resp.Header.Get("Server"), "tinyproxy/")
}

// classify names a plain request's attempt: nil for an answer to pass on.
func classify(resp *http.Response, err error) *attemptError {
	if err != nil {
		_, dial := errors.AsType[*dialError](err)
		return &attemptError{cause: causeOf(err), member: true, sent: !dial, err: err}
	}
	if memberStatus(resp.StatusCode) || tinyproxyUnreached(resp) {
		return &attemptError{cause: "status-" + strconv.Itoa(resp.StatusCode), member: true, sent: true, err: errors.New(resp.Status)}
	}
	return nil
}

// retryable reports whether req may go to another member after f: always
// when nothing was sent; otherwise only an idempotent request without a
// body, which the member may have forwarded already, and a 407, which it
// did not forward.
func retryable(req *http.Request, f *attemptError) bool {
	switch {
	case !f.member:
		return false
	case !f.sent:
		return true
	case req.Body != nil && req.Body != http.NoBody:
		return false
	case f.cause == "status-407":
		return true
	}
	return idempotent(req)
}

// idempotent is net/http's rule: the idempotent methods, or a request that
// names an idempotency key.
func idempotent(req *http.Request) bool {
	switch req.Method {
	case http.MethodGet, http.MethodHead, http.MethodOptions, http.MethodTrace, http.MethodPut, http.MethodDelete:
		return true
	}
	return req.Header.Get("Idempotency-Key") != "" || req.Header.Get("X-Idempotency-Key") != ""
}

// primeBody reads the first bytes of an answer's body before its head is
// passed on, and keeps them for the client (primedBody). A member that dies
// after its head and before any byte of body (stopped, killed, its VM
// gone) would otherwise cut an answer the gateway had committed to: with
// the bytes read first, nothing has reached the client yet, so the attempt
// fails like a member that did not answer (cause "body-cut"), and failover
// may take it to another member. An answer without a body (HEAD, 204, 304,
// a Content-Length of 0) needs no read. The cost is that a head waits for
// the first byte of its body, which a member sends with it for all but
// slowly streamed answers.
func primeBody(req *http.Request, resp *http.Response) *attemptError {
	// A 101's connection speaks another protocol now, whose first bytes
	// may be the client's to send: there is nothing to wait for.
	if req.Method == http.MethodHead || resp.StatusCode == http.StatusNoContent || resp.StatusCode == http.StatusNotModified ||
		resp.StatusCode == http.StatusSwitchingProtocols || resp.ContentLength == 0 || resp.Body == nil || resp.Body == http.NoBody {
		return nil
	}
	pb := &primedBody{ReadCloser: resp.Body}
	var err error
	for pb.n == 0 && err == nil {
		// One read takes what arrived with the head, without waiting for
		// more: a streamed answer's first bytes are not held back.
		pb.n, err = resp.Body.Read(pb.buf[:])
	}
	if pb.n == 0 && !errors.Is(err, io.EOF) {
		_ = resp.Body.Close()
		return &attemptError{cause: "body-cut", member: true, sent: true, err: fmt.Errorf("the answer's body ended before its first byte: %w", err)}
	}
	pb.err = err
	resp.Body = pb
	return nil
}

// primedBody is an answer's body whose first bytes primeBody read: it
// gives them first, then the rest.
type primedBody struct {
	io.ReadCloser
	buf [512]byte
	off int
	n   int
	err error // what the priming read ended with (io.EOF for a short body read whole)
}

func (b *primedBody) Read(p []byte) (int, error) {
	if b.off < b.n {
		n := copy(p, b.buf[b.off:b.n])
		b.off += n
		return n, nil
	}
	if b.err != nil {
		return 0, b.err
	}
	return b.ReadCloser.Read(p)
}

// failedAttempt is a plain request's failed attempt, kept until the next
// member took the request or failover gave up.
type failedAttempt struct {
	m       *Member
	resp    *http.Response // nil after an error
	err     error
	release func()
}

// discard drops the attempt's answer: another member took the request.
func (a *failedAttempt) discard() {
	if a.resp != nil {
		_, _ = io.Copy(io.Discard, io.LimitReader(a.resp.Body, 64<<10))
		_ = a.resp.Body.Close()
	}
	a.release()
}

// giveUp answers with the last failed attempt; ctx is the request's.
func (g *Gateway) giveUp(ctx context.Context, a *failedAttempt) (*http.Response, error) {
	switch {
	case a.resp == nil:
		a.release()
		return nil, fmt.Errorf("member %s: %w", a.m, a.err)
	case a.resp.StatusCode == http.StatusProxyAuthRequired:
		// The client must not be asked for credentials the member
		// wants: they are the gateway's business.
		_ = a.resp.Body.Close()
		a.release()
		return nil, &forwardproxy.RefusedError{Code: http.StatusBadGateway, Message: "bad gateway: the member proxy refused the gateway",
			ProxyError: forwardproxy.ProxyErrorDestinationUnavailable, Err: fmt.Errorf("member %s answered %s", a.m, a.resp.Status)}
	}
	// The member's answer, passed on: the gateway adds its own member to
	// Proxy-Status, which says what it received and names no next hop.
	forwardproxy.AccessField(ctx, "member", a.m.String())
	a.resp.Header.Add(forwardproxy.ProxyStatusHeader, g.name+"; received-status="+strconv.Itoa(a.resp.StatusCode))
	a.resp.Body = &releasingBody{ReadCloser: a.resp.Body, release: a.release, ctx: ctx, handles: g.metrics.handlesOf(a.m)}
	return a.resp, nil
}

// keepOpen is a request body that the Transport cannot close.
type keepOpen struct{ io.ReadCloser }

func (keepOpen) Close() error { return nil }

// releasingBody ends a request's count on its member when the body is
// closed, and counts the request's bytes on the member's series.
type releasingBody struct {
	io.ReadCloser
	release func()
	ctx     context.Context
	handles *memberHandles // nil: no metrics
	closed  atomic.Bool
}

func (b *releasingBody) Close() error {
	err := b.ReadCloser.Close()
	b.release()
	if b.closed.CompareAndSwap(false, true) {
		countBytes(b.ctx, b.handles)
	}
	return err
}

// releasing returns b for resp, writable when resp switched protocols:
// ReverseProxy relays an upgraded connection (WebSocket) only through a
// body it can write to.
func releasing(resp *http.Response, b *releasingBody) io.ReadCloser {
	if w, ok := b.ReadCloser.(io.Writer); ok && resp.StatusCode == http.StatusSwitchingProtocols {
		return &releasingUpgrade{releasingBody: b, w: w}
	}
	return b
}

// releasingUpgrade is the releasingBody of an upgraded connection.
type releasingUpgrade struct {
	*releasingBody
	w io.Writer
}

func (b *releasingUpgrade) Write(p []byte) (int, error) { return b.w.Write(p) }
