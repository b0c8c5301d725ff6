// Command benchproxy measures the forward proxy's data path against
// tinyproxy and squid (`make bench-proxy`): the same client load through
// each, all on loopback, basic auth on. It prints Markdown tables for
// docs/performance.md: requests per second and the latency each proxy adds
// over a direct request, for plain HTTP GETs of a small and a 1 MiB body
// and for CONNECT tunnels; the proxy's CPU seconds per GB relayed; and its
// resident memory with idle tunnels open. Every run is bounded by a request
// count and a time limit and stops by itself.
package main

import (
	"cmp"
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"os/signal"
	"slices"
	"strings"
	"syscall"
	"time"

	"github.com/egress-proxies/egress-proxies-operator/hack/internal/procfs"
)

// options bound a run.
type options struct {
	proxies     []string
	requests    int           // per scenario and proxy
	duration    time.Duration // per scenario and proxy
	concurrency int
	idle        int // idle tunnels for the memory figure
	rounds      int
	install     bool
	command     string // how the run was started, for the table's header
	// scenarios are the names of the scenarios to run; empty: all.
	scenarios []string
	// profile, when set, is a directory where our proxy writes its CPU
	// profile of the whole run and its allocation profile at the end.
	profile string
	// gateway is the gateway mode (`make bench-gateway`): the pool gateway
	// and proxy-chain in front of our forward proxy, and the session
	// placement benchmark.
	gateway bool
	// placementBenchtime is go test's -benchtime of the placement
	// benchmark; empty: it is not run.
	placementBenchtime string
}

func main() {
	if err := mainErr(); err != nil {
		fmt.Fprintln(os.Stderr, "benchproxy:", err)
		os.Exit(1)
	}
}

func mainErr() error {
	if addr := os.Getenv(childEnv); addr != "" {
		return runChild(addr, os.Getenv(childProfileEnv))
	}
	var o options
	var proxies string
	flag.BoolVar(&o.gateway, "gateway", false, "The gateway mode (make bench-gateway): our forward proxy directly, the pool gateway and proxy-chain in front of it, and the session placement benchmark.")
	flag.StringVar(&proxies, "proxies", "", "Comma-separated proxies to measure: ours, tinyproxy, squid (default: all three), or with --gateway ours, gateway, proxy-chain (default: all three; ours is required).")
	flag.IntVar(&o.requests, "requests", 20000, "At most this many requests per scenario and proxy.")
	flag.DurationVar(&o.duration, "duration", 5*time.Second, "At most this long per scenario and proxy.")
	flag.IntVar(&o.concurrency, "concurrency", 16, "Concurrent clients.")
	flag.IntVar(&o.idle, "idle-tunnels", 1000, "Idle CONNECT tunnels opened for the memory figure.")
	flag.IntVar(&o.rounds, "rounds", 3, "Rounds of every scenario through every proxy; the median round is reported.")
	flag.BoolVar(&o.install, "install", true, "Install what is missing: tinyproxy and squid with apt-get; with --gateway, Node.js with apt-get and proxy-chain with npm.")
	var only string
	flag.StringVar(&only, "scenarios", "", "Comma-separated scenario names to run (\"GET 1 KiB\", \"GET 1 MiB\", \"CONNECT + GET 1 KiB\", \"CONNECT + GET 1 MiB\", \"GET 1 KiB at one rate\"; with --gateway each followed by \" (1 client)\" or \" (<concurrency> clients)\"); empty: all.")
	flag.StringVar(&o.profile, "profile", "", "Directory where our proxy writes cpu.pprof (the whole run) and allocs.pprof (at the end); the gateway writes its own in gateway/ under it.")
	flag.StringVar(&o.placementBenchtime, "placement-benchtime", "20x", "With --gateway, go test -benchtime of the session placement benchmark; empty: not run.")
	flag.Parse()
	o.command = "make bench-proxy"
	if o.gateway {
		o.command = "make bench-gateway"
	}
	if proxies == "" {
		proxies = "ours,tinyproxy,squid"
		if o.gateway {
			proxies = "ours,gateway,proxy-chain"
		}
	}
	o.proxies = strings.Split(proxies, ",")
	if only != "" {
		o.scenarios = strings.Split(only, ",")
	}
	if args := modeArgs(os.Args[1:]); len(args) > 0 {
		o.command += " ARGS='" + strings.Join(args, " ") + "'"
	}
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	return run(ctx, o, os.Stdout, func(format string, args ...any) {
		fmt.Fprintf(os.Stderr, format+"\n", args...)
	})
}

