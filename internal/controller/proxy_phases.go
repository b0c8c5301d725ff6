package controller

import (
	"context"
	"fmt"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/controller/controllerutil"

	crawlv1alpha1 "github.com/egress-proxies/egress-proxies-operator/api/v1alpha1"
	"github.com/egress-proxies/egress-proxies-operator/internal/config"
	"github.com/egress-proxies/egress-proxies-operator/internal/provider"
)

// Event reasons on Proxies.
const (
	eventCreated          = "InstanceCreated"
	eventReady            = "Ready"
	eventReplacing        = "Replacing"
	eventProviderError    = "ProviderError"
	eventProviderRefused  = "ProviderRefused"
	eventPermanentFailure = "PermanentFailure"
	eventInvalidSpec      = "InvalidSpec"
	eventRetry            = "RetryRequested"
	eventDeleteFailed     = "DeleteFailed"
	eventDeleted          = "InstanceDeleted"
	// eventReleasedWithoutCleanup: the finalizer was released by
	// annotation; the instance may be left.
	eventReleasedWithoutCleanup = "ReleasedWithoutCleanup"
	// eventForeignInstance: the recorded instance belongs to another Proxy
	// and was left alone on delete.
	eventForeignInstance = "ForeignInstance"
	eventReplacementLoop = crawlv1alpha1.ReasonReplacementLoop
)

// reconcileNormal drives a Proxy that is not being deleted: one provider
// mutation at most per call, then the caller patches the status.
func (r *ProxyReconciler) reconcileNormal(ctx context.Context, p *crawlv1alpha1.Proxy) (observation, error) {
	// The annotation is removed by Reconcile once the status is patched.
	_, retry := p.Annotations[crawlv1alpha1.AnnotationRetry]
	if retry {
		r.event(p, corev1.EventTypeNormal, eventRetry, "Retry", "Retrying as asked by the %s annotation", crawlv1alpha1.AnnotationRetry)
		// A person looked: replacements are counted afresh.
		p.Status.RecentReplacements, p.Status.ReplacementWindowStart, p.Status.LastReplacementTime = 0, nil, nil
	}
	obs, err := r.reconcileSteps(ctx, p, retry)
	obs.retried = retry
	return obs, err
}

