package forwardproxy

import (
	"cmp"
	"context"
	"errors"
	"net"
	"net/http"
	"net/netip"
	"time"
)

// Upstream is where a Proxy sends what it forwards, in place of reaching
// destinations itself: a gateway that chains every request to one of a
// pool's proxies is a Proxy with an Upstream. Without one (Config.Upstream
// nil) a Proxy dials destinations directly, within its egress policy.
//
// Everything before the Upstream stays the Proxy's: the source ranges, the
// strict CONNECT parser, the concurrency and connection caps, the header,
// idle and drain timeouts, the access log and the metrics.
type Upstream interface {
	// Authorize checks a request's Proxy-Authorization value ("" when
	// absent), in place of Config's Username and Password, after the
	// source check. It returns the context the request goes on with (what
	// the credentials say, for RoundTrip and DialTunnel to read), or an
	// error: a *RefusedError is answered as it says, any other error with
	// 407.
	Authorize(ctx context.Context, proxyAuthorization string) (context.Context, error)
	// RoundTrip forwards an absolute-form HTTP request, its hop-by-hop
	// headers and Proxy-Authorization already removed. An error is
	// answered with 502 (504 for a timeout), or as a *RefusedError says.
	RoundTrip(req *http.Request) (*http.Response, error)
	// DialTunnel returns a connection to target (host:port) for a CONNECT
	// tunnel; bytes written to it reach the target and bytes read from it
	// come from there. ctx is what Authorize returned; it ends with the
	// Proxy's server. An error is answered like RoundTrip's, before the
	// client got any byte.
	DialTunnel(ctx context.Context, target string) (net.Conn, error)
}

// ErrorDescriber is an Upstream whose errors may name what the access log
// must not (a gateway's member addresses, which a dial or read error names):
// the log's error field is DescribeError's text in place of the error's
// own. It applies to every error of a request through the Upstream, the
// tunnel's relay included.
type ErrorDescriber interface {
	Upstream
	DescribeError(err error) string
}

// TunnelHeaderReader is an Upstream that reads header fields of a CONNECT
// request besides Proxy-Authorization (a gateway's session header): Serve's
// strict parser keeps the values of the fields TunnelHeaders names, and
// Authorize and DialTunnel find them with TunnelHeader. A plain request's
// fields are in the request RoundTrip gets.
type TunnelHeaderReader interface {
	Upstream
	// TunnelHeaders names the fields; it is called once, by New.
	TunnelHeaders() []string
}

type tunnelHeaderKey struct{}

type clientKey struct{}

// ClientAddr returns the address of the client whose request or CONNECT
// the context belongs to, as its TCP peer says (never a header), from the
// context that Authorize gets and passes on; invalid outside one. An
// Upstream keys what it keeps per client by it (a gateway's ban reports).
func ClientAddr(ctx context.Context) netip.Addr {
	x, _ := ctx.Value(clientKey{}).(*exchange)
	if x == nil {
		return netip.Addr{}
	}
	src := x.source
	if x.remote != nil {
		src = x.remote.String()
	}
	ap, err := netip.ParseAddrPort(src)
	if err != nil {
		return netip.Addr{}
	}
	return ap.Addr().Unmap()
}

// TunnelHeader returns the fields of a CONNECT request that the Upstream
// named in TunnelHeaders, each with every value sent (a repeated field has
// several), from the context that Authorize and DialTunnel get; nil when
// the request sent none of them.
func TunnelHeader(ctx context.Context) http.Header {
	h, _ := ctx.Value(tunnelHeaderKey{}).(http.Header)
	return h
}

// AccessField adds key=value to the access log line of the request or
// tunnel whose context ctx is (the one RoundTrip's request carries, or
// DialTunnel's): an Upstream says there what it did (a gateway names the
// member it used). value must hold no credential. Outside a request it does
// nothing.
func AccessField(ctx context.Context, key, value string) {
	x, ok := ctx.Value(exchangeKey{}).(*exchange)
	if !ok {
		return
	}
	x.fieldsMu.Lock()
	defer x.fieldsMu.Unlock()
	x.fields = append(x.fields, key, value)
}

