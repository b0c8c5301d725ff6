package main

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/pprof"
	"os"
	"os/exec"
	"os/signal"
	"runtime"
	rpprof "runtime/pprof"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/go-logr/logr"
	"github.com/prometheus/client_golang/prometheus"
	kruntime "k8s.io/apimachinery/pkg/runtime"
	clientgoscheme "k8s.io/client-go/kubernetes/scheme"
	ctrl "sigs.k8s.io/controller-runtime"
	ctrlconfig "sigs.k8s.io/controller-runtime/pkg/client/config"
	logf "sigs.k8s.io/controller-runtime/pkg/log"
	ctrlmetrics "sigs.k8s.io/controller-runtime/pkg/metrics"

	crawlv1alpha1 "github.com/egress-proxies/egress-proxies-operator/api/v1alpha1"
	"github.com/egress-proxies/egress-proxies-operator/internal/config"
	"github.com/egress-proxies/egress-proxies-operator/internal/controller"
	"github.com/egress-proxies/egress-proxies-operator/internal/ownership/ownershiptest"
	"github.com/egress-proxies/egress-proxies-operator/internal/setup"
)

// operatorSubcommand is the first argument that makes the bench binary the
// operator process: the bench starts itself again with it, so that the
// operator's CPU time and RSS are its own process's, apart from the bench's
// client, envtest and the simulator.
const operatorSubcommand = "operator"

// operatorFlags are the operator process's settings.
type operatorFlags struct {
	providers, namespaces, cpuProfile, ownImage           string
	pollInterval, resyncInterval, healthInterval, gcEvery time.Duration
	workers                                               int
}

// operatorHello is the line the operator process prints on stdout once its
// debug listener serves.
type operatorHello struct {
	Debug string `json:"debug"`
}

// memStats is what the operator process's /memstats answers.
type memStats struct {
	HeapAlloc, HeapInuse, HeapSys, StackInuse, Sys uint64
	Goroutines                                     int
}

