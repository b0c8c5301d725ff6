package proxypool

import (
	"fmt"
	"maps"
	"math"
	"slices"
	"sort"
	"strings"
	"time"

	apimeta "k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	crawlv1alpha1 "github.com/egress-proxies/egress-proxies-operator/api/v1alpha1"
)

// poolObservation is what one reconcile of a pool saw and did;
// computePoolStatus turns it into the status.
type poolObservation struct {
	generation int64
	desired    int32
	selector   string
	// members are all members, those being deleted included.
	members []poolMember
	// specErr: a placement does not resolve; nothing was planned.
	specErr error
	// annotationErr: the rotate annotation cannot be read.
	annotationErr error
	plan          poolPlan
	// listed are the members in the published list.
	listed []listedMember
	// listName names the published Secret and ConfigMap once this reconcile
	// wrote them; empty when it did not get that far.
	listName string
	// nextSerial is the next member serial number.
	nextSerial int64
	// rotationsStarted counts rotations started since the last status
	// write that landed.
	rotationsStarted int64
}

// computePoolStatus derives the pool's counts and conditions. It does not
// change prev.
func computePoolStatus(prev crawlv1alpha1.ProxyPoolStatus, obs poolObservation, now time.Time) crawlv1alpha1.ProxyPoolStatus {
	s := *prev.DeepCopy()
	s.ObservedGeneration = obs.generation
	s.Desired = obs.desired
	s.Selector = obs.selector
	s.NextMemberSerial = max(s.NextMemberSerial, obs.nextSerial)
	s.Replicas, s.Ready = 0, 0
	var failed []string
	for _, m := range obs.members {
		if m.deleting {
			continue
		}
		s.Replicas++
		if m.ready {
			s.Ready++
		}
		if m.failed {
			failed = append(failed, m.name)
		}
	}
	s.Serving = int32(min(len(obs.listed), math.MaxInt32))
	if obs.listName != "" {
		s.ListSecretName, s.ListConfigMapName = obs.listName, obs.listName
	}
	s.Rotations += obs.rotationsStarted
	byEgress := map[string][]string{}
	for _, l := range obs.listed {
		if l.egressIP != "" {
			byEgress[l.egressIP] = append(byEgress[l.egressIP], l.name)
		}
	}
	s.DistinctEgressAddresses = int32(min(len(byEgress), math.MaxInt32))

	set := func(t string, status metav1.ConditionStatus, reason, msg string) {
		apimeta.SetStatusCondition(&s.Conditions, metav1.Condition{
			Type: t, Status: status, Reason: reason, Message: msg, ObservedGeneration: obs.generation, LastTransitionTime: metav1.NewTime(now),
		})
	}

	switch {
	case obs.specErr != nil:
		set(crawlv1alpha1.ConditionReady, metav1.ConditionFalse, crawlv1alpha1.ReasonPoolInvalidSpec,
			fmt.Sprintf("%v. No member is created until the pool's template or placement is fixed.", obs.specErr))
	case s.Serving >= obs.desired:
		set(crawlv1alpha1.ConditionReady, metav1.ConditionTrue, crawlv1alpha1.ReasonAllMembersServing,
			fmt.Sprintf("%d of %d members serve.", s.Serving, obs.desired))
	case len(failed) > 0:
		sort.Strings(failed)
		set(crawlv1alpha1.ConditionReady, metav1.ConditionFalse, crawlv1alpha1.ReasonMembersFailed,
			fmt.Sprintf("%d of %d members serve; %d failed and are kept as they are, not recreated (see their Ready condition, for example a provider out of capacity): %s.",
				s.Serving, obs.desired, len(failed), strings.Join(failed, ", ")))
	default:
		set(crawlv1alpha1.ConditionReady, metav1.ConditionFalse, crawlv1alpha1.ReasonMembersNotServing,
			fmt.Sprintf("%d of %d members serve; the others are being created, probed or replaced.", s.Serving, obs.desired))
	}

	switch {
	case obs.annotationErr != nil:
		set(crawlv1alpha1.ConditionRotating, metav1.ConditionFalse, crawlv1alpha1.ReasonInvalidRotationRequest,
			fmt.Sprintf("%v. Nothing is rotated until the annotation is fixed or removed.", obs.annotationErr))
	case len(obs.plan.rotating) > 0 || obs.plan.waiting > 0:
		var parts []string
		for _, reason := range slices.Sorted(maps.Keys(obs.plan.rotating)) {
			parts = append(parts, fmt.Sprintf("%s: %d", reason, obs.plan.rotating[reason]))
		}
		if obs.plan.waiting > 0 {
			parts = append(parts, fmt.Sprintf("waiting for maxSurge/maxUnavailable: %d", obs.plan.waiting))
		}
		set(crawlv1alpha1.ConditionRotating, metav1.ConditionTrue, crawlv1alpha1.ReasonRotationInProgress, "Rotating members ("+strings.Join(parts, ", ")+").")
	default:
		set(crawlv1alpha1.ConditionRotating, metav1.ConditionFalse, crawlv1alpha1.ReasonNoRotation, "Every member is current.")
	}

	var dups []string
	for ip, names := range byEgress {
		if len(names) > 1 {
			slices.Sort(names)
			dups = append(dups, fmt.Sprintf("%s share %s", strings.Join(names, " and "), ip))
		}
	}
	sort.Strings(dups)
	switch {
	case len(dups) > 0:
		set(crawlv1alpha1.ConditionEgressDistinct, metav1.ConditionFalse, crawlv1alpha1.ReasonDuplicateEgress,
			"Serving members share egress addresses: "+strings.Join(dups, "; ")+".")
	case len(byEgress) == 0:
		set(crawlv1alpha1.ConditionEgressDistinct, metav1.ConditionUnknown, crawlv1alpha1.ReasonEgressUnknown,
			"No egress address is known: configure probe.checkURL on the provider entries to record them.")
	default:
		set(crawlv1alpha1.ConditionEgressDistinct, metav1.ConditionTrue, crawlv1alpha1.ReasonDistinctEgress,
			fmt.Sprintf("%d Serving members, %d distinct egress addresses.", s.Serving, len(byEgress)))
	}
	return s
}
