package libvirt_test

import (
	"context"
	"errors"
	"fmt"
	"net"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	apimeta "k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"

	crawlv1alpha1 "github.com/egress-proxies/egress-proxies-operator/api/v1alpha1"
	"github.com/egress-proxies/egress-proxies-operator/internal/config"
	"github.com/egress-proxies/egress-proxies-operator/internal/controller"
	"github.com/egress-proxies/egress-proxies-operator/internal/ownership/ownershiptest"
	"github.com/egress-proxies/egress-proxies-operator/internal/provider"
	"github.com/egress-proxies/egress-proxies-operator/internal/provider/libvirt"
	"github.com/egress-proxies/egress-proxies-operator/internal/setup"
	"github.com/egress-proxies/egress-proxies-operator/internal/testing/libvirtlab"
	"github.com/egress-proxies/egress-proxies-operator/internal/testing/poll"
	"github.com/egress-proxies/egress-proxies-operator/internal/testing/pvelab"
	"github.com/egress-proxies/egress-proxies-operator/internal/testing/testenv"
)

// The paused-daemon test's kvm2 entry and its image: an empty disk, on
// which a TCG domain runs its BIOS and boots nothing (no guest to pay for).
const (
	pausedEntry  = "kvm2-paused"
	noOSImage    = "noos"
	noOSVolume   = "noos-base.qcow2"
	pausedStuck  = 4 // Proxies created on the paused entry: more than its share of the workers
	pausedShare  = 2 // the operator's 4 workers over its 2 entries
	pauseWorkers = 4
)