// reconcileSteps is reconcileNormal's body; retry says the retry annotation
// lifts a latched failure.
func (r *ProxyReconciler) reconcileSteps(ctx context.Context, p *crawlv1alpha1.Proxy, retry bool) (observation, error) {
	var obs observation

	if !controllerutil.ContainsFinalizer(p, Finalizer) {
		patch := client.MergeFrom(p.DeepCopy())
		controllerutil.AddFinalizer(p, Finalizer)
		if err := r.Client.Patch(ctx, p, patch); err != nil {
			return obs, fmt.Errorf("adding finalizer: %w", err)
		}
		r.written.record(client.ObjectKeyFromObject(p), p.ResourceVersion)
	}

	placement, specErr := r.Config.Resolve(p.Spec.Provider, p.Spec.Zone, p.Spec.MachineType, p.Spec.Image)
	if specErr == nil {
		specErr = checkOpenSources(p)
	}
	entry := r.Config.Entry(p.Spec.Provider)
	if specErr == nil {
		// Extra user-data runs as root on the guest: only an entry whose
		// administrator allowed it takes it (docs/security.md).
		specErr = entry.CheckExtraUserData(p.Spec.ExtraUserData)
	}
	switch {
	case specErr != nil && (entry == nil || p.Status.InstanceID == ""):
		obs.specErr = specErr
		if p.Status.Phase != crawlv1alpha1.ProxyPhaseFailed {
			r.event(p, corev1.EventTypeWarning, eventInvalidSpec, "Resolve", "%v", specErr)
		}
		return obs, nil
	case specErr != nil:
		// The catalogue lost a zone, size or image after this instance was
		// made. The instance still serves and is still watched; only a
		// replacement would need the spec to resolve.
		if p.Status.Phase != crawlv1alpha1.ProxyPhaseFailed {
			r.event(p, corev1.EventTypeWarning, eventInvalidSpec, "Resolve",
				"%v; the running instance is kept, but could not be replaced if it died", specErr)
		}
	default:
		p.Status.Zone = placement.Zone
	}
	prov, ok := r.Providers[entry.Name]
	if !ok {
		return obs, fmt.Errorf("provider entry %q is configured but has no provider (a bug in the binary's type registry)", entry.Name)
	}

	if !retry && isLatched(p.Status, p.Generation) {
		obs.latched = true
		// The status read from the cache may be older than the latest
		// write; a late look costs no provider call.
		obs.wait = waitResync
		return obs, nil
	}

	// The credentials Secret is read where it is used: to render a create's
	// user-data (once per create, which takes several calls), and once the
	// instance runs, to write the URL and probe, again at most once per
	// resync interval (readyCreds). The polls while an instance boots read
	// nothing from the API server.
	if p.Status.InstanceID == "" {
		if r.ownershipHolds(ctx, p, entry.Name, prov, &obs) {
			return obs, nil
		}
		key := client.ObjectKeyFromObject(p)
		creds, ok := r.createCreds.get(key, p.UID)
		if !ok {
			var done bool
			var err error
			if creds, done, err = r.credentialsOrConflict(ctx, p, &obs); done {
				return obs, err
			}
			r.createCreds.put(key, p.UID, creds)
		}
		return r.create(ctx, p, prov, placement, creds)
	}

	inst, err := prov.Get(ctx, provider.ID(p.Status.InstanceID))
	switch {
	case provider.IsNotFound(err):
		// After a key loss every instance looks gone: replacing them would
		// make a second fleet beside the first.
		if r.ownershipHolds(ctx, p, entry.Name, prov, &obs) {
			return obs, nil
		}
		return r.replace(ctx, p, prov, "vanished", "the instance no longer exists on the provider")
	case err != nil:
		if provider.IsRefused(err) {
			r.refusals.record(entry.Name, err.Error(), r.Now())
		}
		obs.providerErr = err
		r.providerEvent(p, err)
		return obs, nil
	case inst.OwnerUID != "" && inst.OwnerUID != string(p.UID):
		// Never adopt an instance recorded for someone else: a status
		// copied from another object must not hand us its VM.
		obs.providerErr = provider.NewPermanent(
			fmt.Errorf("instance %s belongs to owner %s, not to this Proxy", inst.ID, inst.OwnerUID),
			"recreate the Proxy; the operator will not adopt another Proxy's instance")
		r.providerEvent(p, obs.providerErr)
		return obs, nil
	case inst.State == provider.StateStopped:
		return r.replace(ctx, p, prov, "stopped", "the instance stopped")
	}
	if inst.State == provider.StateRunning && inst.Address.IsValid() {
		key, address := client.ObjectKeyFromObject(p), inst.Address.String()
		creds, held := r.readyCreds.get(key, p.UID, p.Generation, address, r.Now(), r.ResyncInterval)
		if !held {
			var done bool
			if creds, done, err = r.credentialsOrConflict(ctx, p, &obs); done {
				r.readyCreds.Forget(key)
				return obs, err
			}
			if creds != nil {
				if err := r.syncCredentialsURL(ctx, p, creds, address); err != nil {
					return obs, err
				}
			}
			r.readyCreds.put(key, p.UID, p.Generation, address, creds, r.Now())
		} else if creds != nil {
			// As ensureCredentials would have recorded it.
			p.Status.CredentialsSecretName = creds.secretName
		}
		obs.instance = &inst
		// Announced by Reconcile once the status patch lands, so that a
		// reconcile working from a stale copy cannot announce it twice.
		obs.becameReady = p.Status.ReadyTime == nil
		obs.wait = waitResync
		if due, next := r.probeDue(key, p.Status); due {
			obs.probe = r.runProbe(ctx, p, entry, creds, address)
			obs.nextProbe = r.ProbeInterval
		} else if r.Prober != nil {
			obs.nextProbe = next
		}
		return obs, nil
	}
	obs.instance = &inst
	obs.wait = waitPoll
	return obs, nil
}

