package forwardproxy

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httputil"
	"net/netip"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/go-logr/logr"
	"github.com/prometheus/client_golang/prometheus"

	"github.com/egress-proxies/egress-proxies-operator/internal/egress"
)

// Defaults for the zero values of Config's timeouts.
const (
	// DefaultDialTimeout bounds a dial to an upstream server.
	DefaultDialTimeout = 10 * time.Second
	// DefaultIdleTimeout is how long a CONNECT or upgraded (WebSocket)
	// tunnel may carry no bytes either way, and how long an idle upstream
	// keep-alive connection is kept.
	DefaultIdleTimeout = 5 * time.Minute
	// DefaultResponseHeaderTimeout is how long an upstream server may take
	// to send its response headers once it has the whole request.
	DefaultResponseHeaderTimeout = time.Minute
	// DefaultMaxConcurrent is how many requests and tunnels a Proxy
	// serves at once; more are answered 503.
	DefaultMaxConcurrent = 4096
)

// Config configures a Proxy. Its printed forms (fmt, logr, slog, JSON)
// never show the credentials.
type Config struct {
	// Username and Password are the Basic credentials that clients must
	// send in Proxy-Authorization. Both empty: no authentication. One
	// without the other is refused, and so is a username with a colon.
	Username, Password string
	// AllowedSourceRanges are the client addresses served; empty: any.
	AllowedSourceRanges []netip.Prefix
	// AllowOpen must be set to run without credentials and without
	// allowed source ranges, that is as an open proxy; New refuses such a
	// Config otherwise.
	AllowOpen bool
	// DialTimeout bounds each dial to an upstream server; zero means
	// DefaultDialTimeout.
	DialTimeout time.Duration
	// IdleTimeout closes a CONNECT or upgraded tunnel that carried no
	// bytes either way for that long, and idle upstream keep-alive
	// connections; zero means DefaultIdleTimeout.
	IdleTimeout time.Duration
	// ResponseHeaderTimeout bounds the wait for an upstream server's
	// response headers (504 past it); zero means
	// DefaultResponseHeaderTimeout.
	ResponseHeaderTimeout time.Duration
	// MaxConcurrent caps the requests being forwarded and the tunnels open
	// at once; past it requests are answered 503. Zero means
	// DefaultMaxConcurrent.
	MaxConcurrent int
	// Egress is the destination policy; its zero value refuses every
	// non-public address and CONNECT to ports other than
	// egress.DefaultConnectPorts.
	Egress egress.Policy
	// LocalAddr, when valid, is the source address of upstream
	// connections (a host with several addresses egresses from this one).
	LocalAddr netip.Addr
	// Resolver resolves upstream host names; nil means net.DefaultResolver.
	// Whatever it answers, each address is checked against Egress right
	// before it is dialed.
	Resolver Resolver
	// Metrics records requests, durations, bytes and open connections;
	// nil records nothing.
	Metrics *Metrics
	// Log receives the proxy's own messages, and one line per request
	// and tunnel at V(1) when AccessLog is not set.
	Log logr.Logger
	// AccessLog, when set, receives the line of each request and tunnel
	// as it ends, at its V(0): its start time, the client's address, the
	// user (when the credentials checked out), the destination host:port,
	// the status, the bytes each way, the duration and the error, if any.
	// It never holds a credential.
	AccessLog logr.Logger
	// Upstream, when set, forwards requests and opens tunnels in place of
	// direct dials, and checks credentials in place of Username and
	// Password (see Upstream).
	Upstream Upstream
	// ProxyStatus, when set, is the proxy's name in the RFC 9209
	// Proxy-Status header of every answer it gives itself (a token such
	// as egress-gateway); empty: no such header.
	ProxyStatus string
}

// String describes c without its credentials.
func (c Config) String() string {
	auth := "none"
	if c.Username != "" || c.Password != "" {
		auth = "basic " + redacted
	}
	return fmt.Sprintf("forwardproxy.Config{Auth: %s, AllowedSourceRanges: %v, AllowOpen: %t, DialTimeout: %s, IdleTimeout: %s, ResponseHeaderTimeout: %s, MaxConcurrent: %d, Egress: %s}",
		auth, c.AllowedSourceRanges, c.AllowOpen, c.DialTimeout, c.IdleTimeout, c.ResponseHeaderTimeout, c.MaxConcurrent, c.Egress)
}