// TestPausedLibvirtdHoldsOnlyItsEntry is #21 item 5 on a real libvirt host:
// the lab's libvirtd is stopped with SIGSTOP, so that its socket still
// takes connections and the lab's sshd, keepalives included, still answers
// while no libvirt call gets an answer: a daemon that hangs. The operator
// serves that kvm2 entry and a Proxmox VE simulator's entry. While the
// daemon hangs and more Proxies than the entry's share of the workers ask
// it for instances, a Proxy of the simulator's entry becomes Ready, the
// simulator entry's orphaned VM is collected and its health is checked
// again, the paused entry never holds more than its share of worker calls,
// and every call into the paused daemon ends by its deadline as a Transient
// error naming the entry and the operation (the Proxies' Ready condition
// says so). Once the daemon is resumed, the held creates go on. No guest
// boots: the kvm2 domains have no operating system, the simulator's VMs
// no guest processes.
func TestPausedLibvirtdHoldsOnlyItsEntry(t *testing.T) {
	testenv.Need(t, env)
	ctx := context.Background()
	l := libvirtlab.Start(t, libvirtlab.Options{})
	if _, err := l.Virsh("vol-create-as", "--pool", l.Pool, "--name", noOSVolume, "--capacity", "16M", "--format", "qcow2"); err != nil {
		t.Fatal(err)
	}
	simCtx, simCancel := context.WithCancel(ctx)
	t.Cleanup(simCancel)
	sim, err := pvelab.Start(simCtx, pvelab.Options{Nodes: 1, Speed: 50, PollInterval: 50 * time.Millisecond, Dir: t.TempDir()})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(sim.Close)

	// The deadline of every call to the paused entry: far above what a
	// kvm2 call takes on this machine now (tens of milliseconds when
	// quiet), and below the provider's own bound on a shared domain listing
	// (its dial timeout and two keepalives: 40 s by default), so that the
	// operator's deadline, not the provider's, ends the hung calls. The
	// simulator's evidence must come within half of it, so that workers
	// freed by the deadline (were the entry not held to its share) cannot
	// pass for workers it never took.
	deadline := min(max(15*time.Second, poll.Paced(4*time.Second)), 30*time.Second).Round(time.Second)
	kvm2 := pausedKVM2Entry(t, l, deadline)
	cfg := &config.Config{Providers: []config.Entry{sim.Config.Providers[0], kvm2}}
	identity := ownershiptest.Identity("libvirt-e2e")
	lp, err := libvirt.New(&cfg.Providers[1], provider.Deps{Ownership: identity})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(lp.Close)
	calls := &callLog{Provider: lp}

	nsObj := &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{GenerateName: "libvirt-paused-"}}
	if err := env.Client.Create(ctx, nsObj); err != nil {
		t.Fatal(err)
	}
	ns := nsObj.Name
	restCfg, err := env.AsOperator(t.Context(), testenv.RBAC{Namespaces: []string{ns}})
	if err != nil {
		t.Fatal(err)
	}
	op, err := setup.New(setup.Options{
		RestConfig: restCfg, Config: cfg, Namespaces: []string{ns}, Ownership: identity,
		Providers: map[string]provider.Provider{pausedEntry: calls},
		Manager:   ctrl.Options{Scheme: env.Scheme},
		Controller: controller.Options{
			PollInterval: time.Second, ResyncInterval: 5 * time.Second, MaxConcurrentReconciles: pauseWorkers,
			HealthInterval: time.Second, GCInterval: time.Second, GCGracePeriod: time.Second, SkipNameValidation: true,
		},
	})
	if err != nil {
		t.Fatal(err)
	}
	opCtx, opCancel := context.WithCancel(ctx)
	opDone := make(chan error, 1)
	go func() { opDone <- op.Manager.Start(opCtx) }()
	t.Cleanup(func() {
		opCancel()
		if err := <-opDone; err != nil {
			t.Errorf("operator: %v", err)
		}
	})

	newProxy := func(name, entry string) {
		t.Helper()
		spec := crawlv1alpha1.ProxySpec{Provider: entry, MachineType: pvelab.MachineType, Image: pvelab.Image}
		if entry == pausedEntry {
			spec.MachineType, spec.Image = machineType, noOSImage
		}
		if err := env.Client.Create(ctx, &crawlv1alpha1.Proxy{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: name}, Spec: spec}); err != nil {
			t.Fatal(err)
		}
	}
	get := func(name string) *crawlv1alpha1.Proxy {
		var p crawlv1alpha1.Proxy
		if err := env.Client.Get(ctx, client.ObjectKey{Namespace: ns, Name: name}, &p); err != nil {
			return nil
		}
		return &p
	}

	// Before the pause: the kvm2 entry works (a domain is defined and
	// started), and the simulator's entry has a Ready Proxy to orphan.
	newProxy("before", pausedEntry)
	newProxy("orphan", pvelab.EntryName)
	poll.UntilPaced(t, time.Minute, func() (bool, string) {
		b, o := get("before"), get("orphan")
		if b == nil || b.Status.InstanceID == "" {
			return false, "the kvm2 Proxy has no instance yet"
		}
		if o == nil || o.Status.Phase != crawlv1alpha1.ProxyPhaseReady {
			return false, "the simulator's Proxy is not Ready yet"
		}
		return true, ""
	})
	orphanVM := get("orphan").Status.InstanceID
	checkedBefore := lastCheck(ctx, t, pvelab.EntryName)

	l.PauseLibvirtd()
	t.Cleanup(l.ResumeLibvirtd)
	paused := time.Now()
	calls.markPause(paused)
	t.Logf("libvirtd paused (SIGSTOP); deadline of every call to %s: %s", pausedEntry, deadline)
	for i := range pausedStuck {
		newProxy(fmt.Sprintf("stuck-%d", i), pausedEntry)
	}
	// The paused entry takes what workers it can before the simulator's
	// Proxy comes.
	poll.UntilPaced(t, 30*time.Second, func() (bool, string) {
		n := calls.inFlight()
		return n >= pausedShare, fmt.Sprintf("%d worker calls in flight on the paused entry", n)
	})
	served := time.Now()
	newProxy("served", pvelab.EntryName)
	orphan := get("orphan")
	patch := client.MergeFrom(orphan.DeepCopy())
	orphan.Finalizers = nil
	if err := env.Client.Patch(ctx, orphan, patch); err != nil {
		t.Fatal(err)
	}
	if err := client.IgnoreNotFound(env.Client.Delete(ctx, orphan)); err != nil {
		t.Fatal(err)
	}

	// The simulator's entry goes on while the daemon hangs.
	var readyAfter, collectedAfter, checkedAfter time.Duration
	err = poll.Wait(ctx, deadline/2, func() (bool, string) {
		if p := get("served"); readyAfter == 0 && p != nil && p.Status.Phase == crawlv1alpha1.ProxyPhaseReady {
			readyAfter = time.Since(served)
		}
		if collectedAfter == 0 && !simHasVM(sim, orphanVM) {
			collectedAfter = time.Since(served)
		}
		if checkedAfter == 0 && lastCheck(ctx, t, pvelab.EntryName).Sub(checkedBefore) >= 2*time.Second {
			checkedAfter = time.Since(served)
		}
		return readyAfter > 0 && collectedAfter > 0 && checkedAfter > 0,
			fmt.Sprintf("while libvirtd is paused: the simulator's new Proxy Ready after %s, its orphaned VM %s collected after %s, its health checked again after %s (0: not yet)",
				readyAfter, orphanVM, collectedAfter, checkedAfter)
	})
	if err != nil {
		t.Fatalf("%v (bound: half the paused entry's deadline of %s; calls on the paused entry: %s)", err, deadline, calls.summary())
	}
	t.Logf("while libvirtd was paused: the simulator's Proxy Ready after %s, its orphan collected after %s, its health checked again after %s",
		readyAfter.Round(time.Millisecond), collectedAfter.Round(time.Millisecond), checkedAfter.Round(time.Millisecond))

	// Every call into the paused daemon ends by its deadline, as a
	// Transient error that names the entry and the operation: the call that
	// reaches its deadline says so, and ends the libvirt connection it
	// waited on, which ends the calls that shared it at once ("procedure
	// interrupted"), also Transient. The Ready conditions are read as they
	// change, each Proxy's Transient message kept.
	want := fmt.Sprintf("no answer within the deadline of %s", deadline)
	seen := map[string]string{}
	atDeadline := ""
	poll.UntilPaced(t, deadline+30*time.Second, func() (bool, string) {
		for _, name := range []string{"before", "stuck-0", "stuck-1", "stuck-2", "stuck-3"} {
			p := get(name)
			if p == nil {
				return false, name + " is gone"
			}
			c := apimeta.FindStatusCondition(p.Status.Conditions, crawlv1alpha1.ConditionReady)
			call := "create"
			if name == "before" {
				call = "get"
			}
			if c != nil && c.Reason == crawlv1alpha1.ReasonTransientError && strings.Contains(c.Message, `provider "`+pausedEntry+`": `+call) {
				seen[name] = c.Message
				if strings.Contains(c.Message, want) {
					atDeadline = c.Message
				}
			}
		}
		return len(seen) == pausedStuck+1 && atDeadline != "",
			fmt.Sprintf("Transient errors naming %s and the operation seen for %d of %d Proxies, one that says %q: %t (%v)", pausedEntry, len(seen), pausedStuck+1, want, atDeadline != "", seen)
	})
	t.Logf("a call that reached its deadline: %s", atDeadline)
	if n := calls.maxInFlight(); n > pausedShare {
		t.Errorf("the paused entry had %d worker calls in flight at once, more than its share of %d", n, pausedShare)
	}
	// The calls really hung (the sshd kept their connection up), and none
	// outlived its deadline by more than the machine's pace allows.
	slack := poll.Paced(10 * time.Second)
	hungOnes := 0
	for _, c := range calls.pausedCalls() {
		if c.took < deadline*9/10 {
			continue
		}
		hungOnes++
		if c.took > deadline+slack {
			t.Errorf("a %s call into the paused daemon took %s, past its deadline of %s by more than %s", c.op, c.took.Round(time.Millisecond), deadline, slack)
		}
	}
	if hungOnes == 0 {
		t.Errorf("no call into the paused daemon hung until its deadline (the calls failed at once: not a hung daemon): %s", calls.summary())
	}
	for _, c := range calls.pausedCalls() {
		// A Get may answer from the provider's shared listing, without a
		// call; every error must be one to retry.
		if c.err != nil && !provider.IsTransient(c.err) && !errors.Is(c.err, context.DeadlineExceeded) {
			t.Errorf("a %s call into the paused daemon ended with %v (class %s), want Transient or the deadline's", c.op, c.err, provider.ClassOf(c.err))
		}
	}

	// Resumed, the held creates go on: nothing latched. A Proxy's retries
	// after Transient errors back off (up to controller.DefaultBackoffMax),
	// and the calls that the connection's end interrupted failed fast, so
	// the next try may be minutes away.
	l.ResumeLibvirtd()
	resumed := time.Now()
	t.Logf("libvirtd resumed (SIGCONT) after %s", resumed.Sub(paused).Round(time.Second))
	poll.UntilPaced(t, controller.DefaultBackoffMax+time.Minute, func() (bool, string) {
		for i := range pausedStuck {
			if p := get(fmt.Sprintf("stuck-%d", i)); p == nil || p.Status.InstanceID == "" {
				var c *metav1.Condition
				if p != nil {
					c = apimeta.FindStatusCondition(p.Status.Conditions, crawlv1alpha1.ConditionReady)
				}
				return false, fmt.Sprintf("stuck-%d has no instance yet after the resume (Ready: %+v)", i, c)
			}
		}
		return true, ""
	})
	t.Logf("every held create went on %s after the resume", time.Since(resumed).Round(time.Second))

	var list crawlv1alpha1.ProxyList
	if err := env.Client.List(ctx, &list, client.InNamespace(ns)); err != nil {
		t.Fatal(err)
	}
	for i := range list.Items {
		if err := client.IgnoreNotFound(env.Client.Delete(ctx, &list.Items[i])); err != nil {
			t.Fatal(err)
		}
	}
	poll.UntilPaced(t, time.Minute, func() (bool, string) {
		var left crawlv1alpha1.ProxyList
		if err := env.Client.List(ctx, &left, client.InNamespace(ns)); err != nil {
			return false, err.Error()
		}
		return len(left.Items) == 0, fmt.Sprintf("%d Proxies not deleted yet", len(left.Items))
	})
	if doms, err := l.Virsh("list", "--all", "--name"); err != nil || strings.TrimSpace(doms) != "" {
		t.Errorf("domains left after every Proxy was deleted: %q %v", doms, err)
	}
}

