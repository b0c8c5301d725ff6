package setup

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/netip"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/go-logr/logr"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"
	"go.opentelemetry.io/otel/trace"
	"k8s.io/client-go/dynamic"
	"k8s.io/client-go/kubernetes"

	"github.com/egress-proxies/egress-proxies-operator/api/v1alpha1/published"
	"github.com/egress-proxies/egress-proxies-operator/internal/egress"
	"github.com/egress-proxies/egress-proxies-operator/internal/forwardproxy"
	"github.com/egress-proxies/egress-proxies-operator/internal/gateway"
	"github.com/egress-proxies/egress-proxies-operator/internal/gateway/gatewaywatch"
	"github.com/egress-proxies/egress-proxies-operator/internal/proxycmd"
	"github.com/egress-proxies/egress-proxies-operator/internal/tracing"
)

// GatewayClients are the API clients of a gateway replica: the member
// watch's (Core) and the administrator's bans watch's (Dynamic), both as
// the gateway's ServiceAccount in a pod.
type GatewayClients struct {
	Core    kubernetes.Interface
	Dynamic dynamic.Interface
}

// GatewayEnv is what a gateway replica takes from where it runs, beside
// its flags.
type GatewayEnv struct {
	// Getenv reads the environment (os.Getenv in a pod): the gateway's
	// credentials and namespace (published.EnvGatewayUsername, EnvPassword,
	// EnvNamespace) and the OTEL_* variables.
	Getenv func(string) string
	// Clients returns the API clients; it is called once the flags are
	// known to be good.
	Clients func() (GatewayClients, error)
	// Log is the replica's logger.
	Log logr.Logger
	// Version names the build in spans.
	Version string
	// Ready, when set, is called once the replica listens.
	Ready func(GatewayReplica)
	// Now, when set, is the replica's clock (a test moves it to end a
	// cool-down); nil means time.Now.
	Now func() time.Time
}

// GatewayReplica is a running replica: where it listens and the members
// it sends to.
type GatewayReplica struct {
	// Addr is the gateway's address (--listen), AdminAddr its admin
	// server's (--admin-listen).
	Addr, AdminAddr net.Addr
	// Members is the set its member watch keeps.
	Members *gateway.Set
}

// gatewayOptions are the gateway subcommand's flags and what parsing them
// gives.
type gatewayOptions struct {
	listen, adminListen string
	namespace, poolList string
	gateway             string
	strategy            string
	allowedRanges       string
	dialTimeout         time.Duration
	idleTimeout         time.Duration
	maxConcurrent       int
	serve               *forwardproxy.ServeOptions
	maxAttempts         int
	ejectAfter          int
	ejectFor            time.Duration
	maxPerMember        int
	hostPerMinute       int
	banStatusList       string
	banFor              time.Duration
	accessLog           bool

	// Parsed from the flags and the environment.
	pools       []string
	banStatuses []int
	ranges      []netip.Prefix
	user, pass  string
}

