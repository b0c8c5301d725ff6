package controller_test

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"github.com/prometheus/client_golang/prometheus/testutil"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	apimeta "k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	crawlv1alpha1 "github.com/egress-proxies/egress-proxies-operator/api/v1alpha1"
	"github.com/egress-proxies/egress-proxies-operator/internal/config"
	"github.com/egress-proxies/egress-proxies-operator/internal/controller"
	"github.com/egress-proxies/egress-proxies-operator/internal/provider"
	"github.com/egress-proxies/egress-proxies-operator/internal/testing/fakeprovider"
	"github.com/egress-proxies/egress-proxies-operator/internal/testing/poll"
)

func TestProxyGoesReadyAndKeepsSecretsOutOfEveryOutput(t *testing.T) {
	ns := newNamespace(t)
	op := startOperator(t, operatorOptions{namespace: ns})
	ctx := context.Background()
	if err := k8s.Create(ctx, newProxy(ns, "web")); err != nil {
		t.Fatal(err)
	}
	p := waitPhase(t, ns, "web", crawlv1alpha1.ProxyPhaseReady, crawlv1alpha1.ReasonInstanceRunning)

	if !strings.HasPrefix(p.Status.URL, "http://198.51.100.") || !strings.HasSuffix(p.Status.URL, ":3128") {
		t.Errorf("status.url = %q, want http://<address>:3128 without credentials", p.Status.URL)
	}
	if p.Status.Address == "" || p.Status.Node != "node-rack-a" || p.Status.Zone != "rack-a" {
		t.Errorf("status address/node/zone = %q/%q/%q", p.Status.Address, p.Status.Node, p.Status.Zone)
	}
	if p.Status.InstanceCreationTime == nil || p.Status.ReadyTime == nil || p.Status.ObservedGeneration != p.Generation {
		t.Errorf("status times or observedGeneration missing: %+v", p.Status)
	}
	if !strings.HasPrefix(p.Status.InstanceName, ns+"-web-") {
		t.Errorf("instance name %q does not start with namespace-name", p.Status.InstanceName)
	}
	if diff := cmp.Diff([]string{controller.Finalizer}, p.Finalizers); diff != "" {
		t.Errorf("finalizers (-want +got):\n%s", diff)
	}
	// The cache may hand a later reconcile the Proxy before its recorded
	// instance ID: Create may then be called again, and must converge.
	for _, c := range op.fake.Calls() {
		if c.Op == provider.OpCreate && c.Name != p.Status.InstanceName {
			t.Errorf("Create called with name %q, want only %q", c.Name, p.Status.InstanceName)
		}
	}
	if got := len(op.fake.Instances()); got != 1 {
		t.Errorf("instances = %d, want 1", got)
	}

	// The credentials Secret is owned by the Proxy and holds a usable URL.
	var s corev1.Secret
	if err := k8s.Get(ctx, client.ObjectKey{Namespace: ns, Name: p.Status.CredentialsSecretName}, &s); err != nil {
		t.Fatalf("credentials secret: %v", err)
	}
	user, pass := string(s.Data["username"]), string(s.Data["password"])
	if len(pass) < 24 || user == "" {
		t.Fatalf("weak or missing credentials: user %q, password length %d", user, len(pass))
	}
	eventually(t, 5*time.Second, func() (bool, string) {
		_ = k8s.Get(ctx, client.ObjectKeyFromObject(&s), &s)
		want := "http://" + user + ":" + pass + "@" + p.Status.Address + ":3128"
		return string(s.Data["url"]) == want, "secret url is " + string(s.Data["url"])
	})
	if !metav1.IsControlledBy(&s, p) {
		t.Errorf("secret is not controlled by the Proxy: %+v", s.OwnerReferences)
	}

	// Metrics: the proxy is counted as Ready, and create-to-ready observed.
	eventually(t, 5*time.Second, func() (bool, string) {
		n, err := testutil.GatherAndCount(op.reg, "egress_proxies_proxies")
		return err == nil && n == 1, "proxies gauge series missing"
	})
	// Observed when Ready is announced, just after the status patch the
	// test saw: wait for it rather than race it.
	eventually(t, 5*time.Second, func() (bool, string) {
		got := testutil.CollectAndCount(op.metrics.CreateToReady)
		return got == 1, fmt.Sprintf("create_to_ready series = %d, want 1", got)
	})
	// One transition to Ready is announced once, even when a reconcile
	// works from a cached copy that predates the Ready status.
	consistently(t, 500*time.Millisecond, func() (bool, string) {
		n := strings.Count(strings.Join(eventsFor(t, ns, "web"), "\n"), "Ready: Instance")
		return n <= 1, fmt.Sprintf("%d Ready events", n)
	})
	if got := histogramCount(t, op, "egress_proxies_create_to_ready_seconds"); got != 1 {
		t.Errorf("create-to-ready observations = %d, want 1", got)
	}

	// Provider calls are traced inside the reconcile that made them.
	reconciles := map[string]bool{}
	for _, sp := range op.spans.Ended() {
		if sp.Name() == "Proxy.Reconcile" {
			reconciles[sp.SpanContext().SpanID().String()] = true
		}
	}
	for _, sp := range op.spans.Ended() {
		if sp.Name() == "provider.create" && !reconciles[sp.Parent().SpanID().String()] {
			t.Errorf("span provider.create has parent %s, not a Proxy.Reconcile span", sp.Parent().SpanID())
		}
	}

	// Sentinel: the password must appear in no status, event, log line or
	// span, even at verbosity 2.
	statusJSON, _ := json.Marshal(p.Status)
	var spanText strings.Builder
	for _, sp := range op.spans.Ended() {
		spanText.WriteString(sp.Name() + " " + sp.Status().Description)
		for _, a := range sp.Attributes() {
			spanText.WriteString(" " + string(a.Key) + "=" + a.Value.String())
		}
		for _, e := range sp.Events() {
			for _, a := range e.Attributes {
				spanText.WriteString(" " + a.Value.String())
			}
		}
	}
	outputs := map[string]string{
		"status": string(statusJSON),
		"events": strings.Join(eventsFor(t, ns, "web"), "\n"),
		"logs":   op.logs.String(),
		"spans":  spanText.String(),
	}
	if !strings.Contains(outputs["logs"], "provider call succeeded") || spanText.Len() == 0 {
		t.Fatalf("the sentinel check saw no logs or spans; it would pass vacuously")
	}
	if where := containsAny(pass, outputs); len(where) > 0 {
		t.Errorf("the proxy password leaked into: %v", where)
	}
	if where := containsAny("BasicAuth", outputs); len(where) > 0 {
		t.Errorf("cloud-init content leaked into: %v", where)
	}
}

