package controller

import (
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"github.com/google/go-cmp/cmp/cmpopts"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	crawlv1alpha1 "github.com/egress-proxies/egress-proxies-operator/api/v1alpha1"
	"github.com/egress-proxies/egress-proxies-operator/internal/provider"
)

// The fixed clock of the health tests: healthEarlier is the previous check,
// healthNow the check under test.
var (
	healthEarlier = time.Date(2025, 3, 1, 9, 0, 0, 0, time.UTC)
	healthNow     = time.Date(2025, 3, 1, 9, 1, 0, 0, time.UTC)
)

func wantHealthyCond(status metav1.ConditionStatus, reason, msg string, at time.Time) metav1.Condition {
	return metav1.Condition{
		Type: crawlv1alpha1.ConditionHealthy, Status: status, Reason: reason, Message: msg,
		LastTransitionTime: metav1.NewTime(at),
	}
}

// wantTarget is the TargetHealth computeHealth is expected to write at
// healthNow.
func wantTarget(name string, healthy bool, reason, msg string, latency time.Duration) crawlv1alpha1.TargetHealth {
	return crawlv1alpha1.TargetHealth{
		Name: name, Healthy: healthy, Reason: reason, Message: msg,
		Latency: metav1.Duration{Duration: latency}, LastCheckTime: metav1.NewTime(healthNow),
	}
}

