// Command bench measures what the operator costs and how fast it converges,
// against a simulated Proxmox VE cluster. It starts a local kube-apiserver
// and etcd (envtest), and for every proxy count N a fresh three-node
// Proxmox VE simulator (cmd/pvesim, guests off: the agent still reports an
// address) and a fresh operator (this binary again, in its operator
// subcommand: the controllers with the proxmox provider, as the binary
// wires them), each in its own process on loopback. It reports, per N, the
// simulator's API calls and listing bytes per proxy to create, keep (per
// resync) and delete N Proxies, the operator's requests to the API server,
// the time to all-Ready against the time of one Proxy, the operator
// process's CPU seconds per proxy lifecycle, and its RSS with all N Ready
// beside the API server's, etcd's and the simulator's.
//
// Run it with `make bench ARGS='--proxies 1,100'`. Everything listens on
// loopback only.
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"os/signal"
	"path/filepath"
	"runtime"
	"slices"
	"strconv"
	"strings"
	"sync"
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
	"github.com/egress-proxies/egress-proxies-operator/internal/provider/proxmox"
	"github.com/egress-proxies/egress-proxies-operator/internal/testing/modroot"
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
	creators         int
	timeout          time.Duration
	cpuProfile       string
	heapProfile      string
	pvesimBin        string
	provider         string
	createCap        int
}

func main() {
	if len(os.Args) > 1 && os.Args[1] == operatorSubcommand {
		if err := operatorMain(os.Args[2:]); err != nil {
			fmt.Fprintln(os.Stderr, "bench operator:", err)
			os.Exit(1)
		}
		return
	}
	o, err := parseOptions(os.Args[1:], os.Stderr)
	if err == nil {
		// SIGPIPE too (`make bench | head`): stop and clean up the child
		// processes rather than die and leave them behind.
		ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM, syscall.SIGPIPE)
		err = run(ctx, o, os.Stdout)
		stop()
	}
	if errors.Is(err, flag.ErrHelp) {
		return
	}
	if err != nil {
		fmt.Fprintln(os.Stderr, "bench failed:", err)
		os.Exit(1)
	}
}

// parseOptions reads the command line.
func parseOptions(args []string, out io.Writer) (options, error) {
	var o options
	fs := flag.NewFlagSet("bench", flag.ContinueOnError)
	fs.SetOutput(out)
	proxies := fs.String("proxies", "1,100,1000", "Comma-separated proxy counts, run from the smallest; 1 is always run first, as the ideal.")
	fs.Float64Var(&o.speed, "speed", 50, "Simulator speed-up over real-host pace (F26 timings divided by this); 1 is real pace.")
	fs.IntVar(&o.resyncs, "resyncs", 3, "Resync intervals to observe in steady state (0 skips the steady-state phase).")
	fs.DurationVar(&o.resyncInterval, "resync-interval", 0, "Operator resync interval of Ready proxies (default 5m / speed).")
	fs.DurationVar(&o.pollInterval, "poll-interval", 0, "Provider budgets.pollInterval, the listing cache lifetime (default 5s / speed).")
	fs.DurationVar(&o.notReadyInterval, "not-ready-interval", 0, "Operator poll interval of proxies not yet Ready (default 10s / speed).")
	fs.DurationVar(&o.healthInterval, "health-interval", time.Hour, "ProviderHealth check interval (its calls are per node, not per proxy; the default keeps them out of the figures).")
	fs.IntVar(&o.workers, "max-concurrent-reconciles", 4, "Proxies reconciled in parallel (the operator's default is 4).")
	fs.IntVar(&o.creators, "creators", 16, "Clients creating and deleting the Proxy objects in parallel (the bench's load, not the operator).")
	fs.DurationVar(&o.timeout, "timeout", 30*time.Minute, "Budget of each phase (create, delete) per proxy count.")
	fs.StringVar(&o.cpuProfile, "cpuprofile", "", "Write a CPU profile of the operator process to this file (suffixed -N per proxy count).")
	fs.StringVar(&o.heapProfile, "heapprofile", "", "Write a heap profile of the operator process with all N Ready to this file (suffixed -N).")
	fs.StringVar(&o.pvesimBin, "pvesim", "", "A built cmd/pvesim to run (default: build it with `go build`).")
	fs.IntVar(&o.createCap, "max-concurrent-creates", 0, "The entry's maxConcurrentCreates, instances in creation at once (0: the operator's default, 10; at most 1000).")
	fs.StringVar(&o.provider, "provider", providerProxmox, "The provider type measured: proxmox (on the simulator) or kubernetes (pods on the envtest API server, the bench playing the kubelet); `make bench ARGS='--provider kvm2'` runs the libvirt benchmarks instead.")
	if err := fs.Parse(args); err != nil {
		return o, fmt.Errorf("bench flags: %w", err)
	}
	var err error
	if o.proxies, err = parseCounts(*proxies); err != nil {
		return o, err
	}
	if o.provider != providerProxmox && o.provider != providerKubernetes {
		return o, fmt.Errorf("--provider %q: want %s or %s", o.provider, providerProxmox, providerKubernetes)
	}
	if o.speed <= 0 || o.workers < 1 || o.creators < 1 || o.resyncs < 0 || o.createCap < 0 {
		return o, errors.New("--speed, --max-concurrent-reconciles and --creators must be positive, --resyncs and --max-concurrent-creates not negative")
	}
	o.defaults()
	return o, nil
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
	slices.Sort(out) // the steady state's verdict compares each count with the next smaller
	return out, nil
}