func TestTransientErrorsAreRetriedThenSucceed(t *testing.T) {
	ns := newNamespace(t)
	op := startOperator(t, operatorOptions{namespace: ns})
	op.fake.FailNext(provider.OpCreate, 2, provider.NewTransient(errors.New("api busy")))
	if err := k8s.Create(context.Background(), newProxy(ns, "web")); err != nil {
		t.Fatal(err)
	}
	waitPhase(t, ns, "web", crawlv1alpha1.ProxyPhaseReady, crawlv1alpha1.ReasonInstanceRunning)
	if got := op.fake.CallCount(provider.OpCreate); got != 3 {
		t.Errorf("Create calls = %d, want 3 (two transient failures, then success)", got)
	}
	if got := len(op.fake.Instances()); got != 1 {
		t.Errorf("instances = %d, want 1", got)
	}
	if got := testutil.ToFloat64(op.metrics.ProviderCallErrors.WithLabelValues("lab", "fake", "create", "Transient")); got != 2 {
		t.Errorf("transient create errors counted = %v, want 2", got)
	}
	events := strings.Join(eventsFor(t, ns, "web"), "\n")
	if strings.Count(events, "ProviderError") != 1 {
		t.Errorf("want exactly one ProviderError event for one run of failures, got:\n%s", events)
	}
}

