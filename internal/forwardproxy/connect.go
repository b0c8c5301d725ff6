package forwardproxy

import (
	"bytes"
	"context"
	"io"
	"net"
	"net/http"
	"strconv"
	"time"
)

// goTunnel runs tun on a goroutine of its own, then gives back its slot
// and finishes x. t, when not nil, counts c as in flight already; it counts
// the tunnel's pair too until the tunnel ends, so that the end of Serve's
// drain closes both connections (closing the client's alone would leave a
// tunnel whose client shut its write side waiting on the upstream).
func (p *Proxy) goTunnel(t *tracker, c net.Conn, tun *tunnel, x *exchange) {
	t.begin(tun.pair)
	go func() {
		tun.run()
		p.release()
		p.finish(x)
		t.end(tun.pair)
		t.end(c)
	}()
}

// serveLateConnect serves a CONNECT that net/http read: one that follows
// another request on its connection, as Node.js keep-alive agents (the
// default from Node 19 on) and proxy-chain send them, or any CONNECT when
// the Proxy runs under a server other than Serve. What net/http parsed is
// first held to the strict parser's rules (lateConnectHead); then the
// connection is hijacked and the tunnel opened and run as serveConn does.
func (p *Proxy) serveLateConnect(w http.ResponseWriter, r *http.Request, x *exchange) {
	head, herr := lateConnectHead(r, p.tunnelHeaders)
	if herr != nil {
		x.err = herr
		x.refuseWith(w, refusal{code: herr.code, msg: herr.msg})
		return
	}
	x.host = head.target
	c, brw, err := http.NewResponseController(w).Hijack()
	if err != nil {
		// Not an HTTP/1 connection (HTTP/2 has a CONNECT of its own,
		// which Serve does not speak).
		x.err = err
		x.refuseWith(w, refusal{code: http.StatusHTTPVersionNotSupported, msg: "CONNECT is served on HTTP/1.1 connections"})
		return
	}
	// Bytes the client sent behind its head, which net/http may have read
	// already, belong to the tunnel.
	early := bytes.Clone(peekBuffered(brw.Reader))
	// As for a CONNECT that Serve read, the tunnel's dial ends with the
	// server's drain, not with the request, which ends when the handler
	// returns (below), long before the tunnel. Under another server the
	// tunnel has no drain: it ends by its idle timeout or when either
	// side closes.
	ctx := context.WithoutCancel(r.Context()) //nolint:contextcheck // replaced by the server's context under Serve, on purpose (see above).
	if srv, ok := ctx.Value(serverKey{}).(context.Context); ok {
		ctx = srv
	}
	tun := p.openConnect(ctx, c, head, early, x)
	if tun == nil {
		return
	}
	// The tunnel goes on in a goroutine of its own and the handler
	// returns: net/http's connection goroutine, with its grown stack and
	// its buffers, would otherwise stay for the tunnel's life (three times
	// the memory per idle tunnel, BenchmarkIdleLateTunnelMemory). Counted
	// again before the handler's own count ends, so that a drain never
	// sees it gone.
	t, _ := r.Context().Value(trackerKey{}).(*tracker)
	t.begin(c)
	x.detached = true
	p.goTunnel(t, c, tun, x)
}

// openConnect answers a CONNECT, read by serveConn or by net/http
// (serveLateConnect): admission (admit, which ServeHTTP runs too), then the
// target, then the egress policy when the target is dialed. It returns the tunnel
// to run, holding a slot that the caller releases once it ended, or nil
// after a refusal.
func (p *Proxy) openConnect(ctx context.Context, c net.Conn, h connectHead, early []byte, x *exchange) *tunnel {
	ctx = context.WithValue(ctx, exchangeKey{}, x)
	if h.upstream != nil {
		ctx = context.WithValue(ctx, tunnelHeaderKey{}, h.upstream)
	}
	ctx, ref, ok := p.admit(ctx, c, h.proxyAuthorization, x)
	if !ok {
		x.refuseConn(c, ref)
		return nil
	}
	// Admitted: the tunnel has its own idle timeout.
	_ = c.SetDeadline(time.Time{})
	if ref, ok := p.checkTarget(h.target, x); !ok {
		p.release()
		x.refuseConn(c, ref)
		return nil
	}
	upstream, err := p.dialTarget(ctx, h.target)
	if err != nil {
		p.release()
		x.err = err
		x.refuseConn(c, upstreamRefusal(err))
		return nil
	}
	tun := p.established(c, upstream, early, x)
	if tun == nil {
		p.release()
	}
	return tun
}

// lingerTimeout bounds how long a refused connection's unread bytes are
// drained before it is closed.
const lingerTimeout = 500 * time.Millisecond

// refuseConn writes the answer of r on c, raw, as a complete response, and
// closes c. Bytes the client sent after its request are
// read and dropped for a moment first: closing a socket with unread bytes
// sends a reset, which can destroy the answer before the client reads it.
func (x *exchange) refuseConn(c net.Conn, r refusal) {
	body := r.msg + "\n"
	b := make([]byte, 0, 256+len(body))
	b = append(b, "HTTP/1.1 "...)
	b = strconv.AppendInt(b, int64(r.code), 10)
	b = append(b, ' ')
	b = append(b, http.StatusText(r.code)...)
	b = append(b, "\r\n"...)
	for _, f := range x.answer(r) {
		b = append(b, f[0]+": "+f[1]+"\r\n"...)
	}
	b = append(b, "Content-Length: "...)
	b = strconv.AppendInt(b, int64(len(body)), 10)
	b = append(b, "\r\n\r\n"...)
	b = append(b, body...)
	_ = c.SetDeadline(time.Now().Add(lingerTimeout))
	if rc, ok := c.(refusedConn); ok {
		rc.refused()
	}
	if _, err := c.Write(b); err == nil {
		if cw, ok := c.(closeWriter); ok && cw.CloseWrite() == nil {
			_, _ = io.Copy(io.Discard, io.LimitReader(c, 256<<10))
		}
	}
	_ = c.Close()
}

// prefixConn is a connection handed to net/http: its reads return first
// the bytes read while looking at the first request (AheadConn).
type prefixConn struct {
	AheadConn
}

func newPrefixConn(c net.Conn, prefix []byte) *prefixConn {
	pc := &prefixConn{}
	pc.Init(c, prefix)
	return pc
}

// refused bounds what is left of a refused connection: net/http reads the
// body of a refused request before it closes the connection, without a
// deadline of its own, so a client that announces a body and never sends it
// would keep its connection (and its slot) for as long as it likes. It gets
// the linger of a refusal on the CONNECT path instead.
func (c *prefixConn) refused() {
	_ = c.SetDeadline(time.Now().Add(lingerTimeout))
	if rc, ok := c.Conn.(refusedConn); ok {
		rc.refused()
	}
}

// authenticated passes the admission of the connection's client on to
// the connection under the prefix.
func (c *prefixConn) authenticated() { markAuthenticated(c.Conn) }

// The connections Serve hands to net/http keep the socket's ReadFrom, which
// is how a plain answer's bulk reaches splice(2).
var (
	_ io.ReaderFrom = (*prefixConn)(nil)
	_ io.ReaderFrom = (*countedConn)(nil)
)
