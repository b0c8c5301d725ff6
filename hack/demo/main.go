// Command demo shows the operator's control loop on this machine, with no
// cluster and no hypervisor: it starts a local kube-apiserver and etcd (the
// ones the tests use), runs the operator's controllers against them with an
// in-memory provider that stands in for a hypervisor, applies three Proxies,
// prints their progress until they are Ready, replaces one whose instance
// dies, deletes one and shows its instance go.
//
// Run it with `make demo`. The in-memory provider creates no VM and no proxy
// process; the Proxmox VE simulator and provider replace it when they land.
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"os"
	"os/signal"
	"path/filepath"
	"sort"
	"strings"
	"syscall"
	"time"

	"github.com/go-logr/logr"
	"github.com/prometheus/client_golang/prometheus"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	clientgoscheme "k8s.io/client-go/kubernetes/scheme"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/envtest"
	logf "sigs.k8s.io/controller-runtime/pkg/log"
	metricsserver "sigs.k8s.io/controller-runtime/pkg/metrics/server"

	crawlv1alpha1 "github.com/egress-proxies/egress-proxies-operator/api/v1alpha1"
	"github.com/egress-proxies/egress-proxies-operator/internal/config"
	"github.com/egress-proxies/egress-proxies-operator/internal/controller"
	"github.com/egress-proxies/egress-proxies-operator/internal/metrics"
	"github.com/egress-proxies/egress-proxies-operator/internal/provider"
	"github.com/egress-proxies/egress-proxies-operator/internal/provider/instrumented"
	"github.com/egress-proxies/egress-proxies-operator/internal/testing/fakeprovider"
)

const providersYAML = `
providers:
  - name: lab
    type: fake
    zones: [rack-a, rack-b]
    machineTypes:
      - {name: small, cpus: 1, memoryMiB: 512, diskGiB: 8}
    images: [debian-12]
`

func main() {
	wait := flag.Bool("wait", false, "Keep the control plane running after the demo until Ctrl-C, to look around with kubectl.")
	flag.Parse()
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	err := run(ctx, *wait)
	stop()
	if err != nil {
		fmt.Fprintln(os.Stderr, "demo failed:", err)
		os.Exit(1)
	}
}

