package e2e_test

import (
	"context"
	"fmt"
	"strconv"
	"strings"
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	crawlv1alpha1 "github.com/egress-proxies/egress-proxies-operator/api/v1alpha1"
	"github.com/egress-proxies/egress-proxies-operator/internal/testing/poll"
	"github.com/egress-proxies/egress-proxies-operator/internal/testing/pvelab"
)

// TestVanishedVMLeavesNoSeed is the regression test of a leak the chaos run
// found (CHAOS_SEED=5, docs/testing.md): a VM destroyed behind the operator's back was replaced,
// but its seed ISO, which holds the proxy's password, stayed on the seed
// storage for ever: the replacement of a vanished instance did not call
// Delete, the one call that removes what a gone VM left. The first VM's
// agent never answers, so that the guest never consumed its seed and the
// seed is there whatever the provider does with seeds after boot.
func TestVanishedVMLeavesNoSeed(t *testing.T) {
	ns := newNamespace(t)
	w := newWorld(t)
	w.startOperator(t, ns)
	ctx := context.Background()
	w.Sim.AgentNeverStartsNext(1)
	key := client.ObjectKey{Namespace: ns, Name: "egress-1"}
	p := &crawlv1alpha1.Proxy{ObjectMeta: metav1.ObjectMeta{Namespace: key.Namespace, Name: key.Name},
		Spec: crawlv1alpha1.ProxySpec{Provider: pvelab.EntryName, MachineType: pvelab.MachineType, Image: pvelab.Image}}
	if err := env.Client.Create(ctx, p); err != nil {
		t.Fatal(err)
	}
	var first crawlv1alpha1.Proxy
	poll.Until(t, time.Minute, func() (bool, string) {
		if err := env.Client.Get(ctx, key, &first); err != nil {
			return false, err.Error()
		}
		return first.Status.InstanceID != "", fmt.Sprintf("phase %s, no instance yet", first.Status.Phase)
	})
	if !w.SeedLeft(first.Status.InstanceName) {
		t.Fatalf("no seed of %s before the VM vanished: the check below would pass vacuously", first.Status.InstanceName)
	}
	vmid, err := strconv.Atoi(strings.Split(first.Status.InstanceID, "/")[1])
	if err != nil {
		t.Fatal(err)
	}
	if !w.Sim.Vanish(vmid) {
		t.Fatalf("VM %d was not there to vanish", vmid)
	}
	// The successor is created after the replaced instance was dealt with,
	// so once it is Ready the old seed must be gone.
	var second crawlv1alpha1.Proxy
	poll.Until(t, time.Minute, func() (bool, string) {
		if err := env.Client.Get(ctx, key, &second); err != nil {
			return false, err.Error()
		}
		return second.Status.Phase == crawlv1alpha1.ProxyPhaseReady && second.Status.InstanceName != first.Status.InstanceName,
			fmt.Sprintf("phase %s, instance %s", second.Status.Phase, second.Status.InstanceName)
	})
	if w.SeedLeft(first.Status.InstanceName) {
		t.Errorf("the seed of the vanished %s (the proxy's password in it) is still on the seed storage after %s replaced it",
			first.Status.InstanceName, second.Status.InstanceName)
	}
}
