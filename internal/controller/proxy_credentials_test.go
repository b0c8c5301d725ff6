package controller

import (
	"errors"
	"fmt"
	"sync"
	"time"

	"context"
	"testing"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/types"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"
	crfake "sigs.k8s.io/controller-runtime/pkg/client/fake"
	"sigs.k8s.io/controller-runtime/pkg/client/interceptor"
	"sigs.k8s.io/controller-runtime/pkg/controller/controllerutil"

	crawlv1alpha1 "github.com/egress-proxies/egress-proxies-operator/api/v1alpha1"
	"github.com/egress-proxies/egress-proxies-operator/api/v1alpha1/published"
	"github.com/egress-proxies/egress-proxies-operator/internal/config"
	"github.com/egress-proxies/egress-proxies-operator/internal/provider"
	"github.com/egress-proxies/egress-proxies-operator/internal/testing/fakeprobe"
	"github.com/egress-proxies/egress-proxies-operator/internal/testing/fakeprovider"
	"github.com/egress-proxies/egress-proxies-operator/internal/testing/poll"
	"github.com/egress-proxies/egress-proxies-operator/internal/testing/testenv"
)

// A look at a Ready proxy reads its credentials Secret once: the URL is
// synced from that read, not from a second one (each is a round trip to the
// API server, and at thousands of proxies they were a third of the
// operator's requests).
func TestCredentialsSecretIsReadOncePerReconcile(t *testing.T) {
	scheme := testScheme(t)
	p := &crawlv1alpha1.Proxy{
		ObjectMeta: metav1.ObjectMeta{Namespace: "crawl", Name: "web", UID: "uid-1"},
		Spec:       crawlv1alpha1.ProxySpec{Port: 3128, Auth: crawlv1alpha1.ProxyAuthBasic},
	}
	s := &corev1.Secret{
		ObjectMeta: metav1.ObjectMeta{Namespace: "crawl", Name: credentialsSecretName("web")},
		Data:       map[string][]byte{published.CredentialsKeyUsername: []byte("ualice"), published.CredentialsKeyPassword: []byte("pw-sentinel")},
	}
	if err := controllerutil.SetControllerReference(p, s, scheme); err != nil {
		t.Fatal(err)
	}
	reads := 0
	c := secretReadCounter(crfake.NewClientBuilder().WithScheme(scheme).WithObjects(s), &reads)
	r := &ProxyReconciler{Client: c, APIReader: c}

	ctx := context.Background()
	creds, conflict, err := r.ensureCredentials(ctx, p)
	if err != nil || conflict != "" {
		t.Fatalf("ensureCredentials: %v, conflict %q", err, conflict)
	}
	if err := r.syncCredentialsURL(ctx, p, creds, "203.0.113.7"); err != nil {
		t.Fatal(err)
	}
	if reads != 1 {
		t.Errorf("the credentials Secret was read %d times in one reconcile, want 1", reads)
	}
	var got corev1.Secret
	if err := c.Get(ctx, client.ObjectKeyFromObject(s), &got); err != nil {
		t.Fatal(err)
	}
	if want := "http://ualice:pw-sentinel@203.0.113.7:3128"; string(got.Data[published.CredentialsKeyURL]) != want {
		t.Errorf("url in the Secret = %q, want %q", got.Data[published.CredentialsKeyURL], want)
	}
}