// createCapText says how many creates the entry runs at once.
func (o *options) createCapText() string {
	if o.createCap == 0 {
		return fmt.Sprintf("maxConcurrentCreates %d (default)", config.DefaultMaxConcurrentCreates)
	}
	return fmt.Sprintf("maxConcurrentCreates %d", o.createCap)
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

// env is what every proxy count shares: the control plane, the bench's
// client, the operator's kubeconfig and the simulator's binary.
type env struct {
	o          options
	k8s        client.Client
	k8sWatch   client.WithWatch
	benchCfg   *rest.Config // the bench's own, not rate limited
	scheme     *kruntime.Scheme
	dir        string
	kubeconfig string
	pvesim     string
	apiserver  int // PID
	etcd       int // PID
	out        io.Writer
	started    time.Time
	loadStart  string
}

func run(ctx context.Context, o options, out io.Writer) error {
	logf.SetLogger(logr.Discard())
	if os.Getenv("KUBEBUILDER_ASSETS") == "" {
		return errors.New("KUBEBUILDER_ASSETS is not set: run `make bench`, which builds kube-apiserver and etcd first")
	}
	e := &env{o: o, out: out, started: time.Now().UTC(), loadStart: loadAverage()}
	var err error
	if e.dir, err = os.MkdirTemp("", "egress-proxies-bench-"); err != nil {
		return fmt.Errorf("making a temporary directory: %w", err)
	}
	defer func() { _ = os.RemoveAll(e.dir) }()
	root, err := modroot.Find()
	if err != nil {
		return err
	}
	if e.pvesim = o.pvesimBin; e.pvesim == "" && o.provider == providerProxmox {
		e.say("building cmd/pvesim")
		if e.pvesim, err = buildPvesim(ctx, root, e.dir); err != nil {
			return err
		}
	}
	scheme := kruntime.NewScheme()
	if err := errors.Join(clientgoscheme.AddToScheme(scheme), crawlv1alpha1.AddToScheme(scheme)); err != nil {
		return fmt.Errorf("building the scheme: %w", err)
	}
	e.say("starting a local kube-apiserver and etcd")
	te := &envtest.Environment{CRDDirectoryPaths: []string{filepath.Join(root, "config", "crd", "bases")}, ErrorIfCRDPathMissing: true, Scheme: scheme}
	restCfg, err := te.Start()
	if err != nil {
		return fmt.Errorf("starting the control plane: %w", err)
	}
	defer func() { _ = te.Stop() }()
	if err := e.findControlPlane(); err != nil {
		return err
	}
	// The bench's own client must not be what limits the figures.
	benchCfg := rest.CopyConfig(restCfg)
	benchCfg.QPS, benchCfg.Burst = -1, 0
	e.benchCfg, e.scheme = benchCfg, scheme
	if e.k8s, err = client.New(benchCfg, client.Options{Scheme: scheme}); err != nil {
		return fmt.Errorf("building a client: %w", err)
	}
	if e.k8sWatch, err = client.NewWithWatch(benchCfg, client.Options{Scheme: scheme}); err != nil {
		return fmt.Errorf("building a client: %w", err)
	}
	user, err := te.AddUser(envtest.User{Name: "bench-operator", Groups: []string{"system:masters"}}, nil)
	if err != nil {
		return fmt.Errorf("adding the operator's user: %w", err)
	}
	kc, err := user.KubeConfig()
	if err != nil {
		return fmt.Errorf("the operator's kubeconfig: %w", err)
	}
	e.kubeconfig = filepath.Join(e.dir, "kubeconfig")
	if err := os.WriteFile(e.kubeconfig, kc, 0o600); err != nil {
		return fmt.Errorf("writing the operator's kubeconfig: %w", err)
	}
	e.say("%s provider, speed %g, resync interval %s, provider poll interval %s, not-Ready poll %s, %d workers, %s",
		o.provider, o.speed, o.resyncInterval, o.pollInterval, o.notReadyInterval, o.workers, o.createCapText())
	var results []result
	for _, n := range o.proxies {
		r, err := e.benchOne(ctx, n)
		if err != nil {
			printReport(out, o, e.runInfo(), results)
			return fmt.Errorf("%d proxies: %w", n, err)
		}
		results = append(results, r)
	}
	printReport(out, o, e.runInfo(), results)
	return nil
}

// runInfo says when and under which load the run was made.
func (e *env) runInfo() string {
	return fmt.Sprintf("Run started %s, %d CPUs, load average (1, 5, 15 min) %s at the start and %s at the end: %#q.",
		e.started.Format("2006-01-02 15:04 UTC"), runtime.NumCPU(), e.loadStart, loadAverage(), strings.Join(append([]string{"go run ./hack/bench"}, os.Args[1:]...), " "))
}

// findControlPlane finds the PIDs of the kube-apiserver and etcd envtest
// started (its children).
func (e *env) findControlPlane() error {
	api, etcd := childrenNamed(os.Getpid(), "kube-apiserver"), childrenNamed(os.Getpid(), "etcd")
	if len(api) != 1 || len(etcd) != 1 {
		return fmt.Errorf("found %d kube-apiserver and %d etcd processes among the bench's children, want one each", len(api), len(etcd))
	}
	e.apiserver, e.etcd = api[0], etcd[0]
	return nil
}

// The provider types the bench measures.
const (
	providerProxmox    = "proxmox"
	providerKubernetes = "kubernetes"
)

// world is one proxy count's simulator (proxmox) or pod namespace and
// kubelet (kubernetes), the Proxies' namespace and the operator.
type world struct {
	sim     *simProcess // nil for kubernetes
	op      *operatorProcess
	ns      string
	podNS   string // kubernetes
	entry   string
	zones   []string
	dir     string
	kubelet func()       // stops the bench's kubelet (kubernetes)
	proxies *proxyCounts // the bench's informer of the Proxies of ns
}

func (e *env) newWorld(ctx context.Context, n int) (*world, error) {
	w := &world{dir: filepath.Join(e.dir, strconv.Itoa(n))}
	if err := os.MkdirAll(w.dir, 0o700); err != nil {
		return nil, fmt.Errorf("making a directory: %w", err)
	}
	var err error
	if w.ns, err = e.namespace(ctx, "bench-"); err != nil {
		return nil, err
	}
	var providers string
	namespaces := []string{w.ns}
	switch e.o.provider {
	case providerKubernetes:
		if w.podNS, err = e.namespace(ctx, "bench-pods-"); err != nil {
			return nil, err
		}
		namespaces = append(namespaces, w.podNS)
		w.entry, w.zones = kubernetesEntry, []string{kubernetesZone}
		providers = kubernetesProvidersYAML(w.podNS, e.o.createCap)
		w.kubelet = startKubelet(ctx, e.k8sWatch, w.podNS)
	default:
		if w.sim, err = startSim(ctx, e.pvesim, w.dir, e.o.speed); err != nil {
			return nil, err
		}
		providers, w.zones = pvelab.ProvidersYAML(pvelab.Options{Nodes: simNodes, PollInterval: e.o.pollInterval, MaxConcurrentCreates: e.o.createCap}, w.sim.api, w.sim.tok, w.sim.ca)
		w.entry = pvelab.EntryName
	}
	providersFile := filepath.Join(w.dir, "providers.yaml")
	if err := os.WriteFile(providersFile, []byte(providers), 0o600); err != nil {
		w.close()
		return nil, fmt.Errorf("writing the providers configuration: %w", err)
	}
	cpuProfile := ""
	if e.o.cpuProfile != "" {
		cpuProfile = fmt.Sprintf("%s-%d", e.o.cpuProfile, n)
	}
	if w.op, err = startOperatorProcess(ctx, e.o, e.kubeconfig, providersFile, strings.Join(namespaces, ","), cpuProfile); err != nil {
		w.close()
		return nil, err
	}
	if w.proxies, err = watchProxies(ctx, e.benchCfg, e.scheme, w.ns); err != nil {
		w.close()
		return nil, err
	}
	return w, nil
}

// namespace creates a namespace with a generated name.
func (e *env) namespace(ctx context.Context, prefix string) (string, error) {
	ns := &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{GenerateName: prefix}}
	if err := e.k8s.Create(ctx, ns); err != nil {
		return "", fmt.Errorf("creating a namespace: %w", err)
	}
	return ns.Name, nil
}