// RunGateway runs one replica of a pool gateway (internal/gateway) as
// `egress-proxies-operator gateway <args>` does in a ProxyGateway's pod,
// until ctx is done; then it drains and returns nil. The binary, the demo
// and the tests that put a gateway in front of real members all run it, so
// that they run the wiring the Deployment runs: its flags and their
// defaults, the member and bans watches, the admin server, and the order
// in which they stop (the watches and the admin server outlive the drain,
// so that draining tunnels keep their members and /metrics shows the
// drain). Each step is a function of its own, in this order.
func RunGateway(ctx context.Context, args []string, env GatewayEnv) error {
	o, err := parseGatewayFlags(args, env.Getenv)
	if err != nil {
		return err
	}
	reg, gm, fm, err := gatewayMetrics()
	if err != nil {
		return err
	}
	// Spans per request and tunnel when the OTEL_* variables ask for
	// them, as for the operator.
	tracer, shutdownTracing, err := tracing.Setup(ctx, env.Getenv, env.Version)
	if err != nil {
		return fmt.Errorf("gateway: tracing: %w", err)
	}
	defer func() {
		flushCtx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 5*time.Second)
		defer cancel()
		if err := shutdownTracing(flushCtx); err != nil {
			env.Log.Error(err, "flushing spans")
		}
	}()
	// Ejections become events once the API clients exist (below).
	var recorded atomic.Pointer[gatewayEvents]
	onEject := func(m *gateway.Member, cause string, until time.Time) {
		if ev := recorded.Load(); ev != nil {
			ev.ejected(m, cause, until, o.ejectAfter)
		}
	}
	set := gateway.NewSet()
	g, p, err := newGatewayProxy(o, env, set, tracer, gm, fm, onEject)
	if err != nil {
		return err
	}
	clients, err := env.Clients()
	if err != nil {
		return fmt.Errorf("gateway: reaching the API server: %w", err)
	}
	// Events outlive the drain, as the watches do: a member may be
	// ejected while requests drain.
	eventsCtx, stopEvents := context.WithCancel(context.WithoutCancel(ctx))
	defer stopEvents()
	ev, err := startGatewayEvents(eventsCtx, clients.Core, o.namespace, o.gateway)
	if err != nil {
		return fmt.Errorf("gateway: recording events: %w", err)
	}
	defer ev.stop()
	recorded.Store(ev)

	ln, adminLn, err := listenGateway(ctx, o)
	if err != nil {
		return err
	}
	env.Log.Info("gateway listening", "listen", ln.Addr().String(), "admin", adminLn.Addr().String(), "namespace", o.namespace,
		"pools", o.pools, "strategy", o.strategy, "auth", map[bool]string{true: "basic", false: "none"}[o.user != ""],
		"allowedSourceRanges", fmt.Sprint(o.ranges))
	if env.Ready != nil {
		env.Ready(GatewayReplica{Addr: ln.Addr(), AdminAddr: adminLn.Addr(), Members: set})
	}
	err = serveGateway(ctx, o, clients, env.Log, g, set, gm, p, ln, adminLn, gatewayAdminHandler(reg, set))
	env.Log.Info("gateway stopped")
	return err
}

// parseGatewayFlags reads the flags and the credentials of getenv, and
// refuses what would not serve or would serve everyone.
func parseGatewayFlags(args []string, getenv func(string) string) (gatewayOptions, error) {
	var o gatewayOptions
	fs := flag.NewFlagSet("gateway", flag.ContinueOnError)
	fs.SetOutput(io.Discard)
	fs.StringVar(&o.listen, published.GatewayFlagListen, ":3128", "Address of the gateway.")
	fs.StringVar(&o.adminListen, published.GatewayFlagAdminListen, ":9090", "Address of /healthz, /readyz (ready once there are members) and /metrics.")
	fs.StringVar(&o.namespace, "namespace", getenv(published.EnvPodNamespace), "Namespace of the pools (default: $"+published.EnvPodNamespace+").")
	fs.StringVar(&o.gateway, published.GatewayFlagGateway, "", "The ProxyGateway whose spec.bans (an administrator's bans, kubectl egress ban) the gateway honours; empty: none.")
	fs.StringVar(&o.poolList, published.GatewayFlagPools, "", "Comma-separated ProxyPools whose Serving members the gateway sends to (their Secrets <pool>-proxies).")
	fs.StringVar(&o.strategy, published.GatewayFlagStrategy, string(gateway.RoundRobin), "How a member is picked: roundRobin, random or leastConnections.")
	fs.StringVar(&o.allowedRanges, published.GatewayFlagAllowedSourceRanges, "", "Comma-separated CIDRs of the clients served; required without credentials.")
	fs.DurationVar(&o.dialTimeout, "dial-timeout", gateway.DefaultDialTimeout, "Timeout of a dial to a member and of its answer to CONNECT.")
	fs.DurationVar(&o.idleTimeout, "idle-timeout", forwardproxy.DefaultIdleTimeout, "A tunnel, or a member's connection for plain requests, without traffic for that long is closed.")
	fs.IntVar(&o.maxConcurrent, "max-concurrent", forwardproxy.DefaultMaxConcurrent, "Requests and tunnels served at once; more get 503.")
	o.serve = proxycmd.ServeFlags(fs)
	fs.IntVar(&o.maxAttempts, published.GatewayFlagMaxAttempts, gateway.DefaultMaxAttempts, "Members one request or tunnel may try when a member fails (1: no failover).")
	fs.IntVar(&o.ejectAfter, published.GatewayFlagEjectAfter, gateway.DefaultEjectAfter, "Member failures in a row that eject a member for --eject-for.")
	fs.DurationVar(&o.ejectFor, published.GatewayFlagEjectFor, gateway.DefaultEjectFor, "How long an ejected member gets no new request or tunnel.")
	fs.IntVar(&o.maxPerMember, published.GatewayFlagMaxPerMember, gateway.DefaultMaxPerMember, "Requests and tunnels one member carries at once; when every member is at it, 429.")
	fs.IntVar(&o.hostPerMinute, published.GatewayFlagHostPerMinute, 0, "When set, requests and tunnels per minute through one member to one destination host; past it, as past --max-per-member.")
	fs.StringVar(&o.banStatusList, published.GatewayFlagBanStatuses, "429", "Comma-separated answers of a destination that ban the member from that host for --ban-for (such as 429,403).")
	fs.BoolVar(&o.accessLog, "access-log", true, "Log one line per request and tunnel at the default level (time, client, destination, status, bytes, duration, member; never a credential); false: only at -v 1.")
	fs.DurationVar(&o.banFor, published.GatewayFlagBanFor, gateway.DefaultBanFor, "How long a banned member gets no request or tunnel to the host that banned it.")
	if err := proxycmd.ParseSubcommand(fs, args, "egress-proxies-operator gateway --pools a,b [flags]"); err != nil {
		return o, err
	}
	if err := proxycmd.CheckServeFlags(o.serve); err != nil {
		return o, fmt.Errorf("gateway: %w", err)
	}
	for p := range strings.SplitSeq(o.poolList, ",") {
		if p = strings.TrimSpace(p); p != "" {
			o.pools = append(o.pools, p)
		}
	}
	if len(o.pools) == 0 || o.namespace == "" {
		return o, errors.New("gateway: --pools and --namespace (or $" + published.EnvPodNamespace + ") are required")
	}
	var err error
	if o.banStatuses, err = parseStatuses(o.banStatusList); err != nil {
		return o, fmt.Errorf("gateway: --ban-statuses: %w", err)
	}
	if o.ranges, err = egress.ParsePrefixes(o.allowedRanges); err != nil {
		return o, fmt.Errorf("gateway: --allowed-source-ranges: %w", err)
	}
	o.user, o.pass = getenv(published.EnvGatewayUsername), getenv(published.EnvGatewayPassword)
	if o.user == "" && len(o.ranges) > 0 {
		// Without credentials the ranges are all that keeps it closed,
		// with the same bound as a proxy's.
		if err := egress.CheckOpenSources(o.ranges); err != nil {
			return o, fmt.Errorf("gateway: refusing to run an open gateway: --allowed-source-ranges without credentials: %w", err)
		}
	}
	return o, nil
}