// The credentials Secret is created without a read before it, kept for the
// steps of a create, and read once when the instance runs (to write the URL
// and probe); the polls while the instance boots read nothing from the API
// server.
func TestSecretReadsDuringCreate(t *testing.T) {
	scheme := testScheme(t)
	cfg := unitConfig(t)
	fp := fakeprovider.New(nil)
	fp.CreatesUntilDone, fp.GetsUntilRunning = 2, 2
	p := unitProxy()
	reads := 0
	c := secretReadCounter(crfake.NewClientBuilder().WithScheme(scheme).WithObjects(p).WithStatusSubresource(p), &reads)
	r := &ProxyReconciler{Client: c, APIReader: c, Config: cfg, Providers: map[string]provider.Provider{"lab": fp}}
	r.defaults()
	req := ctrl.Request{NamespacedName: client.ObjectKeyFromObject(p)}
	// The first reconcile creates the Secret (no read: nothing is recorded
	// yet) and starts the create; the third gets the instance's ID; two
	// polls find it booting; the sixth finds it running.
	wantReads := []int{0, 0, 0, 0, 0, 1}
	var phases []crawlv1alpha1.ProxyPhase
	for i, want := range wantReads {
		reads = 0
		if _, err := r.Reconcile(context.Background(), req); err != nil {
			t.Fatalf("reconcile %d: %v", i+1, err)
		}
		var got crawlv1alpha1.Proxy
		if err := c.Get(context.Background(), req.NamespacedName, &got); err != nil {
			t.Fatal(err)
		}
		phases = append(phases, got.Status.Phase)
		if reads != want {
			t.Errorf("reconcile %d (phase %s): %d reads of the credentials Secret, want %d", i+1, got.Status.Phase, reads, want)
		}
	}
	if last := phases[len(phases)-1]; last != crawlv1alpha1.ProxyPhaseReady {
		t.Errorf("phases %v, want Ready at the end", phases)
	}
}

// The looks at a Ready proxy between resyncs (a probe round is two, every
// --probe-interval) read its credentials Secret at most once per resync
// interval, not at every look; a Secret deleted meanwhile is noticed at
// the first look past the interval.
func TestReadyLooksReadTheSecretOncePerResync(t *testing.T) {
	scheme := testScheme(t)
	cfg := unitConfig(t)
	now := time.Date(2026, 12, 5, 22, 0, 0, 0, time.UTC)
	clock := func() time.Time { return now }
	fp := fakeprovider.New(clock)
	p := unitProxy()
	reads := 0
	c := secretReadCounter(crfake.NewClientBuilder().WithScheme(scheme).WithObjects(p).WithStatusSubresource(p), &reads)
	r := &ProxyReconciler{Client: c, APIReader: c, Config: cfg, Providers: map[string]provider.Provider{"lab": fp}, Now: clock}
	r.defaults()
	req := ctrl.Request{NamespacedName: client.ObjectKeyFromObject(p)}
	look := func(after time.Duration) (int, *crawlv1alpha1.Proxy) {
		t.Helper()
		now = now.Add(after)
		reads = 0
		got := reconcileAndRead(t, r, c, req)
		return reads, got
	}
	for i := 0; ; i++ {
		if _, got := look(time.Second); got.Status.Phase == crawlv1alpha1.ProxyPhaseReady {
			break
		}
		if i == 20 {
			t.Fatal("the Proxy did not become Ready in 20 looks")
		}
	}
	for _, tc := range []struct {
		why       string
		after     time.Duration
		deleteIt  bool
		wantReads int
		wantPhase crawlv1alpha1.ProxyPhase
	}{
		{why: "a probe interval later: the credentials read when it became Ready serve", after: 30 * time.Second, wantPhase: crawlv1alpha1.ProxyPhaseReady},
		{why: "another one: still within the resync interval", after: 30 * time.Second, wantPhase: crawlv1alpha1.ProxyPhaseReady},
		{why: "past the resync interval: the Secret is read again", after: r.ResyncInterval, wantReads: 1, wantPhase: crawlv1alpha1.ProxyPhaseReady},
		{why: "the Secret deleted, a probe interval later: not read yet", after: 30 * time.Second, deleteIt: true, wantPhase: crawlv1alpha1.ProxyPhaseReady},
		{why: "past the resync interval: the deletion is noticed", after: r.ResyncInterval, wantReads: 1, wantPhase: crawlv1alpha1.ProxyPhaseFailed},
	} {
		if tc.deleteIt {
			if err := c.Delete(context.Background(), &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Namespace: p.Namespace, Name: credentialsSecretName(p.Name)}}); err != nil {
				t.Fatal(err)
			}
		}
		got, proxy := look(tc.after)
		if got != tc.wantReads || proxy.Status.Phase != tc.wantPhase {
			t.Errorf("%s: %d reads of the Secret and phase %s, want %d and %s", tc.why, got, proxy.Status.Phase, tc.wantReads, tc.wantPhase)
		}
	}
}

