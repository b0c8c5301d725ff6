package proxypool_test

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/netip"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	autoscalingv1 "k8s.io/api/autoscaling/v1"
	corev1 "k8s.io/api/core/v1"
	apimeta "k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/intstr"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"

	crawlv1alpha1 "github.com/egress-proxies/egress-proxies-operator/api/v1alpha1"
	"github.com/egress-proxies/egress-proxies-operator/api/v1alpha1/published"
	"github.com/egress-proxies/egress-proxies-operator/internal/config"
	"github.com/egress-proxies/egress-proxies-operator/internal/controller"
	"github.com/egress-proxies/egress-proxies-operator/internal/provider"
	"github.com/egress-proxies/egress-proxies-operator/internal/testing/fakeprovider"
)

// poolConfig has two fake entries: lab-a with zones rack-a and rack-b, lab-b
// with rack-c. Both probe with a check URL, which the fake prober never
// dials: it answers with the proxy's own address.
func poolConfig(t *testing.T) *config.Config {
	t.Helper()
	cfg, err := config.Parse([]byte(`
providers:
  - name: lab-a
    type: fake
    zones: [rack-a, rack-b]
    machineTypes: {small: {cores: 1, memoryMiB: 512}}
    images: [debian-12]
    probe: {checkURL: "http://203.0.113.10/ip"}
  - name: lab-b
    type: fake
    zones: [rack-c]
    machineTypes: {small: {cores: 1, memoryMiB: 512}}
    images: [debian-12]
    probe: {checkURL: "http://203.0.113.10/ip"}
`), fakeprovider.Registry())
	if err != nil {
		t.Fatalf("pool config: %v", err)
	}
	return cfg
}

func startPoolOperator(t *testing.T, ns string) *operator {
	t.Helper()
	return startOperator(t, operatorOptions{namespace: ns, cfg: poolConfig(t),
		opts: controller.Options{PoolResyncInterval: 500 * time.Millisecond}})
}

func newPool(ns, name string, replicas int32) *crawlv1alpha1.ProxyPool {
	return &crawlv1alpha1.ProxyPool{
		ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: name},
		Spec: crawlv1alpha1.ProxyPoolSpec{
			Replicas: ptr.To(replicas),
			Template: crawlv1alpha1.ProxyTemplate{
				Metadata: crawlv1alpha1.ProxyTemplateMetadata{Labels: map[string]string{"team": "crawl"}},
				Spec:     crawlv1alpha1.ProxySpec{Provider: "lab-a", Zone: "rack-a", MachineType: "small", Image: "debian-12"},
			},
		},
	}
}

// poolView is one observation of a pool: its members and its published
// list, read from the API server.
type poolView struct {
	pool    crawlv1alpha1.ProxyPool
	members []crawlv1alpha1.Proxy
	serving []string // names of Serving members, not being deleted
	listed  []string // names in the ConfigMap's proxies.json
	secret  []string // lines of the Secret's proxies.txt
	entries []published.ListEntry
}

func viewPool(t *testing.T, ns, name string) poolView {
	t.Helper()
	ctx := context.Background()
	var v poolView
	if err := k8s.Get(ctx, client.ObjectKey{Namespace: ns, Name: name}, &v.pool); err != nil {
		t.Fatalf("getting pool: %v", err)
	}
	var list crawlv1alpha1.ProxyList
	if err := k8s.List(ctx, &list, client.InNamespace(ns), client.MatchingLabels{crawlv1alpha1.LabelPool: name}); err != nil {
		t.Fatal(err)
	}
	v.members = list.Items
	for _, p := range list.Items {
		if p.DeletionTimestamp.IsZero() && apimeta.IsStatusConditionTrue(p.Status.Conditions, crawlv1alpha1.ConditionServing) {
			v.serving = append(v.serving, p.Name)
		}
	}
	slices.Sort(v.serving)
	var cm corev1.ConfigMap
	if err := k8s.Get(ctx, client.ObjectKey{Namespace: ns, Name: published.ListName(name)}, &cm); err == nil {
		if err := json.Unmarshal([]byte(cm.Data[published.ListKeyJSON]), &v.entries); err != nil {
			t.Fatalf("proxies.json in the ConfigMap does not parse: %v", err)
		}
		for _, e := range v.entries {
			v.listed = append(v.listed, e.Name)
		}
		slices.Sort(v.listed)
	}
	var s corev1.Secret
	if err := k8s.Get(ctx, client.ObjectKey{Namespace: ns, Name: published.ListName(name)}, &s); err == nil {
		v.secret = strings.Fields(string(s.Data[published.ListKeyText]))
	}
	return v
}

