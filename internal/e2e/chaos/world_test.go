package chaos_test

import (
	"context"
	"fmt"
	"math/rand/v2"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/go-logr/logr"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/trace"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/rest"
	"sigs.k8s.io/controller-runtime/pkg/client"

	crawlv1alpha1 "github.com/egress-proxies/egress-proxies-operator/api/v1alpha1"

	"github.com/egress-proxies/egress-proxies-operator/internal/config"
	"github.com/egress-proxies/egress-proxies-operator/internal/controller"
	"github.com/egress-proxies/egress-proxies-operator/internal/ownership"
	"github.com/egress-proxies/egress-proxies-operator/internal/ownership/ownershiptest"
	"github.com/egress-proxies/egress-proxies-operator/internal/testing/poll"
	"github.com/egress-proxies/egress-proxies-operator/internal/testing/pvelab"
	"github.com/egress-proxies/egress-proxies-operator/internal/testing/pvesim"
	"github.com/egress-proxies/egress-proxies-operator/internal/testing/sentinel"
	"github.com/egress-proxies/egress-proxies-operator/internal/testing/testenv"
)

// The operator's intervals in the run: short, so that a poll, a resync, a
// health check and a GC pass each happen many times between two actions.
const (
	gcInterval = 200 * time.Millisecond
	gcGrace    = time.Second
	// leakUptime is how long the operator must have run since a Proxy went
	// before anything of it still there counts as a leak: the grace period
	// and many GC intervals (a pass can meet a fault, a deletion takes more
	// than one, and on a loaded machine a pass takes longer than an
	// interval).
	leakUptime = gcGrace + 30*gcInterval
	// hungEntry is the second provider entry: a cluster of its own whose
	// calls the hang fault holds until their deadline, hungDeadline (below
	// the Proxmox client's own timeout of 30 s, which would end them
	// first).
	hungEntry    = "lab2"
	hungDeadline = 25 * time.Second
	// installation is the operator's installation ID; its key lives in the
	// key Secret of the run's namespace.
	installation = "chaos"
)

// world is the simulated cluster, the namespace and the operator that comes
// and goes.
type world struct {
	t   *testing.T
	lab *pvelab.Lab
	// hung is the cluster of hungEntry, with no foreign VM.
	hung   *pvelab.Lab
	ns     string
	rest   *rest.Config
	watch  *sentinel.Watch
	tracer trace.Tracer
	// tokenID is the operator's API token id, whose mutations are checked
	// (both clusters have the same token).
	tokenID string
	// keys reads and creates the key Secret as the operator does, with its
	// rights; keyRef names the Secret.
	keys   client.Client
	keyRef ownership.KeyRef

	mu       sync.Mutex
	stop     func() error // nil while the operator is down
	upSince  time.Time
	uptime   time.Duration // accumulated over earlier runs
	restarts int
	// keyID names the key the running (or last) operator loaded.
	keyID string
}

