package controller

import (
	"errors"
	"net/netip"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"github.com/google/go-cmp/cmp/cmpopts"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	crawlv1alpha1 "github.com/egress-proxies/egress-proxies-operator/api/v1alpha1"
	"github.com/egress-proxies/egress-proxies-operator/internal/probe"
)

func TestComputeServing(t *testing.T) {
	now := time.Date(2025, 3, 1, 10, 0, 0, 0, time.UTC)
	earlier := metav1.NewTime(now.Add(-time.Minute))
	nowT := metav1.NewTime(now)
	ready := metav1.Condition{Type: crawlv1alpha1.ConditionReady, Status: metav1.ConditionTrue, Reason: crawlv1alpha1.ReasonInstanceRunning}
	serving := func(status metav1.ConditionStatus, reason, msg string) metav1.Condition {
		return metav1.Condition{Type: crawlv1alpha1.ConditionServing, Status: status, Reason: reason, Message: msg, ObservedGeneration: 1}
	}
	readyStatus := func(extra ...metav1.Condition) crawlv1alpha1.ProxyStatus {
		return crawlv1alpha1.ProxyStatus{Phase: crawlv1alpha1.ProxyPhaseReady, Conditions: append([]metav1.Condition{ready}, extra...)}
	}
	passed := serving(metav1.ConditionTrue, crawlv1alpha1.ReasonProbePassed, "Probe through the proxy passed in 12ms; egress address 203.0.113.5.")
	tests := []struct {
		name   string
		reason string
		prev   crawlv1alpha1.ProxyStatus
		obs    observation
		want   crawlv1alpha1.ProxyStatus
	}{
		{
			name:   "not ready",
			reason: "a proxy that is not Ready is not probed and never in a published list; old probe results go, their time too (the successor is probed as soon as it runs)",
			prev: crawlv1alpha1.ProxyStatus{Phase: crawlv1alpha1.ProxyPhaseReplacing, EgressIP: "203.0.113.5", ProbeFailures: 2, Conditions: []metav1.Condition{passed},
				LastProbeTime: &earlier, ProbeLatency: &metav1.Duration{Duration: 12 * time.Millisecond}},
			obs: observation{probing: true, probeThreshold: 3},
			want: crawlv1alpha1.ProxyStatus{Phase: crawlv1alpha1.ProxyPhaseReplacing, Conditions: []metav1.Condition{
				serving(metav1.ConditionFalse, crawlv1alpha1.ReasonNotReady, "The proxy is not Ready.")}},
		},
		{
			name:   "ready, not probed yet",
			reason: "Ready is not Serving: a proxy enters the list only after a probe through it passed",
			prev:   readyStatus(),
			obs:    observation{probing: true, probeThreshold: 3},
			want: readyStatus(serving(metav1.ConditionUnknown, crawlv1alpha1.ReasonProbePending,
				"The proxy is Ready; waiting for the first probe through it.")),
		},
		{
			name:   "probe passed",
			reason: "a passed probe records egress address, time and latency, and resets the failures",
			prev:   func() crawlv1alpha1.ProxyStatus { s := readyStatus(); s.ProbeFailures = 2; return s }(),
			obs: observation{probing: true, probeThreshold: 3, probe: &probeOutcome{result: probe.Result{
				Latency: 12 * time.Millisecond, EgressIP: netip.MustParseAddr("203.0.113.5")}}},
			want: func() crawlv1alpha1.ProxyStatus {
				s := readyStatus(passed)
				s.EgressIP, s.LastProbeTime, s.ProbeLatency = "203.0.113.5", &nowT, &metav1.Duration{Duration: 12 * time.Millisecond}
				return s
			}(),
		},
		{
			name:   "first failure",
			reason: "a failing proxy leaves the list at once, but is not replaced on one failure",
			prev: func() crawlv1alpha1.ProxyStatus {
				s := readyStatus(passed)
				s.EgressIP, s.LastProbeTime = "203.0.113.5", &earlier
				return s
			}(),
			obs: observation{probing: true, probeThreshold: 3, probe: &probeOutcome{err: errors.New("wrong-password check: dialling the proxy: refused")}},
			want: func() crawlv1alpha1.ProxyStatus {
				s := readyStatus(serving(metav1.ConditionFalse, crawlv1alpha1.ReasonProbeFailing,
					"Probe through the proxy failed 1 time(s) in a row: wrong-password check: dialling the proxy: refused."))
				s.EgressIP, s.LastProbeTime, s.ProbeFailures = "203.0.113.5", &nowT, 1
				return s
			}(),
		},
		{
			name:   "threshold reached",
			reason: "at the threshold the pool replaces the member and a lone Proxy is marked",
			prev:   func() crawlv1alpha1.ProxyStatus { s := readyStatus(); s.ProbeFailures = 2; return s }(),
			obs:    observation{probing: true, probeThreshold: 3, probe: &probeOutcome{err: errors.New("timeout")}},
			want: func() crawlv1alpha1.ProxyStatus {
				s := readyStatus(serving(metav1.ConditionFalse, crawlv1alpha1.ReasonProbeFailed, "Probe through the proxy failed 3 time(s) in a row: timeout."))
				s.LastProbeTime, s.ProbeFailures = &nowT, 3
				return s
			}(),
		},
		{
			name:   "probing off",
			reason: "an operator started without probes still fills pools: Serving follows Ready",
			prev:   readyStatus(),
			obs:    observation{},
			want: readyStatus(serving(metav1.ConditionTrue, crawlv1alpha1.ReasonProbeDisabled,
				"The operator runs without probes; Serving follows Ready.")),
		},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			got := *tc.prev.DeepCopy()
			computeServing(&got, tc.obs, 1, now)
			if diff := cmp.Diff(tc.want, got, cmpopts.IgnoreFields(metav1.Condition{}, "LastTransitionTime")); diff != "" {
				t.Errorf("computeServing() (-want +got):\n%s\nwhy this matters: %s", diff, tc.reason)
			}
		})
	}
}