// pausedKVM2Entry is a kvm2 entry on the lab whose every call has the
// given deadline.
func pausedKVM2Entry(t *testing.T, l *libvirtlab.Lab, deadline time.Duration) config.Entry {
	t.Helper()
	host, port, err := net.SplitHostPort(l.SSHAddr)
	if err != nil {
		t.Fatal(err)
	}
	n, _ := strconv.Atoi(port)
	d := &metav1.Duration{Duration: deadline}
	return config.Entry{
		Name: pausedEntry, Type: libvirt.TypeKVM2, Zones: []string{"lab"}, Images: []string{noOSImage},
		MachineTypes: map[string]config.MachineType{machineType: {Name: machineType, Cores: 1, MemoryMiB: 64}},
		Deadlines:    config.Deadlines{Create: d, Get: d, Delete: d, List: d, Check: d, Sweep: d},
		Block: &libvirt.Block{
			Hosts:          []libvirt.Host{{Name: "lab1", Address: host, Port: n, User: l.SSHUser, Zone: "lab"}},
			PrivateKeyFile: l.PrivateKeyFile,
			KnownHostsFile: l.KnownHostsFile,
			Pool:           l.Pool,
			Network:        l.Network,
			Images:         map[string]libvirt.Image{noOSImage: {Volume: noOSVolume}},
			DomainType:     "qemu",
			SerialLogDir:   l.SerialDir,
			Budgets: libvirt.Budgets{
				PollInterval: &metav1.Duration{Duration: time.Second},
				// No OS answers the ACPI power-off: do not wait for it.
				Shutdown: &metav1.Duration{Duration: time.Nanosecond},
			},
		},
	}
}

