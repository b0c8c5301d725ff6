package controller_test

import (
	"context"
	"testing"
	"time"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"sigs.k8s.io/controller-runtime/pkg/client"

	crawlv1alpha1 "github.com/egress-proxies/egress-proxies-operator/api/v1alpha1"
	"github.com/egress-proxies/egress-proxies-operator/internal/config"
	"github.com/egress-proxies/egress-proxies-operator/internal/testing/fakeprovider"
)

// A Proxy whose provider entry was removed from the configuration cannot
// have its instance removed; its finalizer stays until a person sets the
// release annotation, and the event then says what may be left (#12 item
// 11).
func TestReleaseFinalizerAnnotationAfterTheEntryWasRemoved(t *testing.T) {
	ns := newNamespace(t)
	ctx := context.Background()
	first := startOperator(t, operatorOptions{namespace: ns})
	if err := k8s.Create(ctx, newProxy(ns, "web")); err != nil {
		t.Fatal(err)
	}
	ready := waitPhase(t, ns, "web", crawlv1alpha1.ProxyPhaseReady, crawlv1alpha1.ReasonInstanceRunning)
	first.stop()

	// The operator comes back with the entry "lab" gone.
	cfg, err := config.Parse([]byte(`
providers:
  - name: elsewhere
    type: fake
    zones: [rack-a]
    machineTypes:
      small: {cores: 1, memoryMiB: 512}
    images: [debian-12]
`), fakeprovider.Registry())
	if err != nil {
		t.Fatal(err)
	}
	startOperator(t, operatorOptions{namespace: ns, cfg: cfg})
	if err := k8s.Delete(ctx, ready); err != nil {
		t.Fatal(err)
	}
	stuck := waitPhase(t, ns, "web", crawlv1alpha1.ProxyPhaseDeleting, crawlv1alpha1.ReasonDeleteFailed)
	consistently(t, 500*time.Millisecond, func() (bool, string) {
		err := k8s.Get(ctx, client.ObjectKeyFromObject(stuck), &crawlv1alpha1.Proxy{})
		return err == nil, "the Proxy went without anyone asking: its instance would be left unnoticed"
	})

	patch := client.MergeFrom(stuck.DeepCopy())
	stuck.Annotations = map[string]string{crawlv1alpha1.AnnotationReleaseFinalizer: "instance removed by hand"}
	if err := k8s.Patch(ctx, stuck, patch); err != nil {
		t.Fatal(err)
	}
	eventually(t, 20*time.Second, func() (bool, string) {
		err := k8s.Get(ctx, client.ObjectKeyFromObject(stuck), &crawlv1alpha1.Proxy{})
		return apierrors.IsNotFound(err), "the Proxy is still there"
	})
	// The event is emitted just before the finalizer goes: it may reach the
	// API server after the Proxy is gone.
	waitEvents(t, ns, "web", "ReleasedWithoutCleanup", ready.Status.InstanceID)
	// The first fake still holds the instance: the operator never reached
	// it, and says so.
	if got := len(first.fake.Instances()); got != 1 {
		t.Errorf("instances on the unreachable entry = %d, want 1 (left, as the event says)", got)
	}
}
