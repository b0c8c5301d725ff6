package controller

import (
	"errors"
	"net/netip"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"github.com/google/go-cmp/cmp/cmpopts"
	apimeta "k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	crawlv1alpha1 "github.com/egress-proxies/egress-proxies-operator/api/v1alpha1"
	"github.com/egress-proxies/egress-proxies-operator/internal/config"
	"github.com/egress-proxies/egress-proxies-operator/internal/provider"
)

// The fixed clock of the status tests: statusEarlier is when an earlier
// reconcile wrote the previous status, statusNow is the reconcile under test.
var (
	statusEarlier = time.Date(2025, 3, 1, 10, 0, 0, 0, time.UTC)
	statusNow     = time.Date(2025, 3, 1, 10, 5, 0, 0, time.UTC)
)

const (
	statusGen = int64(3)
	statusID  = "pve1/104"
)

// wantReadyCond builds the Ready condition computeStatus is expected to write at
// statusNow for generation statusGen.
func wantReadyCond(status metav1.ConditionStatus, reason, msg string) metav1.Condition {
	return wantReadyCondAt(status, reason, msg, statusGen, statusNow)
}

// wantReadyCondAt builds a Ready condition with an explicit generation and
// transition time, for previous statuses and for the transition-time cases.
func wantReadyCondAt(status metav1.ConditionStatus, reason, msg string, gen int64, at time.Time) metav1.Condition {
	return metav1.Condition{
		Type: crawlv1alpha1.ConditionReady, Status: status, Reason: reason, Message: msg,
		ObservedGeneration: gen, LastTransitionTime: metav1.NewTime(at),
	}
}

func statusTimePtr(t time.Time) *metav1.Time {
	mt := metav1.NewTime(t)
	return &mt
}

// readyProxyStatus is the status of a Proxy that was Ready at statusEarlier on
// 198.51.100.7:3128.
func readyProxyStatus() crawlv1alpha1.ProxyStatus {
	return crawlv1alpha1.ProxyStatus{
		Phase:                 crawlv1alpha1.ProxyPhaseReady,
		Zone:                  "rack-a",
		InstanceID:            statusID,
		InstanceName:          "team-web-0a1b2c3d",
		Node:                  "pve1",
		Address:               "198.51.100.7",
		URL:                   "http://198.51.100.7:3128",
		CredentialsSecretName: "web-proxy-credentials",
		InstanceCreationTime:  statusTimePtr(statusEarlier.Add(-time.Minute)),
		ReadyTime:             statusTimePtr(statusEarlier),
		ObservedGeneration:    statusGen - 1,
		Conditions: []metav1.Condition{wantReadyCondAt(metav1.ConditionTrue, crawlv1alpha1.ReasonInstanceRunning,
			"Instance pve1/104 runs on pve1 and serves at http://198.51.100.7:3128.", statusGen-1, statusEarlier)},
	}
}

// statusWithReady returns s with its phase, generation and Ready condition
// replaced, the way computeStatus is expected to write them.
func statusWithReady(s crawlv1alpha1.ProxyStatus, phase crawlv1alpha1.ProxyPhase, c metav1.Condition) crawlv1alpha1.ProxyStatus {
	s.Phase = phase
	s.ObservedGeneration = statusGen
	s.Conditions = []metav1.Condition{c}
	return s
}