// gatewayMetrics is the replica's registry, with the runtime's, the
// gateway's and its forward proxy's collectors.
func gatewayMetrics() (*prometheus.Registry, *gateway.Metrics, *forwardproxy.Metrics, error) {
	reg := prometheus.NewRegistry()
	if err := errors.Join(reg.Register(collectors.NewGoCollector()), reg.Register(collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}))); err != nil {
		return nil, nil, nil, fmt.Errorf("gateway: registering metrics: %w", err)
	}
	gm, err := gateway.NewMetrics(reg)
	if err != nil {
		return nil, nil, nil, fmt.Errorf("gateway: registering metrics: %w", err)
	}
	fm, err := forwardproxy.NewMetrics(reg)
	if err != nil {
		return nil, nil, nil, fmt.Errorf("gateway: registering metrics: %w", err)
	}
	return reg, gm, fm, nil
}

// newGatewayProxy builds the gateway over set and the forward proxy in
// front of it.
func newGatewayProxy(o gatewayOptions, env GatewayEnv, set *gateway.Set, tracer trace.Tracer, gm *gateway.Metrics, fm *forwardproxy.Metrics,
	onEject func(*gateway.Member, string, time.Time)) (*gateway.Gateway, *forwardproxy.Proxy, error) {
	g, err := gateway.New(gateway.Config{Tracer: tracer, Members: set, Username: o.user, Password: o.pass, OnEject: onEject,
		Strategy: gateway.Strategy(o.strategy), DialTimeout: o.dialTimeout, MaxAttempts: o.maxAttempts, EjectAfter: o.ejectAfter, EjectFor: o.ejectFor,
		MaxPerMember: o.maxPerMember, HostRate: float64(o.hostPerMinute) / 60, BanStatuses: o.banStatuses, BanFor: o.banFor,
		StallTimeout: o.idleTimeout, Metrics: gm, Log: env.Log.WithName("members"), Now: env.Now})
	if err != nil {
		return nil, nil, err
	}
	po := gateway.ProxyOptions{AllowedSourceRanges: o.ranges, MaxConcurrent: o.maxConcurrent,
		IdleTimeout: o.idleTimeout, Metrics: fm, Log: env.Log.WithName("forward")}
	if o.accessLog {
		po.AccessLog = env.Log.WithName("access")
	}
	p, err := gateway.NewProxy(g, po)
	if err != nil {
		return nil, nil, err
	}
	return g, p, nil
}

