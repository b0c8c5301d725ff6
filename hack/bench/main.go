// Command bench measures the operator's cost against a simulated Proxmox VE
// cluster: it starts a local kube-apiserver and etcd (envtest), a three-node
// Proxmox VE simulator (pvesim, guests off: the agent still reports an
// address), and the operator's controllers with the proxmox provider
// (instrumented), as the binary wires them. For every proxy count it reports
// the API calls per proxy to create, to keep (per resync) and to delete N
// Proxies, the time to converge to all-Ready against the time of one Proxy,
// and the Go heap with all N Ready.
//
// Run it with `make bench ARGS='--proxies 1,100'`. Everything listens on
// loopback only.
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"maps"
	"os"
	"os/signal"
	"path/filepath"
	"runtime"
	"runtime/pprof"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/go-logr/logr"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	kruntime "k8s.io/apimachinery/pkg/runtime"
	clientgoscheme "k8s.io/client-go/kubernetes/scheme"
	"k8s.io/client-go/rest"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/envtest"
	logf "sigs.k8s.io/controller-runtime/pkg/log"

	crawlv1alpha1 "github.com/egress-proxies/egress-proxies-operator/api/v1alpha1"
	"github.com/egress-proxies/egress-proxies-operator/internal/config"
	"github.com/egress-proxies/egress-proxies-operator/internal/controller"
	"github.com/egress-proxies/egress-proxies-operator/internal/provider"
	"github.com/egress-proxies/egress-proxies-operator/internal/provider/proxmox"
	"github.com/egress-proxies/egress-proxies-operator/internal/pvesim"
	"github.com/egress-proxies/egress-proxies-operator/internal/testing/pvelab"
)

// Real-host defaults of the operator and the provider, divided by --speed
// unless the flags set them.
const (
	realResyncInterval   = controller.DefaultResyncInterval
	realProviderPoll     = proxmox.DefaultPollInterval
	realNotReadyInterval = controller.DefaultPollInterval
)

// options are the command's flags.
type options struct {
	proxies          []int
	speed            float64
	resyncs          int
	resyncInterval   time.Duration
	pollInterval     time.Duration
	notReadyInterval time.Duration
	healthInterval   time.Duration
	workers          int
	timeout          time.Duration
	cpuProfile       string
}

// result holds the figures of one proxy count.
type result struct {
	n                          int
	createCalls                int64
	createTop                  []kv
	steadyCalls                int64
	steadyTop                  []kv
	steadyResyncs              int
	deleteCalls                int64
	deleteTop                  []kv
	converge, deleteTime       time.Duration
	baseAlloc, baseInuse       uint64
	readyAlloc, readyInuse     uint64
	simAlloc, simInuse         uint64
	simVMs                     int
	steadyWindow               time.Duration
	steadyListings, createPoll int64
}

type kv struct {
	key string
	n   int64
}

func main() {
	var o options
	proxies := flag.String("proxies", "1,100,1000", "Comma-separated proxy counts; 1 is always run first, as the ideal.")
	flag.Float64Var(&o.speed, "speed", 50, "Simulator speed-up over real-host pace (F26 timings divided by this).")
	flag.IntVar(&o.resyncs, "resyncs", 3, "Resync intervals to observe in steady state (0 skips the steady-state phase).")
	flag.DurationVar(&o.resyncInterval, "resync-interval", 0, "Operator resync interval of Ready proxies (default 5m / speed).")
	flag.DurationVar(&o.pollInterval, "poll-interval", 0, "Provider budgets.pollInterval, the listing cache lifetime (default 5s / speed).")
	flag.DurationVar(&o.notReadyInterval, "not-ready-interval", 0, "Operator poll interval of proxies not yet Ready (default 10s / speed).")
	flag.DurationVar(&o.healthInterval, "health-interval", time.Hour, "ProviderHealth check interval (its calls are per node, not per proxy; the default keeps them out of the figures).")
	flag.IntVar(&o.workers, "max-concurrent-reconciles", 4, "Proxies reconciled in parallel (the operator's default is 4).")
	flag.DurationVar(&o.timeout, "timeout", 15*time.Minute, "Budget of each phase (create, delete) per proxy count.")
	flag.StringVar(&o.cpuProfile, "cpuprofile", "", "Write a CPU profile of the whole run (operator, simulator and bench) to this file.")
	flag.Parse()
	var err error
	if o.proxies, err = parseCounts(*proxies); err == nil {
		o.defaults()
		// SIGPIPE too (`make bench | head`): stop and clean up envtest's
		// processes rather than die and leave them behind.
		ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM, syscall.SIGPIPE)
		err = run(ctx, o)
		stop()
	}
	if err != nil {
		fmt.Fprintln(os.Stderr, "bench failed:", err)
		os.Exit(1)
	}
}

