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
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"os/signal"
	"strings"
	"syscall"
	"time"
)

// options bound a run.
type options struct {
	proxies     []string
	requests    int           // per scenario and proxy
	duration    time.Duration // per scenario and proxy
	concurrency int
	idle        int // idle tunnels for the memory figure
	install     bool
	command     string // how the run was started, for the table's header
}

func main() {
	if addr := os.Getenv(childEnv); addr != "" {
		if err := runChild(addr); err != nil {
			fmt.Fprintln(os.Stderr, "benchproxy child:", err)
			os.Exit(1)
		}
		return
	}
	var o options
	var proxies string
	flag.StringVar(&proxies, "proxies", "ours,tinyproxy,squid", "Comma-separated proxies to measure: ours, tinyproxy, squid.")
	flag.IntVar(&o.requests, "requests", 20000, "At most this many requests per scenario and proxy.")
	flag.DurationVar(&o.duration, "duration", 5*time.Second, "At most this long per scenario and proxy.")
	flag.IntVar(&o.concurrency, "concurrency", 16, "Concurrent clients.")
	flag.IntVar(&o.idle, "idle-tunnels", 1000, "Idle CONNECT tunnels opened for the memory figure.")
	flag.BoolVar(&o.install, "install", true, "Install tinyproxy and squid with apt-get when they are missing.")
	flag.Parse()
	o.proxies = strings.Split(proxies, ",")
	o.command = "make bench-proxy"
	if len(os.Args) > 1 {
		o.command += " ARGS='" + strings.Join(os.Args[1:], " ") + "'"
	}
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	if err := run(ctx, o, os.Stdout, func(format string, args ...any) {
		fmt.Fprintf(os.Stderr, format+"\n", args...)
	}); err != nil {
		fmt.Fprintln(os.Stderr, "benchproxy:", err)
		os.Exit(1)
	}
}

// run measures every available proxy and writes the tables to w.
func run(ctx context.Context, o options, w io.Writer, log func(string, ...any)) error {
	if o.requests < 1 || o.duration <= 0 || o.concurrency < 1 || o.idle < 0 {
		return errors.New("--requests, --duration and --concurrency must be positive")
	}
	raiseFileLimit()
	org, err := startOrigin()
	if err != nil {
		return err
	}
	defer org.close()

	res := &results{opts: o, started: time.Now()}
	log("direct requests (the baseline)")
	for _, sc := range scenarios {
		res.direct = append(res.direct, measure(ctx, o, sc, directClient(org, sc, o.concurrency)))
	}
	for _, name := range o.proxies {
		if !available(name, o.install, log) {
			res.missing = append(res.missing, name)
			continue
		}
		r, err := benchProxy(ctx, o, org, name, log)
		if err != nil {
			return fmt.Errorf("%s: %w", name, err)
		}
		res.proxies = append(res.proxies, r)
	}
	return res.write(w)
}

// benchProxy runs the scenarios and the idle-tunnel measurement against one
// proxy, started for the purpose and stopped after.
func benchProxy(ctx context.Context, o options, org *origin, name string, log func(string, ...any)) (proxyResult, error) {
	p, err := startProxy(ctx, name)
	if err != nil {
		return proxyResult{}, err
	}
	defer p.stop()
	r := proxyResult{name: name}
	for _, sc := range scenarios {
		log("%s: %s", name, sc.name)
		cpu := p.cpuSeconds()
		m := measure(ctx, o, sc, proxyClient(org, p.addr, sc, o.concurrency))
		m.cpu = p.cpuSeconds() - cpu
		if m.errors > 0 && m.ok == 0 {
			return r, fmt.Errorf("%s: every request failed (%d): %v", sc.name, m.errors, m.firstErr)
		}
		r.scenarios = append(r.scenarios, m)
	}
	log("%s: %d idle tunnels", name, o.idle)
	r.rssBefore = p.rssKiB()
	tunnels, err := openIdleTunnels(ctx, p.addr, org.addr, o.idle)
	defer closeAll(tunnels)
	if err != nil {
		return r, fmt.Errorf("idle tunnels: %w", err)
	}
	settle(ctx)
	r.rssIdle = p.rssKiB()
	r.idle = len(tunnels)
	return r, nil
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
