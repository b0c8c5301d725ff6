package proxypool

import (
	"context"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"k8s.io/apimachinery/pkg/types"
	ctrl "sigs.k8s.io/controller-runtime"
	crfake "sigs.k8s.io/controller-runtime/pkg/client/fake"

	"github.com/egress-proxies/egress-proxies-operator/internal/testing/testenv"
)

// TestDeletedPoolLeavesNoMemory: a pool that is gone (its Get says NotFound)
// leaves nothing behind in the reconciler's memory, so that a process that
// serves many short-lived pools does not grow, and a pool recreated under
// the same name starts from its own status, not the last one's serials or
// expectations.
func TestDeletedPoolLeavesNoMemory(t *testing.T) {
	key := types.NamespacedName{Namespace: "crawlers", Name: "gone"}
	other := types.NamespacedName{Namespace: "crawlers", Name: "kept"}
	r := &Reconciler{Client: crfake.NewClientBuilder().WithScheme(testenv.Scheme(t)).Build(), Now: time.Now}
	for _, k := range []types.NamespacedName{key, other} {
		r.memory.nextSerial(k, 4, 7)
		r.memory.expectCreated(k, k.Name+"-bcdfg", time.Now())
		r.memory.addPending(k, map[string]int{rotationMaxAge: 2})
	}
	if _, err := r.Reconcile(context.Background(), ctrl.Request{NamespacedName: key}); err != nil {
		t.Fatalf("Reconcile of a deleted pool: %v", err)
	}
	remembered := func(k types.NamespacedName) []string {
		var kept []string
		if _, ok := r.memory.serials.Load(k); ok {
			kept = append(kept, "serials")
		}
		if _, ok := r.memory.expected.Load(k); ok {
			kept = append(kept, "expected")
		}
		if _, ok := r.memory.pending.Load(k); ok {
			kept = append(kept, "pending")
		}
		return kept
	}
	if diff := cmp.Diff([]string(nil), remembered(key)); diff != "" {
		t.Errorf("memory of the deleted pool (-want +got):\n%s", diff)
	}
	if diff := cmp.Diff([]string{"serials", "expected", "pending"}, remembered(other)); diff != "" {
		t.Errorf("memory of another pool, which must be kept (-want +got):\n%s", diff)
	}
}