func (w *world) close() {
	if w.proxies != nil {
		_ = w.proxies.close() // the run's figures are taken; a stopped informer's error says nothing of them
	}
	if w.op != nil {
		w.op.stop()
	}
	if w.sim != nil {
		w.sim.stop()
	}
	if w.kubelet != nil {
		w.kubelet()
	}
}

// phase is what one phase (create, steady state, delete) cost.
type phase struct {
	took        time.Duration
	simCalls    map[string]int64 // by "METHOD /template"
	simBytes    map[string]int64
	apiCalls    map[string]int64  // the operator's, by "VERB resource"
	timings     map[string]timing // the operator's, by histogram
	opCPU       float64           // seconds
	simCPU      float64
	controlCPU  float64 // kube-apiserver and etcd
	objectsTook time.Duration
}

// result holds the figures of one proxy count.
type result struct {
	n                      int
	create, steady, delete phase
	steadyResyncs          int
	instanceAt, readyAt    []time.Duration // per Proxy, from the first Create call, sorted
	op, sim, api, etcd     procStats       // with all N Ready
	heap                   memStats
}

// mark is the counters at the start of a phase.
type mark struct {
	at                  time.Time
	api                 map[string]int64
	timings             map[string]timing
	op, sim, kapi, etcd procStats
}

