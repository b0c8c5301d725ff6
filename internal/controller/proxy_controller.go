package controller

import (
	"context"
	"fmt"
	"time"

	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/trace"
	"go.opentelemetry.io/otel/trace/noop"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/equality"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/tools/events"
	"k8s.io/client-go/util/workqueue"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/builder"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/controller"
	"sigs.k8s.io/controller-runtime/pkg/controller/controllerutil"
	"sigs.k8s.io/controller-runtime/pkg/predicate"
	"sigs.k8s.io/controller-runtime/pkg/reconcile"

	crawlv1alpha1 "github.com/egress-proxies/egress-proxies-operator/api/v1alpha1"
	"github.com/egress-proxies/egress-proxies-operator/internal/config"
	"github.com/egress-proxies/egress-proxies-operator/internal/metrics"
	"github.com/egress-proxies/egress-proxies-operator/internal/probe"
	"github.com/egress-proxies/egress-proxies-operator/internal/provider"
)

// Finalizer keeps a Proxy until its instance is removed.
const Finalizer = "crawl.example.com/instance-cleanup"

// Defaults of ProxyReconciler's intervals.
const (
	DefaultPollInterval   = 10 * time.Second
	DefaultResyncInterval = 5 * time.Minute
	DefaultBackoffBase    = 2 * time.Second
	DefaultBackoffMax     = 5 * time.Minute
)

// ProxyReconciler reconciles Proxy objects with their instances.
type ProxyReconciler struct {
	// Client reads and writes Kubernetes objects (the manager's client).
	Client client.Client
	// APIReader reads from the API server, bypassing the cache; it confirms
	// that the cached Proxy is current before a provider mutation. Nil skips
	// the check.
	APIReader client.Reader
	// Recorder emits events on Proxies.
	Recorder events.EventRecorder
	// Config is the providers configuration.
	Config *config.Config
	// Providers are the configured entries' providers, by entry name, each
	// already wrapped by instrumented.Wrap.
	Providers map[string]provider.Provider
	// Metrics records create-to-ready durations and replacements.
	Metrics *metrics.Metrics
	// Tracer starts one span per reconcile, the parent of the provider
	// calls' spans; nil traces nothing.
	Tracer trace.Tracer
	// Now is the clock; nil means time.Now.
	Now func() time.Time
	// PollInterval is how often an instance that is not yet Ready is looked
	// at; a provider may bring a look forward (Instance.RecheckAfter). Zero
	// means DefaultPollInterval.
	PollInterval time.Duration
	// ResyncInterval is how often a Ready instance is looked at. Zero means
	// DefaultResyncInterval.
	ResyncInterval time.Duration
	// Backoff computes the capped exponential delay after transient
	// failures, per Proxy. Nil means DefaultBackoffBase to DefaultBackoffMax.
	Backoff workqueue.TypedRateLimiter[reconcile.Request]
	// Prober sends requests through Ready proxies (the Serving condition);
	// nil probes nothing and Serving follows Ready.
	Prober probe.Prober
	// ProbeInterval is how often a Ready proxy is probed; zero means
	// DefaultProbeInterval.
	ProbeInterval time.Duration
	// ProbeFailureThreshold is how many failed probes in a row mark a proxy
	// ProbeFailed; zero means DefaultProbeFailureThreshold.
	ProbeFailureThreshold int32
	// MaxConcurrentReconciles bounds the workers; zero means 4.
	MaxConcurrentReconciles int
	// Replacement bounds how fast and how often an instance is replaced.
	Replacement ReplacementPolicy

	skipNameValidation bool
	// refusals collects the reads the providers refused, for ProviderHealth.
	refusals *refusalLog
	// ownership holds creates on entries whose instances do not verify
	// with the current key; nil holds none.
	ownership *ownershipGate
	// slots caps concurrent creates per provider entry.
	slots createSlots
	// written spares isCurrent's live read when the cache holds our last
	// write.
	written writtenVersions
	// ownerChecked spares the owner check at each step of a delete.
	ownerChecked ownerChecks
	// createCreds spares the credentials Secret's read at each step of a
	// create.
	createCreds createCredentials
	// statusWrites spares a status write per create step (progressOnly).
	statusWrites statusWrites
	// readyCreds spares the credentials Secret's read at the looks at a
	// Ready proxy between resyncs (the probe's).
	readyCreds readyCredentials
	// probed spares the status write of a routine probe (routineProbe):
	// it knows when a proxy was last probed ahead of its status.
	probed probeTimes
	// probes runs the probes off the workers, once the manager runs.
	probes *probeRuns
	// shares bound the workers one provider entry holds.
	shares entryShares
}

