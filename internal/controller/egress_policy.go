package controller

import (
	"encoding/hex"
	"fmt"
	"hash/fnv"
	"time"

	apimeta "k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	crawlv1alpha1 "github.com/egress-proxies/egress-proxies-operator/api/v1alpha1"
	"github.com/egress-proxies/egress-proxies-operator/internal/controller/shared"
	"github.com/egress-proxies/egress-proxies-operator/internal/egress"
)

// egressPolicyHash identifies an entry's egress policy in a Proxy's status
// (status.egressPolicyHash). The default policy has a hash too: an empty
// field means "not recorded", not "default".
func egressPolicyHash(p egress.Policy) string {
	h := fnv.New64a()
	_, _ = h.Write(shared.PolicyBytes(p))
	return hex.EncodeToString(h.Sum(nil))
}

// entryPolicy is what a reconcile knows of the Proxy's entry's current
// egress policy, for the EgressPolicyCurrent condition.
type entryPolicy struct {
	// entry names the entry; empty when the Proxy names none configured.
	entry string
	// hash is egressPolicyHash of its policy.
	hash string
}

// computePolicyCurrent sets the EgressPolicyCurrent condition: whether the
// recorded instance was made with the entry's current egress policy. It is
// removed while there is no instance, no configured entry, or the Proxy is
// being deleted.
func computePolicyCurrent(s *crawlv1alpha1.ProxyStatus, obs observation, generation int64, now time.Time) {
	if s.InstanceID == "" || obs.policy.entry == "" || obs.deleting {
		apimeta.RemoveStatusCondition(&s.Conditions, crawlv1alpha1.ConditionEgressPolicyCurrent)
		return
	}
	c := metav1.Condition{Type: crawlv1alpha1.ConditionEgressPolicyCurrent, ObservedGeneration: generation, LastTransitionTime: metav1.NewTime(now)}
	switch s.EgressPolicyHash {
	case obs.policy.hash:
		c.Status, c.Reason = metav1.ConditionTrue, crawlv1alpha1.ReasonCurrentEgressPolicy
		c.Message = fmt.Sprintf("The instance enforces the current egress policy of provider entry %s (%s).", obs.policy.entry, obs.policy.hash)
	case "":
		c.Status, c.Reason = metav1.ConditionUnknown, crawlv1alpha1.ReasonEgressPolicyUnrecorded
		c.Message = fmt.Sprintf("The instance was made before the operator recorded its egress policy, so whether it enforces the current policy "+
			"of provider entry %s is unknown. If that policy changed since the instance was made, delete and re-create this Proxy "+
			"(a ProxyPool replaces its members by itself).", obs.policy.entry)
	default:
		c.Status, c.Reason = metav1.ConditionFalse, crawlv1alpha1.ReasonOlderEgressPolicy
		c.Message = fmt.Sprintf("The instance was made with an older egress policy of provider entry %s (%s; now %s) and still enforces it: "+
			"an instance is configured when it is made. Delete and re-create this Proxy to apply the current policy "+
			"(a ProxyPool replaces its members by itself).", obs.policy.entry, s.EgressPolicyHash, obs.policy.hash)
	}
	apimeta.SetStatusCondition(&s.Conditions, c)
}