func (e *env) mark(ctx context.Context, w *world) (mark, error) {
	m := mark{at: time.Now()}
	if err := w.sim.reset(ctx); err != nil {
		return m, err
	}
	var err error
	if m.api, err = w.op.apiCalls(ctx); err != nil {
		return m, err
	}
	if m.timings, err = w.op.timings(ctx); err != nil {
		return m, err
	}
	if m.op, err = readProc(w.op.pid()); err != nil {
		return m, err
	}
	if m.sim, err = readProc(w.sim.pid()); err != nil {
		return m, err
	}
	if m.kapi, err = readProc(e.apiserver); err != nil {
		return m, err
	}
	m.etcd, err = readProc(e.etcd)
	return m, err
}

// since is what happened from m on.
func (e *env) since(ctx context.Context, w *world, m mark) (phase, error) {
	p := phase{took: time.Since(m.at)}
	var err error
	if p.simCalls, p.simBytes, err = w.sim.counters(ctx); err != nil {
		return p, err
	}
	api, err := w.op.apiCalls(ctx)
	if err != nil {
		return p, err
	}
	p.apiCalls = map[string]int64{}
	for k, v := range api {
		if d := v - m.api[k]; d != 0 {
			p.apiCalls[k] = d
		}
	}
	t, err := w.op.timings(ctx)
	if err != nil {
		return p, err
	}
	p.timings = map[string]timing{}
	for k, v := range t {
		if d := (timing{Count: v.Count - m.timings[k].Count, Sum: v.Sum - m.timings[k].Sum}); d.Count != 0 {
			p.timings[k] = d
		}
	}
	op, err1 := readProc(w.op.pid())
	sim, err2 := readProc(w.sim.pid())
	kapi, err3 := readProc(e.apiserver)
	etcd, err4 := readProc(e.etcd)
	if err := errors.Join(err1, err2, err3, err4); err != nil {
		return p, err
	}
	p.opCPU, p.simCPU = op.CPU-m.op.CPU, sim.CPU-m.sim.CPU
	p.controlCPU = kapi.CPU - m.kapi.CPU + etcd.CPU - m.etcd.CPU
	return p, nil
}