// A Proxy that recorded no Secret may still have one: its reconcile created
// it and crashed before the status write, or someone else made one of that
// name. The create that skips the read must then read and judge it: ours
// is used as it is, someone else's is a conflict, and neither is changed.
func TestCredentialsOnFirstUseWhenTheSecretExists(t *testing.T) {
	for _, tc := range []struct {
		name         string
		ours         bool
		wantConflict bool
	}{
		{name: "ours, from a reconcile that crashed before its status write", ours: true},
		{name: "someone else's", ours: false, wantConflict: true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			scheme := testScheme(t)
			p := unitProxy()
			s := &corev1.Secret{
				ObjectMeta: metav1.ObjectMeta{Namespace: "crawl", Name: credentialsSecretName("web")},
				Data:       map[string][]byte{published.CredentialsKeyUsername: []byte("ualice"), published.CredentialsKeyPassword: []byte("pw-sentinel")},
			}
			if tc.ours {
				if err := controllerutil.SetControllerReference(p, s, scheme); err != nil {
					t.Fatal(err)
				}
			}
			reads := 0
			c := secretReadCounter(crfake.NewClientBuilder().WithScheme(scheme).WithObjects(s), &reads)
			r := &ProxyReconciler{Client: c, APIReader: c}
			creds, conflict, err := r.ensureCredentials(context.Background(), p)
			if err != nil {
				t.Fatal(err)
			}
			if got := conflict != ""; got != tc.wantConflict {
				t.Errorf("conflict %q, want one: %t", conflict, tc.wantConflict)
			}
			if !tc.wantConflict {
				if creds == nil || creds.username != "ualice" || creds.password != "pw-sentinel" {
					t.Errorf("credentials %+v, want the existing Secret's", creds)
				}
				if p.Status.CredentialsSecretName != s.Name {
					t.Errorf("status records Secret %q, want %q", p.Status.CredentialsSecretName, s.Name)
				}
			}
			if reads != 1 {
				t.Errorf("%d reads of the Secret, want 1 (after the create found it)", reads)
			}
			var got corev1.Secret
			if err := c.Get(context.Background(), client.ObjectKeyFromObject(s), &got); err != nil {
				t.Fatal(err)
			}
			if string(got.Data[published.CredentialsKeyPassword]) != "pw-sentinel" {
				t.Errorf("the existing Secret was changed: %v", got.Data)
			}
		})
	}
}

// unitConfig is a configuration of one fake entry, "lab", for the
// reconciler's tests without a control plane.
func unitConfig(t *testing.T) *config.Config {
	t.Helper()
	cfg, err := config.Parse([]byte(`
providers:
  - name: lab
    type: fake
    zones: [rack-a]
    machineTypes:
        small: {cores: 1, memoryMiB: 512, diskGiB: 8}
    images: [debian-12]
`), fakeprovider.Registry())
	if err != nil {
		t.Fatal(err)
	}
	return cfg
}

// unitProxy is a Proxy of unitConfig's entry with basic auth, its finalizer
// already set.
func unitProxy() *crawlv1alpha1.Proxy {
	return &crawlv1alpha1.Proxy{
		ObjectMeta: metav1.ObjectMeta{Namespace: "crawl", Name: "web", UID: "uid-1", Finalizers: []string{Finalizer}},
		Spec: crawlv1alpha1.ProxySpec{Provider: "lab", Zone: "rack-a", MachineType: "small", Image: "debian-12",
			Port: 3128, Auth: crawlv1alpha1.ProxyAuthBasic},
	}
}

// testScheme has the core kinds and the operator's.
func testScheme(t *testing.T) *runtime.Scheme {
	t.Helper()
	return testenv.Scheme(t)
}

