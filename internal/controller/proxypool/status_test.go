package proxypool

import (
	"errors"
	"testing"

	"github.com/google/go-cmp/cmp"
	"github.com/google/go-cmp/cmp/cmpopts"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	crawlv1alpha1 "github.com/egress-proxies/egress-proxies-operator/api/v1alpha1"
)

func TestComputePoolStatus(t *testing.T) {
	cond := func(typ string, status metav1.ConditionStatus, reason, msg string) metav1.Condition {
		return metav1.Condition{Type: typ, Status: status, Reason: reason, Message: msg, ObservedGeneration: 2}
	}
	three := []poolMember{
		{name: "p-a", ready: true, serving: true}, {name: "p-b", ready: true, serving: true}, {name: "p-c", ready: true, serving: true},
	}
	listed := []listedMember{{"p-a", "203.0.113.1"}, {"p-b", "203.0.113.2"}, {"p-c", "203.0.113.3"}}
	tests := []struct {
		name   string
		reason string
		prev   crawlv1alpha1.ProxyPoolStatus
		obs    poolObservation
		want   crawlv1alpha1.ProxyPoolStatus
	}{
		{
			name:   "all serving, distinct egress",
			reason: "the normal state: Ready, not rotating, every egress address distinct, the published list named for crawlers and kubectl egress",
			obs:    poolObservation{generation: 2, desired: 3, selector: "s", members: three, listed: listed, listName: "crawl-proxies"},
			want: crawlv1alpha1.ProxyPoolStatus{Replicas: 3, Desired: 3, Ready: 3, Serving: 3, DistinctEgressAddresses: 3, Selector: "s", ObservedGeneration: 2,
				ListSecretName: "crawl-proxies", ListConfigMapName: "crawl-proxies",
				Conditions: []metav1.Condition{
					cond(crawlv1alpha1.ConditionReady, metav1.ConditionTrue, crawlv1alpha1.ReasonAllMembersServing, "3 of 3 members serve."),
					cond(crawlv1alpha1.ConditionRotating, metav1.ConditionFalse, crawlv1alpha1.ReasonNoRotation, "Every member is current."),
					cond(crawlv1alpha1.ConditionEgressDistinct, metav1.ConditionTrue, crawlv1alpha1.ReasonDistinctEgress, "3 Serving members, 3 distinct egress addresses."),
				}},
		},
		{
			name:   "duplicate egress",
			reason: "two members behind one address defeat the point of a pool; the message names them",
			obs: poolObservation{generation: 2, desired: 3, members: three,
				listed: []listedMember{{"p-a", "203.0.113.1"}, {"p-b", "203.0.113.1"}, {"p-c", "203.0.113.3"}}},
			want: crawlv1alpha1.ProxyPoolStatus{Replicas: 3, Desired: 3, Ready: 3, Serving: 3, DistinctEgressAddresses: 2, ObservedGeneration: 2,
				Conditions: []metav1.Condition{
					cond(crawlv1alpha1.ConditionReady, metav1.ConditionTrue, crawlv1alpha1.ReasonAllMembersServing, "3 of 3 members serve."),
					cond(crawlv1alpha1.ConditionRotating, metav1.ConditionFalse, crawlv1alpha1.ReasonNoRotation, "Every member is current."),
					cond(crawlv1alpha1.ConditionEgressDistinct, metav1.ConditionFalse, crawlv1alpha1.ReasonDuplicateEgress,
						"Serving members share egress addresses: p-a and p-b share 203.0.113.1."),
				}},
		},
		{
			name:   "invalid spec, garbage annotation, no egress known",
			reason: "each problem has its own condition and reason, and says what to do",
			prev:   crawlv1alpha1.ProxyPoolStatus{Rotations: 4},
			obs: poolObservation{generation: 2, desired: 3, specErr: errors.New(`template: spec.provider: no provider entry named "x"`),
				annotationErr: errors.New("annotation crawl.example.com/rotate is empty")},
			want: crawlv1alpha1.ProxyPoolStatus{Desired: 3, Rotations: 4, ObservedGeneration: 2,
				Conditions: []metav1.Condition{
					cond(crawlv1alpha1.ConditionReady, metav1.ConditionFalse, crawlv1alpha1.ReasonPoolInvalidSpec,
						`template: spec.provider: no provider entry named "x". No member is created until the pool's template or placement is fixed.`),
					cond(crawlv1alpha1.ConditionRotating, metav1.ConditionFalse, crawlv1alpha1.ReasonInvalidRotationRequest,
						"annotation crawl.example.com/rotate is empty. Nothing is rotated until the annotation is fixed or removed."),
					cond(crawlv1alpha1.ConditionEgressDistinct, metav1.ConditionUnknown, crawlv1alpha1.ReasonEgressUnknown,
						"No egress address is known: configure probe.checkURL on the provider entries to record them."),
				}},
		},
		{
			name:   "failed members and a rotation",
			reason: "a provider out of capacity shows as MembersFailed naming them; members being deleted are not counted",
			prev:   crawlv1alpha1.ProxyPoolStatus{Rotations: 1},
			obs: poolObservation{generation: 2, desired: 3, rotationsStarted: 2,
				members: []poolMember{{name: "p-a", ready: true, serving: true}, {name: "p-b", failed: true}, {name: "p-c", failed: true}, {name: "p-d", deleting: true}},
				listed:  []listedMember{{"p-a", ""}},
				plan:    poolPlan{rotating: map[string]int{rotationMaxAge: 1, rotationInProgress: 1}, waiting: 1}},
			want: crawlv1alpha1.ProxyPoolStatus{Replicas: 3, Desired: 3, Ready: 1, Serving: 1, Rotations: 3, ObservedGeneration: 2,
				Conditions: []metav1.Condition{
					cond(crawlv1alpha1.ConditionReady, metav1.ConditionFalse, crawlv1alpha1.ReasonMembersFailed,
						"1 of 3 members serve; 2 failed and are kept as they are, not recreated (see their Ready condition, for example a provider out of capacity): p-b, p-c."),
					cond(crawlv1alpha1.ConditionRotating, metav1.ConditionTrue, crawlv1alpha1.ReasonRotationInProgress,
						"Rotating members (inProgress: 1, maxAge: 1, waiting for maxSurge/maxUnavailable: 1)."),
					cond(crawlv1alpha1.ConditionEgressDistinct, metav1.ConditionUnknown, crawlv1alpha1.ReasonEgressUnknown,
						"No egress address is known: configure probe.checkURL on the provider entries to record them."),
				}},
		},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			got := computePoolStatus(tc.prev, tc.obs, planNow)
			if diff := cmp.Diff(tc.want, got, cmpopts.IgnoreFields(metav1.Condition{}, "LastTransitionTime")); diff != "" {
				t.Errorf("computePoolStatus() (-want +got):\n%s\nwhy this matters: %s", diff, tc.reason)
			}
		})
	}
}