func (e *env) benchOne(ctx context.Context, n int) (result, error) {
	o := e.o
	r := result{n: n}
	e.say("%d proxies: starting the %s world and the operator", n, e.o.provider)
	w, err := e.newWorld(ctx, n)
	if err != nil {
		return r, err
	}
	defer w.close()

	// The health reporter checks every node once at start: let it finish
	// so that its calls (per node, not per proxy) stay out of the figures.
	// A dry-run create warms the API server's create path (the first Proxy
	// create otherwise took about 2 s), so that it stays out of the timing.
	if err := waitFor(ctx, time.Minute, func() (bool, string, error) {
		if w.sim == nil { // kubernetes: the operator's caches are up
			c, err := w.op.apiCalls(ctx)
			return err == nil && c["WATCH proxies"] > 0, "waiting for the operator's caches", err
		}
		c, _, err := w.sim.counters(ctx)
		return err == nil && c["GET /version"] >= 3, "waiting for the first health check", err
	}); err != nil {
		return r, err
	}
	if err := e.k8s.Create(ctx, newProxy(w.ns, "warm-up", w.entry, w.zones[0]), client.DryRunAll); err != nil {
		return r, fmt.Errorf("dry-run create: %w", err)
	}
	if err := sleep(ctx, 300*time.Millisecond); err != nil {
		return r, err
	}

	// Create, and convergence: from the first Create call to all Ready.
	m, err := e.mark(ctx, w)
	if err != nil {
		return r, err
	}
	if err := e.parallel(ctx, n, func(ctx context.Context, i int) error {
		p := newProxy(w.ns, fmt.Sprintf("egress-%05d", i), w.entry, w.zones[i%len(w.zones)])
		if err := e.k8s.Create(ctx, p); err != nil {
			return fmt.Errorf("creating proxy %s: %w", p.Name, err)
		}
		return nil
	}); err != nil {
		return r, err
	}
	objectsTook := time.Since(m.at)
	e.say("%d proxies: created in %s, waiting for all Ready", n, objectsTook.Round(time.Millisecond))
	if err := waitFor(ctx, o.timeout, func() (bool, string, error) {
		ready, total, err := w.proxies.count(ctx)
		// The operator's RSS on the way, so that a run cut short still
		// tells how its memory grew.
		st, _ := readProc(w.op.pid())
		return total == n && ready == n, fmt.Sprintf("%d of %d Ready, operator VmRSS %.0f MiB", ready, total, mib(st.RSS)), err
	}); err != nil {
		return r, err
	}
	if r.create, err = e.since(ctx, w, m); err != nil {
		return r, err
	}
	r.create.objectsTook = objectsTook
	r.instanceAt, r.readyAt = w.proxies.spread(m.at)
	e.say("%d proxies: all Ready after %s, %d provider API calls, %d API server requests, operator CPU %.1f s", n, r.create.took.Round(time.Millisecond),
		sum(r.create.simCalls), sum(r.create.apiCalls), r.create.opCPU)

	// Steady state: settle for two poll intervals, then count. Without a
	// steady phase, settle as long before the memory is read.
	if err := sleep(ctx, 2*o.pollInterval+o.notReadyInterval); err != nil {
		return r, err
	}
	if o.resyncs > 0 {
		if m, err = e.mark(ctx, w); err != nil {
			return r, err
		}
		if err := sleep(ctx, time.Duration(o.resyncs)*o.resyncInterval); err != nil {
			return r, err
		}
		if r.steady, err = e.since(ctx, w, m); err != nil {
			return r, err
		}
		r.steadyResyncs = o.resyncs
		ready, total, err := w.proxies.count(ctx)
		if err != nil {
			return r, fmt.Errorf("after the steady-state window: %w", err)
		}
		if ready != n || total != n {
			return r, fmt.Errorf("after the steady-state window: %d of %d Ready", ready, total)
		}
		e.say("%d proxies: %d provider API calls, %d API server requests in %d resyncs (%s)", n, sum(r.steady.simCalls), sum(r.steady.apiCalls),
			o.resyncs, r.steady.took.Round(time.Millisecond))
	}

	// Memory with all N Ready.
	if err := e.memory(ctx, w, &r); err != nil {
		return r, err
	}

	// Delete.
	if m, err = e.mark(ctx, w); err != nil {
		return r, err
	}
	if err := e.parallel(ctx, n, func(ctx context.Context, i int) error {
		p := newProxy(w.ns, fmt.Sprintf("egress-%05d", i), "", "")
		if err := e.k8s.Delete(ctx, p); err != nil {
			return fmt.Errorf("deleting proxy %s: %w", p.Name, err)
		}
		return nil
	}); err != nil {
		return r, err
	}
	if err := waitFor(ctx, o.timeout, func() (bool, string, error) {
		_, total, err := w.proxies.count(ctx)
		return total == 0, fmt.Sprintf("%d proxies left", total), err
	}); err != nil {
		return r, err
	}
	if r.delete, err = e.since(ctx, w, m); err != nil {
		return r, err
	}
	left, err := w.sim.clones(ctx)
	if err != nil {
		return r, err
	}
	if left != 0 {
		return r, fmt.Errorf("%d VMs left after deleting every Proxy", left)
	}
	e.say("%d proxies: all gone after %s, %d provider API calls, %d API server requests, operator CPU %.1f s", n, r.delete.took.Round(time.Millisecond),
		sum(r.delete.simCalls), sum(r.delete.apiCalls), r.delete.opCPU)
	for _, ns := range []string{w.ns, w.podNS} {
		if ns == "" {
			continue
		}
		if err := e.k8s.Delete(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: ns}}); err != nil {
			return r, fmt.Errorf("deleting namespace %s: %w", ns, err)
		}
	}
	return r, nil
}

