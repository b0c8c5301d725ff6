package controller_test

import (
	"context"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	apimeta "k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	crawlv1alpha1 "github.com/egress-proxies/egress-proxies-operator/api/v1alpha1"
	"github.com/egress-proxies/egress-proxies-operator/internal/controller"
	"github.com/egress-proxies/egress-proxies-operator/internal/provider"
	"github.com/egress-proxies/egress-proxies-operator/internal/testing/fakeprovider"
)

func TestProviderHealthIsWrittenAndStaleEntriesRemoved(t *testing.T) {
	needEnvtest(t)
	ctx := context.Background()
	// An object left by an entry that is no longer configured, and one a
	// user made: only ours goes.
	stale := &crawlv1alpha1.ProviderHealth{ObjectMeta: metav1.ObjectMeta{
		Name: "retired", Labels: map[string]string{"app.kubernetes.io/managed-by": "egress-proxies-operator"}}}
	unmanaged := &crawlv1alpha1.ProviderHealth{ObjectMeta: metav1.ObjectMeta{Name: "someone-elses"}}
	for _, o := range []client.Object{stale, unmanaged} {
		if err := k8s.Create(ctx, o); err != nil {
			t.Fatal(err)
		}
	}
	t.Cleanup(func() { _ = k8s.Delete(ctx, unmanaged) })
	// ProviderHealth is cluster-scoped: the object of the entry "lab" that
	// an earlier test's operator wrote with its own fake must go first.
	lab := &crawlv1alpha1.ProviderHealth{ObjectMeta: metav1.ObjectMeta{Name: "lab"}}
	if err := k8s.Delete(ctx, lab); err != nil && !apierrors.IsNotFound(err) {
		t.Fatal(err)
	}
	eventually(t, 10*time.Second, func() (bool, string) {
		return apierrors.IsNotFound(k8s.Get(ctx, client.ObjectKeyFromObject(lab), &crawlv1alpha1.ProviderHealth{})), "an earlier ProviderHealth lab is still there"
	})

	fake := fakeprovider.New(nil)
	fake.Verdicts = []provider.Verdict{
		{Target: "pve2", Healthy: false, Reason: "Unreachable", Message: "no route to host", Latency: 3 * time.Second},
		{Target: "pve1", Healthy: true, Reason: "Reachable", Latency: 12 * time.Millisecond},
	}
	ns := newNamespace(t)
	startOperator(t, operatorOptions{namespace: ns, fake: fake, opts: controller.Options{HealthInterval: 100 * time.Millisecond}})

	var ph crawlv1alpha1.ProviderHealth
	eventually(t, 10*time.Second, func() (bool, string) {
		if err := k8s.Get(ctx, client.ObjectKey{Name: "lab"}, &ph); err != nil {
			return false, err.Error()
		}
		return apimeta.FindStatusCondition(ph.Status.Conditions, crawlv1alpha1.ConditionHealthy) != nil, "no Healthy condition yet"
	})
	c := apimeta.FindStatusCondition(ph.Status.Conditions, crawlv1alpha1.ConditionHealthy)
	if c.Status != metav1.ConditionTrue || c.Reason != crawlv1alpha1.ReasonSomeTargetsUnhealthy {
		t.Errorf("Healthy = %s/%s, want True/SomeTargetsUnhealthy", c.Status, c.Reason)
	}
	var names []string
	for _, tg := range ph.Status.Targets {
		names = append(names, tg.Name)
	}
	if diff := cmp.Diff([]string{"pve1", "pve2"}, names); diff != "" {
		t.Errorf("targets (-want +got):\n%s", diff)
	}
	if ph.Status.Type != "fake" || ph.Status.Targets[1].Reason != "Unreachable" || ph.Status.Targets[1].Latency.Duration != 3*time.Second {
		t.Errorf("status = %+v", ph.Status)
	}

	eventually(t, 10*time.Second, func() (bool, string) {
		err := k8s.Get(ctx, client.ObjectKeyFromObject(stale), &crawlv1alpha1.ProviderHealth{})
		return apierrors.IsNotFound(err), "stale ProviderHealth still exists"
	})
	if err := k8s.Get(ctx, client.ObjectKeyFromObject(unmanaged), &crawlv1alpha1.ProviderHealth{}); err != nil {
		t.Errorf("an object the operator did not make was touched: %v", err)
	}

	// A node coming back shows at the next check.
	fake.SetVerdicts([]provider.Verdict{{Target: "pve1", Healthy: true, Reason: "Reachable"}, {Target: "pve2", Healthy: true, Reason: "Reachable"}})
	eventually(t, 10*time.Second, func() (bool, string) {
		if err := k8s.Get(ctx, client.ObjectKey{Name: "lab"}, &ph); err != nil {
			return false, err.Error()
		}
		c := apimeta.FindStatusCondition(ph.Status.Conditions, crawlv1alpha1.ConditionHealthy)
		return c != nil && c.Reason == crawlv1alpha1.ReasonAllTargetsHealthy, "not yet AllTargetsHealthy"
	})
}
