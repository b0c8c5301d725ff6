package controller

import (
	"time"

	"github.com/egress-proxies/egress-proxies-operator/internal/controller/shared"
	"github.com/egress-proxies/egress-proxies-operator/internal/provider"
)

// waitFor is what a reconcile whose provider call did not fail waits for
// before the Proxy is looked at again. Step functions say which; only
// decideRequeue turns it into a delay.
type waitFor int

const (
	// waitEvent schedules nothing: a change of the Proxy (a new generation,
	// the retry annotation) or of its credentials Secret starts the next
	// reconcile. Invalid specs and credentials conflicts wait so.
	waitEvent waitFor = iota
	// waitPoll: the instance is being made or has not come up yet.
	waitPoll
	// waitResync: the instance is Ready, or the Proxy stays Failed; a late
	// look catches what changed behind the operator's back. A probe due
	// sooner (observation.nextProbe) brings the look forward.
	waitResync
	// waitNextStep: the next step is due at once. It goes through the queue
	// rather than a loop in this call, so that each reconcile makes one
	// provider mutation at most.
	waitNextStep
	// waitCache: the cache has not caught up with the API server yet.
	waitCache
	// waitReplacement: a successor's create waits out the replacement
	// backoff (observation.replacementWait).
	waitReplacement
	// waitSlot: the create waits in line for a slot of its provider entry
	// (maxConcurrentCreates). The slot's hand-off enqueues the Proxy; the
	// resync interval is only a safety net, so that thousands of queued
	// Proxies do not poll.
	waitSlot
)

const (
	// nextStepDelay is the delay of waitNextStep.
	nextStepDelay = time.Millisecond
	// cacheDelay is the delay of waitCache, and of a status patch that
	// conflicted with a newer write.
	cacheDelay = shared.CacheDelay
)

// intervals are the reconciler's configured delays.
type intervals struct {
	poll, resync time.Duration
}

// requeue is the decision at the end of a reconcile.
type requeue struct {
	// after is the delay; zero with backoff false schedules nothing.
	after time.Duration
	// backoff says the Proxy's exponential backoff applies, with after as
	// its floor (a delay the provider asked for); otherwise the backoff is
	// reset.
	backoff bool
}

// decideRequeue is the one place that decides when a Proxy is looked at
// again, from what the reconcile observed.
func decideRequeue(obs observation, iv intervals) requeue {
	err := obs.providerErr
	switch {
	case err == nil:
		switch obs.wait {
		case waitPoll:
			// The provider may know when its instance is due (the guest
			// agent of a booting VM): looking then sees it up to a poll
			// interval sooner. A hint never delays a look: the provider
			// reckons in its own time (a simulator's uptime runs faster
			// than the wall clock), and the poll interval is what the
			// administrator asked for.
			if obs.instance != nil && obs.instance.RecheckAfter > 0 {
				return requeue{after: min(obs.instance.RecheckAfter, iv.poll)}
			}
			return requeue{after: iv.poll}
		case waitResync:
			if obs.nextProbe > 0 {
				return requeue{after: min(iv.resync, obs.nextProbe)}
			}
			return requeue{after: iv.resync}
		case waitNextStep:
			return requeue{after: nextStepDelay}
		case waitCache:
			return requeue{after: cacheDelay}
		case waitReplacement:
			return requeue{after: obs.replacementWait}
		case waitSlot:
			return requeue{after: iv.resync}
		case waitEvent:
			return requeue{}
		}
		return requeue{}
	case provider.IsInProgress(err):
		// Whatever step returned it, come back after the delay the provider
		// asked for, or the poll interval when it named none.
		if after := provider.RetryAfterOf(err); after > 0 {
			return requeue{after: after}
		}
		return requeue{after: iv.poll}
	case provider.IsPermanent(err) && !obs.deleting:
		// Latched: a human acts, and their change triggers the next
		// reconcile.
		return requeue{}
	default:
		// Transient errors, and every deletion failure: a finalizer must
		// never be stuck behind a latch.
		return requeue{after: provider.RetryAfterOf(err), backoff: true}
	}
}