// Format implements fmt.Formatter, so that every verb, %#v and %+v
// included, prints String and never the credentials.
func (c Config) Format(f fmt.State, _ rune) { _, _ = io.WriteString(f, c.String()) }

// MarshalJSON implements json.Marshaler, for JSON encoders that would
// otherwise write the fields (slog's JSONHandler). Loggers that use
// fmt.Stringer (logr's funcr, zap) print String.
func (c Config) MarshalJSON() ([]byte, error) { return json.Marshal(c.String()) }

const redacted = "[redacted]"

// Proxy is an HTTP forward proxy; see the package documentation. It is an
// http.Handler: serve it with Serve, which also drains CONNECT tunnels.
type Proxy struct {
	auth        *basicAuth // nil: no authentication
	ranges      []netip.Prefix
	egress      *egressPolicy
	dialer      *net.Dialer
	resolver    Resolver
	slots       chan struct{} // one value per request or tunnel in flight
	dialTimeout time.Duration
	idleTimeout time.Duration
	metrics     *Metrics
	access      logr.Logger      // where the lines of finish go
	username    string           // for the access log; "" without authentication
	transport   *http.Transport  // upgrades only
	origins     *originTransport // every other plain request
	forwarder   *httputil.ReverseProxy
	upstream    Upstream // nil: destinations are dialed directly
	proxyStatus string   // the name in Proxy-Status, "" for none
	// tunnelHeaders are the CONNECT header fields the Upstream reads
	// (TunnelHeaderReader), canonical names.
	tunnelHeaders []string
	// describeError renders a request's error for the access log.
	describeError func(error) string
}

