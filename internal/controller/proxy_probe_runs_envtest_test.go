package controller_test

import (
	"context"
	"fmt"
	"testing"
	"time"

	apimeta "k8s.io/apimachinery/pkg/api/meta"

	crawlv1alpha1 "github.com/egress-proxies/egress-proxies-operator/api/v1alpha1"
	"github.com/egress-proxies/egress-proxies-operator/internal/controller"
)

// TestAHangingProbeHoldsNoWorker: with one worker, a Proxy whose probe
// hangs (a proxy that drops packets) does not keep another Proxy from being
// created and going Ready, and its own probe ends once the proxy answers.
func TestAHangingProbeHoldsNoWorker(t *testing.T) {
	ns := newNamespace(t)
	op := startOperator(t, operatorOptions{namespace: ns, opts: controller.Options{MaxConcurrentReconciles: 1}})
	ctx := context.Background()
	if err := k8s.Create(ctx, newProxy(ns, "silent")); err != nil {
		t.Fatal(err)
	}
	var silent string
	eventually(t, 20*time.Second, func() (bool, string) {
		p := getProxy(t, ns, "silent")
		silent = p.Status.Address + ":3128"
		return p.Status.Phase == crawlv1alpha1.ProxyPhaseReady, "silent is " + string(p.Status.Phase)
	})
	op.prober.Hang(silent)
	t.Cleanup(func() { op.prober.Release(silent) })
	before := op.prober.Started(silent)
	eventually(t, 10*time.Second, func() (bool, string) {
		return op.prober.Started(silent) > before, "no probe of the silent proxy began"
	})

	if err := k8s.Create(ctx, newProxy(ns, "next")); err != nil {
		t.Fatal(err)
	}
	eventually(t, 20*time.Second, func() (bool, string) {
		p := getProxy(t, ns, "next")
		c := apimeta.FindStatusCondition(p.Status.Conditions, crawlv1alpha1.ConditionServing)
		return p.Status.Phase == crawlv1alpha1.ProxyPhaseReady && c != nil && c.Reason == crawlv1alpha1.ReasonProbePassed,
			fmt.Sprintf("next is %s, Serving %+v, while the silent proxy's probe hangs", p.Status.Phase, c)
	})
	if probed := op.prober.Probed(silent); op.prober.Started(silent) <= probed {
		t.Fatalf("the silent proxy's probe ended (%d begun, %d ended): the test proved nothing", op.prober.Started(silent), probed)
	}

	probed := op.prober.Probed(silent)
	op.prober.Release(silent)
	eventually(t, 10*time.Second, func() (bool, string) {
		return op.prober.Probed(silent) > probed, "the silent proxy's probe did not end once it answered"
	})
}
