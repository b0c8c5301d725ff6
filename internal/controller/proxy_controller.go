package controller

import (
	"context"
	"fmt"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/equality"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
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
	// Recorder emits events on Proxies.
	Recorder events.EventRecorder
	// Config is the providers configuration.
	Config *config.Config
	// Providers are the configured entries' providers, by entry name, each
	// already wrapped by instrumented.Wrap.
	Providers map[string]provider.Provider
	// Metrics records create-to-ready durations and replacements.
	Metrics *metrics.Metrics
	// Now is the clock; nil means time.Now.
	Now func() time.Time
	// PollInterval is how often an instance that is not yet Ready is looked
	// at. Zero means DefaultPollInterval.
	PollInterval time.Duration
	// ResyncInterval is how often a Ready instance is looked at. Zero means
	// DefaultResyncInterval.
	ResyncInterval time.Duration
	// Backoff computes the capped exponential delay after transient
	// failures, per Proxy. Nil means DefaultBackoffBase to DefaultBackoffMax.
	Backoff workqueue.TypedRateLimiter[reconcile.Request]
	// MaxConcurrentReconciles bounds the workers; zero means 4.
	MaxConcurrentReconciles int
}

// +kubebuilder:rbac:groups=crawl.example.com,resources=proxies,verbs=get;list;watch;update;patch
// +kubebuilder:rbac:groups=crawl.example.com,resources=proxies/status,verbs=get;update;patch
// +kubebuilder:rbac:groups=crawl.example.com,resources=proxies/finalizers,verbs=update
// +kubebuilder:rbac:groups="",resources=secrets,verbs=get;list;watch;create;update;patch
// +kubebuilder:rbac:groups=events.k8s.io,resources=events,verbs=create;patch

// SetupWithManager registers the reconciler: it watches Proxies and the
// credentials Secrets they own.
func (r *ProxyReconciler) SetupWithManager(mgr ctrl.Manager) error {
	r.defaults()
	workers := r.MaxConcurrentReconciles
	if workers == 0 {
		workers = 4
	}
	return ctrl.NewControllerManagedBy(mgr).
		For(&crawlv1alpha1.Proxy{}, builder.WithPredicates(predicate.Or(
			predicate.GenerationChangedPredicate{}, predicate.AnnotationChangedPredicate{}))).
		Owns(&corev1.Secret{}).
		WithOptions(controller.Options{MaxConcurrentReconciles: workers}).
		Named("proxy").
		Complete(r)
}

func (r *ProxyReconciler) defaults() {
	if r.Now == nil {
		r.Now = time.Now
	}
	if r.PollInterval == 0 {
		r.PollInterval = DefaultPollInterval
	}
	if r.ResyncInterval == 0 {
		r.ResyncInterval = DefaultResyncInterval
	}
	if r.Backoff == nil {
		r.Backoff = workqueue.NewTypedItemExponentialFailureRateLimiter[reconcile.Request](DefaultBackoffBase, DefaultBackoffMax)
	}
}

// Reconcile moves one Proxy one step towards its desired state and patches
// its status once, at the end.
func (r *ProxyReconciler) Reconcile(ctx context.Context, req ctrl.Request) (ctrl.Result, error) {
	r.defaults()
	var p crawlv1alpha1.Proxy
	if err := r.Client.Get(ctx, req.NamespacedName, &p); err != nil {
		if apierrors.IsNotFound(err) {
			r.Backoff.Forget(req)
			return ctrl.Result{}, nil
		}
		return ctrl.Result{}, fmt.Errorf("getting proxy: %w", err)
	}
	before := p.DeepCopy()

	var (
		res ctrl.Result
		obs observation
		err error
	)
	if !p.DeletionTimestamp.IsZero() {
		res, obs, err = r.reconcileDelete(ctx, &p)
	} else {
		res, obs, err = r.reconcileNormal(ctx, &p)
	}
	if err != nil {
		return ctrl.Result{}, err
	}
	if obs.providerErr != nil && !provider.IsInProgress(obs.providerErr) && !provider.IsPermanent(obs.providerErr) {
		res = ctrl.Result{RequeueAfter: r.Backoff.When(req)}
	} else {
		r.Backoff.Forget(req)
	}

	if !controllerutil.ContainsFinalizer(&p, Finalizer) && !p.DeletionTimestamp.IsZero() {
		// The finalizer is gone and the object with it: nothing to patch.
		return res, nil
	}
	p.Status = computeStatus(p.Status, obs, p.Spec.Port, p.Generation, r.Now())
	if err := r.patchStatus(ctx, before, &p); err != nil {
		return ctrl.Result{}, err
	}
	return res, nil
}

// patchStatus writes the status once, only when it changed.
func (r *ProxyReconciler) patchStatus(ctx context.Context, before, p *crawlv1alpha1.Proxy) error {
	if equality.Semantic.DeepEqual(before.Status, p.Status) {
		return nil
	}
	if err := r.Client.Status().Patch(ctx, p, client.MergeFrom(before)); err != nil {
		if apierrors.IsNotFound(err) {
			return nil
		}
		return fmt.Errorf("patching proxy status: %w", err)
	}
	return nil
}

// event emits an event on the Proxy.
func (r *ProxyReconciler) event(p *crawlv1alpha1.Proxy, eventType, reason, action, note string, args ...any) {
	if r.Recorder != nil {
		r.Recorder.Eventf(p, nil, eventType, reason, action, note, args...)
	}
}