// New checks cfg and builds a Proxy.
func New(cfg Config) (*Proxy, error) {
	if (cfg.Username == "") != (cfg.Password == "") {
		return nil, errors.New("forwardproxy: username and password must be set together")
	}
	if strings.Contains(cfg.Username, ":") {
		return nil, errors.New("forwardproxy: the username must not contain a colon (Basic authentication cannot carry it)")
	}
	if cfg.Username == "" && cfg.Upstream == nil && len(cfg.AllowedSourceRanges) == 0 && !cfg.AllowOpen {
		return nil, errors.New("forwardproxy: refusing to run an open proxy: set credentials or allowed source ranges, or AllowOpen to run one on purpose")
	}
	if cfg.DialTimeout < 0 || cfg.IdleTimeout < 0 || cfg.ResponseHeaderTimeout < 0 || cfg.MaxConcurrent < 0 {
		return nil, errors.New("forwardproxy: timeouts and limits must not be negative")
	}
	if err := cfg.Egress.Validate(); err != nil {
		return nil, fmt.Errorf("forwardproxy: %w", err)
	}
	if cfg.ProxyStatus != "" && !validProxyStatusName(cfg.ProxyStatus) {
		return nil, fmt.Errorf("forwardproxy: the Proxy-Status name %q is not a token", cfg.ProxyStatus)
	}
	p := &Proxy{
		egress:        newEgress(cfg.Egress),
		resolver:      cfg.Resolver,
		dialTimeout:   cfg.DialTimeout,
		idleTimeout:   cfg.IdleTimeout,
		metrics:       cfg.Metrics,
		access:        cfg.AccessLog,
		proxyStatus:   cfg.ProxyStatus,
		describeError: func(err error) string { return err.Error() },
	}
	if p.access.GetSink() == nil {
		p.access = cfg.Log.V(1)
	}
	if cfg.Username != "" {
		p.auth = newBasicAuth(cfg.Username, cfg.Password)
		p.username = cfg.Username
	}
	for _, r := range cfg.AllowedSourceRanges {
		if !r.IsValid() {
			return nil, fmt.Errorf("forwardproxy: invalid allowed source range %v", r)
		}
		if r.Addr().Is4In6() && r.Bits() >= 96 {
			// Clients' IPv4-mapped addresses are compared as IPv4.
			r = netip.PrefixFrom(r.Addr().Unmap(), r.Bits()-96)
		}
		p.ranges = append(p.ranges, r.Masked())
	}
	if p.resolver == nil {
		p.resolver = net.DefaultResolver
	}
	// Every upstream connection, for HTTP and CONNECT alike, is dialed
	// here, and ControlContext checks the address it connects to. No TCP
	// keep-alive: the idle timeout already ends silent connections, and
	// the three socket options it sets cost a few percent of a tunnel.
	p.dialer = &net.Dialer{ControlContext: p.egress.control, KeepAlive: -1}
	if cfg.LocalAddr.IsValid() {
		p.dialer.LocalAddr = &net.TCPAddr{IP: cfg.LocalAddr.AsSlice(), Zone: cfg.LocalAddr.Zone()}
	}
	maxConcurrent := cfg.MaxConcurrent
	if maxConcurrent == 0 {
		maxConcurrent = DefaultMaxConcurrent
	}
	p.slots = make(chan struct{}, maxConcurrent)
	responseHeaderTimeout := cfg.ResponseHeaderTimeout
	if responseHeaderTimeout == 0 {
		responseHeaderTimeout = DefaultResponseHeaderTimeout
	}
	if p.dialTimeout == 0 {
		p.dialTimeout = DefaultDialTimeout
	}
	if p.idleTimeout == 0 {
		p.idleTimeout = DefaultIdleTimeout
	}
	// The transport of requests that ask for a protocol upgrade (it hands
	// ReverseProxy the connection it switches); every other plain request
	// goes through originTransport, on the handler's goroutine.
	p.transport = &http.Transport{
		// Proxy stays nil: never chain to the environment's proxy.
		DialContext: p.dialIdle,
		// Pass the client's Accept-Encoding and the origin's encoding
		// through untouched.
		DisableCompression:    true,
		MaxIdleConns:          maxIdleOrigin,
		IdleConnTimeout:       p.idleTimeout,
		ResponseHeaderTimeout: responseHeaderTimeout,
		ExpectContinueTimeout: time.Second,
	}
	p.origins = &originTransport{
		dial:                  p.dialOrigin,
		responseHeaderTimeout: responseHeaderTimeout,
		idleTimeout:           p.idleTimeout,
		upgrades:              p.transport,
	}
	p.forwarder = &httputil.ReverseProxy{
		// The request URL is already the absolute upstream URL. Rewrite
		// (rather than Director) also drops client-sent X-Forwarded-*
		// and Forwarded headers and adds none; ReverseProxy strips the
		// hop-by-hop headers, Proxy-Authorization and Proxy-Connection
		// included, which are deleted here once more on purpose.
		Rewrite: func(pr *httputil.ProxyRequest) {
			pr.Out.Header.Del("Proxy-Authorization")
			pr.Out.Header.Del("Proxy-Connection")
		},
		Transport: p.origins,
		// Without a pool, ReverseProxy allocates a 32 KiB buffer for
		// every response body: most of the garbage per request.
		BufferPool:    bufferPool{},
		FlushInterval: -1,
		ErrorHandler:  p.upstreamError,
	}
	p.useUpstream(cfg.Upstream)
	return p, nil
}

// CloseIdleConnections closes the idle keep-alive connections to upstream
// servers.
func (p *Proxy) CloseIdleConnections() {
	p.origins.CloseIdleConnections()
	p.transport.CloseIdleConnections()
}

// dial connects to an upstream server, within the dial timeout and the
// egress policy.
func (p *Proxy) dial(ctx context.Context, network, addr string) (net.Conn, error) {
	ctx, cancel := context.WithTimeout(ctx, p.dialTimeout)
	defer cancel()
	return dialChecked(ctx, p.dialer, p.resolver, network, addr)
}

// dialOrigin connects to an origin for plain requests: its connections end
// after the idle timeout without traffic, which bounds upgraded (WebSocket)
// tunnels and responses that stall.
func (p *Proxy) dialOrigin(ctx context.Context, addr string) (*idleConn, error) {
	c, err := p.dial(ctx, "tcp", addr)
	if err != nil {
		return nil, err
	}
	return newIdleConn(c, newActivity(p.idleTimeout)), nil
}

// dialIdle is dialOrigin for the upgrades' http.Transport.
func (p *Proxy) dialIdle(ctx context.Context, _, addr string) (net.Conn, error) {
	c, err := p.dialOrigin(ctx, addr)
	if err != nil {
		return nil, err // not a nil *idleConn in an interface
	}
	return c, nil
}