func run(ctx context.Context, wait bool) error {
	logf.SetLogger(logr.Discard())
	if os.Getenv("KUBEBUILDER_ASSETS") == "" {
		return errors.New("KUBEBUILDER_ASSETS is not set: run `make demo`, which builds kube-apiserver and etcd first")
	}
	scheme := runtime.NewScheme()
	if err := errors.Join(clientgoscheme.AddToScheme(scheme), crawlv1alpha1.AddToScheme(scheme)); err != nil {
		return err
	}
	say("starting a local kube-apiserver and etcd")
	env := &envtest.Environment{CRDDirectoryPaths: []string{filepath.Join("config", "crd", "bases")}, ErrorIfCRDPathMissing: true, Scheme: scheme}
	restCfg, err := env.Start()
	if err != nil {
		return fmt.Errorf("starting the control plane: %w", err)
	}
	defer func() {
		say("stopping the control plane")
		_ = env.Stop()
	}()
	dir, err := os.MkdirTemp("", "egress-proxies-demo-")
	if err != nil {
		return err
	}
	defer func() { _ = os.RemoveAll(dir) }()
	kubeconfig := filepath.Join(dir, "kubeconfig")
	user, err := env.AddUser(envtest.User{Name: "demo", Groups: []string{"system:masters"}}, nil)
	if err != nil {
		return err
	}
	kc, err := user.KubeConfig()
	if err != nil {
		return err
	}
	if err := os.WriteFile(kubeconfig, kc, 0o600); err != nil {
		return err
	}

	cfg, err := config.Parse([]byte(providersYAML), fakeprovider.Registry())
	if err != nil {
		return err
	}
	fake := fakeprovider.New(nil)
	fake.GetsUntilRunning = 4
	fake.Latency = 150 * time.Millisecond
	m, err := metrics.New(prometheus.NewRegistry())
	if err != nil {
		return err
	}
	prov := instrumented.Wrap(fake, instrumented.Options{Name: "lab", Type: "fake", Metrics: m})
	mgr, err := ctrl.NewManager(restCfg, ctrl.Options{
		Scheme: scheme, Metrics: metricsserver.Options{BindAddress: "0"}, HealthProbeBindAddress: "0",
		Cache: controller.CacheOptions(),
	})
	if err != nil {
		return err
	}
	if err := controller.SetupWithManager(mgr, controller.Options{
		Config: cfg, Providers: map[string]provider.Provider{"lab": prov}, Metrics: m,
		PollInterval: 500 * time.Millisecond, ResyncInterval: time.Second, HealthInterval: 2 * time.Second,
		GCInterval: time.Hour,
	}); err != nil {
		return err
	}
	mctx, cancel := context.WithCancel(ctx)
	defer cancel()
	mgrDone := make(chan error, 1)
	go func() { mgrDone <- mgr.Start(mctx) }()
	say("operator running with an in-memory provider entry \"lab\" (zones rack-a, rack-b)")

	k8s, err := client.New(restCfg, client.Options{Scheme: scheme})
	if err != nil {
		return err
	}
	ns := &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: "crawlers"}}
	if err := k8s.Create(ctx, ns); err != nil {
		return err
	}
	for i, zone := range []string{"rack-a", "rack-b", "rack-a"} {
		p := &crawlv1alpha1.Proxy{
			ObjectMeta: metav1.ObjectMeta{Namespace: ns.Name, Name: fmt.Sprintf("egress-%d", i+1)},
			Spec:       crawlv1alpha1.ProxySpec{Provider: "lab", Zone: zone, MachineType: "small", Image: "debian-12"},
		}
		if err := k8s.Create(ctx, p); err != nil {
			return err
		}
		say("applied Proxy %s/%s in zone %s", p.Namespace, p.Name, zone)
	}
	if err := watchUntil(ctx, k8s, ns.Name, 3, allReady); err != nil {
		return err
	}

	var victim crawlv1alpha1.Proxy
	if err := k8s.Get(ctx, client.ObjectKey{Namespace: ns.Name, Name: "egress-2"}, &victim); err != nil {
		return err
	}
	say("the instance of egress-2 (%s) dies; the operator replaces it", victim.Status.InstanceID)
	fake.SetState(provider.ID(victim.Status.InstanceID), provider.StateStopped)
	if err := watchUntil(ctx, k8s, ns.Name, 3, func(ps []crawlv1alpha1.Proxy) bool {
		return allReady(ps) && ps[1].Status.Replacements == 1
	}); err != nil {
		return err
	}

	say("deleting Proxy egress-3; its instance is removed before the object goes")
	if err := k8s.Delete(ctx, &crawlv1alpha1.Proxy{ObjectMeta: metav1.ObjectMeta{Namespace: ns.Name, Name: "egress-3"}}); err != nil {
		return err
	}
	if err := poll(ctx, func() bool {
		err := k8s.Get(ctx, client.ObjectKey{Namespace: ns.Name, Name: "egress-3"}, &crawlv1alpha1.Proxy{})
		return apierrors.IsNotFound(err)
	}); err != nil {
		return err
	}
	var ids []string
	for _, in := range fake.Instances() {
		ids = append(ids, string(in.ID))
	}
	say("egress-3 is gone; instances left on the provider: %s", strings.Join(ids, ", "))
	say("API calls made: %d create, %d get, %d delete",
		fake.CallCount(provider.OpCreate), fake.CallCount(provider.OpGet), fake.CallCount(provider.OpDelete))

	if wait {
		say("the control plane keeps running; look around with:")
		fmt.Printf("    export KUBECONFIG=%s\n    kubectl get proxies -A -o wide\n    kubectl get providerhealths\n    kubectl get events -A\n", kubeconfig)
		say("press Ctrl-C to stop and clean up")
		<-ctx.Done()
	}
	cancel()
	if err := <-mgrDone; err != nil {
		return fmt.Errorf("operator: %w", err)
	}
	say("done")
	return nil
}

// allReady reports whether every Proxy is Ready.
func allReady(ps []crawlv1alpha1.Proxy) bool {
	for _, p := range ps {
		if p.Status.Phase != crawlv1alpha1.ProxyPhaseReady {
			return false
		}
	}
	return true
}

// watchUntil prints a line per Proxy whenever its phase changes, and a
// progress line, until done holds for the n Proxies of the namespace.
func watchUntil(ctx context.Context, k8s client.Client, ns string, n int, done func([]crawlv1alpha1.Proxy) bool) error {
	seen := map[string]string{}
	return poll(ctx, func() bool {
		var list crawlv1alpha1.ProxyList
		if err := k8s.List(ctx, &list, client.InNamespace(ns)); err != nil {
			return false
		}
		sort.Slice(list.Items, func(i, j int) bool { return list.Items[i].Name < list.Items[j].Name })
		ready := 0
		changed := false
		for _, p := range list.Items {
			line := fmt.Sprintf("%-9s %-13s node=%-12s address=%-15s instance=%s", p.Name, p.Status.Phase, p.Status.Node, p.Status.Address, p.Status.InstanceID)
			if seen[p.Name] != line {
				seen[p.Name], changed = line, true
				fmt.Println("    " + line)
			}
			if p.Status.Phase == crawlv1alpha1.ProxyPhaseReady {
				ready++
			}
		}
		if changed {
			fmt.Printf("    -- %d of %d Ready\n", ready, len(list.Items))
		}
		return len(list.Items) == n && done(list.Items)
	})
}

// poll checks cond every 100ms until it holds, ctx ends or a minute passes.
func poll(ctx context.Context, cond func() bool) error {
	deadline := time.NewTimer(time.Minute)
	defer deadline.Stop()
	tick := time.NewTicker(100 * time.Millisecond)
	defer tick.Stop()
	for !cond() {
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-deadline.C:
			return errors.New("timed out after a minute")
		case <-tick.C:
		}
	}
	return nil
}

func say(format string, args ...any) {
	fmt.Printf("==> "+format+"\n", args...)
}