func parseCounts(s string) ([]int, error) {
	out := []int{1}
	for f := range strings.SplitSeq(s, ",") {
		n, err := strconv.Atoi(strings.TrimSpace(f))
		if err != nil || n < 1 {
			return nil, fmt.Errorf("--proxies: %q is not a positive count", f)
		}
		if !slices.Contains(out, n) {
			out = append(out, n)
		}
	}
	return out, nil
}

func (o *options) defaults() {
	scale := func(d *time.Duration, atRealPace time.Duration) {
		if *d == 0 {
			*d = time.Duration(float64(atRealPace) / o.speed)
		}
	}
	scale(&o.resyncInterval, realResyncInterval)
	scale(&o.pollInterval, realProviderPoll)
	scale(&o.notReadyInterval, realNotReadyInterval)
}

func run(ctx context.Context, o options) error {
	logf.SetLogger(logr.Discard())
	if os.Getenv("KUBEBUILDER_ASSETS") == "" {
		return errors.New("KUBEBUILDER_ASSETS is not set: run `make bench`, which builds kube-apiserver and etcd first")
	}
	scheme := kruntime.NewScheme()
	if err := errors.Join(clientgoscheme.AddToScheme(scheme), crawlv1alpha1.AddToScheme(scheme)); err != nil {
		return fmt.Errorf("building the scheme: %w", err)
	}
	say("starting a local kube-apiserver and etcd")
	env := &envtest.Environment{CRDDirectoryPaths: []string{filepath.Join("config", "crd", "bases")}, ErrorIfCRDPathMissing: true, Scheme: scheme}
	restCfg, err := env.Start()
	if err != nil {
		return fmt.Errorf("starting the control plane: %w", err)
	}
	defer func() { _ = env.Stop() }()
	// The bench's own client must not be what limits the figures.
	benchCfg := rest.CopyConfig(restCfg)
	benchCfg.QPS, benchCfg.Burst = 1000, 2000
	k8s, err := client.New(benchCfg, client.Options{Scheme: scheme})
	if err != nil {
		return fmt.Errorf("building a client: %w", err)
	}
	if o.cpuProfile != "" {
		f, err := os.Create(o.cpuProfile)
		if err != nil {
			return fmt.Errorf("creating the CPU profile: %w", err)
		}
		defer func() { _ = f.Close() }()
		if err := pprof.StartCPUProfile(f); err != nil {
			return fmt.Errorf("starting the CPU profile: %w", err)
		}
		defer pprof.StopCPUProfile()
	}
	say("speed %g, resync interval %s, provider poll interval %s, not-Ready poll %s, %d workers",
		o.speed, o.resyncInterval, o.pollInterval, o.notReadyInterval, o.workers)
	var results []result
	for _, n := range o.proxies {
		r, err := benchOne(ctx, o, restCfg, scheme, k8s, n)
		if err != nil {
			printTable(o, results)
			return fmt.Errorf("%d proxies: %w", n, err)
		}
		results = append(results, r)
	}
	printTable(o, results)
	return nil
}

// bench is the world of one proxy count: a fresh simulated cluster (three
// nodes, one zone each, guests off), a fresh namespace and an operator
// confined to it.
type bench struct {
	*pvelab.Lab
	sim  *pvesim.Sim
	prov provider.Provider
	cfg  *config.Config
	dir  string
}

func newBench(ctx context.Context, o options) (*bench, error) {
	dir, err := os.MkdirTemp("", "egress-proxies-bench-")
	if err != nil {
		return nil, fmt.Errorf("making a temporary directory: %w", err)
	}
	lab, err := pvelab.Start(ctx, pvelab.Options{Nodes: 3, Speed: o.speed, PollInterval: o.pollInterval, Dir: dir})
	if err != nil {
		_ = os.RemoveAll(dir)
		return nil, fmt.Errorf("starting the simulated cluster: %w", err)
	}
	return &bench{Lab: lab, sim: lab.Sim, cfg: lab.Config, dir: dir}, nil
}

func (b *bench) close() {
	b.Close()
	_ = os.RemoveAll(b.dir)
}

// clones counts the VMs that are not templates.
func (b *bench) clones() int { return len(b.Clones()) }

