package controller

import (
	"fmt"
	"time"

	"k8s.io/apimachinery/pkg/api/equality"
	apimeta "k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	crawlv1alpha1 "github.com/egress-proxies/egress-proxies-operator/api/v1alpha1"
	"github.com/egress-proxies/egress-proxies-operator/api/v1alpha1/published"
	"github.com/egress-proxies/egress-proxies-operator/internal/provider"
)

// observation is what one reconcile of a Proxy saw. The reconciler fills it
// in; computeStatus turns it into phase, conditions, address and URL. Keeping
// that step pure keeps the rules in one table-tested place.
type observation struct {
	// deleting: the Proxy has a deletion timestamp.
	deleting bool
	// specErr: the spec does not resolve against the configuration.
	specErr error
	// credentialsConflict: the credentials Secret cannot be used; the text
	// says why.
	credentialsConflict string
	// latched: the Proxy stays Failed from an earlier reconcile.
	latched bool
	// providerErr: the provider call of this reconcile failed (or is in
	// progress); nil otherwise.
	providerErr error
	// instance: what Get reported, when it was called and succeeded.
	instance *provider.Instance
	// replacing: the instance stopped or vanished; the text says which.
	replacing string
	// becameReady: the instance runs with an address and the status did not
	// say so yet.
	becameReady bool
	// retried: the retry annotation was present and acted on; Reconcile
	// removes it after patching the status.
	retried bool
	// probing: the operator probes proxies; without it Serving follows
	// Ready (reason ProbeDisabled).
	probing bool
	// probeThreshold is the number of failed probes in a row after which
	// Serving says ProbeFailed.
	probeThreshold int32
	// probe: the probe of this reconcile, when one was due.
	probe *probeOutcome
	// replacementLoop: too many replacements in the window; the text says
	// how many and since when. No successor was created.
	replacementLoop string
	// replacementWait: the successor's create waits this much longer.
	replacementWait time.Duration
	// createQueued: the entry's cap on concurrent creates (this value) is
	// reached; the create waits.
	createQueued int
	// ownershipHold: the entry's instances do not verify with the current
	// key (a lost key); the text says so. Nothing was created or replaced.
	ownershipHold string
	// ownershipPending: another reconcile lists the entry for its first
	// key check; nothing was tried, and the status stays as it was.
	ownershipPending bool
	// wait: what the reconcile waits for when the provider call did not
	// fail; decideRequeue turns it into a delay.
	wait waitFor
	// nextProbe: when waiting on a Ready instance, the next probe is due
	// this soon (zero: no probe scheduled); the look comes no later.
	nextProbe time.Duration
	// policy is the entry's current egress policy, for the
	// EgressPolicyCurrent condition.
	policy entryPolicy
}

