package controller_test

import (
	"context"
	"errors"
	"strings"
	"testing"
	"time"

	apimeta "k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	crawlv1alpha1 "github.com/egress-proxies/egress-proxies-operator/api/v1alpha1"
	"github.com/egress-proxies/egress-proxies-operator/internal/controller"
	"github.com/egress-proxies/egress-proxies-operator/internal/provider"
)

// A token rotation makes one read fail with 401: the Ready fleet is not
// failed, the Proxy keeps its address, the entry's ProviderHealth shows the
// refusal, and the Proxy is Ready again at the next read, with nobody
// setting the retry annotation (item 7 of #12).
func TestRefusedReadKeepsAReadyProxyAndHeals(t *testing.T) {
	ns := newNamespace(t)
	op := startOperator(t, operatorOptions{namespace: ns, opts: controller.Options{HealthInterval: 300 * time.Millisecond}})
	ctx := context.Background()
	if err := k8s.Create(ctx, newProxy(ns, "web")); err != nil {
		t.Fatal(err)
	}
	ready := waitPhase(t, ns, "web", crawlv1alpha1.ProxyPhaseReady, crawlv1alpha1.ReasonInstanceRunning)

	op.fake.FailNext(provider.OpGet, 1, provider.NewRefused(errors.New("401 Unauthorized: Authentication failed!"), "check the API token"))
	refused := waitPhase(t, ns, "web", crawlv1alpha1.ProxyPhaseReady, crawlv1alpha1.ReasonProviderRefused)
	if refused.Status.Address != ready.Status.Address || refused.Status.URL != ready.Status.URL || refused.Status.InstanceID != ready.Status.InstanceID {
		t.Errorf("the refused read changed what is known of the instance: address %q, url %q, id %q; before %q, %q, %q",
			refused.Status.Address, refused.Status.URL, refused.Status.InstanceID, ready.Status.Address, ready.Status.URL, ready.Status.InstanceID)
	}
	c := apimeta.FindStatusCondition(refused.Status.Conditions, crawlv1alpha1.ConditionReady)
	if c.Status != metav1.ConditionUnknown || !strings.Contains(c.Message, "Authentication failed!") || !strings.Contains(c.Message, "check the API token") {
		t.Errorf("Ready = %s: %q, want Unknown with the refusal and the advice", c.Status, c.Message)
	}

	// The entry's health shows the refusal while the Proxy waits.
	eventually(t, 10*time.Second, func() (bool, string) {
		var ph crawlv1alpha1.ProviderHealth
		if err := k8s.Get(ctx, client.ObjectKey{Name: "lab"}, &ph); err != nil {
			return false, err.Error()
		}
		c := apimeta.FindStatusCondition(ph.Status.Conditions, crawlv1alpha1.ConditionReadsAuthorized)
		return c != nil && c.Status == metav1.ConditionFalse && c.Reason == crawlv1alpha1.ReasonReadRefused &&
			strings.Contains(c.Message, "Authentication failed!"), "ProviderHealth shows no refused read"
	})

	healed := waitPhase(t, ns, "web", crawlv1alpha1.ProxyPhaseReady, crawlv1alpha1.ReasonInstanceRunning)
	if _, set := healed.Annotations[crawlv1alpha1.AnnotationRetry]; set {
		t.Error("the retry annotation is set; nobody set it")
	}
	if got := op.fake.CallCount(provider.OpCreate); got != 1 {
		t.Errorf("Create calls = %d, want 1: a refused read must not replace the instance", got)
	}
	waitEvents(t, ns, "web", "ProviderRefused")
}

// A create the API refuses needs a person: it latches like a Permanent
// error, with the provider's advice.
func TestRefusedCreateLatches(t *testing.T) {
	ns := newNamespace(t)
	op := startOperator(t, operatorOptions{namespace: ns})
	op.fake.FailNext(provider.OpCreate, 1, provider.NewRefused(errors.New("403 Permission check failed (/vms/9000, VM.Clone)"), "grant the token VM.Clone"))
	if err := k8s.Create(context.Background(), newProxy(ns, "web")); err != nil {
		t.Fatal(err)
	}
	p := waitPhase(t, ns, "web", crawlv1alpha1.ProxyPhaseFailed, crawlv1alpha1.ReasonPermanentError)
	if msg := apimeta.FindStatusCondition(p.Status.Conditions, crawlv1alpha1.ConditionReady).Message; !strings.Contains(msg, "To fix: grant the token VM.Clone") {
		t.Errorf("Ready message %q lacks the advice", msg)
	}
	consistently(t, 500*time.Millisecond, func() (bool, string) {
		return op.fake.CallCount(provider.OpCreate) == 1, "Create was called again while latched"
	})
}
