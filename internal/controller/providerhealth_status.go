package controller

import (
	"fmt"
	"sort"
	"strings"
	"time"

	apimeta "k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	crawlv1alpha1 "github.com/egress-proxies/egress-proxies-operator/api/v1alpha1"
	"github.com/egress-proxies/egress-proxies-operator/internal/provider"
)

// computeHealth derives a ProviderHealth status from one check's verdicts.
// supported is false for provider types without a Checker. refused is the
// last read the entry's API refused since the previous check, or nil. prev
// carries the conditions' last transition times over when nothing changed.
func computeHealth(prev crawlv1alpha1.ProviderHealthStatus, typ string, supported bool, verdicts []provider.Verdict, refused *refusal, now time.Time) crawlv1alpha1.ProviderHealthStatus {
	s := crawlv1alpha1.ProviderHealthStatus{Type: typ, Conditions: append([]metav1.Condition(nil), prev.Conditions...)}
	t := metav1.NewTime(now)
	s.LastCheckTime = &t
	set := func(status metav1.ConditionStatus, reason, msg string) {
		apimeta.SetStatusCondition(&s.Conditions, metav1.Condition{
			Type: crawlv1alpha1.ConditionHealthy, Status: status, Reason: reason, Message: msg, LastTransitionTime: t,
		})
	}
	if refused != nil {
		apimeta.SetStatusCondition(&s.Conditions, metav1.Condition{
			Type: crawlv1alpha1.ConditionReadsAuthorized, Status: metav1.ConditionFalse, Reason: crawlv1alpha1.ReasonReadRefused,
			Message:            truncateMessage(fmt.Sprintf("At %s the API refused a read: %s", refused.at.UTC().Format(time.RFC3339), refused.message)),
			LastTransitionTime: t,
		})
	} else {
		// Refusals are passing by nature: one check without any clears it.
		apimeta.RemoveStatusCondition(&s.Conditions, crawlv1alpha1.ConditionReadsAuthorized)
	}
	if !supported {
		set(metav1.ConditionUnknown, crawlv1alpha1.ReasonCheckNotSupported, fmt.Sprintf("Provider type %s has no health check.", typ))
		return s
	}
	var unhealthy []string
	for _, v := range verdicts {
		s.Targets = append(s.Targets, crawlv1alpha1.TargetHealth{
			Name: v.Target, Healthy: v.Healthy, Reason: v.Reason, Message: v.Message,
			Latency: metav1.Duration{Duration: v.Latency.Round(time.Millisecond)}, LastCheckTime: t,
		})
		if !v.Healthy {
			unhealthy = append(unhealthy, fmt.Sprintf("%s (%s)", v.Target, v.Reason))
		}
	}
	sort.Slice(s.Targets, func(i, j int) bool { return s.Targets[i].Name < s.Targets[j].Name })
	sort.Strings(unhealthy)
	switch {
	case len(verdicts) == 0:
		set(metav1.ConditionFalse, crawlv1alpha1.ReasonNoTargets, "The check found no node or host to serve from.")
	case len(unhealthy) == 0:
		set(metav1.ConditionTrue, crawlv1alpha1.ReasonAllTargetsHealthy, fmt.Sprintf("All %d targets are healthy.", len(verdicts)))
	case len(unhealthy) < len(verdicts):
		set(metav1.ConditionTrue, crawlv1alpha1.ReasonSomeTargetsUnhealthy,
			fmt.Sprintf("%d of %d targets are unhealthy: %s.", len(unhealthy), len(verdicts), strings.Join(unhealthy, ", ")))
	default:
		set(metav1.ConditionFalse, crawlv1alpha1.ReasonNoHealthyTarget,
			fmt.Sprintf("No target is healthy: %s.", strings.Join(unhealthy, ", ")))
	}
	return s
}