// newWorld starts the lab (three nodes, one zone over all of them, VMs
// without guest processes: the agent reports the address all the same) and
// the one-node cluster of hungEntry (every call bounded by hungDeadline), and
// prepares the operator's logger, tracer and rights.
func newWorld(t *testing.T, p plan, ns string) *world {
	t.Helper()
	dir := t.TempDir()
	ctx, cancel := context.WithCancel(context.Background())
	t.Cleanup(cancel)
	lab, err := pvelab.Start(ctx, pvelab.Options{Nodes: 3, Speed: p.Speed,
		Zones: map[string][]string{"rack-a": {"pve1", "pve2", "pve3"}}, PollInterval: 20 * time.Millisecond, Dir: dir})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(lab.Close)
	hungDir := filepath.Join(dir, hungEntry)
	if err := os.Mkdir(hungDir, 0o700); err != nil {
		t.Fatal(err)
	}
	hung, err := pvelab.Start(ctx, pvelab.Options{Nodes: 1, Speed: p.Speed, PollInterval: 20 * time.Millisecond, Dir: hungDir})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(hung.Close)
	// The operator serves both entries; its setup builds each provider from
	// the lab's configuration.
	e := hung.Config.Providers[0]
	e.Name = hungEntry
	d := &metav1.Duration{Duration: hungDeadline}
	e.Deadlines = config.Deadlines{Create: d, Get: d, Delete: d, List: d, Check: d, Sweep: d}
	lab.Config.Providers = append(lab.Config.Providers, e)
	token, err := os.ReadFile(filepath.Join(dir, "token"))
	if err != nil {
		t.Fatal(err)
	}
	id, secret, ok := strings.Cut(strings.TrimSpace(string(token)), "=")
	if !ok {
		t.Fatalf("token file %q is not id=secret", token)
	}
	w := &world{t: t, lab: lab, hung: hung, ns: ns, watch: sentinel.NewWatch(), tokenID: id,
		keyRef: ownership.KeyRef{Namespace: ns, Name: ownership.DefaultKeySecret}}
	if err := w.watch.AddSecret("the API token", secret); err != nil {
		t.Fatal(err)
	}
	// The cloud-init payload: its first line, and the line that carries the
	// proxy's credentials (each password is added as it appears).
	for _, marker := range []string{"#cloud-config", "BasicAuth "} {
		if err := w.watch.AddSecret("cloud-init payload ("+strings.TrimSpace(marker)+")", marker); err != nil {
			t.Fatal(err)
		}
	}
	tp := sdktrace.NewTracerProvider(sdktrace.WithSpanProcessor(w.watch.SpanProcessor()))
	t.Cleanup(func() { _ = tp.Shutdown(context.Background()) })
	w.tracer = tp.Tracer("chaos")
	if w.rest, err = env.AsOperator(ctx, testenv.RBAC{Namespaces: []string{ns}}); err != nil {
		t.Fatal(err)
	}
	if w.keys, err = client.New(w.rest, client.Options{Scheme: env.Scheme}); err != nil {
		t.Fatal(err)
	}
	return w
}

// loadKey is the leader's first step (ownership.KeyLoader): the key from
// the key Secret, which it creates when it is missing.
func (w *world) loadKey() *ownership.Identity {
	w.t.Helper()
	id, err := ownership.NewPending(installation)
	if err != nil {
		w.t.Fatal(err)
	}
	l := &ownership.KeyLoader{Client: w.keys, Ref: w.keyRef, Identity: id}
	if err := l.Start(context.Background()); err != nil {
		w.t.Fatalf("loading the ownership key: %v", err)
	}
	return id
}

// start runs the operator as its ServiceAccount, with a fresh provider as a
// restarted binary has, the key the key Secret holds at that moment, its log
// lines at verbosity 2 and its spans going to the watch.
func (w *world) start() {
	w.t.Helper()
	w.mu.Lock()
	defer w.mu.Unlock()
	if w.stop != nil {
		return
	}
	id := w.loadKey()
	stop, err := w.lab.StartOperator(context.Background(), pvelab.OperatorOptions{
		RestConfig: w.rest, Scheme: env.Scheme, Namespace: w.ns, Ownership: id,
		Log: w.watch.Logger(2), Tracer: w.tracer,
		Controller: controller.Options{
			PollInterval: 50 * time.Millisecond, ResyncInterval: 500 * time.Millisecond,
			HealthInterval: 500 * time.Millisecond, GCInterval: gcInterval, GCGracePeriod: gcGrace,
			Replacement: controller.ReplacementPolicy{Backoff: 100 * time.Millisecond, Limit: 8, Window: time.Hour},
		},
	})
	if err != nil {
		w.t.Fatal(err)
	}
	w.stop, w.upSince, w.keyID = stop, time.Now(), id.KeyID()
}

