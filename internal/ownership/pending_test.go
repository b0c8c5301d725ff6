package ownership_test

import (
	"context"
	"testing"
	"time"

	"sigs.k8s.io/controller-runtime/pkg/client/fake"
	"sigs.k8s.io/controller-runtime/pkg/manager"

	"github.com/egress-proxies/egress-proxies-operator/internal/ownership"
	"github.com/egress-proxies/egress-proxies-operator/internal/testing/poll"
)

// The key loader needs leader election: a standby replica never reads or
// creates the key Secret, so two replicas never hold different keys.
var _ manager.LeaderElectionRunnable = (*ownership.KeyLoader)(nil)

func TestOnlyTheLeaderLoadsTheKey(t *testing.T) {
	if !(&ownership.KeyLoader{}).NeedLeaderElection() {
		t.Fatal("KeyLoader runs without leader election: a standby would mint a key while the Secret is missing")
	}
	id, err := ownership.NewPending("prod")
	if err != nil {
		t.Fatal(err)
	}
	// Before the leader loads the key, nothing is signed: a signature made
	// with no key (or a key of its own) would make the fleet foreign.
	signed := make(chan string, 1)
	go func() { signed <- id.Sign(markOf) }()
	poll.Always(t, 200*time.Millisecond, func() (bool, string) {
		return len(signed) == 0, "a pending identity signed before it had its key"
	})

	c := fake.NewClientBuilder().Build()
	l := &ownership.KeyLoader{Client: c, Ref: ref, Identity: id}
	if err := l.Start(context.Background()); err != nil {
		t.Fatal(err)
	}
	sig := <-signed
	// The key is the Secret's: an identity loaded from it later (the next
	// leader) verifies what this one signed while it waited.
	next, err := ownership.LoadOrCreate(context.Background(), c, ref, "prod")
	if err != nil {
		t.Fatal(err)
	}
	if err := next.Verify(markOf, sig); err != nil {
		t.Errorf("the next leader does not verify the first one's mark: %v", err)
	}
	if err := id.SetKey(make([]byte, ownership.KeySize)); err == nil {
		t.Error("SetKey replaced a key already set: a second load must never change the key in use")
	}
}