func TestComputeStatus(t *testing.T) {
	transient := provider.Annotate(provider.NewTransient(errors.New("connection refused")), "lab", provider.OpGet, statusID)
	permanent := provider.Annotate(provider.NewPermanent(errors.New("template 9000 does not exist"),
		"create template 9000 on node pve1"), "lab", provider.OpCreate, "")
	inProgress := provider.NewInProgress("waiting for clone task", 5*time.Second)
	refused := provider.Annotate(provider.NewRefused(errors.New("401 Authentication failed!"), "check the API token"), "lab", provider.OpGet, statusID)
	specErr := &config.SpecError{Field: "spec.zone", Message: `no zone "rack-z"; configured: rack-a, rack-b`}
	running := func(addr string) *provider.Instance {
		in := &provider.Instance{ID: statusID, State: provider.StateRunning, Node: "pve1"}
		if addr != "" {
			in.Address = netip.MustParseAddr(addr)
		}
		return in
	}
	withID := func(phase crawlv1alpha1.ProxyPhase) crawlv1alpha1.ProxyStatus {
		return crawlv1alpha1.ProxyStatus{Phase: phase, InstanceID: statusID, ObservedGeneration: statusGen - 1}
	}
	// cleared is a Ready status after address, URL and ready time were
	// cleared (the node stays unless the case says otherwise).
	cleared := func() crawlv1alpha1.ProxyStatus {
		s := readyProxyStatus()
		s.Address, s.URL, s.ReadyTime = "", "", nil
		return s
	}
	latched := crawlv1alpha1.ProxyStatus{
		Phase: crawlv1alpha1.ProxyPhaseFailed, Zone: "rack-a", ObservedGeneration: statusGen,
		Conditions: []metav1.Condition{wantReadyCondAt(metav1.ConditionFalse, crawlv1alpha1.ReasonPermanentError,
			"earlier failure. To fix: do something. Then set the annotation crawl.example.com/retry on the Proxy to retry.",
			statusGen, statusEarlier)},
	}

	tests := []struct {
		name   string
		reason string
		prev   crawlv1alpha1.ProxyStatus
		obs    observation
		port   int32
		want   crawlv1alpha1.ProxyStatus
		// checkTransitionTime compares LastTransitionTime too; the other
		// cases ignore it since they are not about it.
		checkTransitionTime bool
	}{
		{
			name:   "fresh proxy with nothing observed",
			reason: "a new Proxy must show Pending with a Ready condition at once, so that `kubectl get` and waiters have something to read",
			prev:   crawlv1alpha1.ProxyStatus{},
			want: crawlv1alpha1.ProxyStatus{
				Phase: crawlv1alpha1.ProxyPhasePending, ObservedGeneration: statusGen,
				Conditions: []metav1.Condition{wantReadyCond(metav1.ConditionFalse, crawlv1alpha1.ReasonPending, "Waiting to create the instance.")},
			},
		},
		{
			name:   "instance ID recorded, nothing observed yet",
			reason: "right after Create succeeded the instance exists: the phase must move past Pending even before the first Get",
			prev:   withID(crawlv1alpha1.ProxyPhasePending),
			want: statusWithReady(withID(""), crawlv1alpha1.ProxyPhaseProvisioning, wantReadyCond(metav1.ConditionFalse,
				crawlv1alpha1.ReasonProvisioning, "Instance pve1/104 was created; waiting for it to run.")),
		},
		{
			name:   "instance is being created",
			reason: "a provider reporting StateProvisioning is not an error; the message must say the instance is being created",
			prev:   withID(crawlv1alpha1.ProxyPhaseProvisioning),
			obs:    observation{instance: &provider.Instance{ID: statusID, State: provider.StateProvisioning, Node: "pve1"}},
			want: func() crawlv1alpha1.ProxyStatus {
				s := statusWithReady(withID(""), crawlv1alpha1.ProxyPhaseProvisioning, wantReadyCond(metav1.ConditionFalse,
					crawlv1alpha1.ReasonProvisioning, "Instance pve1/104 is being created."))
				s.Node = "pve1"
				return s
			}(),
		},
		{
			name:   "running without an address",
			reason: "a booting VM runs before DHCP/guest agent report its address: it must not be Ready (no URL to hand out) and the message must say what is awaited",
			prev:   withID(crawlv1alpha1.ProxyPhaseProvisioning),
			obs:    observation{instance: running("")},
			want: func() crawlv1alpha1.ProxyStatus {
				s := statusWithReady(withID(""), crawlv1alpha1.ProxyPhaseProvisioning, wantReadyCond(metav1.ConditionFalse,
					crawlv1alpha1.ReasonProvisioning, "Instance pve1/104 is booting; waiting for its address."))
				s.Node = "pve1"
				return s
			}(),
		},
		{
			name:   "running with an IPv4 address",
			reason: "the Ready transition fills everything a user needs (address, URL with the spec's port, node) and stamps ReadyTime for the create-to-ready metric",
			prev:   withID(crawlv1alpha1.ProxyPhaseProvisioning),
			obs:    observation{instance: running("198.51.100.7")},
			port:   8080,
			want: func() crawlv1alpha1.ProxyStatus {
				s := statusWithReady(withID(""), crawlv1alpha1.ProxyPhaseReady, wantReadyCond(metav1.ConditionTrue,
					crawlv1alpha1.ReasonInstanceRunning, "Instance pve1/104 runs on pve1 and serves at http://198.51.100.7:8080."))
				s.Node, s.Address, s.URL, s.ReadyTime = "pve1", "198.51.100.7", "http://198.51.100.7:8080", statusTimePtr(statusNow)
				return s
			}(),
		},
		{
			name:   "running with an IPv6 address",
			reason: "an IPv6 host must be bracketed in the URL, or http://2001:db8::1:3128 is unusable by every HTTP client",
			prev:   withID(crawlv1alpha1.ProxyPhaseProvisioning),
			obs:    observation{instance: running("2001:db8::1")},
			want: func() crawlv1alpha1.ProxyStatus {
				s := statusWithReady(withID(""), crawlv1alpha1.ProxyPhaseReady, wantReadyCond(metav1.ConditionTrue,
					crawlv1alpha1.ReasonInstanceRunning, "Instance pve1/104 runs on pve1 and serves at http://[2001:db8::1]:3128."))
				s.Node, s.Address, s.URL, s.ReadyTime = "pve1", "2001:db8::1", "http://[2001:db8::1]:3128", statusTimePtr(statusNow)
				return s
			}(),
		},
		{
			name: "still running: ready time and transition time are preserved",
			reason: "ReadyTime is when the instance FIRST became Ready: resetting it on every resync would break the create-to-ready " +
				"metric and tell users the proxy just came up; an unchanged Ready status keeps its LastTransitionTime",
			prev: readyProxyStatus(),
			obs:  observation{instance: running("198.51.100.7")},
			want: func() crawlv1alpha1.ProxyStatus {
				s := readyProxyStatus()
				s.ObservedGeneration = statusGen
				s.Conditions = []metav1.Condition{wantReadyCondAt(metav1.ConditionTrue, crawlv1alpha1.ReasonInstanceRunning,
					"Instance pve1/104 runs on pve1 and serves at http://198.51.100.7:3128.", statusGen, statusEarlier)}
				return s
			}(),
			checkTransitionTime: true,
		},
		{
			name:   "Ready status changes: transition time moves to now",
			reason: "LastTransitionTime says since when the proxy is (not) usable; it must move when Ready flips from False to True",
			prev: func() crawlv1alpha1.ProxyStatus {
				s := withID(crawlv1alpha1.ProxyPhaseProvisioning)
				s.Conditions = []metav1.Condition{wantReadyCondAt(metav1.ConditionFalse, crawlv1alpha1.ReasonProvisioning,
					"Instance pve1/104 is being created.", statusGen-1, statusEarlier)}
				return s
			}(),
			obs: observation{instance: running("198.51.100.7")},
			want: func() crawlv1alpha1.ProxyStatus {
				s := statusWithReady(withID(""), crawlv1alpha1.ProxyPhaseReady, wantReadyCondAt(metav1.ConditionTrue,
					crawlv1alpha1.ReasonInstanceRunning, "Instance pve1/104 runs on pve1 and serves at http://198.51.100.7:3128.",
					statusGen, statusNow))
				s.Node, s.Address, s.URL, s.ReadyTime = "pve1", "198.51.100.7", "http://198.51.100.7:3128", statusTimePtr(statusNow)
				return s
			}(),
			checkTransitionTime: true,
		},
		{
			name: "Ready stays False with a new reason: transition time is kept",
			reason: "meta.SetStatusCondition semantics: only a change of status moves LastTransitionTime; a new reason or " +
				"message while still not ready must not make the proxy look freshly broken",
			prev: func() crawlv1alpha1.ProxyStatus {
				s := withID(crawlv1alpha1.ProxyPhaseProvisioning)
				s.Conditions = []metav1.Condition{wantReadyCondAt(metav1.ConditionFalse, crawlv1alpha1.ReasonProvisioning,
					"Instance pve1/104 was created; waiting for it to run.", statusGen-1, statusEarlier)}
				return s
			}(),
			obs: observation{providerErr: transient},
			want: statusWithReady(withID(""), crawlv1alpha1.ProxyPhaseProvisioning, wantReadyCondAt(metav1.ConditionFalse,
				crawlv1alpha1.ReasonTransientError,
				`Retrying after a transient provider error: provider "lab": get "pve1/104": connection refused`,
				statusGen, statusEarlier)),
			checkTransitionTime: true,
		},
		{
			name: "invalid spec",
			reason: "an unresolvable spec is Failed with the remedy spelled out; the address and URL of an instance the " +
				"operator no longer manages must not be handed out",
			prev: readyProxyStatus(),
			obs:  observation{specErr: specErr},
			want: statusWithReady(cleared(), crawlv1alpha1.ProxyPhaseFailed, wantReadyCond(metav1.ConditionFalse, crawlv1alpha1.ReasonInvalidSpec,
				`spec.zone: no zone "rack-z"; configured: rack-a, rack-b. Recreate the Proxy with a valid value, `+
					"or add it to the providers configuration and restart the operator.")),
		},
		{
			name:   "invalid spec wins over a provider error",
			reason: "the spec is checked before any provider call; a stale provider error must not hide the actionable spec error",
			prev:   crawlv1alpha1.ProxyStatus{},
			obs:    observation{specErr: specErr, providerErr: transient},
			want: crawlv1alpha1.ProxyStatus{
				Phase: crawlv1alpha1.ProxyPhaseFailed, ObservedGeneration: statusGen,
				Conditions: []metav1.Condition{wantReadyCond(metav1.ConditionFalse, crawlv1alpha1.ReasonInvalidSpec,
					`spec.zone: no zone "rack-z"; configured: rack-a, rack-b. Recreate the Proxy with a valid value, `+
						"or add it to the providers configuration and restart the operator.")},
			},
		},
		{
			name:   "credentials conflict",
			reason: "a foreign Secret in the way needs a human; the message is the reconciler's explanation, verbatim, and the URL must go",
			prev:   readyProxyStatus(),
			obs:    observation{credentialsConflict: "Secret web-proxy-credentials exists and is not owned by this Proxy."},
			want: statusWithReady(cleared(), crawlv1alpha1.ProxyPhaseFailed, wantReadyCond(metav1.ConditionFalse,
				crawlv1alpha1.ReasonCredentialsConflict, "Secret web-proxy-credentials exists and is not owned by this Proxy.")),
		},
		{
			name: "permanent provider error",
			reason: "a permanent error latches the Proxy: the message must carry the admin action and the retry annotation, " +
				"since nothing else tells the user how to get out of Failed",
			prev: withID(crawlv1alpha1.ProxyPhaseProvisioning),
			obs:  observation{providerErr: permanent},
			want: statusWithReady(withID(""), crawlv1alpha1.ProxyPhaseFailed, wantReadyCond(metav1.ConditionFalse, crawlv1alpha1.ReasonPermanentError,
				`provider "lab": create: template 9000 does not exist. To fix: create template 9000 on node pve1. `+
					"Then set the annotation crawl.example.com/retry on the Proxy to retry.")),
		},
		{
			name:   "permanent provider error without an action",
			reason: "no empty 'To fix: .' sentence when the provider gave no action; the retry annotation is still named",
			prev:   crawlv1alpha1.ProxyStatus{},
			obs:    observation{providerErr: provider.NewPermanent(errors.New("forbidden"), "")},
			want: crawlv1alpha1.ProxyStatus{
				Phase: crawlv1alpha1.ProxyPhaseFailed, ObservedGeneration: statusGen,
				Conditions: []metav1.Condition{wantReadyCond(metav1.ConditionFalse, crawlv1alpha1.ReasonPermanentError,
					"forbidden. Then set the annotation crawl.example.com/retry on the Proxy to retry.")},
			},
		},
		{
			name:   "create in progress",
			reason: "InProgress is not a failure: the Proxy shows Provisioning with the provider's step, not an error",
			prev:   crawlv1alpha1.ProxyStatus{Phase: crawlv1alpha1.ProxyPhasePending},
			obs:    observation{providerErr: inProgress},
			want: crawlv1alpha1.ProxyStatus{
				Phase: crawlv1alpha1.ProxyPhaseProvisioning, ObservedGeneration: statusGen,
				Conditions: []metav1.Condition{wantReadyCond(metav1.ConditionFalse, crawlv1alpha1.ReasonProvisioning,
					"Creating the instance: waiting for clone task.")},
			},
		},
		{
			name: "transient error while Ready",
			reason: "a failed Get says nothing about the instance, which most likely still serves: the phase, address and URL " +
				"stay, and Ready becomes Unknown rather than False",
			prev: readyProxyStatus(),
			obs:  observation{providerErr: transient},
			want: statusWithReady(readyProxyStatus(), crawlv1alpha1.ProxyPhaseReady, wantReadyCond(metav1.ConditionUnknown, crawlv1alpha1.ReasonTransientError,
				`Retrying after a transient provider error: provider "lab": get "pve1/104": connection refused`)),
		},
		{
			name: "refused read while Ready",
			reason: "a 401 or 403 on a read (token rotation, ACL edit) must never fail a Ready fleet: everything known of the " +
				"instance stays, Ready is Unknown with a reason of its own, and the advice is there for when it lasts",
			prev: readyProxyStatus(),
			obs:  observation{providerErr: refused},
			want: statusWithReady(readyProxyStatus(), crawlv1alpha1.ProxyPhaseReady, wantReadyCond(metav1.ConditionUnknown, crawlv1alpha1.ReasonProviderRefused,
				`The provider refused to read the instance; the last known status is kept and the read is retried: `+
					`provider "lab": get "pve1/104": 401 Authentication failed!. If this lasts: check the API token.`)),
		},
		{
			name:   "refused read while Provisioning",
			reason: "before Ready a refusal is not a latch either: the Proxy stays Provisioning and the read is retried",
			prev:   withID(crawlv1alpha1.ProxyPhaseProvisioning),
			obs:    observation{providerErr: refused},
			want: statusWithReady(withID(""), crawlv1alpha1.ProxyPhaseProvisioning, wantReadyCond(metav1.ConditionFalse, crawlv1alpha1.ReasonProviderRefused,
				`The provider refused to read the instance; the last known status is kept and the read is retried: `+
					`provider "lab": get "pve1/104": 401 Authentication failed!. If this lasts: check the API token.`)),
		},
		{
			name: "creates held by a key mismatch while Ready",
			reason: "after a key loss the instance looks gone, yet most likely still serves: the Proxy keeps its address and phase, " +
				"Ready is Unknown with the mismatch as its reason, so that a pool's list is not emptied by a lost Secret",
			prev: readyProxyStatus(),
			obs:  observation{ownershipHold: ownershipHoldMessage("lab")},
			want: statusWithReady(readyProxyStatus(), crawlv1alpha1.ProxyPhaseReady, wantReadyCond(metav1.ConditionUnknown,
				crawlv1alpha1.ReasonOwnershipKeyMismatch, ownershipHoldMessage("lab"))),
		},
		{
			name:   "creates held by a key mismatch before any instance",
			reason: "a new Proxy on an entry whose fleet does not verify waits Pending, and says why and where to look",
			prev:   crawlv1alpha1.ProxyStatus{Phase: crawlv1alpha1.ProxyPhasePending},
			obs:    observation{ownershipHold: ownershipHoldMessage("lab")},
			want: crawlv1alpha1.ProxyStatus{
				Phase: crawlv1alpha1.ProxyPhasePending, ObservedGeneration: statusGen,
				Conditions: []metav1.Condition{wantReadyCond(metav1.ConditionFalse, crawlv1alpha1.ReasonOwnershipKeyMismatch, ownershipHoldMessage("lab"))},
			},
		},
		{
			name:   "first key check in another reconcile",
			reason: "while another reconcile lists the entry nothing was tried: the status must not flip a Ready Proxy to Provisioning",
			prev:   readyProxyStatus(),
			obs:    observation{ownershipPending: true},
			want: func() crawlv1alpha1.ProxyStatus {
				s := readyProxyStatus()
				s.ObservedGeneration = statusGen
				return s
			}(),
		},
		{
			name:   "transient error before any instance",
			reason: "a failed first Create leaves nothing created: the Proxy is still Pending, with the error shown",
			prev:   crawlv1alpha1.ProxyStatus{Phase: crawlv1alpha1.ProxyPhasePending},
			obs:    observation{providerErr: errors.New("dial tcp: i/o timeout")},
			want: crawlv1alpha1.ProxyStatus{
				Phase: crawlv1alpha1.ProxyPhasePending, ObservedGeneration: statusGen,
				Conditions: []metav1.Condition{wantReadyCond(metav1.ConditionFalse, crawlv1alpha1.ReasonTransientError,
					"Retrying after a transient provider error: dial tcp: i/o timeout")},
			},
		},
		{
			name:   "transient error while Replacing",
			reason: "a hiccup during a replacement must not hide that the Proxy is being replaced",
			prev:   crawlv1alpha1.ProxyStatus{Phase: crawlv1alpha1.ProxyPhaseReplacing, Replacements: 1},
			obs:    observation{providerErr: transient},
			want: crawlv1alpha1.ProxyStatus{
				Phase: crawlv1alpha1.ProxyPhaseReplacing, Replacements: 1, ObservedGeneration: statusGen,
				Conditions: []metav1.Condition{wantReadyCond(metav1.ConditionFalse, crawlv1alpha1.ReasonTransientError,
					`Retrying after a transient provider error: provider "lab": get "pve1/104": connection refused`)},
			},
		},
		{
			name: "replacing",
			reason: "the stopped or vanished instance's address, URL and node are gone with it: clients must not be sent " +
				"there, and the next ReadyTime must be stamped by the successor",
			prev: readyProxyStatus(),
			obs:  observation{replacing: "the instance stopped"},
			want: func() crawlv1alpha1.ProxyStatus {
				s := statusWithReady(cleared(), crawlv1alpha1.ProxyPhaseReplacing, wantReadyCond(metav1.ConditionFalse,
					crawlv1alpha1.ReasonReplacing, "Replacing the instance: the instance stopped."))
				s.Node = ""
				return s
			}(),
		},
		{
			name:   "replacement not created yet",
			reason: "between clearing the old instance and creating its successor the phase stays Replacing, not Pending",
			prev:   crawlv1alpha1.ProxyStatus{Phase: crawlv1alpha1.ProxyPhaseReplacing, Replacements: 1},
			want: crawlv1alpha1.ProxyStatus{
				Phase: crawlv1alpha1.ProxyPhaseReplacing, Replacements: 1, ObservedGeneration: statusGen,
				Conditions: []metav1.Condition{wantReadyCond(metav1.ConditionFalse, crawlv1alpha1.ReasonReplacing,
					"Creating the replacement instance.")},
			},
		},
		{
			name:   "deleting",
			reason: "a Proxy being deleted shows Deleting whatever it was before",
			prev:   readyProxyStatus(),
			obs:    observation{deleting: true},
			want: statusWithReady(readyProxyStatus(), crawlv1alpha1.ProxyPhaseDeleting, wantReadyCond(metav1.ConditionFalse,
				crawlv1alpha1.ReasonDeleting, "Deleting the instance.")),
		},
		{
			name:   "deleting with a provider error",
			reason: "a stuck deletion (finalizer held) must say why, or the user cannot tell a slow delete from a broken one",
			prev:   readyProxyStatus(),
			obs:    observation{deleting: true, providerErr: transient},
			want: statusWithReady(readyProxyStatus(), crawlv1alpha1.ProxyPhaseDeleting, wantReadyCond(metav1.ConditionFalse,
				crawlv1alpha1.ReasonDeleteFailed,
				`Deleting the instance failed; retrying: provider "lab": get "pve1/104": connection refused`)),
		},
		{
			name:   "deleting in progress",
			reason: "a Delete that returns InProgress is working, not failing: it must not show DeleteFailed",
			prev:   readyProxyStatus(),
			obs:    observation{deleting: true, providerErr: inProgress},
			want: statusWithReady(readyProxyStatus(), crawlv1alpha1.ProxyPhaseDeleting, wantReadyCond(metav1.ConditionFalse,
				crawlv1alpha1.ReasonDeleting, "Deleting the instance.")),
		},
		{
			name:   "deleting wins over an invalid spec",
			reason: "a Proxy with a bad spec must still be deletable and show it, not stay Failed forever",
			prev:   latched,
			obs:    observation{deleting: true, specErr: specErr},
			want: statusWithReady(latched, crawlv1alpha1.ProxyPhaseDeleting, wantReadyCond(metav1.ConditionFalse,
				crawlv1alpha1.ReasonDeleting, "Deleting the instance.")),
		},
		{
			name:   "latched failure",
			reason: "nothing was tried, so nothing may change: the failure's message (with its remedy) must survive every resync",
			prev:   latched,
			obs:    observation{latched: true},
			want:   latched,
			// The condition must not even be rewritten.
			checkTransitionTime: true,
		},
		{
			name: "latched failure from an older generation",
			reason: "observedGeneration is always the generation this status was computed for, or clients waiting on " +
				"observedGeneration==generation would hang",
			prev: func() crawlv1alpha1.ProxyStatus {
				s := *latched.DeepCopy()
				s.ObservedGeneration = statusGen - 1
				return s
			}(),
			obs:                 observation{latched: true},
			want:                latched,
			checkTransitionTime: true,
		},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			port := tc.port
			if port == 0 {
				port = 3128
			}
			prevCopy := *tc.prev.DeepCopy()

			got := computeStatus(tc.prev, tc.obs, port, statusGen, statusNow)

			var opts []cmp.Option
			if !tc.checkTransitionTime {
				opts = append(opts, cmpopts.IgnoreFields(metav1.Condition{}, "LastTransitionTime"))
			}
			if diff := cmp.Diff(tc.want, got, opts...); diff != "" {
				t.Errorf("computeStatus() (-want +got):\n%s\nwhy this matters: %s", diff, tc.reason)
			}
			if diff := cmp.Diff(prevCopy, tc.prev); diff != "" {
				t.Errorf("computeStatus() changed its input prev (-want +got):\n%s\nthe reconciler compares prev and the result to decide whether to patch", diff)
			}
		})
	}
}