// exchange is what is known of one request, for its log line and metrics.
type exchange struct {
	start    time.Time
	method   string   // MethodConnect or MethodHTTP
	verb     string   // the request's method
	host     string   // the destination's host:port, without userinfo
	source   string   // the client's address, or
	remote   net.Addr // the client's address, made a string only to log it
	user     string   // the username, once the credentials checked out
	status   int
	err      error
	up, down atomic.Int64
	// conn is the client's connection on the net/http path, when Serve
	// runs the Proxy; nil otherwise.
	conn net.Conn
	// sink takes a plain answer's body straight from an origin's socket
	// (originBody): the response writer, when the client's connection is
	// Serve's; nil otherwise.
	sink bodySink
	// proxyStatus is the Proxy's name for Proxy-Status, "" for none.
	proxyStatus string
	// detached: the exchange is a tunnel that runs on after ServeHTTP
	// returned (serveLateConnect), and its goroutine finishes it.
	detached bool
	// fields are the Upstream's own access log fields (AccessField).
	fieldsMu sync.Mutex
	fields   []any
}

// refusal is an answer other than 200, with at most one header of its own
// besides Proxy-Status.
type refusal struct {
	code       int
	msg        string
	key, value string
	// proxyError is its RFC 9209 error type; "" means the one its code
	// implies (proxyErrorOf).
	proxyError string
}

// answer records r as the exchange's status and returns the header fields
// of its answer besides the framing, in the order they are written: the one
// place that decides what a refusal says, whichever connection it goes to
// (refuseWith, refuseConn). Every answer the proxy gives itself, rather
// than relays, closes its connection (Connection: close), so that a client
// that is refused, without credentials for one, cannot keep a connection
// slot with keep-alive.
func (x *exchange) answer(r refusal) [][2]string {
	x.status = r.code
	fields := make([][2]string, 0, 5)
	if r.key != "" {
		fields = append(fields, [2]string{r.key, r.value})
	}
	if ps := proxyStatus(x.proxyStatus, r); ps != "" {
		fields = append(fields, [2]string{ProxyStatusHeader, ps})
	}
	return append(fields, [2]string{"Content-Type", "text/plain; charset=utf-8"}, [2]string{"X-Content-Type-Options", "nosniff"},
		[2]string{"Connection", "close"})
}

// refuseWith writes the answer of r through net/http's w. Under Serve the
// connection's slot is given back as soon as the answer is written (see
// countedConn).
func (x *exchange) refuseWith(w http.ResponseWriter, r refusal) {
	h := w.Header()
	h.Del("Content-Length")
	for _, f := range x.answer(r) {
		h.Set(f[0], f[1])
	}
	if c, ok := x.conn.(refusedConn); ok {
		c.refused()
	}
	w.WriteHeader(r.code)
	_, _ = io.WriteString(w, r.msg+"\n")
}

// The refusals that both paths of a request give.
var (
	refuseSource = refusal{code: http.StatusForbidden, msg: "source address not allowed"}
	refuseAuth   = refusal{code: http.StatusProxyAuthRequired, msg: "proxy authentication required",
		key: "Proxy-Authenticate", value: `Basic realm="` + realm + `"`}
	refuseFull = refusal{code: http.StatusServiceUnavailable, msg: "the proxy is at its limit of concurrent requests and tunnels; retry later",
		key: "Retry-After", value: "1"}
)

type exchangeKey struct{}

// ServeHTTP implements http.Handler.
func (p *Proxy) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	x := &exchange{start: time.Now(), method: MethodHTTP, verb: r.Method, host: destination(r), source: r.RemoteAddr, proxyStatus: p.proxyStatus}
	x.conn, _ = r.Context().Value(connKey{}).(net.Conn)
	if r.Method == http.MethodConnect {
		x.method = MethodConnect
	}
	// Deferred: it runs also when ReverseProxy aborts a response with
	// http.ErrAbortHandler. A tunnel that goes on after the handler
	// returned finishes its exchange itself.
	defer func() {
		if !x.detached {
			p.finish(x)
		}
	}()
	if r.Method == http.MethodConnect {
		// Serve reads a CONNECT that opens a connection with its own
		// parser; this one net/http read, after another request on the
		// connection or under another server. It is admitted once it is
		// known to be a well-formed CONNECT.
		p.serveLateConnect(w, r, x)
		return
	}
	ctx, ref, ok := p.admit(r.Context(), x.conn, r.Header.Get("Proxy-Authorization"), x)
	if !ok {
		x.refuseWith(w, ref)
		return
	}
	defer p.release()
	p.forward(w, r.WithContext(ctx), x)
}