// computeStatus derives the Proxy's phase, Ready condition, node, address and
// URL from prev (the status with this reconcile's records already applied:
// instance ID, replacements, ...) and obs. It does not change prev.
func computeStatus(prev crawlv1alpha1.ProxyStatus, obs observation, port int32, generation int64, now time.Time) crawlv1alpha1.ProxyStatus {
	s := *prev.DeepCopy()
	s.ObservedGeneration = generation
	set := func(phase crawlv1alpha1.ProxyPhase, status metav1.ConditionStatus, reason, msg string) {
		s.Phase = phase
		apimeta.SetStatusCondition(&s.Conditions, metav1.Condition{
			Type: crawlv1alpha1.ConditionReady, Status: status, Reason: reason, Message: truncateMessage(msg),
			ObservedGeneration: generation, LastTransitionTime: metav1.NewTime(now),
		})
	}
	clearAddress := func() { s.Address, s.URL, s.ReadyTime = "", "", nil }
	// notReadyPhase is the phase to show while waiting on something that is
	// not a failure.
	notReadyPhase := crawlv1alpha1.ProxyPhasePending
	if s.InstanceID != "" {
		notReadyPhase = crawlv1alpha1.ProxyPhaseProvisioning
	}

	switch {
	case obs.deleting:
		if obs.providerErr != nil && !provider.IsInProgress(obs.providerErr) {
			set(crawlv1alpha1.ProxyPhaseDeleting, metav1.ConditionFalse, crawlv1alpha1.ReasonDeleteFailed,
				fmt.Sprintf("Deleting the instance failed; retrying: %v", obs.providerErr))
		} else {
			set(crawlv1alpha1.ProxyPhaseDeleting, metav1.ConditionFalse, crawlv1alpha1.ReasonDeleting, "Deleting the instance.")
		}
	case obs.specErr != nil:
		clearAddress()
		set(crawlv1alpha1.ProxyPhaseFailed, metav1.ConditionFalse, crawlv1alpha1.ReasonInvalidSpec,
			fmt.Sprintf("%v. Recreate the Proxy with a valid value, or add it to the providers configuration and restart the operator.", obs.specErr))
	case obs.credentialsConflict != "":
		clearAddress()
		set(crawlv1alpha1.ProxyPhaseFailed, metav1.ConditionFalse, crawlv1alpha1.ReasonCredentialsConflict, obs.credentialsConflict)
	case obs.latched, obs.ownershipPending:
		// Keep what the status said; nothing was tried.
	case obs.replacementLoop != "":
		clearAddress()
		s.Node = ""
		set(crawlv1alpha1.ProxyPhaseFailed, metav1.ConditionFalse, crawlv1alpha1.ReasonReplacementLoop,
			obs.replacementLoop+". Find out what stops the instances (events, the hypervisor's logs), then set the annotation "+
				crawlv1alpha1.AnnotationRetry+" on the Proxy to retry.")
	case obs.replacementWait > 0:
		set(crawlv1alpha1.ProxyPhaseReplacing, metav1.ConditionFalse, crawlv1alpha1.ReasonReplacing,
			fmt.Sprintf("Waiting %s before creating the replacement (replacement %d in this window; each waits twice as long as the one before).",
				obs.replacementWait.Round(time.Second), s.RecentReplacements))
	case obs.createQueued > 0:
		phase := crawlv1alpha1.ProxyPhasePending
		if s.Phase == crawlv1alpha1.ProxyPhaseReplacing {
			phase = crawlv1alpha1.ProxyPhaseReplacing
		}
		set(phase, metav1.ConditionFalse, crawlv1alpha1.ReasonCreateQueued,
			fmt.Sprintf("The provider entry already creates %d instances at once (maxConcurrentCreates); this create waits its turn.", obs.createQueued))
	case obs.ownershipHold != "":
		// A key loss says nothing of the instance itself, which most likely
		// still serves: a Ready Proxy keeps its phase and address, as with
		// a refused read.
		if s.Phase == crawlv1alpha1.ProxyPhaseReady {
			set(crawlv1alpha1.ProxyPhaseReady, metav1.ConditionUnknown, crawlv1alpha1.ReasonOwnershipKeyMismatch, obs.ownershipHold)
			break
		}
		phase := notReadyPhase
		if s.Phase == crawlv1alpha1.ProxyPhaseReplacing {
			phase = crawlv1alpha1.ProxyPhaseReplacing
		}
		set(phase, metav1.ConditionFalse, crawlv1alpha1.ReasonOwnershipKeyMismatch, obs.ownershipHold)
	case provider.IsPermanent(obs.providerErr):
		clearAddress()
		msg := fmt.Sprintf("%v.", obs.providerErr)
		if a := provider.ActionOf(obs.providerErr); a != "" {
			msg += " To fix: " + a + "."
		}
		msg += " Then set the annotation " + crawlv1alpha1.AnnotationRetry + " on the Proxy to retry."
		set(crawlv1alpha1.ProxyPhaseFailed, metav1.ConditionFalse, crawlv1alpha1.ReasonPermanentError, msg)
	case provider.IsInProgress(obs.providerErr) && s.Phase == crawlv1alpha1.ProxyPhaseReplacing:
		// The old instance is still being removed, or its successor made.
		clearAddress()
		set(crawlv1alpha1.ProxyPhaseReplacing, metav1.ConditionFalse, crawlv1alpha1.ReasonReplacing,
			fmt.Sprintf("Replacing the instance: %v.", obs.providerErr))
	case provider.IsInProgress(obs.providerErr):
		set(crawlv1alpha1.ProxyPhaseProvisioning, metav1.ConditionFalse, crawlv1alpha1.ReasonProvisioning,
			fmt.Sprintf("Creating the instance: %v.", obs.providerErr))
	case provider.IsRefused(obs.providerErr):
		// The API refused a read: a token being rotated, an ACL being
		// edited. It says nothing about the instance, so everything known
		// of it stays; only the condition says the view is stale.
		msg := fmt.Sprintf("The provider refused to read the instance; the last known status is kept and the read is retried: %v.", obs.providerErr)
		if a := provider.ActionOf(obs.providerErr); a != "" {
			msg += " If this lasts: " + a + "."
		}
		if s.Phase == crawlv1alpha1.ProxyPhaseReady {
			set(crawlv1alpha1.ProxyPhaseReady, metav1.ConditionUnknown, crawlv1alpha1.ReasonProviderRefused, msg)
			break
		}
		phase := notReadyPhase
		if s.Phase == crawlv1alpha1.ProxyPhaseReplacing {
			phase = crawlv1alpha1.ProxyPhaseReplacing
		}
		set(phase, metav1.ConditionFalse, crawlv1alpha1.ReasonProviderRefused, msg)
	case obs.providerErr != nil:
		// A transient failure says nothing about the instance itself: a Ready
		// proxy most likely still serves, so its phase stays and Ready becomes
		// Unknown; otherwise Ready is False with the error.
		msg := fmt.Sprintf("Retrying after a transient provider error: %v", obs.providerErr)
		if s.Phase == crawlv1alpha1.ProxyPhaseReady {
			set(crawlv1alpha1.ProxyPhaseReady, metav1.ConditionUnknown, crawlv1alpha1.ReasonTransientError, msg)
			break
		}
		phase := notReadyPhase
		if s.Phase == crawlv1alpha1.ProxyPhaseReplacing {
			phase = crawlv1alpha1.ProxyPhaseReplacing
		}
		set(phase, metav1.ConditionFalse, crawlv1alpha1.ReasonTransientError, msg)
	case obs.replacing != "":
		clearAddress()
		s.Node = ""
		set(crawlv1alpha1.ProxyPhaseReplacing, metav1.ConditionFalse, crawlv1alpha1.ReasonReplacing,
			fmt.Sprintf("Replacing the instance: %s.", obs.replacing))
	case obs.instance != nil && obs.instance.State == provider.StateRunning && obs.instance.Address.IsValid():
		in := obs.instance
		s.Node = in.Node
		s.Address = in.Address.String()
		s.URL = published.ProxyURL(s.Address, port, nil)
		if s.ReadyTime == nil {
			t := metav1.NewTime(now)
			s.ReadyTime = &t
		}
		set(crawlv1alpha1.ProxyPhaseReady, metav1.ConditionTrue, crawlv1alpha1.ReasonInstanceRunning,
			fmt.Sprintf("Instance %s runs on %s and serves at %s.", s.InstanceID, in.Node, s.URL))
	case obs.instance != nil:
		s.Node = obs.instance.Node
		clearAddress()
		msg := fmt.Sprintf("Instance %s is booting; waiting for its address.", s.InstanceID)
		if obs.instance.State == provider.StateProvisioning {
			msg = fmt.Sprintf("Instance %s is being created.", s.InstanceID)
		}
		set(crawlv1alpha1.ProxyPhaseProvisioning, metav1.ConditionFalse, crawlv1alpha1.ReasonProvisioning, msg)
	case s.InstanceID != "":
		set(crawlv1alpha1.ProxyPhaseProvisioning, metav1.ConditionFalse, crawlv1alpha1.ReasonProvisioning,
			fmt.Sprintf("Instance %s was created; waiting for it to run.", s.InstanceID))
	default:
		phase, reason, msg := crawlv1alpha1.ProxyPhasePending, crawlv1alpha1.ReasonPending, "Waiting to create the instance."
		if s.Phase == crawlv1alpha1.ProxyPhaseReplacing {
			phase, reason, msg = crawlv1alpha1.ProxyPhaseReplacing, crawlv1alpha1.ReasonReplacing, "Creating the replacement instance."
		}
		set(phase, metav1.ConditionFalse, reason, msg)
	}
	return s
}