// startOperator runs the operator confined to namespace ns. The provider is
// built once per proxy count and kept across restarts, so that its caches
// count in the simulator's share of the heap, not the operator's.
func (b *bench) startOperator(ctx context.Context, o options, restCfg *rest.Config, scheme *kruntime.Scheme, ns string) (stop func() error, err error) {
	if b.prov == nil {
		if b.prov, err = b.NewProvider(); err != nil {
			return nil, err
		}
	}
	return b.StartOperator(ctx, pvelab.OperatorOptions{
		RestConfig: restCfg, Scheme: scheme, Namespace: ns, Provider: b.prov,
		Controller: controller.Options{
			PollInterval: o.notReadyInterval, ResyncInterval: o.resyncInterval, MaxConcurrentReconciles: o.workers,
			HealthInterval: o.healthInterval, GCInterval: time.Hour,
		},
	})
}

func benchOne(ctx context.Context, o options, restCfg *rest.Config, scheme *kruntime.Scheme, k8s client.Client, n int) (result, error) {
	r := result{n: n}
	say("%d proxies: starting the simulator", n)
	b, err := newBench(ctx, o)
	if err != nil {
		return r, err
	}
	defer b.close()
	nsObj := &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{GenerateName: "bench-"}}
	if err := k8s.Create(ctx, nsObj); err != nil {
		return r, fmt.Errorf("creating a namespace: %w", err)
	}
	ns := nsObj.Name
	r.baseAlloc, r.baseInuse = heap()
	stop, err := b.startOperator(ctx, o, restCfg, scheme, ns)
	if err != nil {
		return r, err
	}
	defer func() {
		if stop != nil {
			_ = stop()
		}
	}()

	// The health reporter checks every node once at start: let it finish
	// so that its calls (per node, not per proxy) stay out of the figures.
	// A list and a dry-run create warm the client and the API server's
	// create path (the first Proxy create otherwise took about 2 s), so
	// that they stay out of the timing.
	if err := waitFor(ctx, time.Minute, 1, func() (bool, string, error) {
		return b.sim.Counters()["GET /version"] >= 3, "waiting for the first health check", nil
	}); err != nil {
		return r, err
	}
	if _, _, err := countReady(ctx, k8s, ns); err != nil {
		return r, err
	}
	warm := &crawlv1alpha1.Proxy{
		ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "warm-up"},
		Spec:       crawlv1alpha1.ProxySpec{Provider: pvelab.EntryName, Zone: b.Zones[0], MachineType: pvelab.MachineType, Image: pvelab.Image},
	}
	if err := k8s.Create(ctx, warm, client.DryRunAll); err != nil {
		return r, fmt.Errorf("dry-run create: %w", err)
	}
	if err := sleep(ctx, 300*time.Millisecond); err != nil {
		return r, err
	}

	// 1. Create, and 4. convergence.
	b.sim.ResetCounters()
	start := time.Now()
	for i := range n {
		p := &crawlv1alpha1.Proxy{
			ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: fmt.Sprintf("egress-%04d", i)},
			Spec:       crawlv1alpha1.ProxySpec{Provider: pvelab.EntryName, Zone: b.Zones[i%len(b.Zones)], MachineType: pvelab.MachineType, Image: pvelab.Image},
		}
		if err := k8s.Create(ctx, p); err != nil {
			return r, fmt.Errorf("creating proxy %s: %w", p.Name, err)
		}
	}
	say("%d proxies: created in %s, waiting for all Ready", n, time.Since(start).Round(time.Millisecond))
	if err := waitFor(ctx, o.timeout, n, func() (bool, string, error) {
		ready, total, err := countReady(ctx, k8s, ns)
		return total == n && ready == n, fmt.Sprintf("%d of %d Ready", ready, total), err
	}); err != nil {
		return r, err
	}
	r.converge = time.Since(start)
	c := b.sim.Counters()
	r.createCalls, r.createTop = total(c), top(c, 10)
	r.createPoll = c["GET /nodes/{node}/tasks/{upid}/status"]
	say("%d proxies: all Ready after %s, %d API calls", n, r.converge.Round(time.Millisecond), r.createCalls)

	// 5. Memory with all N Ready.
	r.readyAlloc, r.readyInuse = heap()
	r.simVMs = b.clones()

	// 2. Steady state: settle for two poll intervals, then count.
	if err := r.steady(ctx, o, b, k8s, ns); err != nil {
		return r, err
	}

	// 5b. The operator's share of the heap: stop it (the provider and its
	// caches stay for the restart), measure the simulator alone, restart
	// it and let the restart's first reconciles settle.
	err = stop()
	stop = nil
	if err != nil {
		return r, err
	}
	r.simAlloc, r.simInuse = heap()
	if stop, err = b.startOperator(ctx, o, restCfg, scheme, ns); err != nil {
		return r, err
	}
	if err := sleep(ctx, o.resyncInterval); err != nil {
		return r, err
	}

	// 3. Delete.
	b.sim.ResetCounters()
	start = time.Now()
	if err := k8s.DeleteAllOf(ctx, &crawlv1alpha1.Proxy{}, client.InNamespace(ns)); err != nil {
		return r, fmt.Errorf("deleting the proxies: %w", err)
	}
	if err := waitFor(ctx, o.timeout, n, func() (bool, string, error) {
		_, total, err := countReady(ctx, k8s, ns)
		return total == 0, fmt.Sprintf("%d proxies left", total), err
	}); err != nil {
		return r, err
	}
	r.deleteTime = time.Since(start)
	c = b.sim.Counters()
	r.deleteCalls, r.deleteTop = total(c), top(c, 10)
	if left := b.clones(); left != 0 {
		return r, fmt.Errorf("%d VMs left after deleting every Proxy", left)
	}
	say("%d proxies: all gone after %s, %d API calls", n, r.deleteTime.Round(time.Millisecond), r.deleteCalls)
	err = stop()
	stop = nil
	if err != nil {
		return r, err
	}
	if err := k8s.Delete(ctx, nsObj); err != nil {
		return r, fmt.Errorf("deleting namespace %s: %w", ns, err)
	}
	return r, nil
}