// authenticate checks a request's Proxy-Authorization value, if the Proxy
// has credentials, and records the user for the access log. The user a
// refused client sent is not recorded: it may be a password typed in the
// wrong field.
func (p *Proxy) authenticate(value string, x *exchange) bool {
	if p.auth == nil {
		return true
	}
	if !p.auth.check(value) {
		return false
	}
	x.user = p.username
	return true
}

// destination is the host:port a request is for, for the access log:
// r.Host never holds the userinfo of an absolute URL; an http:// URL
// without a port goes to port 80.
func destination(r *http.Request) string {
	if r.URL.Scheme != "http" || r.Host == "" {
		return r.Host
	}
	if _, _, err := net.SplitHostPort(r.Host); err == nil {
		return r.Host
	}
	return net.JoinHostPort(strings.TrimSuffix(strings.TrimPrefix(r.Host, "["), "]"), "80")
}

// acquire takes a slot for a request or tunnel without waiting; false means
// the Proxy is full.
func (p *Proxy) acquire() bool {
	select {
	case p.slots <- struct{}{}:
		return true
	default:
		return false
	}
}

func (p *Proxy) release() { <-p.slots }

// deniedHeader carries, in the refusal of a CONNECT to a port the egress
// policy does not allow, the word port: that refusal is decided from the
// request alone and tells nothing of the destination.
const deniedHeader = "X-Egress-Denied"

// upstreamErrorHeader carries, in a 502 or 504 for a destination the policy
// allows, a word for what went wrong: refused, reset, unreachable, timeout
// or failed.
const upstreamErrorHeader = "X-Upstream-Error"

// deniedRefusal is the 403 for a destination the egress policy refuses.
func deniedRefusal(d *DeniedError) refusal {
	return refusal{code: http.StatusForbidden, msg: "forbidden by the egress policy: " + strings.TrimPrefix(d.Error(), "egress policy: "),
		key: deniedHeader, value: d.Reason, proxyError: ProxyErrorHTTPRequestDenied}
}

// refuseDestination is the one answer for every destination that the
// egress policy refuses by its address or whose name does not resolve to
// an address (the policy's reason, a DNS error, no address): a client
// cannot tell from it whether an internal name exists, nor what kind of
// range it resolves to. The reason is in the log line.
var refuseDestination = refusal{code: http.StatusForbidden,
	msg:        "forbidden by the egress policy: the destination is not allowed, or its name does not resolve to an allowed address",
	proxyError: ProxyErrorDestinationIPProhibited}

// finish records the request's metrics and logs its line. It runs deferred,
// also when ReverseProxy aborts a response with http.ErrAbortHandler.
func (p *Proxy) finish(x *exchange) {
	d := time.Since(x.start)
	if p.metrics != nil {
		p.metrics.Requests.WithLabelValues(x.method, strconv.Itoa(x.status)).Inc()
		p.metrics.RequestDuration.WithLabelValues(x.method).Observe(d.Seconds())
	}
	if p.access.Enabled() {
		// Proxy-Authorization is not logged, nor the user a refused
		// client sent.
		client := x.source
		if client == "" && x.remote != nil {
			client = x.remote.String()
		}
		kv := []any{"time", x.start.UTC().Format(time.RFC3339Nano), "client", client, "user", x.user,
			"method", x.verb, "destination", x.host, "status", x.status,
			"bytesUp", x.up.Load(), "bytesDown", x.down.Load(), "duration", d.String()}
		if x.err != nil {
			kv = append(kv, "error", p.describeError(x.err))
		}
		x.fieldsMu.Lock()
		kv = append(kv, x.fields...)
		x.fieldsMu.Unlock()
		p.access.Info("request", kv...)
	}
}

func (p *Proxy) active(delta float64) {
	if p.metrics != nil {
		p.metrics.ActiveConnections.Add(delta)
	}
}

// counter returns the function that counts n bytes in direction up or down.
func (p *Proxy) counter(x *exchange, up bool) func(n int) {
	total, metric := &x.down, prometheus.Counter(nil)
	if up {
		total = &x.up
	}
	if p.metrics != nil {
		metric = p.metrics.down
		if up {
			metric = p.metrics.up
		}
	}
	return func(n int) {
		if n <= 0 {
			return
		}
		total.Add(int64(n))
		if metric != nil {
			metric.Add(float64(n))
		}
	}
}

