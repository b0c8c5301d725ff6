package controller_test

import (
	"context"
	"fmt"
	"net/netip"
	"strings"
	"testing"
	"time"

	apimeta "k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	crawlv1alpha1 "github.com/egress-proxies/egress-proxies-operator/api/v1alpha1"
	"github.com/egress-proxies/egress-proxies-operator/internal/testing/fakeprovider"
)

// TestChangedEgressPolicyMarksLoneProxies: a lone Proxy's instance keeps
// the policy it was made with; after the administrator changes the entry's
// policy, the Proxy says so (EgressPolicyCurrent False, OlderEgressPolicy)
// and is left running, and a Proxy made after the change is current.
func TestChangedEgressPolicyMarksLoneProxies(t *testing.T) {
	ns := newNamespace(t)
	fake := fakeprovider.New(nil)
	first := startOperator(t, operatorOptions{namespace: ns, fake: fake})
	if err := k8s.Create(context.Background(), newProxy(ns, "old")); err != nil {
		t.Fatal(err)
	}
	made := waitPhase(t, ns, "old", crawlv1alpha1.ProxyPhaseReady, crawlv1alpha1.ReasonInstanceRunning)
	waitPolicyCurrent(t, ns, "old", metav1.ConditionTrue, crawlv1alpha1.ReasonCurrentEgressPolicy)
	if made.Status.EgressPolicyHash == "" {
		t.Fatal("status.egressPolicyHash is empty on a Proxy the operator made")
	}
	first.stop()

	cfg := testConfig(t)
	cfg.Entry("lab").EgressPolicy.DenyCIDRs = []netip.Prefix{netip.MustParsePrefix("198.18.0.0/15")}
	startOperator(t, operatorOptions{namespace: ns, fake: fake, cfg: cfg})
	c := waitPolicyCurrent(t, ns, "old", metav1.ConditionFalse, crawlv1alpha1.ReasonOlderEgressPolicy)
	if !strings.Contains(c.Message, "Delete and re-create") {
		t.Errorf("the message does not say what to do: %s", c.Message)
	}
	if p := getProxy(t, ns, "old"); p.Status.InstanceID != made.Status.InstanceID || p.Status.Phase != crawlv1alpha1.ProxyPhaseReady {
		t.Errorf("the Proxy under the older policy was touched: instance %s (was %s), phase %s", p.Status.InstanceID, made.Status.InstanceID, p.Status.Phase)
	}
	if err := k8s.Create(context.Background(), newProxy(ns, "new")); err != nil {
		t.Fatal(err)
	}
	waitPhase(t, ns, "new", crawlv1alpha1.ProxyPhaseReady, crawlv1alpha1.ReasonInstanceRunning)
	waitPolicyCurrent(t, ns, "new", metav1.ConditionTrue, crawlv1alpha1.ReasonCurrentEgressPolicy)
}

// waitPolicyCurrent waits for the Proxy's EgressPolicyCurrent condition to
// have status and reason, and returns it.
func waitPolicyCurrent(t *testing.T, ns, name string, status metav1.ConditionStatus, reason string) *metav1.Condition {
	t.Helper()
	var c *metav1.Condition
	eventually(t, 20*time.Second, func() (bool, string) {
		c = apimeta.FindStatusCondition(getProxy(t, ns, name).Status.Conditions, crawlv1alpha1.ConditionEgressPolicyCurrent)
		if c == nil {
			return false, "no EgressPolicyCurrent condition"
		}
		return c.Status == status && c.Reason == reason, fmt.Sprintf("EgressPolicyCurrent %s/%s: %s", c.Status, c.Reason, c.Message)
	})
	return c
}