// operatorMain runs the operator as the binary wires it (internal/setup,
// the client's rate limit left to the API server as ctrl.GetConfig leaves
// it), confined to one namespace, with a counting transport on its
// rest.Config and a loopback debug listener: /debug/pprof/, /apicalls (the
// counts of requests to the API server) and /memstats. It stops on SIGTERM
// or when its stdin closes (the bench is gone).
func operatorMain(args []string) error {
	var f operatorFlags
	fs := flag.NewFlagSet(operatorSubcommand, flag.ContinueOnError)
	fs.StringVar(&f.providers, "providers-config", "", "providers configuration file")
	fs.StringVar(&f.namespaces, "namespaces", "", "comma-separated namespaces watched (the Proxies', and the kubernetes provider's pods')")
	fs.StringVar(&f.ownImage, "proxy-image", "registry.example/egress-proxies-operator:bench", "the image of the kubernetes provider's pods")
	fs.StringVar(&f.cpuProfile, "cpuprofile", "", "write a CPU profile of the operator process there")
	fs.DurationVar(&f.pollInterval, "poll-interval", controller.DefaultPollInterval, "not-Ready poll interval")
	fs.DurationVar(&f.resyncInterval, "resync-interval", controller.DefaultResyncInterval, "resync interval")
	fs.DurationVar(&f.healthInterval, "health-interval", time.Hour, "ProviderHealth interval")
	fs.DurationVar(&f.gcEvery, "gc-interval", time.Hour, "garbage collection interval")
	fs.IntVar(&f.workers, "max-concurrent-reconciles", 4, "workers")
	if err := fs.Parse(args); err != nil {
		return fmt.Errorf("operator flags: %w", err)
	}
	// The binary logs at info level; the bench's operator logs nothing, so
	// that its figures do not depend on where a log would go.
	logf.SetLogger(logr.Discard())
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	go func() {
		_, _ = io.Copy(io.Discard, os.Stdin)
		stop()
	}()
	if f.cpuProfile != "" {
		pf, err := os.Create(f.cpuProfile)
		if err != nil {
			return fmt.Errorf("creating the CPU profile: %w", err)
		}
		defer func() { _ = pf.Close() }()
		if err := rpprof.StartCPUProfile(pf); err != nil {
			return fmt.Errorf("starting the CPU profile: %w", err)
		}
		defer rpprof.StopCPUProfile()
	}
	cfg, err := config.Load(f.providers, setup.Types.Registry())
	if err != nil {
		return err
	}
	restCfg, err := ctrlconfig.GetConfig() // KUBECONFIG, as the binary's ctrl.GetConfig
	if err != nil {
		return fmt.Errorf("reaching the API server: %w", err)
	}
	calls := newAPICounter()
	restCfg.Wrap(calls.wrap)
	reg := prometheus.NewRegistry()
	scheme := kruntime.NewScheme()
	if err := errors.Join(clientgoscheme.AddToScheme(scheme), crawlv1alpha1.AddToScheme(scheme)); err != nil {
		return fmt.Errorf("building the scheme: %w", err)
	}
	op, err := setup.New(setup.Options{
		RestConfig: restCfg, Config: cfg, Namespaces: strings.Split(f.namespaces, ","), OwnImage: f.ownImage,
		Manager: ctrl.Options{Scheme: scheme}, Registerer: reg,
		// A fixed test identity: the bench measures the provider's calls,
		// not the key Secret's create at start.
		Ownership: ownershiptest.Identity("bench"),
		Controller: controller.Options{
			PollInterval: f.pollInterval, ResyncInterval: f.resyncInterval, MaxConcurrentReconciles: f.workers,
			HealthInterval: f.healthInterval, GCInterval: f.gcEvery,
		},
	})
	if err != nil {
		return err
	}
	ln, err := (&net.ListenConfig{}).Listen(ctx, "tcp", "127.0.0.1:0")
	if err != nil {
		return fmt.Errorf("debug listener: %w", err)
	}
	srv := &http.Server{Handler: debugMux(calls, prometheus.Gatherers{reg, ctrlmetrics.Registry}), ReadHeaderTimeout: 10 * time.Second}
	go func() { _ = srv.Serve(ln) }()
	defer func() { _ = srv.Close() }()
	hello, err := json.Marshal(operatorHello{Debug: "http://" + ln.Addr().String()})
	if err != nil {
		return fmt.Errorf("encoding the hello line: %w", err)
	}
	if _, err := fmt.Printf("%s\n", hello); err != nil {
		return fmt.Errorf("writing the hello line: %w", err)
	}
	if err := op.Manager.Start(ctx); err != nil {
		return fmt.Errorf("operator: %w", err)
	}
	return nil
}

// timing is a histogram's count and sum of seconds.
type timing struct {
	Count uint64  `json:"count"`
	Sum   float64 `json:"sum"`
}

// timingKeys name the histograms the bench reads, by metric, from the
// label that tells them apart.
var timingKeys = map[string]struct{ prefix, label string }{
	"egress_proxies_provider_call_duration_seconds": {"provider", "operation"},
	"controller_runtime_reconcile_time_seconds":     {"reconcile", "controller"},
	"workqueue_queue_duration_seconds":              {"queue wait", "name"},
}

// timings sums the histograms of timingKeys: where the operator's time
// goes (provider calls by operation and outcome, reconciles, waits in the
// work queues).
func timings(g prometheus.Gatherer) (map[string]timing, error) {
	mfs, err := g.Gather()
	if err != nil {
		return nil, fmt.Errorf("gathering metrics: %w", err)
	}
	out := map[string]timing{}
	for _, mf := range mfs {
		k, ok := timingKeys[mf.GetName()]
		if !ok {
			continue
		}
		for _, m := range mf.GetMetric() {
			parts := []string{k.prefix}
			for _, l := range m.GetLabel() {
				if l.GetName() == k.label || (k.prefix == "provider" && l.GetName() == "outcome") {
					parts = append(parts, l.GetValue())
				}
			}
			key := strings.Join(parts, " ")
			t := out[key]
			t.Count += m.GetHistogram().GetSampleCount()
			t.Sum += m.GetHistogram().GetSampleSum()
			out[key] = t
		}
	}
	return out, nil
}