// forward relays an absolute-form request to its origin.
func (p *Proxy) forward(w http.ResponseWriter, r *http.Request, x *exchange) {
	if !r.URL.IsAbs() || r.URL.Host == "" {
		x.refuseWith(w, refusal{code: http.StatusBadRequest, msg: "not a proxy request: the request target must be an absolute http:// URL"})
		return
	}
	if r.URL.Scheme != "http" {
		x.refuseWith(w, refusal{code: http.StatusBadRequest, msg: "only http:// URLs are forwarded; use CONNECT for anything else"})
		return
	}
	p.active(1)
	defer p.active(-1)
	ctx := r.Context()
	if srv, ok := ctx.Value(serverKey{}).(context.Context); ok {
		// net/http cancels a request's context as soon as the client's
		// connection reads EOF, which is also what a client that shut only
		// its write side looks like; that client still waits for the
		// answer. So the upstream request ends with the server (the end of
		// Serve's drain), with the response header timeout, or when
		// writing the response to a client that is really gone fails.
		detached, cancel := context.WithCancel(context.WithoutCancel(ctx))
		defer cancel()
		defer context.AfterFunc(srv, cancel)() //nolint:contextcheck // bound to the server's context on purpose, see above.
		ctx = detached
	}
	out := r.WithContext(context.WithValue(ctx, exchangeKey{}, x))
	if r.Body != nil && r.Body != http.NoBody {
		out.Body = &countingBody{ReadCloser: r.Body, count: p.counter(x, true)}
	}
	sw := &statusWriter{ResponseWriter: w, x: x, count: p.counter(x, false)}
	if x.conn != nil {
		x.sink = sw
	}
	p.forwarder.ServeHTTP(sw, out)
}

// upstreamError answers a request whose upstream round trip failed.
func (p *Proxy) upstreamError(w http.ResponseWriter, r *http.Request, err error) {
	x, ok := r.Context().Value(exchangeKey{}).(*exchange)
	if !ok {
		x = &exchange{proxyStatus: p.proxyStatus}
	}
	x.err = err
	x.refuseWith(w, upstreamRefusal(err))
}

// upstreamRefusal is the answer to a request whose upstream could not be
// reached or did not answer: refuseDestination when the egress policy
// refused the address or the name did not resolve, the port refusal for a
// CONNECT port, and for a destination the policy allows 504 on a timeout,
// 502 otherwise, with a word for the cause in X-Upstream-Error.
func upstreamRefusal(err error) refusal {
	if re, ok := isRefused(err); ok {
		return re.refusal()
	}
	if d, ok := isDenied(err); ok {
		if d.Reason == egress.ReasonPort {
			return deniedRefusal(d)
		}
		return refuseDestination
	}
	if _, ok := errors.AsType[*net.DNSError](err); ok {
		return refuseDestination
	}
	if ne, ok := errors.AsType[net.Error](err); ok && ne.Timeout() {
		return refusal{code: http.StatusGatewayTimeout, msg: "gateway timeout: the upstream server did not answer in time",
			key: upstreamErrorHeader, value: "timeout", proxyError: timeoutErrorOf(err)}
	}
	cause, perr := "failed", ProxyErrorDestinationUnavailable
	switch {
	case errors.Is(err, syscall.ECONNREFUSED):
		cause, perr = "refused", ProxyErrorConnectionRefused
	case errors.Is(err, syscall.ECONNRESET):
		cause, perr = "reset", ProxyErrorConnectionTerminated
	case errors.Is(err, syscall.EHOSTUNREACH), errors.Is(err, syscall.ENETUNREACH):
		cause, perr = "unreachable", ProxyErrorDestinationIPUnroutable
	}
	return refusal{code: http.StatusBadGateway, msg: "bad gateway: the upstream server could not be reached",
		key: upstreamErrorHeader, value: cause, proxyError: perr}
}