// waitPoolSettled waits until the pool has exactly want members, all
// Serving, and the published list is exactly them.
func waitPoolSettled(t *testing.T, ns, name string, want int) poolView {
	t.Helper()
	var v poolView
	eventually(t, 30*time.Second, func() (bool, string) {
		v = viewPool(t, ns, name)
		ok := v.pool.Status.ObservedGeneration == v.pool.Generation && len(v.members) == want && len(v.serving) == want && slices.Equal(v.serving, v.listed) &&
			len(v.secret) == want && v.pool.Status.Serving == int32(want) && v.pool.Status.Replicas == int32(want)
		return ok, fmt.Sprintf("members %d, serving %v, listed %v, secret lines %d, status %+v",
			len(v.members), v.serving, v.listed, len(v.secret), v.pool.Status)
	})
	return v
}

func scalePool(t *testing.T, ns, name string, replicas int32) {
	t.Helper()
	// Through the scale subresource, as kubectl scale does.
	var pool crawlv1alpha1.ProxyPool
	if err := k8s.Get(context.Background(), client.ObjectKey{Namespace: ns, Name: name}, &pool); err != nil {
		t.Fatal(err)
	}
	scale := &autoscalingv1.Scale{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: name}, Spec: autoscalingv1.ScaleSpec{Replicas: replicas}}
	if err := k8s.SubResource("scale").Update(context.Background(), &pool, client.WithSubResourceBody(scale)); err != nil {
		t.Fatalf("scaling the pool to %d: %v", replicas, err)
	}
}

func TestPoolScalesFromZeroToTenToThree(t *testing.T) {
	ns := newNamespace(t)
	op := startPoolOperator(t, ns)
	ctx := context.Background()
	if err := k8s.Create(ctx, newPool(ns, "crawl", 0)); err != nil {
		t.Fatal(err)
	}
	v := waitPoolSettled(t, ns, "crawl", 0)
	if v.pool.Status.Selector != crawlv1alpha1.LabelPool+"=crawl" {
		t.Errorf("status.selector = %q", v.pool.Status.Selector)
	}
	if c := apimeta.FindStatusCondition(v.pool.Status.Conditions, crawlv1alpha1.ConditionReady); c == nil || c.Status != metav1.ConditionTrue {
		t.Errorf("a pool scaled to zero is Ready: %+v", c)
	}

	scalePool(t, ns, "crawl", 10)
	v = waitPoolSettled(t, ns, "crawl", 10)
	for _, p := range v.members {
		if !strings.HasPrefix(p.Name, "crawl-") || len(p.Name) != len("crawl-")+5 {
			t.Errorf("member name %q is not crawl-<5 characters>", p.Name)
		}
		if ref := metav1.GetControllerOf(&p); ref == nil || ref.Kind != "ProxyPool" || ref.Name != "crawl" || ref.UID != v.pool.UID || !ptr.Deref(ref.BlockOwnerDeletion, false) {
			t.Errorf("member %s: controller reference %+v, want the pool, blocking owner deletion (deleting the pool deletes it)", p.Name, ref)
		}
		if p.Labels["team"] != "crawl" {
			t.Errorf("member %s lacks the template's labels: %v", p.Name, p.Labels)
		}
	}
	if got := v.pool.Status.DistinctEgressAddresses; got != 10 {
		t.Errorf("distinct egress addresses = %d, want 10", got)
	}
	for _, line := range v.secret {
		if !strings.HasPrefix(line, "http://u") || !strings.Contains(line, "@198.51.100.") {
			t.Errorf("proxies.txt line %q is not http://user:password@address:port", line)
		}
	}
	for _, e := range v.entries {
		if strings.Contains(e.URL, "@") {
			t.Errorf("the ConfigMap's list carries credentials: %q", e.URL)
		}
		if e.Provider != "lab-a" || e.Zone != "rack-a" || e.EgressIP == "" || e.Created.IsZero() {
			t.Errorf("list entry %+v lacks provider, zone, egress address or creation time", e)
		}
		// The fake type says its instances run tinyproxy, as the VM
		// types do; setup hands it to the pools.
		if e.Engine != published.EngineTinyproxy {
			t.Errorf("list entry %s: engine %q, want its type's (%q)", e.Name, e.Engine, published.EngineTinyproxy)
		}
	}

	scalePool(t, ns, "crawl", 3)
	v = waitPoolSettled(t, ns, "crawl", 3)
	// Scaling down keeps the lowest slots.
	for _, p := range v.members {
		if s := p.Labels[crawlv1alpha1.LabelPoolSlot]; s != "0" && s != "1" && s != "2" {
			t.Errorf("member %s in slot %s survived a scale-down to 3", p.Name, s)
		}
	}
	eventually(t, 20*time.Second, func() (bool, string) {
		n := len(op.Fake.Instances())
		return n == 3, fmt.Sprintf("%d instances on the provider, want 3", n)
	})
}