// TestComputeStatusDoesNotAliasPrev checks that the result shares no memory
// with prev: the reconciler keeps the old status to diff against, and a
// shared Conditions slice or ReadyTime pointer would make the two equal.
func TestComputeStatusDoesNotAliasPrev(t *testing.T) {
	prev := readyProxyStatus()
	got := computeStatus(prev, observation{instance: &provider.Instance{ID: statusID, State: provider.StateRunning,
		Node: "pve1", Address: netip.MustParseAddr("198.51.100.7")}}, 3128, statusGen, statusNow)
	want := *prev.DeepCopy()

	got.Conditions[0].Message = "changed"
	got.ReadyTime.Time = statusNow.Add(time.Hour)

	if diff := cmp.Diff(want, prev); diff != "" {
		t.Errorf("changing computeStatus' result changed prev (-want +got):\n%s", diff)
	}
}

func TestIsLatched(t *testing.T) {
	failed := func(reason string, gen int64) crawlv1alpha1.ProxyStatus {
		return crawlv1alpha1.ProxyStatus{
			Phase: crawlv1alpha1.ProxyPhaseFailed, ObservedGeneration: gen,
			Conditions: []metav1.Condition{wantReadyCondAt(metav1.ConditionFalse, reason, "failed", gen, statusEarlier)},
		}
	}
	tests := []struct {
		name   string
		reason string
		status crawlv1alpha1.ProxyStatus
		gen    int64
		want   bool
	}{
		{
			name:   "permanent error of this generation",
			reason: "a permanent failure must stop provider calls until a human acts, or the operator hammers a broken API",
			status: failed(crawlv1alpha1.ReasonPermanentError, 3), gen: 3,
			want: true,
		},
		{
			name:   "permanent error of another generation",
			reason: "a new generation is a human acting: it lifts the latch",
			status: failed(crawlv1alpha1.ReasonPermanentError, 2), gen: 3,
			want: false,
		},
		{
			name: "invalid spec",
			reason: "InvalidSpec is re-evaluated on every reconcile, so fixing the providers configuration and " +
				"restarting the operator heals the Proxy without an annotation",
			status: failed(crawlv1alpha1.ReasonInvalidSpec, 3), gen: 3,
			want: false,
		},
		{
			name:   "credentials conflict",
			reason: "a conflicting Secret is re-checked on every reconcile, so deleting it is enough",
			status: failed(crawlv1alpha1.ReasonCredentialsConflict, 3), gen: 3,
			want: false,
		},
		{
			name:   "failed without a Ready condition",
			reason: "a hand-edited or truncated status must not latch (nor panic): without the reason there is no proof of a permanent error",
			status: crawlv1alpha1.ProxyStatus{Phase: crawlv1alpha1.ProxyPhaseFailed, ObservedGeneration: 3}, gen: 3,
			want: false,
		},
		{
			name:   "ready",
			reason: "a working Proxy must keep being reconciled",
			status: readyProxyStatus(), gen: readyProxyStatus().ObservedGeneration,
			want: false,
		},
		{
			name:   "permanent error reason but phase not Failed",
			reason: "only phase Failed latches; a Deleting Proxy whose condition still says PermanentError must go on deleting",
			status: func() crawlv1alpha1.ProxyStatus {
				s := failed(crawlv1alpha1.ReasonPermanentError, 3)
				s.Phase = crawlv1alpha1.ProxyPhaseDeleting
				return s
			}(),
			gen:  3,
			want: false,
		},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			if got := isLatched(tc.status, tc.gen); got != tc.want {
				t.Errorf("isLatched() = %v, want %v\nwhy this matters: %s", got, tc.want, tc.reason)
			}
		})
	}
}