// ExchangeBytes returns the bytes relayed so far by the request or tunnel
// whose context ctx is, up (from the client) and down (to it); ok is false
// outside a request. An Upstream reads it when its part ends, to count the
// bytes per member it sent through.
func ExchangeBytes(ctx context.Context) (up, down int64, ok bool) {
	x, ok := ctx.Value(exchangeKey{}).(*exchange)
	if !ok {
		return 0, 0, false
	}
	return x.up.Load(), x.down.Load(), true
}

// RefusedError is an Upstream's refusal with its own answer: Code and
// Message (a sentence for the client, which must name no secret), with one
// header when Header is set. Err, when set, is the cause, for the access
// log.
type RefusedError struct {
	Code    int
	Message string
	// Header and Value are one header of the answer, such as Retry-After.
	Header, Value string
	// ProxyError is the RFC 9209 error type of the answer's Proxy-Status
	// (ProxyError* constants); empty: the one its Code implies.
	ProxyError string
	Err        error
}

func (e *RefusedError) Error() string {
	if e.Err != nil {
		return e.Message + ": " + e.Err.Error()
	}
	return e.Message
}

func (e *RefusedError) Unwrap() error { return e.Err }

// refusal is how the Proxy answers e.
func (e *RefusedError) refusal() refusal {
	return refusal{code: e.Code, msg: e.Message, key: e.Header, value: e.Value, proxyError: e.ProxyError}
}

// authorize runs the credentials check of a request: the Upstream's when
// there is one, the Proxy's own Basic credentials otherwise. It returns the
// context to go on with, or the refusal to answer.
func (p *Proxy) authorize(ctx context.Context, proxyAuthorization string, x *exchange) (context.Context, refusal, bool) {
	if p.upstream == nil {
		if !p.authenticate(proxyAuthorization, x) {
			return ctx, refuseAuth, false
		}
		return ctx, refusal{}, true
	}
	next, err := p.upstream.Authorize(context.WithValue(ctx, clientKey{}, x), proxyAuthorization)
	if err != nil {
		x.err = err
		if re, ok := isRefused(err); ok {
			return ctx, re.refusal(), false
		}
		return ctx, refuseAuth, false
	}
	return next, refusal{}, true
}

// admit is a request's admission, the same for a plain request that
// net/http read and for a CONNECT, whichever parser read it, and in this
// order: the client's source address (only from the TCP peer), then its
// credentials (an Upstream reads its options only after them), which make
// the connection authenticated for Serve's admission limits, then a slot of
// MaxConcurrent. On success the caller holds the slot (release it) and has
// the context the Upstream gave; on a refusal it writes the refusal.
func (p *Proxy) admit(ctx context.Context, c net.Conn, proxyAuthorization string, x *exchange) (context.Context, refusal, bool) {
	if !x.sourceAllowed(p.ranges) {
		return ctx, refuseSource, false
	}
	ctx, ref, ok := p.authorize(ctx, proxyAuthorization, x)
	if !ok {
		return ctx, ref, false
	}
	markAuthenticated(c)
	if !p.acquire() {
		return ctx, refuseFull, false
	}
	return ctx, refusal{}, true
}

// dialTarget opens the upstream end of a CONNECT tunnel: through the
// Upstream, or by dialing target within the egress policy.
func (p *Proxy) dialTarget(ctx context.Context, target string) (net.Conn, error) {
	if p.upstream != nil {
		return p.upstream.DialTunnel(ctx, target)
	}
	return p.dial(ctx, "tcp", target)
}

// useUpstream makes the Proxy forward through u; New calls it last.
func (p *Proxy) useUpstream(u Upstream) {
	if u == nil {
		return
	}
	p.upstream = u
	p.forwarder.Transport = u
	if d, ok := u.(ErrorDescriber); ok {
		p.describeError = d.DescribeError
	}
	if r, ok := u.(TunnelHeaderReader); ok {
		for _, name := range r.TunnelHeaders() {
			p.tunnelHeaders = append(p.tunnelHeaders, http.CanonicalHeaderKey(name))
		}
	}
}