// computeProxyStatus is the whole status of one reconcile: the phase and
// Ready condition (computeStatus), then the Serving condition and probe
// fields, which depend on them, and the EgressPolicyCurrent condition.
func computeProxyStatus(prev crawlv1alpha1.ProxyStatus, obs observation, port int32, generation int64, now time.Time) crawlv1alpha1.ProxyStatus {
	s := computeStatus(prev, obs, port, generation, now)
	computeServing(&s, obs, generation, now)
	computePolicyCurrent(&s, obs, generation, now)
	return s
}

// computeServing sets the Serving condition and the probe's fields: only a
// proxy in phase Ready is probed; a probe of this reconcile updates them; a
// Ready proxy not probed this time keeps what the last probe said.
func computeServing(s *crawlv1alpha1.ProxyStatus, obs observation, generation int64, now time.Time) {
	set := func(status metav1.ConditionStatus, reason, msg string) {
		apimeta.SetStatusCondition(&s.Conditions, metav1.Condition{
			Type: crawlv1alpha1.ConditionServing, Status: status, Reason: reason, Message: msg,
			ObservedGeneration: generation, LastTransitionTime: metav1.NewTime(now),
		})
	}
	ready := apimeta.FindStatusCondition(s.Conditions, crawlv1alpha1.ConditionReady)
	switch {
	case s.Phase != crawlv1alpha1.ProxyPhaseReady || ready == nil:
		// The probe's fields describe an instance that no longer serves;
		// without lastProbeTime, the next instance is due for a probe as
		// soon as it runs (probeDue).
		s.EgressIP, s.ProbeFailures, s.ProbeLatency, s.LastProbeTime = "", 0, nil, nil
		set(metav1.ConditionFalse, crawlv1alpha1.ReasonNotReady, "The proxy is not Ready.")
	case !obs.probing:
		if ready.Status == metav1.ConditionTrue {
			set(metav1.ConditionTrue, crawlv1alpha1.ReasonProbeDisabled, "The operator runs without probes; Serving follows Ready.")
		}
	case obs.probe == nil:
		if c := apimeta.FindStatusCondition(s.Conditions, crawlv1alpha1.ConditionServing); c == nil || c.Reason == crawlv1alpha1.ReasonNotReady || c.Reason == crawlv1alpha1.ReasonProbeDisabled {
			set(metav1.ConditionUnknown, crawlv1alpha1.ReasonProbePending, "The proxy is Ready; waiting for the first probe through it.")
		}
	case obs.probe.err == nil:
		t := metav1.NewTime(now)
		s.LastProbeTime, s.ProbeFailures = &t, 0
		s.ProbeLatency = &metav1.Duration{Duration: obs.probe.result.Latency}
		s.EgressIP = ""
		if obs.probe.result.EgressIP.IsValid() {
			s.EgressIP = obs.probe.result.EgressIP.String()
		}
		msg := fmt.Sprintf("Probe through the proxy passed in %s.", obs.probe.result.Latency.Round(time.Millisecond))
		if s.EgressIP != "" {
			msg = fmt.Sprintf("Probe through the proxy passed in %s; egress address %s.", obs.probe.result.Latency.Round(time.Millisecond), s.EgressIP)
		}
		set(metav1.ConditionTrue, crawlv1alpha1.ReasonProbePassed, msg)
	default:
		t := metav1.NewTime(now)
		s.LastProbeTime = &t
		s.ProbeFailures++
		reason := crawlv1alpha1.ReasonProbeFailing
		if s.ProbeFailures >= obs.probeThreshold {
			reason = crawlv1alpha1.ReasonProbeFailed
		}
		set(metav1.ConditionFalse, reason, fmt.Sprintf("Probe through the proxy failed %d time(s) in a row: %v.", s.ProbeFailures, obs.probe.err))
	}
}