func TestPoolSpreadsOverProvidersAndZones(t *testing.T) {
	ns := newNamespace(t)
	startPoolOperator(t, ns)
	pool := newPool(ns, "spread", 6)
	pool.Spec.Placement = []crawlv1alpha1.PlacementEntry{
		{Zone: "rack-a"}, {Zone: "rack-b"}, {Provider: "lab-b", Zone: "rack-c"},
	}
	if err := k8s.Create(context.Background(), pool); err != nil {
		t.Fatal(err)
	}
	v := waitPoolSettled(t, ns, "spread", 6)
	got := map[string]int{}
	for _, p := range v.members {
		got[p.Spec.Provider+"/"+p.Spec.Zone]++
	}
	want := map[string]int{"lab-a/rack-a": 2, "lab-a/rack-b": 2, "lab-b/rack-c": 2}
	if diff := cmp.Diff(want, got); diff != "" {
		t.Errorf("members per provider/zone (-want +got):\n%s\nan even spread is what lets the pool survive the loss of one hypervisor", diff)
	}
}

func TestPoolRecreatesAMemberDeletedByHand(t *testing.T) {
	ns := newNamespace(t)
	startPoolOperator(t, ns)
	if err := k8s.Create(context.Background(), newPool(ns, "heal", 3)); err != nil {
		t.Fatal(err)
	}
	v := waitPoolSettled(t, ns, "heal", 3)
	victim := v.members[1].Name
	if err := k8s.Delete(context.Background(), &v.members[1]); err != nil {
		t.Fatal(err)
	}
	eventually(t, 30*time.Second, func() (bool, string) {
		v = viewPool(t, ns, "heal")
		ok := len(v.members) == 3 && len(v.serving) == 3 && slices.Equal(v.serving, v.listed) && !slices.Contains(v.listed, victim)
		for _, p := range v.members {
			ok = ok && p.Name != victim
		}
		return ok, fmt.Sprintf("members %d, serving %v, listed %v", len(v.members), v.serving, v.listed)
	})
}

