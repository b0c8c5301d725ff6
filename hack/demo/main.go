// Command demo shows the operator doing its job on this machine, with no
// cluster and no hypervisor: it starts a local kube-apiserver and etcd (the
// ones the tests use), a simulated 3-node Proxmox VE cluster whose VMs really
// run the proxy their cloud-init seed configures, and the operator with a
// proxmox provider entry pointing at it. It applies three Proxies, one per
// zone, prints their progress until they are Ready, sends a request through
// one of them with its credentials, deletes another and shows its VM go.
//
// Run it with `make demo` (ARGS=-wait keeps everything up to look around).
// Ctrl-C stops it and removes every process, port and file it made.
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"net/url"
	"os"
	"os/signal"
	"path/filepath"
	"sort"
	"strings"
	"syscall"
	"time"

	"github.com/go-logr/logr"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	clientgoscheme "k8s.io/client-go/kubernetes/scheme"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/envtest"
	logf "sigs.k8s.io/controller-runtime/pkg/log"

	crawlv1alpha1 "github.com/egress-proxies/egress-proxies-operator/api/v1alpha1"
	"github.com/egress-proxies/egress-proxies-operator/api/v1alpha1/published"
	"github.com/egress-proxies/egress-proxies-operator/internal/controller"
	"github.com/egress-proxies/egress-proxies-operator/internal/probe"
	"github.com/egress-proxies/egress-proxies-operator/internal/testing/modroot"
	"github.com/egress-proxies/egress-proxies-operator/internal/testing/poll"
	"github.com/egress-proxies/egress-proxies-operator/internal/testing/pvelab"
)

// options are the demo's flags.
type options struct {
	wait  bool
	speed float64
	out   io.Writer
}

func main() {
	var o options
	flag.BoolVar(&o.wait, "wait", false, "Keep everything running after the demo until Ctrl-C, to look around with kubectl.")
	flag.Float64Var(&o.speed, "speed", 10, "Speed-up over a real Proxmox VE host (1 is real-host pace: about a minute per proxy).")
	flag.Parse()
	o.out = os.Stdout
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	err := run(ctx, o)
	stop()
	switch {
	case errors.Is(err, context.Canceled):
		fmt.Println("==> interrupted; everything is cleaned up")
	case err != nil:
		fmt.Fprintln(os.Stderr, "demo failed:", err)
		os.Exit(1)
	}
}