func TestInProgressDuringReplacementStaysReplacing(t *testing.T) {
	now := time.Date(2026, 11, 30, 12, 0, 0, 0, time.UTC)
	prev := crawlv1alpha1.ProxyStatus{Phase: crawlv1alpha1.ProxyPhaseReplacing, Address: "198.51.100.7", URL: "http://198.51.100.7:3128"}
	err := provider.Annotate(provider.NewInProgress("waiting for the stop task", 5*time.Second), "lab", provider.OpDelete, "pve1/104")
	got := computeStatus(prev, observation{providerErr: err}, 3128, 3, now)
	c := apimeta.FindStatusCondition(got.Conditions, crawlv1alpha1.ConditionReady)
	if got.Phase != crawlv1alpha1.ProxyPhaseReplacing || c.Reason != crawlv1alpha1.ReasonReplacing || got.URL != "" {
		t.Errorf("a replacement in progress must show as Replacing without the old URL: phase %s, reason %s, url %q",
			got.Phase, c.Reason, got.URL)
	}
}

// TestProgressOnly: only a new message on a Ready condition that stays
// False for Provisioning or Replacing is progress; anything a user or a
// controller acts on is not.
func TestProgressOnly(t *testing.T) {
	provisioning := func(msg string) crawlv1alpha1.ProxyStatus {
		return crawlv1alpha1.ProxyStatus{
			Phase: crawlv1alpha1.ProxyPhaseProvisioning, Zone: "rack-a",
			Conditions: []metav1.Condition{wantReadyCondAt(metav1.ConditionFalse, crawlv1alpha1.ReasonProvisioning, msg, statusGen, statusEarlier)},
		}
	}
	with := func(s crawlv1alpha1.ProxyStatus, change func(*crawlv1alpha1.ProxyStatus)) crawlv1alpha1.ProxyStatus {
		s = *s.DeepCopy()
		change(&s)
		return s
	}
	before := provisioning("Creating the instance: cloning VM 150.")
	for _, c := range []struct {
		name, reason string
		before       crawlv1alpha1.ProxyStatus
		after        crawlv1alpha1.ProxyStatus
		want         bool
	}{
		{"the next step named", "the provider moved on; nothing else changed", before, provisioning("Creating the instance: uploaded the seed."), true},
		{"a replacement's next step", "the same for a successor being made", with(before, func(s *crawlv1alpha1.ProxyStatus) {
			s.Phase, s.Conditions[0].Reason = crawlv1alpha1.ProxyPhaseReplacing, crawlv1alpha1.ReasonReplacing
		}), with(before, func(s *crawlv1alpha1.ProxyStatus) {
			s.Phase, s.Conditions[0].Reason, s.Conditions[0].Message = crawlv1alpha1.ProxyPhaseReplacing, crawlv1alpha1.ReasonReplacing, "Replacing the instance: started."
		}), true},
		{"nothing changed", "there is nothing to write, progress or not", before, before, false},
		{"the instance's ID", "the ID must be in the status before the next step: it is how a restart finds the instance",
			before, with(provisioning("Instance pve1/150 is booting; waiting for its address."), func(s *crawlv1alpha1.ProxyStatus) { s.InstanceID = "pve1/150" }), false},
		{"Ready", "a user waits for it", before, readyProxyStatus(), false},
		{"another reason", "queued behind the entry's cap is news", before, with(before, func(s *crawlv1alpha1.ProxyStatus) {
			s.Conditions[0].Reason, s.Conditions[0].Message = crawlv1alpha1.ReasonCreateQueued, "waits its turn"
		}), false},
		{"a transient error", "an error is news, even while creating", before, with(before, func(s *crawlv1alpha1.ProxyStatus) {
			s.Conditions[0].Reason, s.Conditions[0].Message = crawlv1alpha1.ReasonTransientError, "Retrying after a transient provider error: timeout"
		}), false},
		{"another transient error", "a new error is news, not progress", with(before, func(s *crawlv1alpha1.ProxyStatus) {
			s.Conditions[0].Reason, s.Conditions[0].Message = crawlv1alpha1.ReasonTransientError, "Retrying after a transient provider error: timeout"
		}), with(before, func(s *crawlv1alpha1.ProxyStatus) {
			s.Conditions[0].Reason, s.Conditions[0].Message = crawlv1alpha1.ReasonTransientError, "Retrying after a transient provider error: 500"
		}), false},
		{"Ready became Unknown", "only a False Ready is a create in progress", before, with(before, func(s *crawlv1alpha1.ProxyStatus) {
			s.Conditions[0].Status, s.Conditions[0].Message = metav1.ConditionUnknown, "other"
		}), false},
		{"a new generation observed", "a spec change acknowledged is news", before, with(provisioning("Creating the instance: started."), func(s *crawlv1alpha1.ProxyStatus) {
			s.ObservedGeneration = statusGen + 1
		}), false},
		{"no Ready condition before", "the first status", crawlv1alpha1.ProxyStatus{}, before, false},
	} {
		t.Run(c.name, func(t *testing.T) {
			if got := progressOnly(c.before, c.after); got != c.want {
				t.Errorf("progressOnly = %v, want %v: %s", got, c.want, c.reason)
			}
		})
	}
}