func TestPoolBadInputCreatesNothing(t *testing.T) {
	tests := []struct {
		name       string
		reason     string
		mutate     func(*crawlv1alpha1.ProxyPool)
		wantReason string
		wantIn     string
	}{
		{
			name:       "unknown provider in the template",
			reason:     "a typo must say what exists, not create proxies that fail one by one",
			mutate:     func(p *crawlv1alpha1.ProxyPool) { p.Spec.Template.Spec.Provider = "nowhere" },
			wantReason: crawlv1alpha1.ReasonPoolInvalidSpec, wantIn: `no provider entry named "nowhere"`,
		},
		{
			name:   "unknown zone in a placement entry",
			reason: "one bad placement entry must stop the pool before any member is made",
			mutate: func(p *crawlv1alpha1.ProxyPool) {
				p.Spec.Placement = []crawlv1alpha1.PlacementEntry{{Zone: "rack-a"}, {Provider: "lab-b", Zone: "rack-z"}}
			},
			wantReason: crawlv1alpha1.ReasonPoolInvalidSpec, wantIn: "placement[1]",
		},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			ns := newNamespace(t)
			op := startPoolOperator(t, ns)
			pool := newPool(ns, "bad", 3)
			tc.mutate(pool)
			if err := k8s.Create(context.Background(), pool); err != nil {
				t.Fatal(err)
			}
			eventually(t, 20*time.Second, func() (bool, string) {
				v := viewPool(t, ns, "bad")
				c := apimeta.FindStatusCondition(v.pool.Status.Conditions, crawlv1alpha1.ConditionReady)
				return c != nil && c.Reason == tc.wantReason && strings.Contains(c.Message, tc.wantIn), fmt.Sprintf("Ready condition %+v", c)
			})
			consistently(t, 2*time.Second, func() (bool, string) {
				v := viewPool(t, ns, "bad")
				return len(v.members) == 0 && op.Fake.CallCount(provider.OpCreate) == 0,
					fmt.Sprintf("%d members, %d creates; why this matters: %s", len(v.members), op.Fake.CallCount(provider.OpCreate), tc.reason)
			})
		})
	}
}

func TestPoolBeyondCapacityReportsAndDoesNotLoop(t *testing.T) {
	ns := newNamespace(t)
	op := startPoolOperator(t, ns)
	op.Fake.SetCapacity(3)
	if err := k8s.Create(context.Background(), newPool(ns, "big", 5)); err != nil {
		t.Fatal(err)
	}
	eventually(t, 30*time.Second, func() (bool, string) {
		v := viewPool(t, ns, "big")
		c := apimeta.FindStatusCondition(v.pool.Status.Conditions, crawlv1alpha1.ConditionReady)
		return c != nil && c.Reason == crawlv1alpha1.ReasonMembersFailed && len(v.listed) == 3 && strings.Contains(c.Message, "2 failed"),
			fmt.Sprintf("Ready %+v, listed %v", c, v.listed)
	})
	creates := op.Fake.CallCount(provider.OpCreate)
	consistently(t, 2*time.Second, func() (bool, string) {
		v := viewPool(t, ns, "big")
		n := op.Fake.CallCount(provider.OpCreate)
		return len(v.members) == 5 && n == creates, fmt.Sprintf("%d members, %d creates (was %d): a full provider must not make the pool create and delete in a loop", len(v.members), n, creates)
	})
}

func TestPoolRotationAnnotation(t *testing.T) {
	ns := newNamespace(t)
	op := startPoolOperator(t, ns)
	ctx := context.Background()
	if err := k8s.Create(ctx, newPool(ns, "rot", 3)); err != nil {
		t.Fatal(err)
	}
	v := waitPoolSettled(t, ns, "rot", 3)
	first := v.members[0].Name

	// Garbage: a clear condition, the annotation stays, nothing created.
	creates := op.Fake.CallCount(provider.OpCreate)
	annotatePool(t, ns, "rot", "no such member!")
	eventually(t, 20*time.Second, func() (bool, string) {
		v := viewPool(t, ns, "rot")
		c := apimeta.FindStatusCondition(v.pool.Status.Conditions, crawlv1alpha1.ConditionRotating)
		return c != nil && c.Reason == crawlv1alpha1.ReasonInvalidRotationRequest, fmt.Sprintf("Rotating %+v", c)
	})
	consistently(t, time.Second, func() (bool, string) {
		v := viewPool(t, ns, "rot")
		n := op.Fake.CallCount(provider.OpCreate)
		_, kept := v.pool.Annotations[crawlv1alpha1.AnnotationRotate]
		return n == creates && len(v.members) == 3 && kept, fmt.Sprintf("%d creates (was %d), %d members, annotation kept %v", n, creates, len(v.members), kept)
	})

	// One member by name.
	annotatePool(t, ns, "rot", first)
	eventually(t, 30*time.Second, func() (bool, string) {
		v = viewPool(t, ns, "rot")
		_, left := v.pool.Annotations[crawlv1alpha1.AnnotationRotate]
		ok := !left && len(v.members) == 3 && len(v.serving) == 3 && slices.Equal(v.serving, v.listed)
		for _, p := range v.members {
			ok = ok && p.Name != first
		}
		return ok, fmt.Sprintf("annotation left %v, members %d, serving %v, listed %v", left, len(v.members), v.serving, v.listed)
	})
	kept := map[string]bool{}
	for _, p := range v.members {
		kept[p.Name] = true
	}

	// The whole pool.
	annotatePool(t, ns, "rot", "all")
	eventually(t, 60*time.Second, func() (bool, string) {
		v = viewPool(t, ns, "rot")
		ok := len(v.members) == 3 && len(v.serving) == 3 && slices.Equal(v.serving, v.listed)
		for _, p := range v.members {
			ok = ok && !kept[p.Name]
		}
		return ok, fmt.Sprintf("members %d, serving %v, listed %v", len(v.members), v.serving, v.listed)
	})
	if v.pool.Status.Rotations < 4 {
		t.Errorf("status.rotations = %d, want at least 4", v.pool.Status.Rotations)
	}
}