// run measures every available proxy and writes the tables to w.
func run(ctx context.Context, o options, w io.Writer, log func(string, ...any)) error {
	if o.requests < 1 || o.duration <= 0 || o.concurrency < 1 || o.idle < 0 || o.rounds < 1 {
		return errors.New("--requests, --duration, --concurrency and --rounds must be positive")
	}
	scs, err := selectScenarios(modeScenarios(o), o.scenarios)
	if err != nil {
		return err
	}
	if o.gateway && !slices.Contains(o.proxies, "ours") {
		return errors.New("--gateway: --proxies must name ours, the forward proxy the others chain to")
	}
	raiseFileLimit()
	org, err := startOrigin(ctx)
	if err != nil {
		return err
	}
	defer org.close()

	res := &results{opts: o, scenarios: scs, started: time.Now(), loadBefore: loadAverage()}
	var procs []*proxyProc
	defer func() {
		for _, p := range procs {
			p.stop()
		}
	}()
	// Ours starts first: the gateway and proxy-chain chain to it.
	names := slices.Clone(o.proxies)
	if i := slices.Index(names, "ours"); i > 0 {
		names = append([]string{"ours"}, slices.Delete(names, i, i+1)...)
	}
	upstream := ""
	for _, name := range names {
		pcDir := ""
		if name == nameProxyChain {
			if pcDir, err = ensureProxyChain(ctx, o.install, log); err != nil {
				log("going on without proxy-chain: %v", err)
				res.missing = append(res.missing, name)
				continue
			}
		} else if !available(ctx, name, o.install, log) {
			res.missing = append(res.missing, name)
			continue
		}
		p, err := startProxy(ctx, name, o.profile, upstream, pcDir)
		if err != nil {
			return err
		}
		if name == "ours" {
			upstream = p.addr
		}
		procs = append(procs, p)
	}

	// Rounds interleave the proxies, so that a burst of load from
	// elsewhere on the machine hits all of them alike; each figure is the
	// round with the median throughput.
	direct := make([][]measurement, len(scs))
	rounds := make([][][]measurement, len(procs))
	for i := range procs {
		rounds[i] = make([][]measurement, len(scs))
	}
	for round := range o.rounds {
		for si, sc := range scs {
			rate := 0.0
			if sc.pacedAfter != "" {
				rate = pacedRate(scs, sc, rounds, round)
				log("round %d/%d: %s at %.0f requests/s", round+1, o.rounds, sc.name, rate)
			}
			log("round %d/%d: %s: direct", round+1, o.rounds, sc.name)
			direct[si] = append(direct[si], measure(ctx, o, sc, directClient(org, sc, sc.concurrency(o)), rate))
			for pi, p := range procs {
				log("round %d/%d: %s: %s", round+1, o.rounds, sc.name, p.name)
				cpu, sys := p.cpuSeconds()
				m := measure(ctx, o, sc, proxyClient(org, p.addr, sc, sc.concurrency(o)), rate)
				cpuAfter, sysAfter := p.cpuSeconds()
				m.cpu, m.sys = cpuAfter-cpu, sysAfter-sys
				if m.errors > 0 && m.ok == 0 {
					return fmt.Errorf("%s: %s: every request failed (%d): %w", p.name, sc.name, m.errors, m.firstErr)
				}
				rounds[pi][si] = append(rounds[pi][si], m)
			}
		}
	}
	for si := range scs {
		res.direct = append(res.direct, median(direct[si]))
	}
	for pi, p := range procs {
		r := proxyResult{name: p.name}
		for si := range scs {
			r.scenarios = append(r.scenarios, median(rounds[pi][si]))
		}
		log("%s: %d idle tunnels", p.name, o.idle)
		if err := idleTunnels(ctx, p, org, o.idle, &r); err != nil {
			return fmt.Errorf("%s: idle tunnels: %w", p.name, err)
		}
		res.proxies = append(res.proxies, r)
	}
	// Our proxy writes its profiles when it is stopped.
	for _, p := range procs {
		p.stop()
	}
	if o.gateway && o.placementBenchtime != "" {
		log("session placement benchmark (go test -bench BenchmarkSessionPlacement ./internal/gateway/)")
		pl, err := runPlacement(ctx, o.placementBenchtime)
		if err != nil {
			return fmt.Errorf("session placement benchmark: %w", err)
		}
		res.placement = &pl
	}
	res.loadAfter = loadAverage()
	if o.gateway {
		return res.writeGateway(w)
	}
	return res.write(w)
}