// checkTarget checks a CONNECT target: host:port, and a port the egress
// policy allows (the address is checked when it is dialed).
func (p *Proxy) checkTarget(target string, x *exchange) (refusal, bool) {
	_, port, err := net.SplitHostPort(target)
	if err != nil || port == "" {
		return refusal{code: http.StatusBadRequest, msg: msgConnectTarget}, false
	}
	if d := p.egress.checkConnectPort(port); d != nil {
		x.err = d
		return deniedRefusal(d), false
	}
	return refusal{}, true
}

// established answers 200 on client and returns the tunnel to run, or
// nil when the answer could not be written.
func (p *Proxy) established(client, upstream net.Conn, early []byte, x *exchange) *tunnel {
	x.status = http.StatusOK
	if _, err := io.WriteString(client, "HTTP/1.1 200 Connection established\r\n\r\n"); err != nil {
		_ = client.Close()
		_ = upstream.Close()
		x.err = err
		return nil
	}
	p.active(1)
	t := &tunnel{p: p, pair: &pair{client: client, upstream: upstream}, early: early, x: x}
	t.client, t.upstream = p.newTunnelConns(t.pair)
	return t
}

// tunnel is an established CONNECT tunnel, ready to run.
type tunnel struct {
	p                *Proxy
	pair             *pair
	client, upstream *idleConn // pair's, with the idle timeout
	early            []byte    // bytes the client sent after its request, for upstream
	x                *exchange
}

// run splices the tunnel until it ends.
func (t *tunnel) run() {
	defer t.p.active(-1)
	t.x.err = t.p.splice(t.pair, t.client, t.upstream, t.early, t.x)
}

// countingBody counts the bytes read from a request body.
type countingBody struct {
	io.ReadCloser
	count func(int)
}

func (b *countingBody) Read(buf []byte) (int, error) {
	n, err := b.ReadCloser.Read(buf)
	b.count(n)
	return n, err
}

// statusWriter records the final status and counts the body bytes written.
// ReverseProxy flushes through FlushError (http.ResponseController).
type statusWriter struct {
	http.ResponseWriter
	x     *exchange
	count func(int)
	// mu keeps ReadFrom, called by an origin's body within ReverseProxy's
	// copy, apart from the flush that ReverseProxy's first timer runs on
	// a goroutine of its own: net/http's response writer is not safe for
	// concurrent use. Write needs no lock: ReverseProxy holds its own
	// around Write and that flush.
	mu sync.Mutex
}

func (s *statusWriter) WriteHeader(code int) {
	if s.x.status == 0 && code >= http.StatusOK {
		s.x.status = code
	}
	s.ResponseWriter.WriteHeader(code)
}

func (s *statusWriter) Write(b []byte) (int, error) {
	if s.x.status == 0 {
		s.x.status = http.StatusOK
	}
	n, err := s.ResponseWriter.Write(b)
	s.count(n)
	return n, err
}

// Hijack is called by ReverseProxy for a 101 Switching Protocols response
// (WebSocket), which it then writes to the connection itself.
func (s *statusWriter) Hijack() (net.Conn, *bufio.ReadWriter, error) {
	c, brw, err := http.NewResponseController(s.ResponseWriter).Hijack()
	if err == nil && s.x.status == 0 {
		s.x.status = http.StatusSwitchingProtocols
	}
	return c, brw, err
}

func (s *statusWriter) Unwrap() http.ResponseWriter { return s.ResponseWriter }

// bodySink is where an origin's body hands its bulk: the client's response
// writer.
type bodySink interface {
	io.ReaderFrom
	// sending reports whether the answer's head went to the client: only
	// then are the bytes an origin's body reads the client's. Before, a
	// body may be read and dropped (a gateway's failed attempt).
	sending() bool
}

func (s *statusWriter) sending() bool { return s.x.status != 0 }

// FlushError implements what http.ResponseController's Flush looks for.
func (s *statusWriter) FlushError() error {
	s.mu.Lock()
	defer s.mu.Unlock()
	return http.NewResponseController(s.ResponseWriter).Flush()
}

// ReadFrom writes r's bytes as the body through net/http's own ReadFrom,
// which hands an io.LimitedReader of a *net.TCPConn to the client's socket
// (countedConn.ReadFrom): splice(2), the bytes never copied through the
// process.
func (s *statusWriter) ReadFrom(r io.Reader) (int64, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.x.status == 0 {
		s.x.status = http.StatusOK
	}
	n, err := readFromWith(s.ResponseWriter, r)
	s.count(int(n))
	return n, err
}
