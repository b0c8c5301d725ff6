package controller

import (
	"fmt"
	"strings"
	"sync"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/tools/events"

	crawlv1alpha1 "github.com/egress-proxies/egress-proxies-operator/api/v1alpha1"
	"github.com/egress-proxies/egress-proxies-operator/internal/metrics"
	"github.com/egress-proxies/egress-proxies-operator/internal/provider"
)

// keyCheck is what the latest listing of one entry said of its instances'
// marks (provider.UnverifiedLister), and what the administrator said of it.
type keyCheck struct {
	// checked: a listing of the entry was read since the operator started.
	checked bool
	// verified is how many instances verify with the current key.
	verified int
	// unverified are the instances whose mark names this installation and
	// whose signature does not verify.
	unverified []provider.Instance
	// afresh: the entry's ProviderHealth carries AnnotationStartAfresh
	// naming the current key.
	afresh bool
}

// keyVerdict is what a keyCheck means for creating on the entry.
type keyVerdict int

const (
	// keyUnchecked: not listed since the start; creating waits for a
	// listing, since a key loss shows only there.
	keyUnchecked keyVerdict = iota
	// keyVerified: the entry's instances verify (or none is this
	// installation's): create.
	keyVerified
	// keyMismatch: instances of this installation, none verifying: a lost
	// or replaced key. Creating waits for a person.
	keyMismatch
	// keyAfresh: a mismatch the administrator chose to start afresh from.
	keyAfresh
)

// verdict decides. Instances that verify beside unverified ones mean the
// key is the fleet's: the others are copied or forged marks, or left from
// an earlier key, and never hold up an entry whose fleet is recognised.
func (c keyCheck) verdict() keyVerdict {
	switch {
	case !c.checked:
		return keyUnchecked
	case len(c.unverified) == 0 || c.verified > 0:
		return keyVerified
	case c.afresh:
		return keyAfresh
	default:
		return keyMismatch
	}
}

// creates says whether the verdict lets the entry create.
func (v keyVerdict) creates() bool { return v == keyVerified || v == keyAfresh }

// ownershipGate holds, per provider entry, the latest keyCheck: garbage
// collection and the Proxy reconciler record the listings they read, the
// health reporter records the administrator's annotation and shows the
// verdict, and the Proxy reconciler creates (or takes an instance for gone)
// only where it allows. It is safe for concurrent use; a nil gate allows
// everything.
type ownershipGate struct {
	// recorder emits an event on the entry's ProviderHealth when it turns
	// to a mismatch; nil emits none.
	recorder events.EventRecorder
	// metrics receives the count of unverified instances; nil records
	// nothing.
	metrics *metrics.Metrics

	mu       sync.Mutex
	entries  map[string]keyCheck
	checking map[string]bool
}

// get returns the entry's latest check.
func (g *ownershipGate) get(entry string) keyCheck {
	if g == nil {
		return keyCheck{checked: true}
	}
	g.mu.Lock()
	defer g.mu.Unlock()
	return g.entries[entry]
}

// begin claims the entry's first check, so that one reconcile lists it
// while the others wait; false when another holds it. end releases it.
func (g *ownershipGate) begin(entry string) bool {
	g.mu.Lock()
	defer g.mu.Unlock()
	if g.checking[entry] {
		return false
	}
	if g.checking == nil {
		g.checking = map[string]bool{}
	}
	g.checking[entry] = true
	return true
}

func (g *ownershipGate) end(entry string) {
	g.mu.Lock()
	defer g.mu.Unlock()
	delete(g.checking, entry)
}

// observe records a listing of the entry: how many instances verified, and
// the unverified ones. Turning to a mismatch emits a Warning event.
func (g *ownershipGate) observe(entry string, verified int, unverified []provider.Instance) {
	if g == nil {
		return
	}
	g.mu.Lock()
	if g.entries == nil {
		g.entries = map[string]keyCheck{}
	}
	before := g.entries[entry]
	now := keyCheck{checked: true, verified: verified, unverified: unverified, afresh: before.afresh}
	g.entries[entry] = now
	g.mu.Unlock()
	if g.metrics != nil {
		g.metrics.OwnershipUnverified.WithLabelValues(entry).Set(float64(len(unverified)))
	}
	if now.verdict() == keyMismatch && before.verdict() != keyMismatch && g.recorder != nil {
		g.recorder.Eventf(providerHealthRef(entry), nil, corev1.EventTypeWarning, crawlv1alpha1.ReasonOwnershipKeyMismatch, "VerifyOwnership",
			"%d instances carry this installation's mark and none verifies with the current ownership key: nothing is created on this entry "+
				"until the key is restored or the administrator starts afresh (kubectl get providerhealth %s -o yaml; docs/security.md). They are: %s",
			len(unverified), entry, listInstances(unverified))
	}
}