// listenGateway opens the client port and the admin port.
func listenGateway(ctx context.Context, o gatewayOptions) (ln, adminLn net.Listener, err error) {
	var lc net.ListenConfig
	if ln, err = lc.Listen(ctx, "tcp", o.listen); err != nil {
		return nil, nil, fmt.Errorf("gateway: --listen: %w", err)
	}
	if adminLn, err = lc.Listen(ctx, "tcp", o.adminListen); err != nil {
		_ = ln.Close()
		return nil, nil, fmt.Errorf("gateway: --admin-listen: %w", err)
	}
	return ln, adminLn, nil
}

// serveGateway runs the watches and both servers until ctx is done, and
// stops them in order: the client port drains first, while the member
// watch and the admin server go on, so that draining tunnels keep their
// members and /metrics shows the drain; then the admin server, the
// watches and the idle member connections. Either server failing stops
// the other (proxycmd.ServeWithAdmin).
func serveGateway(ctx context.Context, o gatewayOptions, clients GatewayClients, log logr.Logger, g *gateway.Gateway, set *gateway.Set,
	gm *gateway.Metrics, p *forwardproxy.Proxy, ln, adminLn net.Listener, admin http.Handler) error {
	watchCtx, stopWatch := context.WithCancel(context.WithoutCancel(ctx))
	var watches sync.WaitGroup
	watches.Go(func() {
		gatewaywatch.Watch(watchCtx, clients.Core, o.namespace, o.pools, set, gm, log.WithName("watch"))
	})
	if o.gateway != "" {
		watches.Go(func() {
			gatewaywatch.WatchAdminBans(watchCtx, clients.Dynamic, o.namespace, o.gateway, g, log.WithName("bans"))
		})
	}
	err := proxycmd.ServeWithAdmin(ctx, "gateway", ln, p, *o.serve, adminLn, admin)
	stopWatch()
	watches.Wait()
	g.CloseIdleConnections()
	return err
}

// StartGateway runs RunGateway in a goroutine of its own and returns once
// the replica listens, with wait, which returns RunGateway's result once
// ctx is done and the replica has drained (cancel ctx to stop it). An
// error before the replica listens (bad flags, a port taken) is returned
// at once. env.Ready, when set, is still called.
func StartGateway(ctx context.Context, args []string, env GatewayEnv) (r GatewayReplica, wait func() error, err error) {
	ready := make(chan GatewayReplica, 1)
	done := make(chan error, 1)
	then := env.Ready
	env.Ready = func(r GatewayReplica) {
		if then != nil {
			then(r)
		}
		ready <- r
	}
	go func() { done <- RunGateway(ctx, args, env) }()
	select {
	case r := <-ready:
		return r, sync.OnceValue(func() error { return <-done }), nil
	case err := <-done:
		if err == nil {
			err = errors.New("gateway: stopped before it listened")
		}
		return GatewayReplica{}, nil, err
	}
}

// gatewayAdminHandler is AdminHandler with /readyz, 200 only while the
// gateway has members to send to.
func gatewayAdminHandler(reg *prometheus.Registry, set *gateway.Set) http.Handler {
	mux := proxycmd.AdminHandler(reg)
	mux.HandleFunc("GET /readyz", func(w http.ResponseWriter, _ *http.Request) {
		w.Header().Set("Content-Type", "text/plain; charset=utf-8")
		if n := set.Len(); n > 0 {
			_, _ = fmt.Fprintf(w, "ok: %d members\n", n)
			return
		}
		w.WriteHeader(http.StatusServiceUnavailable)
		_, _ = io.WriteString(w, "no members to send to\n")
	})
	return mux
}

// parseStatuses reads a comma-separated list of HTTP status codes; the
// gateway checks which codes may be bans.
func parseStatuses(s string) ([]int, error) {
	var out []int
	for f := range strings.SplitSeq(s, ",") {
		if f = strings.TrimSpace(f); f == "" {
			continue
		}
		n, err := strconv.Atoi(f)
		if err != nil {
			return nil, fmt.Errorf("%q is not a status code", f)
		}
		out = append(out, n)
	}
	if len(out) == 0 {
		return nil, errors.New("no status code")
	}
	return out, nil
}
