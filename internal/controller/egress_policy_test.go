package controller

import (
	"net/netip"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
	apimeta "k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	crawlv1alpha1 "github.com/egress-proxies/egress-proxies-operator/api/v1alpha1"
	"github.com/egress-proxies/egress-proxies-operator/internal/egress"
)

func TestEgressPolicyHash(t *testing.T) {
	deny := egress.Policy{DenyCIDRs: []netip.Prefix{netip.MustParsePrefix("198.18.0.0/15")}}
	switch def, changed := egressPolicyHash(egress.Policy{}), egressPolicyHash(deny); {
	case def == "":
		t.Error("the default policy has no hash: an unrecorded policy could not be told from it")
	case def == changed:
		t.Errorf("a changed policy hashes as the default one (%s)", def)
	case changed != egressPolicyHash(egress.Policy{DenyCIDRs: []netip.Prefix{netip.MustParsePrefix("198.18.0.0/15")}}):
		t.Error("the same policy hashes twice differently")
	}
}

func TestComputePolicyCurrent(t *testing.T) {
	current := egressPolicyHash(egress.Policy{DenyCIDRs: []netip.Prefix{netip.MustParsePrefix("198.18.0.0/15")}})
	older := egressPolicyHash(egress.Policy{})
	withCond := func(status metav1.ConditionStatus, reason string) []metav1.Condition {
		return []metav1.Condition{{Type: crawlv1alpha1.ConditionEgressPolicyCurrent, Status: status, Reason: reason, Message: "earlier"}}
	}
	labPolicy := entryPolicy{entry: "lab", hash: current}
	type want struct {
		present bool
		status  metav1.ConditionStatus
		reason  string
		// says are words the message must hold.
		says []string
	}
	cases := []struct {
		name, reason string
		prev         crawlv1alpha1.ProxyStatus
		obs          observation
		want         want
	}{
		{
			name: "made with the current policy", reason: "the recorded hash is the entry's: nothing to do",
			prev: crawlv1alpha1.ProxyStatus{InstanceID: statusID, EgressPolicyHash: current},
			obs:  observation{policy: labPolicy},
			want: want{present: true, status: metav1.ConditionTrue, reason: crawlv1alpha1.ReasonCurrentEgressPolicy, says: []string{"lab", current}},
		},
		{
			name: "made with an older policy", reason: "the entry's policy changed after the instance was made: it still enforces the old one, and the message says what to do",
			prev: crawlv1alpha1.ProxyStatus{InstanceID: statusID, EgressPolicyHash: older},
			obs:  observation{policy: labPolicy},
			want: want{present: true, status: metav1.ConditionFalse, reason: crawlv1alpha1.ReasonOlderEgressPolicy,
				says: []string{"provider entry lab", older, current, "Delete and re-create this Proxy", "ProxyPool"}},
		},
		{
			name: "made before the operator recorded it", reason: "no hash recorded is not the default policy: unknown, and the message says what to do if the policy changed",
			prev: crawlv1alpha1.ProxyStatus{InstanceID: statusID},
			obs:  observation{policy: labPolicy},
			want: want{present: true, status: metav1.ConditionUnknown, reason: crawlv1alpha1.ReasonEgressPolicyUnrecorded, says: []string{"lab", "delete and re-create"}},
		},
		{
			name: "turns True again", reason: "a successor made with the current policy replaces the False verdict",
			prev: crawlv1alpha1.ProxyStatus{InstanceID: statusID, EgressPolicyHash: current, Conditions: withCond(metav1.ConditionFalse, crawlv1alpha1.ReasonOlderEgressPolicy)},
			obs:  observation{policy: labPolicy},
			want: want{present: true, status: metav1.ConditionTrue, reason: crawlv1alpha1.ReasonCurrentEgressPolicy},
		},
		{
			name: "no instance", reason: "nothing enforces a policy: the condition goes, also one left from an earlier instance",
			prev: crawlv1alpha1.ProxyStatus{EgressPolicyHash: older, Conditions: withCond(metav1.ConditionFalse, crawlv1alpha1.ReasonOlderEgressPolicy)},
			obs:  observation{policy: labPolicy},
		},
		{
			name: "entry not configured", reason: "no current policy to compare with",
			prev: crawlv1alpha1.ProxyStatus{InstanceID: statusID, EgressPolicyHash: older, Conditions: withCond(metav1.ConditionFalse, crawlv1alpha1.ReasonOlderEgressPolicy)},
			obs:  observation{},
		},
		{
			name: "being deleted", reason: "the instance goes anyway: no advice to re-create",
			prev: crawlv1alpha1.ProxyStatus{InstanceID: statusID, EgressPolicyHash: older},
			obs:  observation{policy: labPolicy, deleting: true},
		},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			s := *tc.prev.DeepCopy()
			computePolicyCurrent(&s, tc.obs, statusGen, statusNow)
			var got want
			if c := apimeta.FindStatusCondition(s.Conditions, crawlv1alpha1.ConditionEgressPolicyCurrent); c != nil {
				got = want{present: true, status: c.Status, reason: c.Reason}
				for _, w := range tc.want.says {
					if strings.Contains(c.Message, w) {
						got.says = append(got.says, w)
					}
				}
				if c.ObservedGeneration != statusGen {
					t.Errorf("condition of generation %d, want %d", c.ObservedGeneration, statusGen)
				}
			}
			if diff := cmp.Diff(tc.want, got, cmp.AllowUnexported(want{})); diff != "" {
				t.Errorf("%s: EgressPolicyCurrent (-want +got):\n%s", tc.reason, diff)
			}
		})
	}
}