// The rights in the namespaces the operator serves (roleName namespace-role:
// a ClusterRole that config/namespaces binds with a RoleBinding in each of
// them, so it grants nothing elsewhere; docs/security.md, RBAC).
// +kubebuilder:rbac:groups=crawl.example.com,resources=proxies,verbs=get;list;watch;update;patch,roleName=namespace-role
// +kubebuilder:rbac:groups=crawl.example.com,resources=proxies/status,verbs=get;update;patch,roleName=namespace-role
// +kubebuilder:rbac:groups=crawl.example.com,resources=proxies/finalizers,verbs=update,roleName=namespace-role
// +kubebuilder:rbac:groups="",resources=secrets,verbs=get;create;update;patch,roleName=namespace-role

// Events are the one namespaced right the operator keeps in every namespace:
// those about cluster-scoped ProviderHealth objects land in namespace
// default. Creating and patching events reads nothing.
// +kubebuilder:rbac:groups=events.k8s.io,resources=events,verbs=create;patch

// SetupWithManager registers the reconciler: it watches Proxies, and takes
// the Proxies handed a create slot (createSlots) or whose probe ended
// (probeRuns, added to the manager when probing is on) from its own source. It does not
// watch their credentials Secrets (that would take the right to list and
// watch every Secret of the cluster): a deleted or edited Secret is noticed
// at the Proxy's next reconcile, within the resync interval.
func (r *ProxyReconciler) SetupWithManager(mgr ctrl.Manager) error {
	r.defaults()
	var wq wakeQueue
	r.slots.wake = wq.wake
	if r.Prober != nil {
		r.probes = newProbeRuns(r.Prober, probeConcurrency, wq.wake)
		if err := mgr.Add(r.probes); err != nil {
			return fmt.Errorf("adding the probe runner: %w", err)
		}
	}
	return ctrl.NewControllerManagedBy(mgr).
		For(&crawlv1alpha1.Proxy{}, builder.WithPredicates(predicate.Or(
			predicate.GenerationChangedPredicate{}, predicate.AnnotationChangedPredicate{}))).
		WatchesRawSource(wq.source()).
		WithOptions(controller.Options{MaxConcurrentReconciles: r.MaxConcurrentReconciles, SkipNameValidation: &r.skipNameValidation}).
		Named("proxy").
		Complete(r)
}

// defaults fills in the zero options, once, when the reconciler is set up.
func (r *ProxyReconciler) defaults() {
	if r.MaxConcurrentReconciles == 0 {
		r.MaxConcurrentReconciles = 4
	}
	if r.Now == nil {
		r.Now = time.Now
	}
	if r.PollInterval == 0 {
		r.PollInterval = DefaultPollInterval
	}
	if r.ResyncInterval == 0 {
		r.ResyncInterval = DefaultResyncInterval
	}
	if r.ProbeInterval == 0 {
		r.ProbeInterval = DefaultProbeInterval
	}
	if r.ProbeFailureThreshold == 0 {
		r.ProbeFailureThreshold = DefaultProbeFailureThreshold
	}
	if r.Tracer == nil {
		r.Tracer = noop.NewTracerProvider().Tracer("")
	}
	if r.Backoff == nil {
		r.Backoff = workqueue.NewTypedItemExponentialFailureRateLimiter[reconcile.Request](DefaultBackoffBase, DefaultBackoffMax)
	}
	if r.shares.limit == 0 {
		r.shares.limit = shareOf(r.MaxConcurrentReconciles, len(r.Providers))
	}
}

