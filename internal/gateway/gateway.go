package gateway

import (
	"context"
	"crypto/sha256"
	"crypto/subtle"
	"encoding/base64"
	"errors"
	"fmt"
	"io"
	"math/rand/v2"
	"net"
	"net/http"
	"net/netip"
	"net/url"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/go-logr/logr"
	"go.opentelemetry.io/otel/trace"
	"go.opentelemetry.io/otel/trace/noop"

	"github.com/egress-proxies/egress-proxies-operator/internal/egress"
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

// Defaults of Config's zero values.
const (
	// DefaultDialTimeout bounds the dial to a member and, for a tunnel,
	// its answer to CONNECT.
	DefaultDialTimeout = 10 * time.Second
	// DefaultResponseHeaderTimeout bounds the wait for a member's answer
	// to a plain request.
	DefaultResponseHeaderTimeout = time.Minute
	// DefaultIdleTimeout closes idle keep-alive connections to members.
	DefaultIdleTimeout = 90 * time.Second
	// DefaultName names the gateway in Proxy-Status.
	DefaultName = "egress-gateway"
)

// Config configures a Gateway.
type Config struct {
	// Members are the proxies it sends to; required.
	Members *Set
	// Username and Password are what clients authenticate with; both
	// empty means no authentication (the serving Proxy's source ranges
	// must then say who may use it).
	Username, Password string
	// Strategy picks members; empty means RoundRobin.
	Strategy Strategy
	// DialTimeout, ResponseHeaderTimeout and IdleTimeout: see the
	// defaults.
	DialTimeout, ResponseHeaderTimeout, IdleTimeout time.Duration
	// StallTimeout closes a connection to a member that carried no bytes
	// either way for so long, which ends a plain request whose member
	// stopped sending without closing (a paused VM): before its answer's
	// first bytes that is a failed attempt, which failover may take to
	// another member; after them, a cut answer. Zero means
	// forwardproxy.DefaultIdleTimeout, the tunnels' idle bound.
	StallTimeout time.Duration
	// MaxAttempts bounds the members one request or tunnel tries
	// (failover); zero means DefaultMaxAttempts, 1 turns failover off.
	MaxAttempts int
	// EjectAfter member failures in a row eject a member for EjectFor;
	// zero means DefaultEjectAfter and DefaultEjectFor.
	EjectAfter int
	EjectFor   time.Duration
	// MaxPerMember caps the requests and tunnels a member carries at once
	// through this gateway; zero means DefaultMaxPerMember.
	MaxPerMember int
	// HostRate, when positive, caps the requests and tunnels per second
	// through one member to one destination host, with bursts of
	// HostBurst (zero: the rate rounded up).
	HostRate  float64
	HostBurst int
	// BanStatuses are the destination answers to a plain request that
	// mean it banned the member (bans.go); empty means
	// DefaultBanStatuses. 407, 502 and 503 are a member's failures, not
	// bans.
	BanStatuses []int
	// BanFor is how long a banned member stays away from the host; zero
	// means DefaultBanFor.
	BanFor time.Duration
	// Name is the gateway's name in Proxy-Status; empty means
	// DefaultName.
	Name string
	// Metrics, when set, counts per pool and member.
	Metrics *Metrics
	// Log receives a line per member failure at V(1); it never holds a
	// member's credentials.
	Log logr.Logger
	// Now is the clock; nil means time.Now.
	Now func() time.Time
	// Tracer, when set, gets a span per request and tunnel (tracing.go).
	Tracer trace.Tracer
	// OnEject, when set, is told of each ejection: the member, the cause
	// of the failure that ejected it, and until when it sits out. It runs
	// on the goroutine of the request or tunnel that failed, so it must
	// not block (the gateway subcommand records an event, which is
	// queued).
	OnEject func(m *Member, cause string, until time.Time)
}

// Gateway is the forwardproxy.Upstream of a pool gateway: it checks the
// gateway's own credentials and sends each plain request, and each tunnel,
// through one member, with the member's credentials. It dials member proxies
// only, never a destination.
type Gateway struct {
	members   *Set
	auth      *credentials // nil: no authentication
	strategy  Strategy
	dial      time.Duration
	next      atomic.Uint64                // round-robin position
	transport *forwardproxy.ProxyTransport // plain requests to members
	upgrades  *http.Transport              // upgrades (WebSocket) to members
	// maxAttempts, ejectAfter, ejectFor, maxPerMember: see Config.
	maxAttempts, ejectAfter, maxPerMember int
	ejectFor                              time.Duration
	rates                                 *rateLimiter // nil without a HostRate
	bans                                  *banTable
	banStatuses                           []int
	banFor                                time.Duration
	name                                  string
	metrics                               *Metrics
	log                                   logr.Logger
	now                                   func() time.Time
	tracer                                trace.Tracer
	onEject                               func(*Member, string, time.Time)
}

var _ forwardproxy.TunnelHeaderReader = (*Gateway)(nil)

// New checks cfg and builds a Gateway.
func New(cfg Config) (*Gateway, error) {
	if cfg.Members == nil {
		return nil, errors.New("gateway: no member set")
	}
	if (cfg.Username == "") != (cfg.Password == "") {
		return nil, errors.New("gateway: username and password must be set together")
	}
	if strings.ContainsAny(cfg.Username, ":-") {
		return nil, errors.New("gateway: the username must not contain a colon or a dash (options follow it after dashes)")
	}
	switch cfg.Strategy {
	case "":
		cfg.Strategy = RoundRobin
	case RoundRobin, Random, LeastConnections:
	default:
		return nil, fmt.Errorf("gateway: unknown strategy %q (roundRobin, random or leastConnections)", cfg.Strategy)
	}
	if cfg.StallTimeout < 0 || cfg.MaxAttempts < 0 || cfg.EjectAfter < 0 || cfg.EjectFor < 0 || cfg.MaxPerMember < 0 || cfg.HostRate < 0 || cfg.HostBurst < 0 || cfg.BanFor < 0 {
		return nil, errors.New("gateway: the stall timeout, attempts, ejection bound, cool-downs and limits must not be negative")
	}
	if err := checkBanStatuses(cfg.BanStatuses); err != nil {
		return nil, err
	}
	if cfg.Name == "" {
		cfg.Name = DefaultName
	}
	g := &Gateway{members: cfg.Members, strategy: cfg.Strategy, dial: orDefault(cfg.DialTimeout, DefaultDialTimeout),
		maxAttempts: cfg.MaxAttempts, ejectAfter: cfg.EjectAfter, ejectFor: orDefault(cfg.EjectFor, DefaultEjectFor),
		maxPerMember: cfg.MaxPerMember, name: cfg.Name, metrics: cfg.Metrics, log: cfg.Log, now: cfg.Now,
		bans: newBanTable(maxBanKeys), banStatuses: slices.Clone(cfg.BanStatuses), banFor: orDefault(cfg.BanFor, DefaultBanFor)}
	if len(g.banStatuses) == 0 {
		g.banStatuses = DefaultBanStatuses
	}
	if g.maxPerMember == 0 {
		g.maxPerMember = DefaultMaxPerMember
	}
	if cfg.HostRate > 0 {
		g.rates = newRateLimiter(cfg.HostRate, cfg.HostBurst)
	}
	if g.maxAttempts == 0 {
		g.maxAttempts = DefaultMaxAttempts
	}
	if g.ejectAfter == 0 {
		g.ejectAfter = DefaultEjectAfter
	}
	if g.now == nil {
		g.now = time.Now
	}
	g.onEject = cfg.OnEject
	g.tracer = cfg.Tracer
	if g.tracer == nil {
		g.tracer = noop.NewTracerProvider().Tracer("")
	}
	if g.metrics != nil {
		g.metrics.watchBans(g.bans, g.now)
		g.metrics.watchSet(g.members)
	}
	if cfg.Username != "" {
		g.auth = &credentials{user: sha256.Sum256([]byte(cfg.Username)), pass: sha256.Sum256([]byte(cfg.Password)), userLen: len(cfg.Username)}
	}
	dialer := &net.Dialer{KeepAlive: -1}
	stall := orDefault(cfg.StallTimeout, forwardproxy.DefaultIdleTimeout)
	// Only ever the member's own address: a request never reaches its
	// destination from the gateway itself.
	dialMember := func(ctx context.Context, addr string) (net.Conn, error) {
		m, ok := ctx.Value(memberKey{}).(*Member)
		if !ok || addr != m.target.host {
			return nil, errNoMember
		}
		ctx, cancel := context.WithTimeout(ctx, g.dial)
		defer cancel()
		c, err := dialer.DialContext(ctx, "tcp", addr)
		if err != nil {
			return nil, &dialError{err}
		}
		return c, nil
	}
	idle := orDefault(cfg.IdleTimeout, DefaultIdleTimeout)
	headTimeout := orDefault(cfg.ResponseHeaderTimeout, DefaultResponseHeaderTimeout)
	// A request that asks for a protocol upgrade (WebSocket) goes through
	// net/http's Transport, which hands over the switched connection.
	upgrades := &http.Transport{
		// Every upgrade goes to the member its context names, in
		// absolute form, with the member's credentials from its URL.
		Proxy: func(req *http.Request) (*url.URL, error) {
			m, ok := req.Context().Value(memberKey{}).(*Member)
			if !ok {
				return nil, errNoMember
			}
			return m.target.url, nil
		},
		DialContext: func(ctx context.Context, _, addr string) (net.Conn, error) {
			c, err := dialMember(ctx, addr)
			if err != nil {
				return nil, err
			}
			return forwardproxy.IdleConn(c, stall), nil
		},
		DisableCompression: true,
		// A connection switched to another protocol is the client's
		// alone; one whose member refused the upgrade is not kept
		// either, as http.Transport cannot be told which members parse
		// what they relay (ProxyTarget.KeepAlive). Upgrades are rare.
		DisableKeepAlives:     true,
		ResponseHeaderTimeout: headTimeout,
		ExpectContinueTimeout: time.Second,
	}
	// Every other plain request: written and answered on the handler's
	// goroutine, a body of known length spliced to the client
	// (forwardproxy.ProxyTransport).
	transport, err := forwardproxy.NewProxyTransport(forwardproxy.ProxyTransportConfig{
		Proxy: func(req *http.Request) (forwardproxy.ProxyTarget, error) {
			m, ok := req.Context().Value(memberKey{}).(*Member)
			if !ok {
				return forwardproxy.ProxyTarget{}, errNoMember
			}
			// A kept connection only to a member known to run this
			// project's forward proxy (docs/security.md, "Kept
			// connections to members").
			return forwardproxy.ProxyTarget{Addr: m.target.host, Authorization: m.target.auth, KeepAlive: m.keepAlive()}, nil
		},
		Dial:                  dialMember,
		StallTimeout:          stall,
		IdleTimeout:           idle,
		ResponseHeaderTimeout: headTimeout,
		MaxIdle:               maxIdleMemberConns,
		MaxIdlePerProxy:       maxIdleConnsPerMember,
		Upgrades:              upgrades,
	})
	if err != nil {
		return nil, err
	}
	g.transport, g.upgrades = transport, upgrades
	return g, nil
}

func orDefault(d, def time.Duration) time.Duration {
	if d <= 0 {
		return def
	}
	return d
}

// CloseIdleConnections closes idle keep-alive connections to members.
func (g *Gateway) CloseIdleConnections() {
	g.transport.CloseIdleConnections()
	g.upgrades.CloseIdleConnections()
}

// Bounds of the kept-alive connections to members: a member's share of a
// crawler's concurrent requests, and enough in all for a large pool.
const (
	maxIdleMemberConns    = 1024
	maxIdleConnsPerMember = 64
)

// errNoMember is a Transport call without a member; it is a bug.
var errNoMember = errors.New("gateway: request without a member")

type memberKey struct{}

// credentials are the gateway's own, kept as digests (see
// forwardproxy's basicAuth).
type credentials struct {
	user, pass [sha256.Size]byte
	userLen    int
}

type routeKey struct{}

// Authorize implements forwardproxy.Upstream: the gateway's credentials,
// then the options after the username (see parseOptions). Credentials are
// checked first, so that a client without them learns nothing of the
// options.
func (g *Gateway) Authorize(ctx context.Context, value string) (context.Context, error) {
	user, pass, ok := parseBasic(value)
	// The username proper ends at the first dash; options follow.
	base, opts, hasOpts := strings.Cut(user, "-")
	if g.auth != nil {
		if !ok {
			return ctx, errBadCredentials
		}
		u, p := sha256.Sum256([]byte(base)), sha256.Sum256([]byte(pass))
		if subtle.ConstantTimeCompare(u[:], g.auth.user[:])&subtle.ConstantTimeCompare(p[:], g.auth.pass[:]) != 1 {
			return ctx, errBadCredentials
		}
	}
	rest := ""
	if hasOpts {
		rest = "-" + opts
	}
	rt, err := parseOptions(rest)
	if err != nil {
		return ctx, err
	}
	rt.client = forwardproxy.ClientAddr(ctx)
	return context.WithValue(ctx, routeKey{}, rt), nil
}

var errBadCredentials = errors.New("wrong or missing gateway credentials")

// parseBasic decodes a Proxy-Authorization Basic value.
func parseBasic(value string) (user, pass string, ok bool) {
	scheme, encoded, ok := strings.Cut(strings.TrimSpace(value), " ")
	if !ok || !strings.EqualFold(scheme, "Basic") {
		return "", "", false
	}
	raw, err := base64.StdEncoding.DecodeString(strings.TrimSpace(encoded))
	if err != nil {
		return "", "", false
	}
	return strings.Cut(string(raw), ":")
}

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

// RoundTrip implements forwardproxy.Upstream: the request goes through one
// member.
func (g *Gateway) RoundTrip(req *http.Request) (*http.Response, error) {
	ctx, span := g.startSpan(req.Context(), "gateway.request", req.Method, req.URL.Host, req.Header)
	rt, resp, err := g.roundTripWithHeaders(req.WithContext(ctx))
	endSpan(span, rt, resp, err)
	return resp, err
}

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

// withMember is ctx naming the member the Transport sends to.
func withMember(ctx context.Context, m *Member) context.Context {
	return context.WithValue(ctx, memberKey{}, m)
}

// TunnelHeaders implements forwardproxy.TunnelHeaderReader: the session
// header is read on CONNECT too. The gateway writes its own CONNECT to the
// member, so the header never goes further.
func (g *Gateway) TunnelHeaders() []string { return []string{SessionHeader, BanHeader} }

// withHeaders is rt with the session of the session header, if any, and
// the ban reports of the username and the ban header.
func withHeaders(rt *route, sessions, banValues []string) (*route, []banReport, error) {
	if len(sessions) > 0 {
		var err error
		if rt, err = rt.withSessionHeader(sessions); err != nil {
			return nil, nil, err
		}
	}
	reps, err := reports(rt, banValues)
	return rt, reps, err
}

// DialTunnel implements forwardproxy.Upstream: a CONNECT through one
// member.
func (g *Gateway) DialTunnel(ctx context.Context, target string) (net.Conn, error) {
	ctx, span := g.startSpan(ctx, "gateway.tunnel", MethodConnect, target, nil)
	rt, c, err := g.dialTunnel(ctx, target)
	endSpan(span, rt, nil, err)
	return c, err
}

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
	host, err := destHost(target)
	if err != nil {
		return rt, nil, err
	}
	candidates, err := g.eligible(rt)
	if err != nil {
		return rt, nil, err
	}
	if candidates, err = g.withoutBanned(candidates, rt, host); err != nil {
		return rt, nil, err
	}
	// The client gets no byte before the tunnel is open, so every failed
	// attempt may go to another member.
	var tried []*Member
	var last error
	var lastMember *Member
	for attempts := 0; ; {
		m, release, wait := g.admitNext(rt, candidates, &tried, host, MethodConnect)
		if m == nil {
			if last != nil {
				return rt, nil, last
			}
			return rt, nil, limitRefusal(wait)
		}
		if last != nil {
			g.retried(lastMember, MethodConnect)
		}
		start := time.Now()
		c, err := g.connect(ctx, m, target)
		if err == nil {
			g.succeeded(m)
			attemptEvent(ctx, m, "ok")
			forwardproxy.AccessField(ctx, "member", m.String())
			if h := g.metrics.handlesOf(m); h != nil {
				h.latencyTun.Observe(time.Since(start).Seconds())
				c.ctx, c.handles = ctx, h
			}
			return rt, c.withRelease(release), nil
		}
		release()
		f, ok := errors.AsType[*attemptError](err)
		if !ok {
			return rt, nil, err
		}
		attemptEvent(ctx, m, f.cause)
		g.failed(m, f)
		attempts++
		last, lastMember = err, m
		if !f.member || attempts >= g.maxAttempts || ctx.Err() != nil {
			return rt, nil, err
		}
	}
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

// countBytes adds the bytes of the request or tunnel of ctx to a member's
// series; h may be nil.
func countBytes(ctx context.Context, h *memberHandles) {
	if h == nil {
		return
	}
	if up, down, ok := forwardproxy.ExchangeBytes(ctx); ok {
		h.up.Add(float64(up))
		h.down.Add(float64(down))
	}
}

// tunnelConn is the upstream end of a tunnel through a member. It keeps
// what the forward proxy's relay uses of the TCP connection
// (forwardproxy.RelayConn), and ends the tunnel's count on its member when
// closed.
type tunnelConn struct {
	forwardproxy.RelayConn
	early   []byte // read after the member's answer, returned first
	release func()
	mu      sync.Mutex
	ctx     context.Context
	handles *memberHandles // nil: no metrics
	closed  atomic.Bool
}

func newTunnelConn(c net.Conn, early []byte) *tunnelConn {
	tc := &tunnelConn{early: early}
	// The relay may read the socket itself once the early bytes are read.
	tc.RelayConn = forwardproxy.RelayConn{Conn: c, Ahead: tc.pending}
	return tc
}

// pending reports whether early bytes are still to be read.
func (c *tunnelConn) pending() bool {
	c.mu.Lock()
	defer c.mu.Unlock()
	return len(c.early) > 0
}

func (c *tunnelConn) withRelease(release func()) net.Conn {
	c.release = release
	return c
}

func (c *tunnelConn) Read(b []byte) (int, error) {
	c.mu.Lock()
	if len(c.early) > 0 {
		n := copy(b, c.early)
		c.early = c.early[n:]
		c.mu.Unlock()
		return n, nil
	}
	c.mu.Unlock()
	return c.Conn.Read(b)
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

// ProxyOptions are the forward proxy's settings in front of a Gateway.
type ProxyOptions struct {
	// AllowedSourceRanges are the clients served; empty: any client with
	// the gateway's credentials.
	AllowedSourceRanges []netip.Prefix
	// AllowOpen must be set to run without credentials and without
	// source ranges.
	AllowOpen bool
	// MaxConcurrent and IdleTimeout: see forwardproxy.Config.
	MaxConcurrent int
	IdleTimeout   time.Duration
	// Metrics and Log are the forward proxy's.
	Metrics *forwardproxy.Metrics
	Log     logr.Logger
	// AccessLog, when set, gets one line per request and tunnel at its
	// V(0) (forwardproxy.Config.AccessLog); otherwise they go to Log at
	// V(1).
	AccessLog logr.Logger
}

// NewProxy returns the forward proxy that serves g: everything in front of
// the members (source ranges, parser, caps, timeouts) is the product's
// forward proxy. It refuses an open gateway unless o.AllowOpen says so.
func NewProxy(g *Gateway, o ProxyOptions) (*forwardproxy.Proxy, error) {
	if g.auth == nil && len(o.AllowedSourceRanges) == 0 && !o.AllowOpen {
		return nil, errors.New("gateway: refusing to run an open gateway: set credentials or allowed source ranges")
	}
	return forwardproxy.New(forwardproxy.Config{
		Upstream: g, AllowedSourceRanges: o.AllowedSourceRanges, AllowOpen: o.AllowOpen,
		MaxConcurrent: o.MaxConcurrent, IdleTimeout: o.IdleTimeout, Metrics: o.Metrics, Log: o.Log, AccessLog: o.AccessLog, ProxyStatus: g.name,
		// The members apply their own egress policy, ports included; the
		// gateway reaches no destination itself.
		Egress: egress.Policy{ConnectPorts: []egress.PortRange{{From: 1, To: 65535}}},
	})
}