// setAfresh records whether the administrator's start-afresh annotation
// names the current key.
func (g *ownershipGate) setAfresh(entry string, afresh bool) {
	if g == nil {
		return
	}
	g.mu.Lock()
	defer g.mu.Unlock()
	c, ok := g.entries[entry]
	if !ok && !afresh {
		return
	}
	c.afresh = afresh
	if g.entries == nil {
		g.entries = map[string]keyCheck{}
	}
	g.entries[entry] = c
}

// providerHealthRef is the entry's ProviderHealth, as events regard it.
func providerHealthRef(entry string) *crawlv1alpha1.ProviderHealth {
	ref := &crawlv1alpha1.ProviderHealth{ObjectMeta: metav1.ObjectMeta{Name: entry}}
	ref.SetGroupVersionKind(crawlv1alpha1.GroupVersion.WithKind("ProviderHealth"))
	return ref
}

// maxListedInstances caps the instances a message names: enough to find
// them on the hypervisor, short enough for a condition and an event.
const maxListedInstances = 10

// listInstances names instances as "ID (name)", at most
// maxListedInstances, then how many more. Names come from the marks, which
// hold no secret.
func listInstances(list []provider.Instance) string {
	parts := make([]string, 0, min(len(list), maxListedInstances)+1)
	for i, in := range list {
		if i == maxListedInstances {
			parts = append(parts, fmt.Sprintf("and %d more", len(list)-maxListedInstances))
			break
		}
		parts = append(parts, fmt.Sprintf("%s (%s)", in.ID, in.Name))
	}
	return strings.Join(parts, ", ")
}

// ownershipCondition is the ProviderHealth OwnershipKey condition of a
// check, or nil before the entry was listed. keyID names the current key
// (ownership.Identity.KeyID).
func ownershipCondition(entry string, c keyCheck, keyID string, now time.Time) *metav1.Condition {
	cond := &metav1.Condition{Type: crawlv1alpha1.ConditionOwnershipKey, LastTransitionTime: metav1.NewTime(now)}
	switch c.verdict() {
	case keyUnchecked:
		return nil
	case keyMismatch:
		cond.Status, cond.Reason = metav1.ConditionFalse, crawlv1alpha1.ReasonOwnershipKeyMismatch
		cond.Message = fmt.Sprintf("%d instances carry this installation's mark, and none verifies with the current ownership key (ID %s): "+
			"the key Secret was lost or replaced. Nothing is created or replaced on this entry meanwhile, so that no second fleet is made. "+
			"Restore the key Secret from its backup and restart the operator (docs/security.md); or, to start afresh with the current key, "+
			"kubectl annotate providerhealth %s %s=%s and remove the old instances by hand. They are: %s.",
			len(c.unverified), keyID, entry, crawlv1alpha1.AnnotationStartAfresh, keyID, listInstances(c.unverified))
	case keyAfresh:
		cond.Status, cond.Reason = metav1.ConditionTrue, crawlv1alpha1.ReasonStartedAfresh
		cond.Message = fmt.Sprintf("Started afresh with the ownership key %s, as the annotation %s says. The %d instances made with the old key "+
			"are never touched and may still serve with their old passwords: remove them by hand. They are: %s.",
			keyID, crawlv1alpha1.AnnotationStartAfresh, len(c.unverified), listInstances(c.unverified))
	case keyVerified:
		cond.Status, cond.Reason = metav1.ConditionTrue, crawlv1alpha1.ReasonKeyVerified
		cond.Message = fmt.Sprintf("%d instances verify with the ownership key %s.", c.verified, keyID)
		if len(c.unverified) > 0 {
			cond.Message += fmt.Sprintf(" %d others carry this installation's mark with a signature that does not verify "+
				"(copied or forged marks, or left from an earlier key); they are never touched: look at them. They are: %s.",
				len(c.unverified), listInstances(c.unverified))
		}
	}
	cond.Message = truncateMessage(cond.Message)
	return cond
}

// ownershipHoldMessage is the Proxy's Ready message while its entry's
// creates are held by a key mismatch.
func ownershipHoldMessage(entry string) string {
	return fmt.Sprintf("Provider entry %s holds instances of this installation that the current ownership key does not verify, and none that it does: "+
		"the key was lost or replaced. Nothing is created or replaced on it until the administrator restores the key or starts afresh "+
		"(kubectl get providerhealth %s -o yaml; docs/security.md).", entry, entry)
}