func TestComputeHealth(t *testing.T) {
	now := metav1.NewTime(healthNow)
	reachable := func(name string) provider.Verdict {
		return provider.Verdict{Target: name, Healthy: true, Reason: "Reachable", Latency: 12 * time.Millisecond}
	}
	unreachable := func(name string) provider.Verdict {
		return provider.Verdict{Target: name, Healthy: false, Reason: "Unreachable",
			Message: "dial tcp: i/o timeout; check the node's network", Latency: 2 * time.Second}
	}
	// prevHealthy is the status of an earlier check that found all targets
	// healthy, with targets that are no longer reported.
	prevHealthy := crawlv1alpha1.ProviderHealthStatus{
		Type: "proxmox",
		Targets: []crawlv1alpha1.TargetHealth{{Name: "pve-gone", Healthy: true, Reason: "Reachable",
			LastCheckTime: metav1.NewTime(healthEarlier)}},
		LastCheckTime: &metav1.Time{Time: healthEarlier},
		Conditions: []metav1.Condition{wantHealthyCond(metav1.ConditionTrue, crawlv1alpha1.ReasonAllTargetsHealthy,
			"All 1 targets are healthy.", healthEarlier)},
	}

	refusedCond := metav1.Condition{
		Type: crawlv1alpha1.ConditionReadsAuthorized, Status: metav1.ConditionFalse, Reason: crawlv1alpha1.ReasonReadRefused,
		Message:            `At 2025-03-01T09:00:30Z the API refused a read: provider "lab": get "pve1/104": 401 Authentication failed!`,
		LastTransitionTime: now,
	}
	tests := []struct {
		name      string
		reason    string
		refused   *refusal
		prev      crawlv1alpha1.ProviderHealthStatus
		typ       string
		supported bool
		verdicts  []provider.Verdict
		want      crawlv1alpha1.ProviderHealthStatus
		// checkTransitionTime compares the condition's LastTransitionTime;
		// the other cases ignore it since they are not about it.
		checkTransitionTime bool
	}{
		{
			name:      "provider type without a checker",
			reason:    "a provider that cannot check itself is neither healthy nor unhealthy: Unknown, never False, so that no alert fires for it",
			typ:       "kubernetes",
			supported: false,
			want: crawlv1alpha1.ProviderHealthStatus{
				Type: "kubernetes", LastCheckTime: &now,
				Conditions: []metav1.Condition{wantHealthyCond(metav1.ConditionUnknown, crawlv1alpha1.ReasonCheckNotSupported,
					"Provider type kubernetes has no health check.", healthNow)},
			},
		},
		{
			name:      "no verdicts",
			reason:    "a check that finds no node or host cannot serve a proxy: it must be False, not vacuously 'all healthy'",
			typ:       "proxmox",
			supported: true,
			verdicts:  nil,
			want: crawlv1alpha1.ProviderHealthStatus{
				Type: "proxmox", LastCheckTime: &now,
				Conditions: []metav1.Condition{wantHealthyCond(metav1.ConditionFalse, crawlv1alpha1.ReasonNoTargets,
					"The check found no node or host to serve from.", healthNow)},
			},
		},
		{
			name:      "all targets healthy",
			reason:    "the common case; targets are sorted by name whatever order the provider reported, so the object does not churn between checks",
			typ:       "proxmox",
			supported: true,
			verdicts:  []provider.Verdict{reachable("pve2"), reachable("pve1"), reachable("pve3")},
			want: crawlv1alpha1.ProviderHealthStatus{
				Type: "proxmox", LastCheckTime: &now,
				Targets: []crawlv1alpha1.TargetHealth{
					wantTarget("pve1", true, "Reachable", "", 12*time.Millisecond),
					wantTarget("pve2", true, "Reachable", "", 12*time.Millisecond),
					wantTarget("pve3", true, "Reachable", "", 12*time.Millisecond),
				},
				Conditions: []metav1.Condition{wantHealthyCond(metav1.ConditionTrue, crawlv1alpha1.ReasonAllTargetsHealthy,
					"All 3 targets are healthy.", healthNow)},
			},
		},
		{
			name: "some targets unhealthy",
			reason: "the entry can still serve, so Healthy stays True, but the message must name each unhealthy target with " +
				"its reason, in a stable (sorted) order so that the condition does not flap between checks",
			typ:       "libvirt",
			supported: true,
			verdicts: []provider.Verdict{
				unreachable("host-c"), reachable("host-b"),
				{Target: "host-a", Healthy: false, Reason: "Unauthorized", Message: "check the SSH key", Latency: 3 * time.Millisecond},
			},
			want: crawlv1alpha1.ProviderHealthStatus{
				Type: "libvirt", LastCheckTime: &now,
				Targets: []crawlv1alpha1.TargetHealth{
					wantTarget("host-a", false, "Unauthorized", "check the SSH key", 3*time.Millisecond),
					wantTarget("host-b", true, "Reachable", "", 12*time.Millisecond),
					wantTarget("host-c", false, "Unreachable", "dial tcp: i/o timeout; check the node's network", 2*time.Second),
				},
				Conditions: []metav1.Condition{wantHealthyCond(metav1.ConditionTrue, crawlv1alpha1.ReasonSomeTargetsUnhealthy,
					"2 of 3 targets are unhealthy: host-a (Unauthorized), host-c (Unreachable).", healthNow)},
			},
		},
		{
			name:      "no target healthy",
			reason:    "with no healthy target no new proxy can be created on the entry: Healthy must be False and name the failures",
			typ:       "proxmox",
			supported: true,
			verdicts:  []provider.Verdict{unreachable("pve2"), unreachable("pve1")},
			want: crawlv1alpha1.ProviderHealthStatus{
				Type: "proxmox", LastCheckTime: &now,
				Targets: []crawlv1alpha1.TargetHealth{
					wantTarget("pve1", false, "Unreachable", "dial tcp: i/o timeout; check the node's network", 2*time.Second),
					wantTarget("pve2", false, "Unreachable", "dial tcp: i/o timeout; check the node's network", 2*time.Second),
				},
				Conditions: []metav1.Condition{wantHealthyCond(metav1.ConditionFalse, crawlv1alpha1.ReasonNoHealthyTarget,
					"No target is healthy: pve1 (Unreachable), pve2 (Unreachable).", healthNow)},
			},
		},
		{
			name:      "latency rounded to milliseconds",
			reason:    "raw nanosecond latencies would change the object on every check (and read badly as 35.123456ms); 1.4999ms rounds down, 2.5ms up",
			typ:       "proxmox",
			supported: true,
			verdicts: []provider.Verdict{
				{Target: "a", Healthy: true, Reason: "Reachable", Latency: 1499900 * time.Nanosecond},
				{Target: "b", Healthy: true, Reason: "Reachable", Latency: 2500 * time.Microsecond},
				{Target: "c", Healthy: true, Reason: "Reachable", Latency: 35123456 * time.Nanosecond},
			},
			want: crawlv1alpha1.ProviderHealthStatus{
				Type: "proxmox", LastCheckTime: &now,
				Targets: []crawlv1alpha1.TargetHealth{
					wantTarget("a", true, "Reachable", "", time.Millisecond),
					wantTarget("b", true, "Reachable", "", 3*time.Millisecond),
					wantTarget("c", true, "Reachable", "", 35*time.Millisecond),
				},
				Conditions: []metav1.Condition{wantHealthyCond(metav1.ConditionTrue, crawlv1alpha1.ReasonAllTargetsHealthy,
					"All 3 targets are healthy.", healthNow)},
			},
		},
		{
			name: "status unchanged since the last check",
			reason: "LastTransitionTime says since when the entry is healthy; a periodic re-check that finds the same must " +
				"keep it, while targets and LastCheckTime are replaced by the new check (stale targets dropped)",
			prev:      prevHealthy,
			typ:       "proxmox",
			supported: true,
			verdicts:  []provider.Verdict{reachable("pve1"), reachable("pve2")},
			want: crawlv1alpha1.ProviderHealthStatus{
				Type: "proxmox", LastCheckTime: &now,
				Targets: []crawlv1alpha1.TargetHealth{
					wantTarget("pve1", true, "Reachable", "", 12*time.Millisecond),
					wantTarget("pve2", true, "Reachable", "", 12*time.Millisecond),
				},
				Conditions: []metav1.Condition{wantHealthyCond(metav1.ConditionTrue, crawlv1alpha1.ReasonAllTargetsHealthy,
					"All 2 targets are healthy.", healthEarlier)},
			},
			checkTransitionTime: true,
		},
		{
			name:      "status changed since the last check",
			reason:    "a flip from True to False is a transition: LastTransitionTime must move to this check",
			prev:      prevHealthy,
			typ:       "proxmox",
			supported: true,
			verdicts:  []provider.Verdict{unreachable("pve1")},
			want: crawlv1alpha1.ProviderHealthStatus{
				Type: "proxmox", LastCheckTime: &now,
				Targets: []crawlv1alpha1.TargetHealth{
					wantTarget("pve1", false, "Unreachable", "dial tcp: i/o timeout; check the node's network", 2*time.Second),
				},
				Conditions: []metav1.Condition{wantHealthyCond(metav1.ConditionFalse, crawlv1alpha1.ReasonNoHealthyTarget,
					"No target is healthy: pve1 (Unreachable).", healthNow)},
			},
			checkTransitionTime: true,
		},
		{
			name: "a read was refused since the last check",
			reason: "a token rotation that makes Get fail with 401 must show on the entry (item 7 of #12), beside a " +
				"health check that may well pass by then; the Proxies keep their status",
			prev:      prevHealthy,
			typ:       "proxmox",
			supported: true,
			verdicts:  []provider.Verdict{reachable("pve1")},
			refused: &refusal{at: healthEarlier.Add(30 * time.Second),
				message: `provider "lab": get "pve1/104": 401 Authentication failed!`},
			want: crawlv1alpha1.ProviderHealthStatus{
				Type: "proxmox", LastCheckTime: &now,
				Targets: []crawlv1alpha1.TargetHealth{wantTarget("pve1", true, "Reachable", "", 12*time.Millisecond)},
				Conditions: []metav1.Condition{
					wantHealthyCond(metav1.ConditionTrue, crawlv1alpha1.ReasonAllTargetsHealthy, "All 1 targets are healthy.", healthEarlier),
					refusedCond,
				},
			},
			checkTransitionTime: true,
		},
		{
			name:   "no read refused since the last check",
			reason: "a refusal is passing: once a whole interval went by without one, the condition goes away",
			prev: func() crawlv1alpha1.ProviderHealthStatus {
				p := *prevHealthy.DeepCopy()
				p.Conditions = append(p.Conditions, refusedCond)
				return p
			}(),
			typ:       "proxmox",
			supported: true,
			verdicts:  []provider.Verdict{reachable("pve1")},
			want: crawlv1alpha1.ProviderHealthStatus{
				Type: "proxmox", LastCheckTime: &now,
				Targets: []crawlv1alpha1.TargetHealth{wantTarget("pve1", true, "Reachable", "", 12*time.Millisecond)},
				Conditions: []metav1.Condition{
					wantHealthyCond(metav1.ConditionTrue, crawlv1alpha1.ReasonAllTargetsHealthy, "All 1 targets are healthy.", healthEarlier),
				},
			},
			checkTransitionTime: true,
		},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			prevCopy := *tc.prev.DeepCopy()
			verdictsCopy := append([]provider.Verdict(nil), tc.verdicts...)

			got := computeHealth(tc.prev, tc.typ, tc.supported, tc.verdicts, tc.refused, healthNow)

			var opts []cmp.Option
			if !tc.checkTransitionTime {
				opts = append(opts, cmpopts.IgnoreFields(metav1.Condition{}, "LastTransitionTime"))
			}
			if diff := cmp.Diff(tc.want, got, opts...); diff != "" {
				t.Errorf("computeHealth() (-want +got):\n%s\nwhy this matters: %s", diff, tc.reason)
			}
			if diff := cmp.Diff(prevCopy, tc.prev); diff != "" {
				t.Errorf("computeHealth() changed prev (-want +got):\n%s", diff)
			}
			if diff := cmp.Diff(verdictsCopy, tc.verdicts); diff != "" {
				t.Errorf("computeHealth() reordered or changed the caller's verdicts (-want +got):\n%s", diff)
			}
		})
	}
}