// debugMux serves the operator process's figures to the bench.
func debugMux(calls *apiCounter, g prometheus.Gatherer) *http.ServeMux {
	mux := http.NewServeMux()
	mux.HandleFunc("/debug/pprof/", pprof.Index)
	mux.HandleFunc("/debug/pprof/profile", pprof.Profile)
	mux.HandleFunc("GET /apicalls", func(w http.ResponseWriter, _ *http.Request) {
		w.Header().Set("Content-Type", "application/json")
		_ = json.NewEncoder(w).Encode(calls.snapshot())
	})
	mux.HandleFunc("GET /timings", func(w http.ResponseWriter, _ *http.Request) {
		t, err := timings(g)
		if err != nil {
			http.Error(w, err.Error(), http.StatusInternalServerError)
			return
		}
		w.Header().Set("Content-Type", "application/json")
		_ = json.NewEncoder(w).Encode(t)
	})
	mux.HandleFunc("GET /memstats", func(w http.ResponseWriter, _ *http.Request) {
		var ms runtime.MemStats
		runtime.ReadMemStats(&ms)
		w.Header().Set("Content-Type", "application/json")
		_ = json.NewEncoder(w).Encode(memStats{
			HeapAlloc: ms.HeapAlloc, HeapInuse: ms.HeapInuse, HeapSys: ms.HeapSys, StackInuse: ms.StackInuse,
			Sys: ms.Sys, Goroutines: runtime.NumGoroutine(),
		})
	})
	return mux
}

// operatorProcess is the bench's handle on a running operator process.
type operatorProcess struct {
	cmd    *exec.Cmd
	cancel context.CancelFunc
	stdin  io.Closer
	done   chan error
	debug  string
	hc     *http.Client
}

// startOperatorProcess starts this binary again as the operator, with the
// kubeconfig and providers configuration in the named files, watching the
// comma-separated namespaces.
func startOperatorProcess(ctx context.Context, o options, kubeconfig, providers, namespaces, cpuProfile string) (*operatorProcess, error) {
	self, err := os.Executable()
	if err != nil {
		return nil, fmt.Errorf("finding the bench binary: %w", err)
	}
	args := []string{operatorSubcommand, "--providers-config", providers, "--namespaces", namespaces,
		"--poll-interval", o.notReadyInterval.String(), "--resync-interval", o.resyncInterval.String(),
		"--health-interval", o.healthInterval.String(), "--max-concurrent-reconciles", strconv.Itoa(o.workers)}
	if cpuProfile != "" {
		args = append(args, "--cpuprofile", cpuProfile)
	}
	p := &operatorProcess{done: make(chan error, 1), hc: &http.Client{Timeout: 2 * time.Minute}}
	// Its own context: stop ends it with SIGTERM, SIGKILL 30 s later.
	pctx, cancel := context.WithCancel(context.WithoutCancel(ctx))
	p.cancel = cancel
	p.cmd = exec.CommandContext(pctx, self, args...) //nolint:gosec // G204: this very binary.
	p.cmd.Cancel = func() error { return p.cmd.Process.Signal(syscall.SIGTERM) }
	p.cmd.WaitDelay = 30 * time.Second
	p.cmd.Env = append(os.Environ(), "KUBECONFIG="+kubeconfig)
	p.cmd.Stderr = os.Stderr
	stdout, err := p.cmd.StdoutPipe()
	if err != nil {
		cancel()
		return nil, fmt.Errorf("operator stdout: %w", err)
	}
	stdin, err := p.cmd.StdinPipe()
	if err != nil {
		cancel()
		return nil, fmt.Errorf("operator stdin: %w", err)
	}
	p.stdin = stdin
	if err := p.cmd.Start(); err != nil {
		cancel()
		return nil, fmt.Errorf("starting the operator process: %w", err)
	}
	hello := make(chan string, 1)
	go func() {
		sc := bufio.NewScanner(stdout)
		if sc.Scan() {
			hello <- sc.Text()
		}
		close(hello)
		_, _ = io.Copy(io.Discard, stdout)
		p.done <- p.cmd.Wait()
	}()
	t := time.NewTimer(time.Minute)
	defer t.Stop()
	select {
	case line, ok := <-hello:
		var h operatorHello
		if !ok || json.Unmarshal([]byte(line), &h) != nil || h.Debug == "" {
			p.stop()
			return nil, fmt.Errorf("the operator process did not start (first line %q)", line)
		}
		p.debug = h.Debug
		return p, nil
	case <-t.C:
	case <-ctx.Done():
	}
	p.stop()
	return nil, errors.New("the operator process did not start within a minute")
}