// ownershipHolds reports whether the entry's key check holds this
// reconcile's create (or its taking the instance for gone), and fills obs
// with why. The first time since the start, the entry is listed here,
// unless garbage collection did it first; while another reconcile lists it,
// this one waits, changing nothing. A failed listing is the reconcile's
// provider error.
func (r *ProxyReconciler) ownershipHolds(ctx context.Context, p *crawlv1alpha1.Proxy, entry string, prov provider.Provider, obs *observation) bool {
	l, ok := provider.AsUnverifiedLister(prov)
	if !ok || r.ownership == nil {
		return false
	}
	c := r.ownership.get(entry)
	if c.verdict() == keyUnchecked {
		if !r.ownership.begin(entry) {
			obs.ownershipPending, obs.wait = true, waitPoll
			return true
		}
		list, err := prov.ListByTag(ctx)
		if err == nil {
			r.ownership.observe(entry, len(list), l.Unverified())
		}
		r.ownership.end(entry)
		if err != nil {
			if provider.IsRefused(err) {
				r.refusals.record(entry, err.Error(), r.Now())
			}
			obs.providerErr = err
			r.providerEvent(p, err)
			return true
		}
		c = r.ownership.get(entry)
	}
	if c.verdict().creates() {
		return false
	}
	obs.ownershipHold, obs.wait = ownershipHoldMessage(entry), waitPoll
	if c := readyCondition(p); c == nil || c.Reason != crawlv1alpha1.ReasonOwnershipKeyMismatch {
		r.event(p, corev1.EventTypeWarning, crawlv1alpha1.ReasonOwnershipKeyMismatch, "Create", "%s", obs.ownershipHold)
	}
	return true
}

// credentialsOrConflict returns the Proxy's credentials (nil with auth
// None). done says the reconcile ends here: with err, or with a conflict
// recorded in obs (and announced once by an event).
func (r *ProxyReconciler) credentialsOrConflict(ctx context.Context, p *crawlv1alpha1.Proxy, obs *observation) (*credentials, bool, error) {
	creds, conflict, err := r.ensureCredentials(ctx, p)
	if err != nil {
		return nil, true, err
	}
	if conflict != "" {
		obs.credentialsConflict = conflict
		if c := readyCondition(p); c == nil || c.Reason != crawlv1alpha1.ReasonCredentialsConflict {
			r.event(p, corev1.EventTypeWarning, crawlv1alpha1.ReasonCredentialsConflict, "Credentials", "%s", conflict)
		}
		return nil, true, nil
	}
	return creds, false, nil
}

// create asks the provider for the instance and records its ID. A crash
// between the provider's work and the status patch is harmless: the next
// reconcile sends the same Request, and Create is idempotent.
func (r *ProxyReconciler) create(ctx context.Context, p *crawlv1alpha1.Proxy, prov provider.Provider, pl config.Placement, creds *credentials) (observation, error) {
	var obs observation
	if current, err := r.isCurrent(ctx, p); err != nil || !current {
		obs.wait = waitCache
		return obs, err
	}
	switch wait, loop := r.Replacement.beforeCreate(p.Status, r.Now()); {
	case loop:
		pol := r.Replacement.withDefaults()
		obs.replacementLoop = fmt.Sprintf("The instance was replaced %d times since %s (at most %d in %s are allowed), so no successor is created",
			p.Status.RecentReplacements, p.Status.ReplacementWindowStart.UTC().Format(time.RFC3339), pol.Limit, pol.Window)
		if p.Status.Phase != crawlv1alpha1.ProxyPhaseFailed {
			r.event(p, corev1.EventTypeWarning, eventReplacementLoop, "Replace", "%s", obs.replacementLoop)
		}
		return obs, nil
	case wait > 0:
		obs.replacementWait, obs.wait = wait, waitReplacement
		return obs, nil
	}
	if limit := pl.Entry.CreateLimit(); !r.slots.acquire(pl.Entry.Name, client.ObjectKeyFromObject(p), limit) {
		obs.createQueued, obs.wait = limit, waitSlot
		return obs, nil
	}
	req, err := buildRequest(p, pl, creds)
	if err != nil {
		// The spec passed the API server's validation, so this is a bug or
		// an input the renderer cannot take; a human must look.
		obs.providerErr = provider.NewPermanent(fmt.Errorf("rendering cloud-init: %w", err), "recreate the Proxy with a valid spec")
		r.providerEvent(p, obs.providerErr)
		return obs, nil
	}
	id, err := prov.Create(ctx, req)
	err = latchRefused(err)
	if err != nil {
		obs.providerErr = err
		r.providerEvent(p, err) // silent for InProgress
		return obs, nil
	}
	now := metav1.NewTime(r.Now())
	p.Status.InstanceID = string(id)
	p.Status.InstanceName = req.Name
	p.Status.InstanceCreationTime = &now
	p.Status.EgressPolicyHash = egressPolicyHash(pl.Entry.EgressPolicy)
	p.Status.ReadyTime = nil
	ctrl.LoggerFrom(ctx).Info("instance created", "instanceID", id, "instanceName", req.Name)
	r.event(p, corev1.EventTypeNormal, eventCreated, "Create", "Created instance %s (%s) on provider %s", id, req.Name, pl.Entry.Name)
	obs.wait = waitPoll
	return obs, nil
}