func TestPermanentErrorLatchesUntilRetryAnnotation(t *testing.T) {
	ns := newNamespace(t)
	op := startOperator(t, operatorOptions{namespace: ns})
	op.fake.FailNext(provider.OpCreate, 1, provider.NewPermanent(errors.New("template 9000 does not exist"), "create the template"))
	ctx := context.Background()
	if err := k8s.Create(ctx, newProxy(ns, "web")); err != nil {
		t.Fatal(err)
	}
	p := waitPhase(t, ns, "web", crawlv1alpha1.ProxyPhaseFailed, crawlv1alpha1.ReasonPermanentError)
	msg := apimeta.FindStatusCondition(p.Status.Conditions, crawlv1alpha1.ConditionReady).Message
	for _, want := range []string{`provider "lab": create: template 9000 does not exist`, "To fix: create the template", crawlv1alpha1.AnnotationRetry} {
		if !strings.Contains(msg, want) {
			t.Errorf("Ready message %q lacks %q", msg, want)
		}
	}
	// Latched: no further Create while nobody asks, even across resyncs.
	consistently(t, time.Second, func() (bool, string) {
		n := op.fake.CallCount(provider.OpCreate)
		return n == 1, "Create was called again while latched"
	})

	patch := client.MergeFrom(p.DeepCopy())
	p.Annotations = map[string]string{crawlv1alpha1.AnnotationRetry: "now"}
	if err := k8s.Patch(ctx, p, patch); err != nil {
		t.Fatal(err)
	}
	p = waitPhase(t, ns, "web", crawlv1alpha1.ProxyPhaseReady, crawlv1alpha1.ReasonInstanceRunning)
	if _, still := p.Annotations[crawlv1alpha1.AnnotationRetry]; still {
		t.Errorf("the retry annotation was not removed after the retry")
	}
}

func TestInstanceThatVanishesOrStopsIsReplaced(t *testing.T) {
	for _, tc := range []struct {
		name   string
		reason string
		// breakIt does to the instance what the infrastructure did.
		breakIt func(op *operator, id provider.ID)
		// wantDeletes is how many Delete calls the replacement needs: a
		// stopped instance must be removed, and a vanished one too, since
		// what it left (a seed with the proxy's password) may still be there
		// (the chaos run found such seeds).
		wantDeletes int
	}{
		{name: "vanished", reason: "vanished", breakIt: func(op *operator, id provider.ID) { op.fake.Vanish(id) }, wantDeletes: 1},
		{name: "stopped", reason: "stopped", breakIt: func(op *operator, id provider.ID) { op.fake.SetState(id, provider.StateStopped) }, wantDeletes: 1},
	} {
		t.Run(tc.name, func(t *testing.T) {
			ns := newNamespace(t)
			op := startOperator(t, operatorOptions{namespace: ns})
			if err := k8s.Create(context.Background(), newProxy(ns, "web")); err != nil {
				t.Fatal(err)
			}
			first := waitPhase(t, ns, "web", crawlv1alpha1.ProxyPhaseReady, crawlv1alpha1.ReasonInstanceRunning)
			tc.breakIt(op, provider.ID(first.Status.InstanceID))

			var p *crawlv1alpha1.Proxy
			eventually(t, 20*time.Second, func() (bool, string) {
				p = getProxy(t, ns, "web")
				return p.Status.Phase == crawlv1alpha1.ProxyPhaseReady && p.Status.InstanceID != first.Status.InstanceID,
					"phase " + string(p.Status.Phase) + ", instance " + p.Status.InstanceID
			})
			if p.Status.Replacements != 1 || !strings.HasSuffix(p.Status.InstanceName, "-r1") {
				t.Errorf("replacements = %d, name %q; want 1 and a -r1 name", p.Status.Replacements, p.Status.InstanceName)
			}
			if got := len(op.fake.Instances()); got != 1 {
				t.Errorf("instances after replacement = %d, want exactly 1", got)
			}
			if got := op.fake.CallCount(provider.OpDelete); got != tc.wantDeletes {
				t.Errorf("Delete calls = %d, want %d", got, tc.wantDeletes)
			}
			if got := testutil.ToFloat64(op.metrics.Replacements.WithLabelValues("lab", tc.reason)); got != 1 {
				t.Errorf("replacements metric = %v, want 1", got)
			}
			waitEvents(t, ns, "web", "Replacing: Replacing instance "+first.Status.InstanceID)
		})
	}
}