// run is the demo; it returns nil once a request went through a proxy (and,
// with wait, after Ctrl-C), and removes everything it started on return.
func run(ctx context.Context, o options) error {
	say := func(format string, args ...any) { _, _ = fmt.Fprintf(o.out, "==> "+format+"\n", args...) }
	logf.SetLogger(logr.Discard())
	if os.Getenv("KUBEBUILDER_ASSETS") == "" {
		return errors.New("KUBEBUILDER_ASSETS is not set: run `make demo`, which builds kube-apiserver and etcd first")
	}
	dir, err := os.MkdirTemp("", "egress-proxies-demo-")
	if err != nil {
		return err
	}
	defer func() { _ = os.RemoveAll(dir) }()

	scheme := runtime.NewScheme()
	if err := errors.Join(clientgoscheme.AddToScheme(scheme), crawlv1alpha1.AddToScheme(scheme)); err != nil {
		return err
	}
	root, err := modroot.Find()
	if err != nil {
		return err
	}
	say("starting a local kube-apiserver and etcd")
	env := &envtest.Environment{CRDDirectoryPaths: []string{filepath.Join(root, "config", "crd", "bases")}, ErrorIfCRDPathMissing: true, Scheme: scheme}
	restCfg, err := env.Start()
	if err != nil {
		return fmt.Errorf("starting the control plane: %w", err)
	}
	defer func() { _ = env.Stop() }()
	kubeconfig, err := writeKubeconfig(env, dir)
	if err != nil {
		return err
	}

	echo := startIPEcho()
	defer echo.Close()
	lab, err := pvelab.Start(ctx, pvelab.Options{Nodes: 3, Speed: o.speed, Guests: true, PollInterval: 500 * time.Millisecond, Dir: dir,
		ProbeCheckURL: echo.URL + "/ip"})
	if err != nil {
		return err
	}
	defer lab.Close()
	sim := lab.Sim
	say("simulated Proxmox VE cluster (pve1, pve2, pve3) at %s, %gx real-host pace; its VMs run the proxy their seed configures", lab.APIURL, o.speed)

	stopOperator, err := lab.StartOperator(ctx, pvelab.OperatorOptions{
		RestConfig: restCfg, Scheme: scheme,
		Controller: controller.Options{PollInterval: 500 * time.Millisecond, ResyncInterval: 10 * time.Second, HealthInterval: 5 * time.Second,
			Prober: &probe.HTTP{}, ProbeInterval: time.Second, PoolResyncInterval: 2 * time.Second},
	})
	if err != nil {
		return err
	}
	defer func() { _ = stopOperator() }()
	say("operator running with provider entry \"lab\" (zones rack-a, rack-b, rack-c on pve1, pve2, pve3)")

	k8s, err := client.New(restCfg, client.Options{Scheme: scheme})
	if err != nil {
		return err
	}
	ns := "crawlers"
	if err := k8s.Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: ns}}); err != nil {
		return err
	}
	for i, zone := range lab.Zones {
		p := &crawlv1alpha1.Proxy{
			ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: fmt.Sprintf("egress-%d", i+1)},
			Spec:       crawlv1alpha1.ProxySpec{Provider: pvelab.EntryName, Zone: zone, MachineType: pvelab.MachineType, Image: pvelab.Image},
		}
		if err := k8s.Create(ctx, p); err != nil {
			return err
		}
		say("applied Proxy %s/%s in zone %s", ns, p.Name, zone)
	}
	say("each proxy is a VM: clone, seed upload, config, start, then its address from the guest agent")
	if err := watchUntilReady(ctx, o.out, k8s, ns, 3); err != nil {
		return err
	}

	if err := requestThrough(ctx, o.out, k8s, ns, "egress-1"); err != nil {
		return err
	}

	say("deleting Proxy egress-3; its VM and seed are removed before the object goes")
	if err := k8s.Delete(ctx, &crawlv1alpha1.Proxy{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "egress-3"}}); err != nil {
		return err
	}
	if err := poll.Wait(ctx, 2*time.Minute, func() (bool, string) {
		return apierrors.IsNotFound(k8s.Get(ctx, client.ObjectKey{Namespace: ns, Name: "egress-3"}, &crawlv1alpha1.Proxy{})), "egress-3 still exists"
	}); err != nil {
		return err
	}
	var vms []string
	for _, vm := range sim.VMs() {
		if !vm.Template {
			vms = append(vms, fmt.Sprintf("%d on %s (%s)", vm.VMID, vm.Node, vm.Status))
		}
	}
	say("egress-3 is gone; VMs left on the cluster: %s", strings.Join(vms, ", "))

	if err := poolDemo(ctx, o.out, k8s, ns, lab.Zones); err != nil {
		return fmt.Errorf("the pool: %w", err)
	}
	gw, err := gatewayDemo(ctx, o.out, restCfg, k8s, ns, "crawl", echo.URL+"/ip")
	if err != nil {
		return fmt.Errorf("the gateway: %w", err)
	}
	defer gw.stop()

	if o.wait {
		say("everything keeps running; look around with:")
		_, _ = fmt.Fprintf(o.out, "    export KUBECONFIG=%s\n    kubectl get proxies -A -o wide\n    kubectl get proxypools -A\n    kubectl get providerhealths\n"+
			"    kubectl get events -n %s\n    kubectl delete proxy -n %s egress-2   # and watch its VM go\n", kubeconfig, ns, ns)
		urlFile, err := gw.writeURL(dir)
		if err != nil {
			return err
		}
		_, _ = fmt.Fprintf(o.out, "    curl -x \"$(cat %s)\" %s/ip   # through the gateway (the file holds its URL with the password)\n", urlFile, echo.URL)
		say("press Ctrl-C to stop and clean up")
		<-ctx.Done()
		return ctx.Err()
	}
	say("done; everything is cleaned up")
	return nil
}

// writeKubeconfig writes an administrator kubeconfig for the control plane.
func writeKubeconfig(env *envtest.Environment, dir string) (string, error) {
	user, err := env.AddUser(envtest.User{Name: "demo", Groups: []string{"system:masters"}}, nil)
	if err != nil {
		return "", err
	}
	kc, err := user.KubeConfig()
	if err != nil {
		return "", err
	}
	path := filepath.Join(dir, "kubeconfig")
	return path, os.WriteFile(path, kc, 0o600)
}

