package proxypool_test

import (
	"context"
	"fmt"
	"net/netip"
	"slices"
	"testing"
	"time"

	crawlv1alpha1 "github.com/egress-proxies/egress-proxies-operator/api/v1alpha1"
	"github.com/egress-proxies/egress-proxies-operator/internal/controller"
	"github.com/egress-proxies/egress-proxies-operator/internal/testing/fakeprovider"
)

// TestChangedEgressPolicyRollsPoolMembers: the policy is part of what a
// member is made from, so members made before the administrator changed it
// are replaced by members made with it.
func TestChangedEgressPolicyRollsPoolMembers(t *testing.T) {
	ns := newNamespace(t)
	fake := fakeprovider.New(nil)
	opts := controller.Options{PoolResyncInterval: 500 * time.Millisecond}
	first := startOperator(t, operatorOptions{namespace: ns, cfg: poolConfig(t), fake: fake, opts: opts})
	if err := k8s.Create(context.Background(), newPool(ns, "web", 2)); err != nil {
		t.Fatal(err)
	}
	before := waitPoolSettled(t, ns, "web", 2)
	oldHashes := hashesOf(before.members)
	first.Stop()

	// The administrator denies one more range on lab-a and restarts the
	// operator.
	cfg := poolConfig(t)
	cfg.Entry("lab-a").EgressPolicy.DenyCIDRs = []netip.Prefix{netip.MustParsePrefix("198.18.0.0/15")}
	startOperator(t, operatorOptions{namespace: ns, cfg: cfg, fake: fake, opts: opts})
	eventually(t, 60*time.Second, func() (bool, string) {
		v := viewPool(t, ns, "web")
		hashes := hashesOf(v.members)
		rolled := len(v.members) == 2 && len(v.serving) == 2
		for _, h := range hashes {
			rolled = rolled && !slices.Contains(oldHashes, h)
		}
		return rolled, fmt.Sprintf("members %d, serving %d, hashes %v (made under the old policy: %v)", len(v.members), len(v.serving), hashes, oldHashes)
	})
}

func hashesOf(members []crawlv1alpha1.Proxy) []string {
	var out []string
	for _, p := range members {
		if p.DeletionTimestamp.IsZero() {
			out = append(out, p.Labels[crawlv1alpha1.LabelTemplateHash])
		}
	}
	slices.Sort(out)
	return out
}