// replace removes the old instance and clears the record, so that the next
// reconcile creates a successor with the next instance name. The old
// instance is deleted before the successor is created, so that there is
// never more than one. A vanished instance is deleted too: its VM is gone,
// but what it left may not be (a seed ISO with the proxy's password on
// shared storage), and Delete of a gone instance removes that and succeeds.
func (r *ProxyReconciler) replace(ctx context.Context, p *crawlv1alpha1.Proxy, prov provider.Provider, reason, why string) (observation, error) {
	var obs observation
	if current, err := r.isCurrent(ctx, p); err != nil || !current {
		obs.wait = waitCache
		return obs, err
	}
	if err := latchRefused(prov.Delete(ctx, provider.ID(p.Status.InstanceID))); err != nil {
		obs.providerErr = err
		p.Status.Phase = crawlv1alpha1.ProxyPhaseReplacing
		r.providerEvent(p, err)
		return obs, nil
	}
	now := r.Now()
	r.Replacement.recordReplacement(&p.Status, now)
	next := "no successor is created: too many replacements"
	if wait, loop := r.Replacement.beforeCreate(p.Status, now); !loop {
		next = fmt.Sprintf("the successor is created in %s", wait)
	}
	ctrl.LoggerFrom(ctx).Info("replacing instance", "instanceID", p.Status.InstanceID, "reason", reason, "recentReplacements", p.Status.RecentReplacements)
	r.event(p, corev1.EventTypeWarning, eventReplacing, "Replace", "Replacing instance %s: %s; replacement %d since %s, %s",
		p.Status.InstanceID, why, p.Status.RecentReplacements, p.Status.ReplacementWindowStart.UTC().Format(time.RFC3339), next)
	if r.Metrics != nil {
		r.Metrics.Replacements.WithLabelValues(p.Spec.Provider, reason).Inc()
	}
	obs.replacing = why
	p.Status.InstanceID = ""
	p.Status.InstanceName = ""
	p.Status.InstanceCreationTime = nil
	p.Status.Replacements++
	obs.wait = waitNextStep
	return obs, nil
}

// latchRefused turns a refusal (401, 403) of a mutation into a Permanent
// error: unlike a refused read, a create or a replacement that the API
// refuses needs a person to grant a right, and retrying it blindly would
// only hammer the API. The provider's advice is kept.
func latchRefused(err error) error {
	if !provider.IsRefused(err) {
		return err
	}
	return provider.NewPermanent(err, provider.ActionOf(err))
}

// providerEvent emits a warning event for a failed provider call, once per
// transition into the failure (not on every retry).
func (r *ProxyReconciler) providerEvent(p *crawlv1alpha1.Proxy, err error) {
	switch {
	case provider.IsInProgress(err):
	case provider.IsPermanent(err):
		r.event(p, corev1.EventTypeWarning, eventPermanentFailure, "Provision", "%v", err)
	case provider.IsRefused(err):
		if c := readyCondition(p); c == nil || c.Reason != crawlv1alpha1.ReasonProviderRefused {
			r.event(p, corev1.EventTypeWarning, eventProviderRefused, "Observe", "%v", err)
		}
	default:
		if c := readyCondition(p); c == nil || c.Reason != crawlv1alpha1.ReasonTransientError {
			r.event(p, corev1.EventTypeWarning, eventProviderError, "Provision", "%v", err)
		}
	}
}

func readyCondition(p *crawlv1alpha1.Proxy) *metav1.Condition {
	for i := range p.Status.Conditions {
		if p.Status.Conditions[i].Type == crawlv1alpha1.ConditionReady {
			return &p.Status.Conditions[i]
		}
	}
	return nil
}