// pacedRate is the rate of the paced scenario sc in round: pacedShare of
// the lowest throughput a proxy reached in sc's base scenario in that
// round (selectScenarios keeps the base before it).
func pacedRate(scs []scenario, sc scenario, rounds [][][]measurement, round int) float64 {
	base := slices.IndexFunc(scs, func(s scenario) bool { return s.name == sc.pacedAfter })
	lowest := 0.0
	for _, byScenario := range rounds {
		if rps := byScenario[base][round].rps(); lowest == 0 || rps < lowest {
			lowest = rps
		}
	}
	return max(pacedShare*lowest, 1)
}

// modeArgs are the command-line arguments less --gateway, which the make
// target's name says.
func modeArgs(args []string) []string {
	return slices.DeleteFunc(slices.Clone(args), func(a string) bool { return a == "--gateway" || a == "-gateway" })
}

// modeScenarios are the scenarios of the mode. The gateway mode measures
// each twice: with one client for the latency a hop adds, and with
// --concurrency clients for throughput.
func modeScenarios(o options) []scenario {
	if !o.gateway {
		return scenarios
	}
	var out []scenario
	for _, sc := range scenarios {
		if sc.pacedAfter != "" {
			// The gateway mode's one-client rows measure latency.
			continue
		}
		one, many := sc, sc
		one.name, one.clients = sc.name+" (1 client)", 1
		many.name = fmt.Sprintf("%s (%d clients)", sc.name, o.concurrency)
		out = append(out, one, many)
	}
	return out
}

// selectScenarios returns the scenarios of all named, in their usual
// order, with the base of each paced one (its rate comes from it); no
// names: all of them.
func selectScenarios(all []scenario, names []string) ([]scenario, error) {
	if len(names) == 0 {
		return all, nil
	}
	picked := 0
	want := slices.Clone(names)
	for _, sc := range all {
		if slices.Contains(names, sc.name) {
			picked++
			if sc.pacedAfter != "" && !slices.Contains(want, sc.pacedAfter) {
				want = append(want, sc.pacedAfter)
			}
		}
	}
	if picked != len(names) {
		return nil, fmt.Errorf("--scenarios %q: the scenarios are %q", names, scenarioNames(all))
	}
	var out []scenario
	for _, sc := range all {
		if slices.Contains(want, sc.name) {
			out = append(out, sc)
		}
	}
	return out, nil
}

func scenarioNames(all []scenario) []string {
	var names []string
	for _, sc := range all {
		names = append(names, sc.name)
	}
	return names
}

// loadAverage is the machine's load over the last minute, from
// /proc/loadavg: the run shares the machine, and the tables say how busy
// it was.
func loadAverage() string {
	if la := procfs.LoadAverage(); la != nil {
		return la[0]
	}
	return "unknown"
}

// median returns the round with the median throughput, with the CPU time,
// requests and bytes of all rounds, so that CPU per GB and per request use
// everything measured.
func median(ms []measurement) measurement {
	sorted := slices.Clone(ms)
	slices.SortFunc(sorted, func(a, b measurement) int { return cmp.Compare(a.rps(), b.rps()) })
	m := sorted[len(sorted)/2]
	m.cpu, m.sys, m.bytes, m.errors, m.requests = 0, 0, 0, 0, 0
	for _, r := range ms {
		m.cpu += r.cpu
		m.sys += r.sys
		m.requests += r.ok
		m.bytes += r.bytes
		m.errors += r.errors
		if m.firstErr == nil {
			m.firstErr = r.firstErr
		}
	}
	return m
}

// idleTunnels measures the proxy's resident memory before and with n idle
// tunnels open, then closes them.
func idleTunnels(ctx context.Context, p *proxyProc, org *origin, n int, r *proxyResult) error {
	settle(ctx)
	r.rssBefore = p.rssKiB()
	tunnels, refused, err := openIdleTunnels(ctx, p.addr, org.addr, n)
	defer closeAll(tunnels)
	if err != nil {
		return err
	}
	r.idleRefused = refused
	settle(ctx)
	r.rssIdle = p.rssKiB()
	r.idle = len(tunnels)
	return nil
}

// settle gives the proxy a moment to finish accepting the last tunnels
// before its memory is read.
func settle(ctx context.Context) {
	t := time.NewTimer(500 * time.Millisecond)
	defer t.Stop()
	select {
	case <-ctx.Done():
	case <-t.C:
	}
}

// raiseFileLimit lifts the soft limit on open files to the hard one: 1000
// idle tunnels are 3000 descriptors here and 2000 in the proxy, which
// inherits the limit.
func raiseFileLimit() {
	var l syscall.Rlimit
	if syscall.Getrlimit(syscall.RLIMIT_NOFILE, &l) == nil && l.Cur < l.Max {
		l.Cur = l.Max
		_ = syscall.Setrlimit(syscall.RLIMIT_NOFILE, &l)
	}
}