// Reconcile moves one Proxy one step towards its desired state and patches
// its status once, at the end.
func (r *ProxyReconciler) Reconcile(ctx context.Context, req ctrl.Request) (ctrl.Result, error) {
	ctx, span := r.Tracer.Start(ctx, "Proxy.Reconcile", trace.WithAttributes(
		attribute.String("k8s.namespace.name", req.Namespace), attribute.String("egress.proxy.name", req.Name)))
	defer span.End()
	var p crawlv1alpha1.Proxy
	if err := r.Client.Get(ctx, req.NamespacedName, &p); err != nil {
		if apierrors.IsNotFound(err) {
			r.Backoff.Forget(req)
			r.slots.release(req.NamespacedName)
			r.written.Forget(req.NamespacedName)
			r.createCreds.Forget(req.NamespacedName)
			r.statusWrites.Forget(req.NamespacedName)
			r.readyCreds.Forget(req.NamespacedName)
			r.probed.Forget(req.NamespacedName)
			if r.probes != nil {
				r.probes.forget(req.NamespacedName)
			}
			return ctrl.Result{}, nil
		}
		return ctrl.Result{}, fmt.Errorf("getting proxy: %w", err)
	}
	// Every provider call of this reconcile is the entry's: when its share
	// of the workers is taken (its provider hangs or crawls), the Proxy
	// waits its turn without holding a worker. A Proxy naming no configured
	// entry makes no provider call.
	if entry := p.Spec.Provider; r.Providers[entry] != nil {
		if !r.shares.acquire(entry) {
			return ctrl.Result{RequeueAfter: r.PollInterval}, nil
		}
		defer r.shares.release(entry)
	}
	before := p.DeepCopy()

	var (
		obs observation
		err error
	)
	if !p.DeletionTimestamp.IsZero() {
		obs, err = r.reconcileDelete(ctx, &p)
	} else {
		obs, err = r.reconcileNormal(ctx, &p)
	}
	if err != nil {
		return ctrl.Result{}, err
	}
	d := decideRequeue(obs, intervals{poll: r.PollInterval, resync: r.ResyncInterval})
	res := ctrl.Result{RequeueAfter: d.after}
	if d.backoff {
		res.RequeueAfter = max(r.Backoff.When(req), d.after)
	} else {
		r.Backoff.Forget(req)
	}

	if !controllerutil.ContainsFinalizer(&p, Finalizer) && !p.DeletionTimestamp.IsZero() {
		// The finalizer is gone and the object with it: nothing to patch.
		return res, nil
	}
	obs.probing, obs.probeThreshold = r.Prober != nil, r.ProbeFailureThreshold
	if e := r.Config.Entry(p.Spec.Provider); e != nil {
		obs.policy = entryPolicy{entry: e.Name, hash: egressPolicyHash(e.EgressPolicy)}
	}
	p.Status = computeProxyStatus(p.Status, obs, p.Spec.Port, p.Generation, r.Now())
	if obs.probe != nil {
		r.probed.record(req.NamespacedName, r.Now())
	}
	r.trackCreate(req.NamespacedName, &p)
	if err := r.patchStatus(ctx, before, &p); err != nil {
		if apierrors.IsConflict(err) {
			// The status changed since we read it: what we computed is based
			// on an old view. Look again with the newer one.
			return ctrl.Result{RequeueAfter: cacheDelay}, nil
		}
		return ctrl.Result{}, err
	}
	if obs.becameReady {
		r.announceReady(ctx, &p)
	}
	if obs.retried {
		// Only now that the status no longer says Failed: the update event
		// of this patch must not show a latched status without the
		// annotation that lifted the latch.
		if err := r.removeRetryAnnotation(ctx, &p); err != nil {
			return ctrl.Result{}, err
		}
	}
	return res, nil
}

// trackCreate frees the Proxy's create slot and forgets the credentials
// held for its create once the provider's part of the create is over
// (Create returned the ID, the create failed for good, the Proxy is being
// deleted), and takes the slot back for a create in flight that this
// process did not start (after a restart).
func (r *ProxyReconciler) trackCreate(key types.NamespacedName, p *crawlv1alpha1.Proxy) {
	switch {
	case !p.DeletionTimestamp.IsZero(), p.Status.InstanceID != "",
		p.Status.Phase == crawlv1alpha1.ProxyPhaseReady, p.Status.Phase == crawlv1alpha1.ProxyPhaseFailed:
		r.slots.release(key)
		r.createCreds.Forget(key)
	case p.Status.Phase == crawlv1alpha1.ProxyPhaseProvisioning:
		r.slots.hold(p.Spec.Provider, key)
	}
}