// secretReadCounter builds b's client, counting in reads every Get of a
// Secret.
func secretReadCounter(b *crfake.ClientBuilder, reads *int) client.WithWatch {
	return b.WithInterceptorFuncs(interceptor.Funcs{
		Get: func(ctx context.Context, c client.WithWatch, key client.ObjectKey, obj client.Object, opts ...client.GetOption) error {
			if _, ok := obj.(*corev1.Secret); ok {
				*reads++
			}
			return c.Get(ctx, key, obj, opts...)
		},
	}).Build()
}

// reconcileAndRead reconciles req once and returns the Proxy as it is
// then.
func reconcileAndRead(t *testing.T, r *ProxyReconciler, c client.Client, req ctrl.Request) *crawlv1alpha1.Proxy {
	t.Helper()
	if _, err := r.Reconcile(context.Background(), req); err != nil {
		t.Fatal(err)
	}
	var got crawlv1alpha1.Proxy
	if err := c.Get(context.Background(), req.NamespacedName, &got); err != nil {
		t.Fatal(err)
	}
	return &got
}

// statusPatchCounter builds b's client, counting in writes every patch of
// a subresource (the status).
func statusPatchCounter(b *crfake.ClientBuilder, writes *int) client.WithWatch {
	return b.WithInterceptorFuncs(interceptor.Funcs{
		SubResourcePatch: func(ctx context.Context, c client.Client, sub string, obj client.Object, patch client.Patch, opts ...client.SubResourcePatchOption) error {
			*writes++
			return c.SubResource(sub).Patch(ctx, obj, patch, opts...)
		},
	}).Build()
}

// TestProgressIsWrittenAtMostOncePerInterval: the steps of a create each
// name themselves in the Ready message; within progressEvery of the last
// status write only a change that says more than progress (the instance's
// ID, Ready) is written, so a create of many fast steps costs a few status
// writes, not one per step. A step reached after progressEvery is written.
func TestProgressIsWrittenAtMostOncePerInterval(t *testing.T) {
	scheme := testScheme(t)
	cfg := unitConfig(t)
	fp := fakeprovider.New(nil)
	fp.CreatesUntilDone, fp.GetsUntilRunning = 6, 1
	p := unitProxy()
	writes := 0
	c := statusPatchCounter(crfake.NewClientBuilder().WithScheme(scheme).WithObjects(p).WithStatusSubresource(p), &writes)
	now := time.Date(2026, 12, 1, 12, 0, 0, 0, time.UTC)
	r := &ProxyReconciler{Client: c, APIReader: c, Config: cfg, Providers: map[string]provider.Provider{"lab": fp},
		Now: func() time.Time { return now }}
	r.defaults()
	req := ctrl.Request{NamespacedName: client.ObjectKeyFromObject(p)}
	type step struct {
		advance    time.Duration
		wantWrites int
		reason     string
	}
	for i, s := range []step{
		{0, 1, "the first step: Pending becomes Provisioning"},
		{time.Second, 0, "a second step a second later is progress only"},
		{time.Second, 0, "so is a third"},
		{progressEvery, 1, "a step reached after progressEvery is written: a slow step is named"},
		{time.Second, 0, "progress only again"},
		{time.Second, 0, "the last step before the ID, still progress only"},
		{time.Second, 1, "Create returns the ID: written at once"},
		{time.Second, 1, "the instance runs: Ready, written at once"},
	} {
		now = now.Add(s.advance)
		writes = 0
		if _, err := r.Reconcile(context.Background(), req); err != nil {
			t.Fatalf("reconcile %d: %v", i+1, err)
		}
		var got crawlv1alpha1.Proxy
		if err := c.Get(context.Background(), req.NamespacedName, &got); err != nil {
			t.Fatal(err)
		}
		if writes != s.wantWrites {
			t.Errorf("reconcile %d (phase %s, %q): %d status writes, want %d: %s", i+1, got.Status.Phase,
				readyCondition(&got).Message, writes, s.wantWrites, s.reason)
		}
	}
}