func annotatePool(t *testing.T, ns, name, value string) {
	t.Helper()
	var pool crawlv1alpha1.ProxyPool
	if err := k8s.Get(context.Background(), client.ObjectKey{Namespace: ns, Name: name}, &pool); err != nil {
		t.Fatal(err)
	}
	patch := client.MergeFrom(pool.DeepCopy())
	if pool.Annotations == nil {
		pool.Annotations = map[string]string{}
	}
	pool.Annotations[crawlv1alpha1.AnnotationRotate] = value
	if err := k8s.Patch(context.Background(), &pool, patch); err != nil {
		t.Fatal(err)
	}
}

// TestPoolMaxAgeRotationKeepsServing rotates a pool by age with
// maxUnavailable 0 and looks at it continuously: at every observed moment,
// at least replicas members serve, and every listed member exists and is not
// being deleted.
func TestPoolMaxAgeRotationKeepsServing(t *testing.T) {
	ns := newNamespace(t)
	startPoolOperator(t, ns)
	pool := newPool(ns, "aging", 3)
	pool.Spec.Rotation = &crawlv1alpha1.RotationPolicy{
		MaxAge: &metav1.Duration{Duration: 3 * time.Second}, MaxUnavailable: ptr.To(intstr.FromInt32(0)),
	}
	if err := k8s.Create(context.Background(), pool); err != nil {
		t.Fatal(err)
	}
	v := waitPoolSettled(t, ns, "aging", 3)
	seen := map[string]bool{}
	for _, p := range v.members {
		seen[p.Name] = true
	}
	initial := len(seen)
	observations := 0
	eventually(t, 60*time.Second, func() (bool, string) {
		v := viewPool(t, ns, "aging")
		observations++
		if len(v.serving) < 3 {
			t.Fatalf("only %d members serve during a rotation with maxUnavailable 0: %v", len(v.serving), v.serving)
		}
		// The Secret and the ConfigMap are two objects, read one after the
		// other: each must hold at least replicas entries.
		if len(v.listed) < 3 || len(v.secret) < 3 {
			t.Fatalf("the published list has %d entries (%d with credentials) during a rotation with maxUnavailable 0", len(v.listed), len(v.secret))
		}
		live := map[string]bool{}
		for _, p := range v.members {
			seen[p.Name] = true
			if p.DeletionTimestamp.IsZero() {
				live[p.Name] = true
			}
		}
		for _, name := range v.listed {
			if !live[name] {
				t.Fatalf("the published list names %s, which is gone or being deleted", name)
			}
		}
		return len(seen) >= initial+6, fmt.Sprintf("%d members seen so far", len(seen))
	})
	t.Logf("%d observations, %d members seen", observations, len(seen))
	// With a 3 s maximum age the pool never stops rotating, and on a loaded
	// machine a surge member may be there at every look: end the rotation,
	// then the pool must settle at its replicas.
	var cur crawlv1alpha1.ProxyPool
	if err := k8s.Get(context.Background(), client.ObjectKey{Namespace: ns, Name: "aging"}, &cur); err != nil {
		t.Fatal(err)
	}
	patch := client.MergeFrom(cur.DeepCopy())
	cur.Spec.Rotation.MaxAge = nil
	if err := k8s.Patch(context.Background(), &cur, patch); err != nil {
		t.Fatal(err)
	}
	waitPoolSettled(t, ns, "aging", 3)
}