// lastCheck is when the entry's health was last checked; zero before.
func lastCheck(ctx context.Context, t *testing.T, entry string) time.Time {
	t.Helper()
	var ph crawlv1alpha1.ProviderHealth
	if err := env.Client.Get(ctx, client.ObjectKey{Name: entry}, &ph); err != nil {
		if !apierrors.IsNotFound(err) {
			t.Fatal(err)
		}
		return time.Time{}
	}
	if ph.Status.LastCheckTime == nil {
		return time.Time{}
	}
	return ph.Status.LastCheckTime.Time
}

// simHasVM reports whether the simulator still has the VM of an instance
// ID (node/vmid/name).
func simHasVM(sim *pvelab.Lab, id string) bool {
	parts := strings.Split(id, "/")
	for _, vm := range sim.Clones() {
		if len(parts) == 3 && strconv.Itoa(vm.VMID) == parts[1] {
			return true
		}
	}
	return false
}

// callLog is the kvm2 provider with its worker calls (Create, Get, Delete)
// timed: how many are in flight, the most at once, and how long each one
// that began after the pause took. Everything else passes through.
type callLog struct {
	*libvirt.Provider

	mu      sync.Mutex
	pause   time.Time
	now     int
	most    int
	records []callRecord
}

type callRecord struct {
	op   provider.Op
	took time.Duration
	err  error
}