// TestRoutineProbesAreWrittenEveryTenIntervals: a Ready proxy is probed
// every probe interval, but a probe that passed as the one before did is
// written to the status once per routineProbeEvery intervals; a failure is
// written at once, and so is the pass that ends it. The probes keep their
// pace in between (the schedule is kept in memory), and a new process,
// which remembers nothing, probes from the status's lastProbeTime. Before,
// every probe was a status write: one per Ready proxy per 30 s.
func TestRoutineProbesAreWrittenEveryTenIntervals(t *testing.T) {
	scheme := testScheme(t)
	cfg := unitConfig(t)
	now := time.Date(2026, 12, 6, 4, 0, 0, 0, time.UTC)
	clock := func() time.Time { return now }
	fp := fakeprovider.New(clock)
	prober := fakeprobe.New()
	p := unitProxy()
	writes := 0
	c := statusPatchCounter(crfake.NewClientBuilder().WithScheme(scheme).WithObjects(p).WithStatusSubresource(p), &writes)
	newReconciler := func() *ProxyReconciler {
		r := &ProxyReconciler{Client: c, APIReader: c, Config: cfg, Providers: map[string]provider.Provider{"lab": fp},
			Prober: prober, Now: clock}
		r.defaults()
		return r
	}
	r := newReconciler()
	req := ctrl.Request{NamespacedName: client.ObjectKeyFromObject(p)}
	look := func(after time.Duration) *crawlv1alpha1.Proxy {
		t.Helper()
		now = now.Add(after)
		return reconcileAndRead(t, r, c, req)
	}
	var address string
	for i := 0; ; i++ {
		got := look(time.Second)
		if c := servingCondition(got.Status); c != nil && c.Reason == crawlv1alpha1.ReasonProbePassed {
			address = fmt.Sprintf("%s:%d", got.Status.Address, got.Spec.Port)
			break
		}
		if i == 20 {
			t.Fatal("the Proxy was not Serving after 20 looks")
		}
	}
	interval := r.ProbeInterval
	for i, s := range []struct {
		why        string
		after      time.Duration
		restart    bool
		fail, pass bool
		wantProbes int
		wantWrites int
		wantReason string
	}{
		{why: "half an interval later: not due", after: interval / 2, wantReason: crawlv1alpha1.ReasonProbePassed},
		{why: "an interval after the first pass: probed, routine, not written", after: interval / 2, wantProbes: 1, wantReason: crawlv1alpha1.ReasonProbePassed},
		{why: "half an interval later: the schedule is kept in memory, not due", after: interval / 2, wantReason: crawlv1alpha1.ReasonProbePassed},
		{why: "the next interval: probed, not written", after: interval / 2, wantProbes: 1, wantReason: crawlv1alpha1.ReasonProbePassed},
		{why: "seven more intervals", after: 7 * interval, wantProbes: 1, wantReason: crawlv1alpha1.ReasonProbePassed},
		{why: "ten intervals after the last write: written", after: interval, wantProbes: 1, wantWrites: 1, wantReason: crawlv1alpha1.ReasonProbePassed},
		{why: "a failure is written at once", after: interval, fail: true, wantProbes: 1, wantWrites: 1, wantReason: crawlv1alpha1.ReasonProbeFailing},
		{why: "so is the pass that ends it", after: interval, pass: true, wantProbes: 1, wantWrites: 1, wantReason: crawlv1alpha1.ReasonProbePassed},
		{why: "a new process, half an interval after the last (written) probe: not due by the status", after: interval / 2, restart: true, wantReason: crawlv1alpha1.ReasonProbePassed},
		{why: "the new process, due by the status: probed, and written (it wrote nothing yet)", after: interval / 2, wantProbes: 1, wantWrites: 1, wantReason: crawlv1alpha1.ReasonProbePassed},
		{why: "routine again", after: interval, wantProbes: 1, wantReason: crawlv1alpha1.ReasonProbePassed},
	} {
		if s.restart {
			r = newReconciler()
		}
		if s.fail {
			prober.Fail(address, errors.New("connection refused"))
		}
		if s.pass {
			prober.Pass(address)
		}
		probesBefore := prober.Probed(address)
		writes = 0
		got := look(s.after)
		probes := prober.Probed(address) - probesBefore
		reason := ""
		if c := servingCondition(got.Status); c != nil {
			reason = c.Reason
		}
		if probes != s.wantProbes || writes != s.wantWrites || reason != s.wantReason {
			t.Errorf("look %d, %s: %d probes, %d status writes, Serving %s; want %d, %d, %s",
				i+1, s.why, probes, writes, reason, s.wantProbes, s.wantWrites, s.wantReason)
		}
	}
}