func TestProbeFailuresMarkALoneProxyAndReplaceAPoolMember(t *testing.T) {
	ns := newNamespace(t)
	op := startPoolOperator(t, ns)
	ctx := context.Background()

	lone := newProxy(ns, "lone")
	lone.Spec.Provider = "lab-a"
	if err := k8s.Create(ctx, lone); err != nil {
		t.Fatal(err)
	}
	if err := k8s.Create(ctx, newPool(ns, "probed", 3)); err != nil {
		t.Fatal(err)
	}
	v := waitPoolSettled(t, ns, "probed", 3)
	var p *crawlv1alpha1.Proxy
	eventually(t, 20*time.Second, func() (bool, string) {
		p = getProxy(t, ns, "lone")
		c := apimeta.FindStatusCondition(p.Status.Conditions, crawlv1alpha1.ConditionServing)
		return c != nil && c.Reason == crawlv1alpha1.ReasonProbePassed && p.Status.EgressIP != "" && p.Status.LastProbeTime != nil && p.Status.ProbeLatency != nil,
			fmt.Sprintf("Serving %+v, status %+v", c, p.Status)
	})

	// The lone Proxy is marked, and kept.
	op.Prober.Fail(p.Status.Address+":3128", errors.New("wrong-password check: dialling the proxy: connection refused"))
	eventually(t, 20*time.Second, func() (bool, string) {
		p = getProxy(t, ns, "lone")
		c := apimeta.FindStatusCondition(p.Status.Conditions, crawlv1alpha1.ConditionServing)
		return c != nil && c.Reason == crawlv1alpha1.ReasonProbeFailed && p.Status.ProbeFailures >= 3, fmt.Sprintf("Serving %+v", c)
	})
	if p.Status.Phase != crawlv1alpha1.ProxyPhaseReady || !p.DeletionTimestamp.IsZero() {
		t.Errorf("a lone Proxy whose probe fails is marked, not replaced: phase %s", p.Status.Phase)
	}
	waitEvents(t, ns, "lone", "ProbeFailed: ")

	// A pool member whose probe fails leaves the list and is replaced.
	victim := v.members[0]
	op.Prober.Fail(victim.Status.Address+":3128", errors.New("check URL: the proxy answered 502"))
	eventually(t, 30*time.Second, func() (bool, string) {
		v = viewPool(t, ns, "probed")
		ok := len(v.serving) == 3 && slices.Equal(v.serving, v.listed) && len(v.members) == 3
		for _, m := range v.members {
			ok = ok && m.Name != victim.Name
		}
		return ok, fmt.Sprintf("members %d, serving %v, listed %v", len(v.members), v.serving, v.listed)
	})
	if v.pool.Status.Rotations < 1 {
		t.Errorf("status.rotations = %d after a probe replacement", v.pool.Status.Rotations)
	}
}