func (c *callLog) markPause(at time.Time) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.pause, c.most = at, c.now
}

func (c *callLog) inFlight() int {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.now
}

func (c *callLog) maxInFlight() int {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.most
}

func (c *callLog) pausedCalls() []callRecord {
	c.mu.Lock()
	defer c.mu.Unlock()
	return slices.Clone(c.records)
}

func (c *callLog) summary() string {
	var b strings.Builder
	for _, r := range c.pausedCalls() {
		fmt.Fprintf(&b, "[%s %s: %v] ", r.op, r.took.Round(time.Millisecond), r.err)
	}
	return fmt.Sprintf("%d in flight now; ended since the pause: %s", c.inFlight(), b.String())
}

func (c *callLog) timed(op provider.Op, fn func() error) error {
	c.mu.Lock()
	c.now++
	c.most = max(c.most, c.now)
	c.mu.Unlock()
	began := time.Now()
	err := fn()
	c.mu.Lock()
	defer c.mu.Unlock()
	c.now--
	if !c.pause.IsZero() && began.After(c.pause) {
		c.records = append(c.records, callRecord{op: op, took: time.Since(began), err: err})
	}
	return err
}

func (c *callLog) Create(ctx context.Context, req provider.Request) (id provider.ID, err error) {
	err = c.timed(provider.OpCreate, func() error { id, err = c.Provider.Create(ctx, req); return err })
	return id, err
}

func (c *callLog) Get(ctx context.Context, id provider.ID) (in provider.Instance, err error) {
	err = c.timed(provider.OpGet, func() error { in, err = c.Provider.Get(ctx, id); return err })
	return in, err
}

func (c *callLog) Delete(ctx context.Context, id provider.ID) error {
	return c.timed(provider.OpDelete, func() error { return c.Provider.Delete(ctx, id) })
}