// TestASuccessorIsProbedAtOnce: the instance that replaces a vanished one
// is probed as soon as it runs, and its Serving verdict is taken by the
// reconcile that the probe's end wakes, however recently its predecessor
// was probed. The probe runs off the workers, as with the manager. Before,
// the status kept the predecessor's lastProbeTime, so the outcome of the
// successor's first probe waited, Serving Unknown (ProbePending) and out
// of every published list, until a probe interval after that time.
func TestASuccessorIsProbedAtOnce(t *testing.T) {
	scheme := testScheme(t)
	cfg := unitConfig(t)
	now := time.Date(2026, 12, 6, 5, 0, 0, 0, time.UTC)
	var mu sync.Mutex
	clock := func() time.Time { mu.Lock(); defer mu.Unlock(); return now }
	fp := fakeprovider.New(clock)
	prober := fakeprobe.New()
	p := unitProxy()
	c := crfake.NewClientBuilder().WithScheme(scheme).WithObjects(p).WithStatusSubresource(p).Build()
	r := &ProxyReconciler{Client: c, APIReader: c, Config: cfg, Providers: map[string]provider.Provider{"lab": fp},
		Prober: prober, Now: clock}
	r.defaults()
	r.probes = newProbeRuns(prober, 4, func(types.NamespacedName) {})
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- r.probes.Start(ctx) }()
	t.Cleanup(func() {
		cancel()
		if err := <-done; err != nil {
			t.Errorf("the probe runner: %v", err)
		}
	})
	req := ctrl.Request{NamespacedName: client.ObjectKeyFromObject(p)}
	look := func(after time.Duration) *crawlv1alpha1.Proxy {
		t.Helper()
		mu.Lock()
		now = now.Add(after)
		mu.Unlock()
		return reconcileAndRead(t, r, c, req)
	}
	// serving looks, a second apart and after each probe's end, until
	// the instance is Serving; it returns the instance and the looks.
	serving := func(what string) (string, int) {
		t.Helper()
		for i := 1; i <= 40; i++ {
			got := look(time.Second)
			if c := servingCondition(got.Status); got.Status.Phase == crawlv1alpha1.ProxyPhaseReady && c != nil && c.Reason == crawlv1alpha1.ReasonProbePassed {
				return got.Status.InstanceID, i
			}
			// A probe started by this look ends before the next look,
			// which takes its outcome, as the wake-up would make it.
			poll.Until(t, 10*time.Second, func() (bool, string) {
				r.probes.mu.Lock()
				defer r.probes.mu.Unlock()
				return len(r.probes.running) == 0, "a probe is still running"
			})
		}
		t.Fatalf("%s: not Serving after 40 looks a second apart", what)
		return "", 0
	}
	first, _ := serving("the first instance")
	fp.Vanish(provider.ID(first))
	// The successor is made after the replacement's backoff and runs in
	// well under a probe interval of its predecessor's last probe.
	look(time.Second)
	look(DefaultReplacementBackoff)
	second, looks := serving("the successor")
	if second == first {
		t.Fatalf("the successor has the vanished instance's ID %s", first)
	}
	// Make, boot and probe: a few looks, never a wait for the
	// predecessor's probe schedule (30 looks).
	if looks > 5 {
		t.Errorf("the successor was Serving after %d looks a second apart, want at most 5: its first probe waited for its predecessor's schedule", looks)
	}
}