// kill stops the operator (its context ends mid-call, as a killed process
// stops) and waits for it.
func (w *world) kill() {
	w.t.Helper()
	w.mu.Lock()
	defer w.mu.Unlock()
	if w.stop == nil {
		return
	}
	if err := w.stop(); err != nil {
		w.t.Errorf("operator run ended with: %v", err)
	}
	w.stop = nil
	w.uptime += time.Since(w.upSince)
	w.restarts++
}

// up reports whether the operator runs.
func (w *world) up() bool {
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.stop != nil
}

// upFor is how long the operator has run since its last start; zero while
// it is down.
func (w *world) upFor() time.Duration {
	w.mu.Lock()
	defer w.mu.Unlock()
	if w.stop == nil {
		return 0
	}
	return time.Since(w.upSince)
}

// operatorUptime is how long the operator has run in all.
func (w *world) operatorUptime() time.Duration {
	w.mu.Lock()
	defer w.mu.Unlock()
	if w.stop == nil {
		return w.uptime
	}
	return w.uptime + time.Since(w.upSince)
}

// Classes of the foreign VMs placed in the simulator.
const (
	classPlain  = "plain"
	classTagged = "our tag, no mark"
	classForged = "our tag and a forged mark"
	classCopied = "our tag and a mark copied from one of our VMs"
	classOther  = "another installation's"
)

// placeOtherInstallation runs, before the chaos, a second installation of
// the operator (its own identity, its own namespace) on the same cluster
// until its Proxies are Ready, stops it, and lets its Proxies go without it
// (finalizers removed by hand, as after an uninstall): their VMs are
// orphans to anyone who forgets whose they are. It returns their VMIDs.
func (w *world) placeOtherInstallation(ctx context.Context, n int) map[int]string {
	w.t.Helper()
	ns := &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{GenerateName: "chaos-other-"}}
	if err := env.Client.Create(ctx, ns); err != nil {
		w.t.Fatal(err)
	}
	stop, err := w.lab.StartOperator(ctx, pvelab.OperatorOptions{
		RestConfig: env.Config, Scheme: env.Scheme, Namespace: ns.Name, Log: logr.Discard(),
		Ownership: ownershiptest.Identity("other-installation"),
		Controller: controller.Options{PollInterval: 50 * time.Millisecond, ResyncInterval: 500 * time.Millisecond,
			HealthInterval: time.Second, GCInterval: time.Hour},
	})
	if err != nil {
		w.t.Fatal(err)
	}
	for i := range n {
		p := &crawlv1alpha1.Proxy{ObjectMeta: metav1.ObjectMeta{Namespace: ns.Name, Name: fmt.Sprintf("theirs-%d", i)},
			Spec: crawlv1alpha1.ProxySpec{Provider: pvelab.EntryName, MachineType: pvelab.MachineType, Image: pvelab.Image}}
		if err := env.Client.Create(ctx, p); err != nil {
			w.t.Fatal(err)
		}
	}
	if err := poll.Wait(ctx, 2*time.Minute, func() (bool, string) {
		var list crawlv1alpha1.ProxyList
		if err := env.Client.List(ctx, &list, client.InNamespace(ns.Name)); err != nil {
			return false, err.Error()
		}
		ready := 0
		for _, p := range list.Items {
			if p.Status.Phase == crawlv1alpha1.ProxyPhaseReady {
				ready++
			}
		}
		return ready == n, fmt.Sprintf("%d of %d of the other installation's Proxies Ready", ready, n)
	}); err != nil {
		w.t.Fatal(err)
	}
	if err := stop(); err != nil {
		w.t.Fatal(err)
	}
	var list crawlv1alpha1.ProxyList
	if err := env.Client.List(ctx, &list, client.InNamespace(ns.Name)); err != nil {
		w.t.Fatal(err)
	}
	for i := range list.Items {
		p := &list.Items[i]
		patch := client.MergeFrom(p.DeepCopy())
		p.Finalizers = nil
		if err := env.Client.Patch(ctx, p, patch); err != nil {
			w.t.Fatal(err)
		}
		if err := client.IgnoreNotFound(env.Client.Delete(ctx, p)); err != nil {
			w.t.Fatal(err)
		}
	}
	out := map[int]string{}
	for _, vm := range w.lab.Sim.VMs() {
		if !vm.Template {
			out[vm.VMID] = classOther
		}
	}
	if len(out) != n {
		w.t.Fatalf("the other installation left %d VMs, want %d", len(out), n)
	}
	return out
}

