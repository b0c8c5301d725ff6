package controller

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"time"

	"github.com/go-logr/logr"
	"k8s.io/apimachinery/pkg/api/equality"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	apimeta "k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"

	crawlv1alpha1 "github.com/egress-proxies/egress-proxies-operator/api/v1alpha1"
	"github.com/egress-proxies/egress-proxies-operator/internal/config"
	"github.com/egress-proxies/egress-proxies-operator/internal/controller/shared"
	"github.com/egress-proxies/egress-proxies-operator/internal/provider"
)

// DefaultHealthInterval is how often providers are checked by default.
const DefaultHealthInterval = time.Minute

// HealthReporter runs each configured provider's Checker on an interval and
// writes one ProviderHealth object per entry, named after it. It deletes the
// ProviderHealth objects it made for entries that are no longer configured.
type HealthReporter struct {
	// Client writes ProviderHealth objects.
	Client client.Client
	// Config lists the entries.
	Config *config.Config
	// Providers are the entries' providers, by entry name.
	Providers map[string]provider.Provider
	// Interval between checks; zero means DefaultHealthInterval. One check
	// of one entry may take at most this long.
	Interval time.Duration
	// Now is the clock; nil means time.Now.
	Now func() time.Time
	// Log is the logger of the checks and of the provider calls they make;
	// the zero value takes the one of Start's context (see
	// GarbageCollector.Log).
	Log logr.Logger

	// KeyID names the current ownership key (ownership.Identity.KeyID);
	// nil makes no start afresh possible.
	KeyID func() string

	// refusals are the reads the entries' APIs refused, recorded by the
	// Proxy reconciler and garbage collection; nil records none.
	refusals *refusalLog
	// ownership holds the entries' key checks: the health reporter shows
	// them (condition OwnershipKey) and records the start-afresh
	// annotation into them; nil shows none.
	ownership *ownershipGate
}

// +kubebuilder:rbac:groups=crawl.example.com,resources=providerhealths,verbs=get;list;watch;create;delete
// +kubebuilder:rbac:groups=crawl.example.com,resources=providerhealths/status,verbs=get;update;patch

// NeedLeaderElection makes only the leader check and write.
func (h *HealthReporter) NeedLeaderElection() bool { return true }

// Start checks at once, then every Interval until ctx is done.
func (h *HealthReporter) Start(ctx context.Context) error {
	if h.Log.GetSink() != nil {
		ctx = logr.NewContext(ctx, h.Log)
	}
	log := ctrl.LoggerFrom(ctx).WithName("health")
	t := time.NewTicker(h.interval())
	defer t.Stop()
	for {
		if err := h.RunOnce(ctx); err != nil && ctx.Err() == nil {
			log.Error(err, "writing provider health failed; retrying at the next interval")
		}
		select {
		case <-ctx.Done():
			return nil
		case <-t.C:
		}
	}
}

func (h *HealthReporter) interval() time.Duration {
	if h.Interval == 0 {
		return DefaultHealthInterval
	}
	return h.Interval
}

// RunOnce checks every entry once, writes the objects and removes stale ones.
func (h *HealthReporter) RunOnce(ctx context.Context) error {
	now := time.Now
	if h.Now != nil {
		now = h.Now
	}
	var errs []error
	configured := map[string]bool{}
	// The entries are checked and written side by side, each check within
	// the interval: one that hangs delays no other's verdicts.
	entryErrs := make([]error, len(h.Config.Providers))
	var wg sync.WaitGroup
	for i := range h.Config.Providers {
		e := &h.Config.Providers[i]
		configured[e.Name] = true
		wg.Go(func() {
			checker, supported := provider.AsChecker(h.Providers[e.Name])
			var verdicts []provider.Verdict
			if supported {
				cctx, cancel := context.WithTimeout(ctx, h.interval())
				verdicts = checker.Check(cctx)
				cancel()
			}
			entryErrs[i] = h.write(ctx, e, supported, verdicts, now())
		})
	}
	wg.Wait()
	errs = append(errs, entryErrs...)

	var list crawlv1alpha1.ProviderHealthList
	if err := h.Client.List(ctx, &list, client.MatchingLabels{shared.LabelManagedBy: shared.LabelManagedByValue}); err != nil {
		return errors.Join(append(errs, fmt.Errorf("listing provider health objects: %w", err))...)
	}
	for i := range list.Items {
		ph := &list.Items[i]
		if configured[ph.Name] {
			continue
		}
		if err := client.IgnoreNotFound(h.Client.Delete(ctx, ph)); err != nil {
			errs = append(errs, fmt.Errorf("deleting provider health %s of an entry no longer configured: %w", ph.Name, err))
		}
	}
	return errors.Join(errs...)
}

// write creates the entry's object if needed and patches its status.
func (h *HealthReporter) write(ctx context.Context, e *config.Entry, supported bool, verdicts []provider.Verdict, now time.Time) error {
	var ph crawlv1alpha1.ProviderHealth
	err := h.Client.Get(ctx, client.ObjectKey{Name: e.Name}, &ph)
	if apierrors.IsNotFound(err) {
		ph = crawlv1alpha1.ProviderHealth{ObjectMeta: metav1.ObjectMeta{
			Name: e.Name, Labels: map[string]string{shared.LabelManagedBy: shared.LabelManagedByValue},
		}}
		if err := h.Client.Create(ctx, &ph); err != nil {
			return fmt.Errorf("creating provider health %s: %w", e.Name, err)
		}
	} else if err != nil {
		return fmt.Errorf("reading provider health %s: %w", e.Name, err)
	}
	before := ph.DeepCopy()
	var refused *refusal
	var lastCheck time.Time
	if ph.Status.LastCheckTime != nil {
		lastCheck = ph.Status.LastCheckTime.Time
	}
	if r, ok := h.refusals.since(e.Name, lastCheck); ok {
		refused = &r
	}
	ph.Status = computeHealth(ph.Status, e.Type, supported, verdicts, refused, now)
	h.showOwnership(&ph, now)
	if equality.Semantic.DeepEqual(before.Status, ph.Status) {
		return nil
	}
	if err := h.Client.Status().Patch(ctx, &ph, client.MergeFrom(before)); err != nil {
		return fmt.Errorf("writing provider health %s: %w", e.Name, err)
	}
	return nil
}

// showOwnership records the start-afresh annotation of the entry's
// ProviderHealth into the key check, and sets the OwnershipKey condition
// from it. The key is named only once the entry was listed: a listing
// verified marks, so the (pending) identity has its key.
func (h *HealthReporter) showOwnership(ph *crawlv1alpha1.ProviderHealth, now time.Time) {
	if h.ownership == nil {
		return
	}
	c := h.ownership.get(ph.Name)
	if !c.checked {
		apimeta.RemoveStatusCondition(&ph.Status.Conditions, crawlv1alpha1.ConditionOwnershipKey)
		return
	}
	keyID := "unknown"
	if h.KeyID != nil {
		keyID = h.KeyID()
	}
	v, ok := ph.Annotations[crawlv1alpha1.AnnotationStartAfresh]
	h.ownership.setAfresh(ph.Name, ok && h.KeyID != nil && v == keyID)
	if cond := ownershipCondition(ph.Name, h.ownership.get(ph.Name), keyID, now); cond != nil {
		apimeta.SetStatusCondition(&ph.Status.Conditions, *cond)
	}
}