// steady counts the API calls of resyncs resync intervals with all n
// Proxies Ready; zero resyncs skips it.
func (r *result) steady(ctx context.Context, o options, b *bench, k8s client.Client, ns string) error {
	n := r.n
	if o.resyncs == 0 {
		return nil
	}
	if err := sleep(ctx, 2*o.pollInterval); err != nil {
		return err
	}
	b.sim.ResetCounters()
	window := time.Duration(o.resyncs) * o.resyncInterval
	steadyStart := time.Now()
	if err := sleep(ctx, window); err != nil {
		return err
	}
	c := b.sim.Counters()
	r.steadyWindow = time.Since(steadyStart)
	r.steadyCalls, r.steadyTop, r.steadyResyncs = total(c), top(c, 10), o.resyncs
	r.steadyListings = c["GET /cluster/resources"]
	ready, all, err := countReady(ctx, k8s, ns)
	if err != nil {
		return fmt.Errorf("after the steady-state window: %w", err)
	}
	if ready != n || all != n {
		return fmt.Errorf("after the steady-state window: %d of %d Ready", ready, all)
	}
	say("%d proxies: %d API calls in %d resyncs (%s)", n, r.steadyCalls, o.resyncs, r.steadyWindow.Round(time.Millisecond))
	return nil
}

func countReady(ctx context.Context, k8s client.Client, ns string) (ready, total int, err error) {
	var list crawlv1alpha1.ProxyList
	if err := k8s.List(ctx, &list, client.InNamespace(ns)); err != nil {
		return 0, 0, fmt.Errorf("listing proxies: %w", err)
	}
	for _, p := range list.Items {
		if p.Status.Phase == crawlv1alpha1.ProxyPhaseReady && p.DeletionTimestamp == nil {
			ready++
		}
	}
	return ready, len(list.Items), nil
}

// waitFor checks cond until it holds, every 50ms for one proxy and less
// often for many (listing a thousand objects is not free on two cores),
// printing its progress every few seconds.
func waitFor(ctx context.Context, timeout time.Duration, n int, cond func() (bool, string, error)) error {
	every := max(50*time.Millisecond, time.Duration(n)*time.Millisecond/2)
	deadline := time.NewTimer(timeout)
	defer deadline.Stop()
	tick := time.NewTicker(every)
	defer tick.Stop()
	last := time.Now()
	for {
		ok, msg, err := cond()
		if ok {
			return nil
		}
		if time.Since(last) > 5*time.Second {
			last = time.Now()
			say("    %s", msg)
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("interrupted (%s): %w", msg, ctx.Err())
		case <-deadline.C:
			if err != nil {
				return fmt.Errorf("timed out after %s: %s: %w", timeout, msg, err)
			}
			return fmt.Errorf("timed out after %s: %s", timeout, msg)
		case <-tick.C:
		}
	}
}

// sleep waits for d unless ctx ends first.
func sleep(ctx context.Context, d time.Duration) error {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-ctx.Done():
		return fmt.Errorf("interrupted: %w", ctx.Err())
	case <-t.C:
		return nil
	}
}