// isRefused reports whether err carries an Upstream's own answer.
func isRefused(err error) (*RefusedError, bool) {
	return errors.AsType[*RefusedError](err)
}

// ProxyTransportConfig configures NewProxyTransport.
type ProxyTransportConfig struct {
	// Proxy names the proxy a request goes to. An error fails the request
	// as it is.
	Proxy func(req *http.Request) (ProxyTarget, error)
	// Dial opens a connection to a proxy that Proxy named. Its error is
	// returned as it is, so that the caller can tell a request that was
	// never sent.
	Dial func(ctx context.Context, addr string) (net.Conn, error)
	// StallTimeout ends a connection that carried no byte either way for
	// that long (DefaultIdleTimeout when zero).
	StallTimeout time.Duration
	// IdleTimeout closes a kept-alive connection unused for that long
	// (DefaultIdleTimeout when zero).
	IdleTimeout time.Duration
	// ResponseHeaderTimeout bounds the wait for an answer's head
	// (DefaultResponseHeaderTimeout when zero).
	ResponseHeaderTimeout time.Duration
	// MaxIdle and MaxIdlePerProxy bound the kept-alive connections (256
	// and 64 when zero).
	MaxIdle, MaxIdlePerProxy int
	// Upgrades carries the requests that ask for a protocol upgrade
	// (WebSocket), whose connection the Proxy then relays.
	Upgrades http.RoundTripper
}

// ProxyTarget is where a ProxyTransport sends one request.
type ProxyTarget struct {
	// Addr is the proxy's host:port.
	Addr string
	// Authorization is the Proxy-Authorization value to send it, "" for
	// none.
	Authorization string
	// KeepAlive lets the connection carry another request once this one's
	// answer was read to the end of its framing with nothing after it.
	// Set it only for a proxy that parses every answer it relays (this
	// package's Proxy): one that relays an origin's bytes as they come
	// (tinyproxy) lets the origin write past its answer and read the next
	// request, another client's, from the kept connection
	// (docs/security.md, "Kept connections to members"). False closes the
	// connection after each answer.
	KeepAlive bool
}

// ProxyTransport sends plain requests through other forward proxies, as a
// Proxy sends them to origins: it writes each request (in absolute form,
// with the proxy's credentials) and reads the answer's head on the
// caller's goroutine, over kept-alive connections, and a body of known
// length is spliced (Linux) from the proxy's socket to the client's once it
// turns out bulky. An Upstream's RoundTrip uses it to reach its proxies.
type ProxyTransport struct{ t *originTransport }

// NewProxyTransport returns a ProxyTransport; cfg.Proxy, cfg.Dial and
// cfg.Upgrades must be set.
func NewProxyTransport(cfg ProxyTransportConfig) (*ProxyTransport, error) {
	if cfg.Proxy == nil || cfg.Dial == nil || cfg.Upgrades == nil {
		return nil, errors.New("forwardproxy: a proxy transport needs Proxy, Dial and Upgrades")
	}
	stall := cmp.Or(cfg.StallTimeout, DefaultIdleTimeout)
	return &ProxyTransport{t: &originTransport{
		dial: func(ctx context.Context, addr string) (*idleConn, error) {
			c, err := cfg.Dial(ctx, addr)
			if err != nil {
				return nil, err
			}
			return newIdleConn(c, newActivity(stall)), nil
		},
		proxy:                 cfg.Proxy,
		responseHeaderTimeout: cmp.Or(cfg.ResponseHeaderTimeout, DefaultResponseHeaderTimeout),
		idleTimeout:           cmp.Or(cfg.IdleTimeout, DefaultIdleTimeout),
		upgrades:              cfg.Upgrades,
		maxIdle:               cfg.MaxIdle,
		maxIdlePerHost:        cfg.MaxIdlePerProxy,
	}}, nil
}

// RoundTrip implements http.RoundTripper.
func (t *ProxyTransport) RoundTrip(req *http.Request) (*http.Response, error) {
	return t.t.RoundTrip(req)
}

// CloseIdleConnections closes the kept-alive connections.
func (t *ProxyTransport) CloseIdleConnections() { t.t.CloseIdleConnections() }
