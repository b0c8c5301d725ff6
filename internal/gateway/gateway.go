package gateway

import (
	"context"
	"crypto/sha256"
	"errors"
	"fmt"
	"net"
	"net/http"
	"net/url"
	"slices"
	"strings"
	"sync/atomic"
	"time"

	"github.com/go-logr/logr"
	"go.opentelemetry.io/otel/trace"
	"go.opentelemetry.io/otel/trace/noop"

	"github.com/egress-proxies/egress-proxies-operator/internal/forwardproxy"
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

// withMember is ctx naming the member the Transport sends to.
func withMember(ctx context.Context, m *Member) context.Context {
	return context.WithValue(ctx, memberKey{}, m)
}

// RoundTrip implements forwardproxy.Upstream: the request goes through one
// member.
func (g *Gateway) RoundTrip(req *http.Request) (*http.Response, error) {
	ctx, span := g.startSpan(req.Context(), "gateway.request", req.Method, req.URL.Host, req.Header)
	rt, resp, err := g.roundTripWithHeaders(req.WithContext(ctx))
	endSpan(span, rt, resp, err)
	return resp, err
}

// DialTunnel implements forwardproxy.Upstream: a CONNECT through one
// member.
func (g *Gateway) DialTunnel(ctx context.Context, target string) (net.Conn, error) {
	ctx, span := g.startSpan(ctx, "gateway.tunnel", MethodConnect, target, nil)
	rt, c, err := g.dialTunnel(ctx, target)
	endSpan(span, rt, nil, err)
	return c, err
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