// requestThrough sends a request through a Proxy with the credentials from
// its Secret to a loopback HTTP server, and shows what came back.
func requestThrough(ctx context.Context, out io.Writer, k8s client.Client, ns, name string) error {
	var p crawlv1alpha1.Proxy
	if err := k8s.Get(ctx, client.ObjectKey{Namespace: ns, Name: name}, &p); err != nil {
		return err
	}
	var s corev1.Secret
	if err := poll.Wait(ctx, time.Minute, func() (bool, string) {
		return k8s.Get(ctx, client.ObjectKey{Namespace: ns, Name: p.Status.CredentialsSecretName}, &s) == nil && len(s.Data[published.CredentialsKeyURL]) > 0, "no url yet"
	}); err != nil {
		return fmt.Errorf("waiting for the proxy URL in secret %s: %w", p.Status.CredentialsSecretName, err)
	}
	origin := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "text/plain; charset=utf-8")
		_, _ = fmt.Fprintf(w, "hello from the origin; you came from %s", r.RemoteAddr) //nolint:gosec // G705: plain text to a local client, not HTML.
	}))
	defer origin.Close()
	proxyURL, err := url.Parse(string(s.Data[published.CredentialsKeyURL]))
	if err != nil {
		return fmt.Errorf("the secret's url: %w", err)
	}
	tr := &http.Transport{Proxy: http.ProxyURL(proxyURL)}
	defer tr.CloseIdleConnections()
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, origin.URL, nil)
	if err != nil {
		return err
	}
	resp, err := (&http.Client{Transport: tr, Timeout: 10 * time.Second}).Do(req)
	if err != nil {
		return fmt.Errorf("request through %s: %w", p.Status.URL, err)
	}
	defer func() { _ = resp.Body.Close() }()
	body, _ := io.ReadAll(resp.Body)
	if resp.StatusCode != http.StatusOK {
		return fmt.Errorf("request through %s: %s", p.Status.URL, resp.Status)
	}
	_, _ = fmt.Fprintf(out, "==> GET %s through %s (VM %s on %s), with the credentials from Secret %s/%s:\n    %s %q\n",
		origin.URL, p.Status.URL, p.Status.InstanceID, p.Status.Node, ns, s.Name, resp.Status, body)
	return nil
}

// watchUntilReady prints a line per Proxy whenever it changes, and a
// progress line, until the n Proxies of the namespace are Ready.
func watchUntilReady(ctx context.Context, out io.Writer, k8s client.Client, ns string, n int) error {
	seen := map[string]string{}
	return poll.Wait(ctx, 10*time.Minute, func() (bool, string) {
		var list crawlv1alpha1.ProxyList
		if err := k8s.List(ctx, &list, client.InNamespace(ns)); err != nil {
			return false, err.Error()
		}
		sort.Slice(list.Items, func(i, j int) bool { return list.Items[i].Name < list.Items[j].Name })
		ready, changed := 0, false
		for _, p := range list.Items {
			reason := ""
			for _, c := range p.Status.Conditions {
				if c.Type == crawlv1alpha1.ConditionReady {
					reason = c.Message
				}
			}
			line := fmt.Sprintf("%-9s %-13s node=%-5s address=%-14s %s", p.Name, p.Status.Phase, p.Status.Node, p.Status.Address, reason)
			if seen[p.Name] != line {
				seen[p.Name], changed = line, true
				_, _ = fmt.Fprintln(out, "    "+line)
			}
			if p.Status.Phase == crawlv1alpha1.ProxyPhaseReady {
				ready++
			}
		}
		if changed {
			_, _ = fmt.Fprintf(out, "    -- %d of %d Ready\n", ready, len(list.Items))
		}
		return len(list.Items) == n && ready == n, fmt.Sprintf("%d of %d Ready", ready, n)
	})
}

// waitUntil polls cond with the tests' polling helper until it holds,
// timeout passes or ctx ends.
func waitUntil(ctx context.Context, timeout time.Duration, cond func() bool) error {
	return poll.Wait(ctx, timeout, func() (bool, string) { return cond(), "not yet" })
}