// memory reads the RSS of every process with all N Ready, and the
// operator's heap (and profile, when asked).
func (e *env) memory(ctx context.Context, w *world, r *result) error {
	var err error
	if r.op, err = readProc(w.op.pid()); err != nil {
		return err
	}
	if r.sim, err = readProc(w.sim.pid()); err != nil {
		return err
	}
	if r.api, err = readProc(e.apiserver); err != nil {
		return err
	}
	if r.etcd, err = readProc(e.etcd); err != nil {
		return err
	}
	if err := w.op.get(ctx, "/memstats", &r.heap); err != nil {
		return err
	}
	if e.o.heapProfile != "" {
		return w.op.heapProfile(ctx, fmt.Sprintf("%s-%d", e.o.heapProfile, r.n))
	}
	return nil
}

// parallel runs f for 0..n-1 on --creators goroutines and returns the
// first error.
func (e *env) parallel(ctx context.Context, n int, f func(context.Context, int) error) error {
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	next := make(chan int)
	errs := make(chan error, e.o.creators)
	var wg sync.WaitGroup
	for range min(e.o.creators, n) {
		wg.Go(func() {
			for i := range next {
				if err := f(ctx, i); err != nil {
					errs <- err
					cancel()
					return
				}
			}
		})
	}
feed:
	for i := range n {
		select {
		case next <- i:
		case <-ctx.Done():
			break feed
		}
	}
	close(next)
	wg.Wait()
	select {
	case err := <-errs:
		return err
	default:
		return ctx.Err()
	}
}

func newProxy(ns, name, entry, zone string) *crawlv1alpha1.Proxy {
	spec := crawlv1alpha1.ProxySpec{Provider: entry, Zone: zone, MachineType: pvelab.MachineType, Image: pvelab.Image}
	if entry == kubernetesEntry {
		spec.MachineType, spec.Image = kubernetesMachineType, kubernetesImage
	}
	return &crawlv1alpha1.Proxy{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: name}, Spec: spec}
}

// waitFor checks cond every 50ms until it holds, printing its progress
// every few seconds. The conditions read the bench's informer or the
// simulator's counters, not a listing from the API server.
func waitFor(ctx context.Context, timeout time.Duration, cond func() (bool, string, error)) error {
	const every = 50 * time.Millisecond
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
		if time.Since(last) > 10*time.Second {
			last = time.Now()
			fmt.Fprintf(os.Stderr, "==> %s     %s\n", time.Now().UTC().Format("15:04:05"), msg)
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

// say prints progress on stderr: stdout is the report.
func (e *env) say(format string, args ...any) {
	fmt.Fprintf(os.Stderr, "==> %s "+format+"\n", append([]any{time.Now().UTC().Format("15:04:05")}, args...)...)
}