// TestRoutineProbe: only a probe that passed as the one before it did,
// with the same egress address, is routine; whatever a user, a pool or the
// gateway acts on is not.
func TestRoutineProbe(t *testing.T) {
	at := func(d time.Duration) *metav1.Time { t := metav1.NewTime(statusEarlier.Add(d)); return &t }
	serving := func(status metav1.ConditionStatus, reason, msg string) crawlv1alpha1.ProxyStatus {
		s := readyProxyStatus()
		s.EgressIP, s.LastProbeTime, s.ProbeLatency = "198.51.100.7", at(0), &metav1.Duration{Duration: 12 * time.Millisecond}
		s.Conditions = append(s.Conditions, metav1.Condition{Type: crawlv1alpha1.ConditionServing, Status: status, Reason: reason,
			Message: msg, ObservedGeneration: statusGen, LastTransitionTime: metav1.NewTime(statusEarlier)})
		return s
	}
	passed := serving(metav1.ConditionTrue, crawlv1alpha1.ReasonProbePassed, "Probe through the proxy passed in 12ms; egress address 198.51.100.7.")
	with := func(s crawlv1alpha1.ProxyStatus, change func(*crawlv1alpha1.ProxyStatus)) crawlv1alpha1.ProxyStatus {
		s = *s.DeepCopy()
		change(&s)
		return s
	}
	again := with(passed, func(s *crawlv1alpha1.ProxyStatus) {
		s.LastProbeTime, s.ProbeLatency = at(30*time.Second), &metav1.Duration{Duration: 9 * time.Millisecond}
		s.Conditions[len(s.Conditions)-1].Message = "Probe through the proxy passed in 9ms; egress address 198.51.100.7."
	})
	for _, c := range []struct {
		name, reason  string
		before, after crawlv1alpha1.ProxyStatus
		want          bool
	}{
		{"another pass", "the time, the latency and the message naming it changed: news to no one", passed, again, true},
		{"nothing changed", "there is nothing to write", passed, passed, false},
		{"the first pass", "Serving becomes True: pools and the gateway publish the proxy",
			serving(metav1.ConditionUnknown, crawlv1alpha1.ReasonProbePending, "waiting for the first probe"), again, false},
		{"a failure", "a failed probe counts towards the threshold and unpublishes the proxy",
			passed, with(again, func(s *crawlv1alpha1.ProxyStatus) {
				s.ProbeFailures = 1
				s.Conditions[len(s.Conditions)-1].Status, s.Conditions[len(s.Conditions)-1].Reason = metav1.ConditionFalse, crawlv1alpha1.ReasonProbeFailing
			}), false},
		{"a pass after a failure", "Serving comes back", with(passed, func(s *crawlv1alpha1.ProxyStatus) {
			s.ProbeFailures = 1
			s.Conditions[len(s.Conditions)-1].Status, s.Conditions[len(s.Conditions)-1].Reason = metav1.ConditionFalse, crawlv1alpha1.ReasonProbeFailing
		}), again, false},
		{"a new egress address", "crawlers pick proxies by their egress address",
			passed, with(again, func(s *crawlv1alpha1.ProxyStatus) { s.EgressIP = "198.51.100.8" }), false},
		{"the address changed too", "a change besides the probe is written at once",
			passed, with(again, func(s *crawlv1alpha1.ProxyStatus) { s.Address = "198.51.100.9" }), false},
		{"no Serving condition before", "the first status", crawlv1alpha1.ProxyStatus{}, again, false},
	} {
		t.Run(c.name, func(t *testing.T) {
			if got := routineProbe(c.before, c.after); got != c.want {
				t.Errorf("routineProbe = %v, want %v: %s", got, c.want, c.reason)
			}
		})
	}
}