// announceReady logs, records and counts a Proxy's transition to Ready.
func (r *ProxyReconciler) announceReady(ctx context.Context, p *crawlv1alpha1.Proxy) {
	ctrl.LoggerFrom(ctx).Info("proxy is ready", "instanceID", p.Status.InstanceID, "address", p.Status.Address, "node", p.Status.Node)
	r.event(p, corev1.EventTypeNormal, eventReady, "Observe", "Instance %s runs on %s at %s", p.Status.InstanceID, p.Status.Node, p.Status.Address)
	if p.Status.InstanceCreationTime != nil && r.Metrics != nil {
		r.Metrics.CreateToReady.WithLabelValues(p.Spec.Provider).Observe(r.Now().Sub(p.Status.InstanceCreationTime.Time).Seconds())
	}
}

// isCurrent reports whether the cached Proxy is the latest version on the API
// server. The reconciler checks it before it asks a provider to create or
// destroy anything, so that a cache that has not yet seen the last status
// write cannot trigger a second create or a needless replacement. A cached
// copy at the version of this process's last write of it has seen that
// write; then no request is made (writtenVersions).
func (r *ProxyReconciler) isCurrent(ctx context.Context, p *crawlv1alpha1.Proxy) (bool, error) {
	if r.APIReader == nil || r.written.seen(client.ObjectKeyFromObject(p), p.ResourceVersion) {
		return true, nil
	}
	var fresh crawlv1alpha1.Proxy
	if err := r.APIReader.Get(ctx, client.ObjectKeyFromObject(p), &fresh); err != nil {
		return false, fmt.Errorf("reading the proxy from the API server: %w", err)
	}
	return fresh.ResourceVersion == p.ResourceVersion, nil
}

// removeRetryAnnotation removes the annotation that asked for a retry.
func (r *ProxyReconciler) removeRetryAnnotation(ctx context.Context, p *crawlv1alpha1.Proxy) error {
	patch := client.MergeFrom(p.DeepCopy())
	delete(p.Annotations, crawlv1alpha1.AnnotationRetry)
	if err := client.IgnoreNotFound(r.Client.Patch(ctx, p, patch)); err != nil {
		return fmt.Errorf("removing the retry annotation: %w", err)
	}
	r.written.record(client.ObjectKeyFromObject(p), p.ResourceVersion)
	return nil
}

// patchStatus writes the status once, only when it changed, a create's
// progress alone (progressOnly) at most once per progressEvery, and a
// routine probe (routineProbe) at most once per routineProbeEvery probe
// intervals.
func (r *ProxyReconciler) patchStatus(ctx context.Context, before, p *crawlv1alpha1.Proxy) error {
	if equality.Semantic.DeepEqual(before.Status, p.Status) {
		return nil
	}
	key := client.ObjectKeyFromObject(p)
	now := r.Now()
	if progressOnly(before.Status, p.Status) && r.statusWrites.within(key, now, progressEvery) {
		return nil
	}
	if routineProbe(before.Status, p.Status) && r.statusWrites.within(key, now, routineProbeEvery*r.ProbeInterval) {
		return nil
	}
	// The base of the patch is the status as read, with the metadata (and
	// resourceVersion) of our own writes in this reconcile, such as the
	// finalizer. The optimistic lock then makes a status computed from a
	// stale cached copy fail with a conflict instead of overwriting a newer
	// one.
	base := p.DeepCopy()
	base.Status = *before.Status.DeepCopy()
	if err := r.Client.Status().Patch(ctx, p, client.MergeFromWithOptions(base, client.MergeFromWithOptimisticLock{})); err != nil {
		if apierrors.IsNotFound(err) {
			return nil
		}
		return fmt.Errorf("patching proxy status: %w", err)
	}
	r.written.record(key, p.ResourceVersion)
	r.statusWrites.record(key, now)
	return nil
}

// event emits an event on the Proxy.
func (r *ProxyReconciler) event(p *crawlv1alpha1.Proxy, eventType, reason, action, note string, args ...any) {
	if r.Recorder != nil {
		r.Recorder.Eventf(p, nil, eventType, reason, action, note, args...)
	}
}