func TestDeletionRetriesProviderErrorsAndShowsThem(t *testing.T) {
	ns := newNamespace(t)
	op := startOperator(t, operatorOptions{namespace: ns})
	ctx := context.Background()
	if err := k8s.Create(ctx, newProxy(ns, "web")); err != nil {
		t.Fatal(err)
	}
	p := waitPhase(t, ns, "web", crawlv1alpha1.ProxyPhaseReady, crawlv1alpha1.ReasonInstanceRunning)
	// A permanent error must not be latched on deletion: the finalizer would
	// hold the Proxy forever.
	op.fake.FailNext(provider.OpDelete, 1, provider.NewPermanent(errors.New("permission denied"), "grant VM.Allocate"))
	op.fake.FailNext(provider.OpDelete, 1, provider.NewTransient(errors.New("node busy")))
	if err := k8s.Delete(ctx, p); err != nil {
		t.Fatal(err)
	}
	eventually(t, 20*time.Second, func() (bool, string) {
		err := k8s.Get(ctx, client.ObjectKeyFromObject(p), &crawlv1alpha1.Proxy{})
		return apierrors.IsNotFound(err), "proxy still exists"
	})
	if got := op.fake.CallCount(provider.OpDelete); got != 3 {
		t.Errorf("Delete calls = %d, want 3 (two failures, then success)", got)
	}
	if got := len(op.fake.Instances()); got != 0 {
		t.Errorf("instances left = %d, want 0", got)
	}
	// InstanceDeleted is emitted just before the finalizer goes: the event
	// may reach the API server after the Proxy is gone.
	waitEvents(t, ns, "web", "DeleteFailed: provider \"lab\": delete", "permission denied", "node busy", "InstanceDeleted")
}

// A delete of several steps checks the recorded instance's owner once, at
// its first step: the steps after it read nothing more (on proxmox that Get
// of a stopped VM was a status/current read per step, the largest part of
// a delete's calls).
func TestDeletionOfSeveralStepsChecksTheOwnerOnce(t *testing.T) {
	ns := newNamespace(t)
	fake := fakeprovider.New(nil)
	fake.DeletesUntilDone = 3
	op := startOperator(t, operatorOptions{namespace: ns, fake: fake})
	ctx := context.Background()
	if err := k8s.Create(ctx, newProxy(ns, "web")); err != nil {
		t.Fatal(err)
	}
	p := waitPhase(t, ns, "web", crawlv1alpha1.ProxyPhaseReady, crawlv1alpha1.ReasonInstanceRunning)
	if err := k8s.Delete(ctx, p); err != nil {
		t.Fatal(err)
	}
	eventually(t, 20*time.Second, func() (bool, string) {
		err := k8s.Get(ctx, client.ObjectKeyFromObject(p), &crawlv1alpha1.Proxy{})
		return apierrors.IsNotFound(err), "proxy still exists"
	})
	var deletes, getsAfterFirstDelete int
	for _, c := range op.fake.Calls() {
		switch {
		case c.Op == provider.OpDelete:
			deletes++
		case c.Op == provider.OpGet && deletes > 0:
			getsAfterFirstDelete++
		}
	}
	if deletes != 4 {
		t.Errorf("Delete calls = %d, want 4 (three steps in progress, then done)", deletes)
	}
	if getsAfterFirstDelete != 0 {
		t.Errorf("%d Get calls after the first Delete step, want 0: the owner was checked again at a later step", getsAfterFirstDelete)
	}
	if got := len(op.fake.Instances()); got != 0 {
		t.Errorf("instances left = %d, want 0", got)
	}
}

func TestDeletionFindsAnInstanceWhoseIDWasNeverRecorded(t *testing.T) {
	ns := newNamespace(t)
	op := startOperator(t, operatorOptions{namespace: ns})
	// Every Create reaches the provider and then "crashes" before the ID
	// comes back, so the status never records the instance.
	op.fake.SetAfterCreate(func(context.Context, provider.ID) error {
		return provider.NewTransient(errors.New("connection reset"))
	})
	ctx := context.Background()
	if err := k8s.Create(ctx, newProxy(ns, "web")); err != nil {
		t.Fatal(err)
	}
	waitPhase(t, ns, "web", crawlv1alpha1.ProxyPhasePending, crawlv1alpha1.ReasonTransientError)
	if got := len(op.fake.Instances()); got != 1 {
		t.Fatalf("instances = %d, want 1 (retries must converge on one)", got)
	}
	if err := k8s.Delete(ctx, newProxy(ns, "web")); err != nil {
		t.Fatal(err)
	}
	eventually(t, 20*time.Second, func() (bool, string) {
		err := k8s.Get(ctx, client.ObjectKey{Namespace: ns, Name: "web"}, &crawlv1alpha1.Proxy{})
		return apierrors.IsNotFound(err), "proxy still exists"
	})
	if got := len(op.fake.Instances()); got != 0 {
		t.Errorf("instances left = %d, want 0: the unrecorded instance leaked", got)
	}
}