// pid is the operator's process id.
func (p *operatorProcess) pid() int { return p.cmd.Process.Pid }

// get decodes the answer of a debug GET into v.
func (p *operatorProcess) get(ctx context.Context, path string, v any) error {
	return getJSON(ctx, p.hc, p.debug+path, "operator "+path, v)
}

// getJSON decodes the JSON answer of a GET of url into v; what names the
// request in errors. The bench reads its child processes' debug and admin
// endpoints with it.
func getJSON(ctx context.Context, hc *http.Client, url, what string, v any) error {
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, url, nil)
	if err != nil {
		return fmt.Errorf("%s: %w", what, err)
	}
	resp, err := hc.Do(req)
	if err != nil {
		return fmt.Errorf("%s: %w", what, err)
	}
	defer func() { _ = resp.Body.Close() }()
	if resp.StatusCode != http.StatusOK {
		return fmt.Errorf("%s: %s", what, resp.Status)
	}
	if err := json.NewDecoder(resp.Body).Decode(v); err != nil {
		return fmt.Errorf("%s: %w", what, err)
	}
	return nil
}

// timings returns the operator's timing histograms so far.
func (p *operatorProcess) timings(ctx context.Context) (map[string]timing, error) {
	var t map[string]timing
	if err := p.get(ctx, "/timings", &t); err != nil {
		return nil, err
	}
	return t, nil
}

// apiCalls returns the operator's requests to the API server so far.
func (p *operatorProcess) apiCalls(ctx context.Context) (map[string]int64, error) {
	var c map[string]int64
	if err := p.get(ctx, "/apicalls", &c); err != nil {
		return nil, err
	}
	return c, nil
}

// heapProfile writes the operator's heap profile (after a GC) to file.
func (p *operatorProcess) heapProfile(ctx context.Context, file string) error {
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, p.debug+"/debug/pprof/heap?gc=1", nil)
	if err != nil {
		return fmt.Errorf("heap profile: %w", err)
	}
	resp, err := p.hc.Do(req)
	if err != nil {
		return fmt.Errorf("heap profile: %w", err)
	}
	defer func() { _ = resp.Body.Close() }()
	out, err := os.Create(file) //nolint:gosec // G304: the file --heapprofile names.
	if err != nil {
		return fmt.Errorf("heap profile: %w", err)
	}
	if _, err := io.Copy(out, resp.Body); err != nil {
		_ = out.Close()
		return fmt.Errorf("heap profile: %w", err)
	}
	if err := out.Close(); err != nil {
		return fmt.Errorf("heap profile: %w", err)
	}
	return nil
}

// stop ends the operator and waits for it.
func (p *operatorProcess) stop() {
	p.cancel()
	_ = p.stdin.Close()
	if err := <-p.done; err != nil && !isSignalExit(err) {
		fmt.Fprintln(os.Stderr, "operator:", err)
	}
}

// isSignalExit reports whether a child's Wait error is only stop's doing:
// the SIGTERM it sent, or the cancelled context exec reports when the child
// exited cleanly on it.
func isSignalExit(err error) bool {
	if errors.Is(err, context.Canceled) {
		return true
	}
	var ee *exec.ExitError
	if !errors.As(err, &ee) {
		return false
	}
	ws, ok := ee.Sys().(syscall.WaitStatus)
	return ok && ws.Signaled() && ws.Signal() == syscall.SIGTERM
}