// markText is a mark as a hand-written forgery would look: the lines of
// the operator's mark (docs/proxmox.md) with an owner that never existed.
func markText(ownerUID, name string, created time.Time) string {
	return "Managed by egress-proxies-operator; do not edit the lines below.\n" +
		"egress-proxies-operator/owner-uid: " + ownerUID + "\n" +
		"egress-proxies-operator/name: " + name + "\n" +
		"egress-proxies-operator/created-at: " + created.UTC().Format(time.RFC3339) + "\n" +
		"egress-proxies-operator/owner: someone/else\n"
}

// placeForeign puts foreign VMs on every node, inside and outside the
// provider's VMID range (100000 to 199999), stopped (what GC would take) and
// of every class but the copied one (made during the run from a live VM).
// It returns their classes by VMID.
func placeForeign(t *testing.T, sim *pvesim.Sim, rng *rand.Rand) map[int]string {
	t.Helper()
	no := false
	out := map[int]string{}
	classes := []string{classPlain, classTagged, classForged}
	for i := range 18 {
		vmid := 4000 + i
		if i%2 == 0 {
			vmid = 100000 + rng.IntN(99999)
		}
		if _, taken := sim.VMConfig(vmid); taken {
			continue
		}
		class := classes[i%len(classes)]
		tc := pvesim.TemplateConfig{VMID: vmid, Node: fmt.Sprintf("pve%d", 1+i%3), Name: "colleague-" + strconv.Itoa(i), Template: &no,
			Disks: []pvesim.DiskConfig{{Slot: "scsi0", Storage: "local-lvm", Size: "2G"}}, Agent: "1", Extra: map[string]string{}}
		switch class {
		case classTagged:
			tc.Tags = "proxy_operator"
		case classForged:
			// The forger names the VM as the mark does: the provider checks
			// that the two agree.
			tc.Tags = "proxy_operator;web"
			tc.Name = "forged-" + strconv.Itoa(i)
			uid := fmt.Sprintf("%08x-dead-4bee-8f00-%012x", rng.Uint32(), rng.Uint64()&0xffffffffffff)
			tc.Extra["description"] = markText(uid, tc.Name, time.Now().Add(-48*time.Hour))
		}
		if err := sim.AddVM(tc); err != nil {
			t.Fatal(err)
		}
		out[vmid] = class
	}
	return out
}

// copyMark places a foreign VM that carries the name, tags and description
// (the mark, whatever it holds, signature included) of VM src, at a free
// VMID; it returns 0 when src has no mark to copy yet.
func copyMark(sim *pvesim.Sim, src, vmid int, node string) (int, error) {
	conf, ok := sim.VMConfig(src)
	if !ok || conf["description"] == "" || conf["tags"] == "" || conf["lock"] != "" {
		return 0, nil
	}
	no := false
	tc := pvesim.TemplateConfig{VMID: vmid, Node: node, Name: conf["name"], Template: &no, Tags: conf["tags"],
		Disks: []pvesim.DiskConfig{{Slot: "scsi0", Storage: "local-lvm", Size: "2G"}},
		Extra: map[string]string{"description": conf["description"]}}
	if err := sim.AddVM(tc); err != nil {
		return 0, err
	}
	return vmid, nil
}

// uidOf finds which of the given Proxy UIDs a VM description names.
func uidOf(desc string, uids []types.UID) (types.UID, bool) {
	for _, u := range uids {
		if strings.Contains(desc, string(u)) {
			return u, true
		}
	}
	return "", false
}