func TestRestartInTheMiddleOfCreateConvergesOnOneInstance(t *testing.T) {
	ns := newNamespace(t)
	first := startOperator(t, operatorOptions{namespace: ns})
	created := make(chan struct{}, 1)
	// The provider did the work, then the operator dies before it hears back.
	first.fake.SetAfterCreate(func(ctx context.Context, _ provider.ID) error {
		select {
		case created <- struct{}{}:
		default:
		}
		<-ctx.Done()
		return provider.NewTransient(ctx.Err())
	})
	if err := k8s.Create(context.Background(), newProxy(ns, "web")); err != nil {
		t.Fatal(err)
	}
	poll.Receive(t, poll.Paced(20*time.Second), "create reaching the provider", created)
	first.stop()
	if id := getProxy(t, ns, "web").Status.InstanceID; id != "" {
		t.Fatalf("the first operator recorded %q; the test needs a crash before the record", id)
	}

	first.fake.SetAfterCreate(nil)
	second := startOperator(t, operatorOptions{namespace: ns, fake: first.fake})
	p := waitPhase(t, ns, "web", crawlv1alpha1.ProxyPhaseReady, crawlv1alpha1.ReasonInstanceRunning)
	instances := second.fake.Instances()
	if len(instances) != 1 {
		t.Fatalf("instances = %d, want 1: %+v", len(instances), instances)
	}
	if string(instances[0].ID) != p.Status.InstanceID {
		t.Errorf("status records %q, provider has %q", p.Status.InstanceID, instances[0].ID)
	}
	var names []string
	for _, c := range second.fake.Calls() {
		if c.Op == provider.OpCreate {
			names = append(names, c.Name)
		}
	}
	if diff := cmp.Diff([]string{p.Status.InstanceName, p.Status.InstanceName}, names); diff != "" {
		t.Errorf("Create must be called again with the same name (-want +got):\n%s", diff)
	}
}

func TestInvalidSpecFailsWithWhatExists(t *testing.T) {
	ns := newNamespace(t)
	op := startOperator(t, operatorOptions{namespace: ns})
	p := newProxy(ns, "web")
	p.Spec.Zone = "rack-z"
	if err := k8s.Create(context.Background(), p); err != nil {
		t.Fatal(err)
	}
	got := waitPhase(t, ns, "web", crawlv1alpha1.ProxyPhaseFailed, crawlv1alpha1.ReasonInvalidSpec)
	msg := apimeta.FindStatusCondition(got.Status.Conditions, crawlv1alpha1.ConditionReady).Message
	if !strings.Contains(msg, `spec.zone: provider "lab" has no zone "rack-z"; zones: rack-a, rack-b`) {
		t.Errorf("message %q does not say what is wrong and what exists", msg)
	}
	if n := op.fake.CallCount(provider.OpCreate); n != 0 {
		t.Errorf("Create called %d times for an invalid spec", n)
	}
	// A Proxy that never got an instance is deleted without provider calls.
	if err := k8s.Delete(context.Background(), got); err != nil {
		t.Fatal(err)
	}
	eventually(t, 10*time.Second, func() (bool, string) {
		err := k8s.Get(context.Background(), client.ObjectKeyFromObject(got), &crawlv1alpha1.Proxy{})
		return apierrors.IsNotFound(err), "proxy still exists"
	})
}

func TestForeignSecretIsNeverOverwritten(t *testing.T) {
	ns := newNamespace(t)
	startOperator(t, operatorOptions{namespace: ns})
	ctx := context.Background()
	foreign := &corev1.Secret{
		ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "web-proxy-credentials"},
		StringData: map[string]string{"password": "theirs"},
	}
	if err := k8s.Create(ctx, foreign); err != nil {
		t.Fatal(err)
	}
	if err := k8s.Create(ctx, newProxy(ns, "web")); err != nil {
		t.Fatal(err)
	}
	waitPhase(t, ns, "web", crawlv1alpha1.ProxyPhaseFailed, crawlv1alpha1.ReasonCredentialsConflict)
	var s corev1.Secret
	if err := k8s.Get(ctx, client.ObjectKeyFromObject(foreign), &s); err != nil {
		t.Fatal(err)
	}
	if string(s.Data["password"]) != "theirs" || len(s.OwnerReferences) != 0 {
		t.Errorf("the foreign secret was changed: %+v", s)
	}
}