// isLatched reports whether a Proxy's status says it failed in a way that
// only a human (a new generation or the retry annotation) can clear.
func isLatched(s crawlv1alpha1.ProxyStatus, generation int64) bool {
	if s.Phase != crawlv1alpha1.ProxyPhaseFailed || s.ObservedGeneration != generation {
		return false
	}
	c := apimeta.FindStatusCondition(s.Conditions, crawlv1alpha1.ConditionReady)
	return c != nil && (c.Reason == crawlv1alpha1.ReasonPermanentError || c.Reason == crawlv1alpha1.ReasonReplacementLoop)
}

// routineProbe reports whether after differs from before only by a probe
// that passed as the one before it did, with the same egress address: its
// time, its latency and the Serving message that names the latency. Such a
// probe is news to no one, and the reconciler writes it at most once per
// routineProbeEvery probe intervals (statusWrites): at the default 30 s, a
// status write per Ready proxy every 5 minutes instead of every 30 s, 33
// writes a second fewer at 1000 proxies. A failed probe, a changed egress
// address or any change besides is written at once.
func routineProbe(before, after crawlv1alpha1.ProxyStatus) bool {
	b, a := apimeta.FindStatusCondition(before.Conditions, crawlv1alpha1.ConditionServing),
		apimeta.FindStatusCondition(after.Conditions, crawlv1alpha1.ConditionServing)
	if b == nil || a == nil || b.Status != metav1.ConditionTrue || b.Reason != crawlv1alpha1.ReasonProbePassed ||
		a.Status != metav1.ConditionTrue || a.Reason != crawlv1alpha1.ReasonProbePassed ||
		after.LastProbeTime.Equal(before.LastProbeTime) {
		return false
	}
	same := *after.DeepCopy()
	same.LastProbeTime, same.ProbeLatency = before.LastProbeTime.DeepCopy(), before.ProbeLatency.DeepCopy()
	apimeta.FindStatusCondition(same.Conditions, crawlv1alpha1.ConditionServing).Message = b.Message
	return equality.Semantic.DeepEqual(before, same)
}

// progressOnly reports whether after differs from before only in the
// message of a Ready condition that stays False for the same reason, a
// create or replacement in progress: the provider named its next step
// ("cloned VM 150", "uploaded the seed"). Such a change is progress, not
// news a user acts on, and the reconciler writes it at most once per
// progressEvery (statusWrites), which spares the API server a status write
// per create step. A change of phase, reason, address, instance or any
// other field is never progress only.
func progressOnly(before, after crawlv1alpha1.ProxyStatus) bool {
	b, a := apimeta.FindStatusCondition(before.Conditions, crawlv1alpha1.ConditionReady),
		apimeta.FindStatusCondition(after.Conditions, crawlv1alpha1.ConditionReady)
	if b == nil || a == nil || a.Message == b.Message || a.Status != metav1.ConditionFalse ||
		(a.Reason != crawlv1alpha1.ReasonProvisioning && a.Reason != crawlv1alpha1.ReasonReplacing) {
		return false
	}
	same := *after.DeepCopy()
	apimeta.FindStatusCondition(same.Conditions, crawlv1alpha1.ConditionReady).Message = b.Message
	return equality.Semantic.DeepEqual(before, same)
}