func TestPoolReportsDuplicateEgress(t *testing.T) {
	ns := newNamespace(t)
	op := startPoolOperator(t, ns)
	if err := k8s.Create(context.Background(), newPool(ns, "dup", 3)); err != nil {
		t.Fatal(err)
	}
	v := waitPoolSettled(t, ns, "dup", 3)
	if c := apimeta.FindStatusCondition(v.pool.Status.Conditions, crawlv1alpha1.ConditionEgressDistinct); c == nil || c.Status != metav1.ConditionTrue {
		t.Fatalf("EgressDistinct = %+v, want True with three distinct addresses", c)
	}
	shared := netip.MustParseAddr("203.0.113.50")
	op.Prober.Egress(v.members[0].Status.Address+":3128", shared)
	op.Prober.Egress(v.members[1].Status.Address+":3128", shared)
	eventually(t, 20*time.Second, func() (bool, string) {
		v = viewPool(t, ns, "dup")
		c := apimeta.FindStatusCondition(v.pool.Status.Conditions, crawlv1alpha1.ConditionEgressDistinct)
		return c != nil && c.Reason == crawlv1alpha1.ReasonDuplicateEgress && strings.Contains(c.Message, "203.0.113.50") &&
			v.pool.Status.DistinctEgressAddresses == 2, fmt.Sprintf("EgressDistinct %+v, distinct %d", c, v.pool.Status.DistinctEgressAddresses)
	})
	// Emitted in the reconcile that writes the condition the test saw.
	waitEvents(t, ns, "dup", "DuplicateEgress: ")
}

// TestAPIServerRejectsInvalidPools proves the ProxyPool schema and CEL rules
// against the real API server.
func TestAPIServerRejectsInvalidPools(t *testing.T) {
	ns := newNamespace(t)
	for _, tc := range []struct {
		name   string
		reason string
		mutate func(p *crawlv1alpha1.ProxyPool)
		want   string
	}{
		{
			name:   "no surge and no unavailability",
			reason: "a rotation that may neither add nor remove a member can never progress",
			mutate: func(p *crawlv1alpha1.ProxyPool) {
				p.Spec.Rotation = &crawlv1alpha1.RotationPolicy{MaxSurge: ptr.To(intstr.FromInt32(0))}
			},
			want: "rotation.maxSurge 0 needs a rotation.maxUnavailable above 0",
		},
		{
			name:   "no surge as a percentage",
			reason: "0% is 0",
			mutate: func(p *crawlv1alpha1.ProxyPool) {
				p.Spec.Rotation = &crawlv1alpha1.RotationPolicy{MaxSurge: ptr.To(intstr.FromString("0%")), MaxUnavailable: ptr.To(intstr.FromInt32(0))}
			},
			want: "rotation.maxSurge 0 needs a rotation.maxUnavailable above 0",
		},
		{
			name:   "name too long for its members",
			reason: "members are named <pool>-<5 characters> and must stay within 63",
			mutate: func(p *crawlv1alpha1.ProxyPool) { p.Name = strings.Repeat("a", 51) },
			want:   "metadata.name must be at most 50 characters",
		},
		{
			name:   "negative replicas",
			reason: "a count",
			mutate: func(p *crawlv1alpha1.ProxyPool) { p.Spec.Replicas = ptr.To[int32](-1) },
			want:   "spec.replicas",
		},
		{
			name:   "zero weight",
			reason: "a placement entry that takes no members is a mistake",
			mutate: func(p *crawlv1alpha1.ProxyPool) {
				p.Spec.Placement = []crawlv1alpha1.PlacementEntry{{Zone: "rack-a", Weight: -1}}
			},
			want: "weight",
		},
		{
			name:   "template auth None without source ranges",
			reason: "the template obeys the Proxy's rules: no open proxy by default",
			mutate: func(p *crawlv1alpha1.ProxyPool) { p.Spec.Template.Spec.Auth = crawlv1alpha1.ProxyAuthNone },
			want:   "auth None needs allowedSourceRanges",
		},
	} {
		t.Run(tc.name, func(t *testing.T) {
			p := newPool(ns, "bad", 1)
			tc.mutate(p)
			err := k8s.Create(context.Background(), p)
			if err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Fatalf("Create() error = %v, want one containing %q\nwhy this matters: %s", err, tc.want, tc.reason)
			}
		})
	}
	// A valid percentage surge is accepted.
	p := newPool(ns, "ok", 1)
	p.Spec.Rotation = &crawlv1alpha1.RotationPolicy{MaxSurge: ptr.To(intstr.FromString("25%"))}
	if err := k8s.Create(context.Background(), p); err != nil {
		t.Fatalf("a pool with maxSurge 25%% was refused: %v", err)
	}
}