// heap returns HeapAlloc and HeapInuse after a forced garbage collection.
func heap() (alloc, inuse uint64) {
	runtime.GC()
	runtime.GC()
	var ms runtime.MemStats
	runtime.ReadMemStats(&ms)
	return ms.HeapAlloc, ms.HeapInuse
}

func total(c map[string]int64) int64 {
	var n int64
	for _, v := range c {
		n += v
	}
	return n
}

func top(c map[string]int64, k int) []kv {
	keys := slices.Sorted(maps.Keys(c))
	out := make([]kv, 0, len(keys))
	for _, key := range keys {
		out = append(out, kv{key, c[key]})
	}
	slices.SortStableFunc(out, func(a, b kv) int { return int(b.n - a.n) })
	if len(out) > k {
		out = out[:k]
	}
	return out
}

func mib(b uint64) float64 { return float64(b) / (1 << 20) }

func printTable(o options, rs []result) {
	if len(rs) == 0 {
		return
	}
	ideal := rs[0].converge // N=1 always runs first
	fmt.Printf("\n## Proxmox provider against pvesim: speed %g, resync %s, poll %s, not-Ready poll %s, %d workers, GOMAXPROCS %d\n\n",
		o.speed, o.resyncInterval, o.pollInterval, o.notReadyInterval, o.workers, runtime.GOMAXPROCS(0))
	fmt.Println("| proxies | create calls/proxy | steady calls/proxy/resync | steady listings | delete calls/proxy | all Ready after | ideal (N=1) | ratio | ×speed (naive) | delete took |")
	fmt.Println("|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|")
	for _, r := range rs {
		n := float64(r.n)
		steady, listings := "not run", "-"
		if r.steadyResyncs > 0 {
			steady = fmt.Sprintf("%.3f", float64(r.steadyCalls)/n/float64(r.steadyResyncs))
			listings = strconv.FormatInt(r.steadyListings, 10)
		}
		fmt.Printf("| %d | %.1f | %s | %s | %.1f | %s | %s | %.2f | %s | %s |\n",
			r.n, float64(r.createCalls)/n, steady, listings,
			float64(r.deleteCalls)/n, r.converge.Round(time.Millisecond), ideal.Round(time.Millisecond),
			r.converge.Seconds()/ideal.Seconds(), time.Duration(float64(r.converge)*o.speed).Round(time.Second),
			r.deleteTime.Round(time.Millisecond))
	}
	fmt.Println("\n### Heap (MiB, HeapAlloc / HeapInuse after a forced GC)")
	fmt.Println()
	fmt.Println("| proxies | sim VMs | baseline: sim, no VM, no operator | all Ready: sim + operator | operator stopped: sim with N VMs | operator share (alloc) | operator per proxy (KiB) | sim share (alloc) |")
	fmt.Println("|---:|---:|---:|---:|---:|---:|---:|---:|")
	for _, r := range rs {
		op := float64(r.readyAlloc) - float64(r.simAlloc)
		fmt.Printf("| %d | %d | %.1f / %.1f | %.1f / %.1f | %.1f / %.1f | %.1f | %.1f | %.1f |\n",
			r.n, r.simVMs, mib(r.baseAlloc), mib(r.baseInuse), mib(r.readyAlloc), mib(r.readyInuse),
			mib(r.simAlloc), mib(r.simInuse), op/(1<<20), op/1024/float64(r.n), (float64(r.simAlloc)-float64(r.baseAlloc))/(1<<20))
	}
	for _, r := range rs {
		fmt.Printf("\n### %d proxies: calls by path (top 10)\n\n| phase | call | count | per proxy |\n|---|---|---:|---:|\n", r.n)
		for _, ph := range []struct {
			name string
			kvs  []kv
		}{{"create", r.createTop}, {"steady", r.steadyTop}, {"delete", r.deleteTop}} {
			for _, e := range ph.kvs {
				fmt.Printf("| %s | `%s` | %d | %.2f |\n", ph.name, e.key, e.n, float64(e.n)/float64(r.n))
			}
		}
	}
	fmt.Println()
	fmt.Println("Heap figures are of the whole bench process (the API server and etcd are separate processes). The operator's share is")
	fmt.Println("all-Ready minus operator-stopped; the provider's caches survive the stop (it is reused for the delete phase), so they")
	fmt.Println("count in the simulator's share. ×speed (naive) is the wall time times --speed: a real-pace figure only while the")
	fmt.Println("simulated durations, not this machine's CPU, bound the run.")
}

func say(format string, args ...any) {
	fmt.Printf("==> %s "+format+"\n", append([]any{time.Now().UTC().Format("15:04:05")}, args...)...)
}