// histogramCount returns the number of observations of a histogram family.
func histogramCount(t *testing.T, op *operator, name string) uint64 {
	t.Helper()
	families, err := op.reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	var n uint64
	for _, f := range families {
		if f.GetName() == name {
			for _, m := range f.GetMetric() {
				n += m.GetHistogram().GetSampleCount()
			}
		}
	}
	return n
}

func TestCatalogueShrinkKeepsARunningInstance(t *testing.T) {
	ns := newNamespace(t)
	first := startOperator(t, operatorOptions{namespace: ns})
	if err := k8s.Create(context.Background(), newProxy(ns, "web")); err != nil {
		t.Fatal(err)
	}
	ready := waitPhase(t, ns, "web", crawlv1alpha1.ProxyPhaseReady, crawlv1alpha1.ReasonInstanceRunning)
	first.stop()

	// The operator restarts with a configuration that lost the Proxy's
	// machine type: the instance still serves, so it stays Ready.
	shrunk, err := config.Parse([]byte(`
providers:
  - name: lab
    type: fake
    zones: [rack-a, rack-b]
    machineTypes:
        large: {cores: 4, memoryMiB: 4096}
    images: [debian-12]
`), fakeprovider.Registry())
	if err != nil {
		t.Fatal(err)
	}
	second := startOperator(t, operatorOptions{namespace: ns, fake: first.fake, cfg: shrunk})
	consistently(t, time.Second, func() (bool, string) {
		p := getProxy(t, ns, "web")
		return p.Status.Phase == crawlv1alpha1.ProxyPhaseReady && p.Status.Address == ready.Status.Address,
			"phase " + string(p.Status.Phase)
	})
	// Only a replacement needs the spec to resolve; then it fails clearly.
	second.fake.Vanish(provider.ID(ready.Status.InstanceID))
	p := waitPhase(t, ns, "web", crawlv1alpha1.ProxyPhaseFailed, crawlv1alpha1.ReasonInvalidSpec)
	if msg := apimeta.FindStatusCondition(p.Status.Conditions, crawlv1alpha1.ConditionReady).Message; !strings.Contains(msg, "machine types: large") {
		t.Errorf("message %q does not list the machine types that exist", msg)
	}
	if n := len(second.fake.Instances()); n != 0 {
		t.Errorf("instances = %d, want 0: nothing may be created from an unresolvable spec", n)
	}
}

// TestDeleteNeverTouchesAnotherProxysInstance is #12 item 1: a Proxy whose
// status names another Proxy's instance (a status edited by hand, or the
// advice to recreate a Failed Proxy followed with a copied status) is deleted
// without deleting that instance.
func TestDeleteNeverTouchesAnotherProxysInstance(t *testing.T) {
	ns := newNamespace(t)
	op := startOperator(t, operatorOptions{namespace: ns})
	ctx := context.Background()
	for _, name := range []string{"a", "b"} {
		if err := k8s.Create(ctx, newProxy(ns, name)); err != nil {
			t.Fatal(err)
		}
	}
	a := waitPhase(t, ns, "a", crawlv1alpha1.ProxyPhaseReady, crawlv1alpha1.ReasonInstanceRunning)
	b := waitPhase(t, ns, "b", crawlv1alpha1.ProxyPhaseReady, crawlv1alpha1.ReasonInstanceRunning)

	// A's status now names B's instance.
	patch := client.MergeFrom(a.DeepCopy())
	a.Status.InstanceID = b.Status.InstanceID
	if err := k8s.Status().Patch(ctx, a, patch); err != nil {
		t.Fatal(err)
	}
	if err := k8s.Delete(ctx, a); err != nil {
		t.Fatal(err)
	}
	eventually(t, 20*time.Second, func() (bool, string) {
		err := k8s.Get(ctx, client.ObjectKey{Namespace: ns, Name: "a"}, &crawlv1alpha1.Proxy{})
		return apierrors.IsNotFound(err), "proxy a still exists"
	})
	for _, c := range op.fake.Calls() {
		if c.Op == provider.OpDelete && c.ID == provider.ID(b.Status.InstanceID) {
			t.Fatalf("Delete was called on proxy b's instance %s", b.Status.InstanceID)
		}
	}
	found := false
	for _, in := range op.fake.Instances() {
		found = found || in.ID == provider.ID(b.Status.InstanceID)
	}
	if !found {
		t.Errorf("proxy b's instance %s is gone", b.Status.InstanceID)
	}
}
