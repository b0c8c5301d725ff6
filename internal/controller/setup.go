package controller

import (
	"fmt"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"go.opentelemetry.io/otel/trace"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/labels"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/cache"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/egress-proxies/egress-proxies-operator/internal/config"
	"github.com/egress-proxies/egress-proxies-operator/internal/controller/proxygateway"
	"github.com/egress-proxies/egress-proxies-operator/internal/controller/proxypool"
	"github.com/egress-proxies/egress-proxies-operator/internal/controller/shared"
	"github.com/egress-proxies/egress-proxies-operator/internal/metrics"
	"github.com/egress-proxies/egress-proxies-operator/internal/ownership"
	"github.com/egress-proxies/egress-proxies-operator/internal/probe"
	"github.com/egress-proxies/egress-proxies-operator/internal/provider"
)

// EventSource is the name the operator's events are reported under.
const EventSource = "egress-proxies-operator"

// Options configure the operator's loops; zero values take the defaults of
// each loop.
type Options struct {
	// Config is the providers configuration.
	Config *config.Config
	// Providers are the entries' providers, by entry name, already wrapped by
	// instrumented.Wrap.
	Providers map[string]provider.Provider
	// Engines are the forward proxies the entries' instances run, by entry
	// name (provider.Type.Engine); the pools publish them with their
	// members. An entry not named is published without one.
	Engines map[string]string
	// Metrics are the operator's collectors.
	Metrics *metrics.Metrics
	// Tracer starts the reconcile spans; nil traces nothing.
	Tracer trace.Tracer
	// Registerer receives the proxies-by-phase collector; nil skips it.
	Registerer prometheus.Registerer

	// Prober probes Ready proxies through the proxy (the Serving
	// condition); nil probes nothing and Serving follows Ready.
	Prober probe.Prober
	// ProbeInterval and ProbeFailureThreshold: see ProxyReconciler.
	ProbeInterval         time.Duration
	ProbeFailureThreshold int32
	// PoolResyncInterval is how often a pool is looked at without changes.
	PoolResyncInterval time.Duration
	// GatewayImage is the image ProxyGateway pods run (the operator's own,
	// --proxy-image).
	GatewayImage string

	PollInterval            time.Duration
	ResyncInterval          time.Duration
	MaxConcurrentReconciles int
	HealthInterval          time.Duration
	GCInterval              time.Duration
	GCGracePeriod           time.Duration
	// Replacement bounds replacements per Proxy; zero values take its
	// defaults.
	Replacement ReplacementPolicy
	// Now is the clock; nil means time.Now.
	Now func() time.Time
	// Ownership is the installation's identity; the health reporter names
	// its key (KeyID) in the OwnershipKey condition and matches the
	// start-afresh annotation against it. Nil makes no start afresh
	// possible.
	Ownership *ownership.Identity
	// SkipNameValidation allows several managers with the same controllers
	// in one process; only tests need it.
	SkipNameValidation bool
}

// CacheOptions returns the manager cache options the controllers rely on.
// The controllers cache no Secret: they read the Secrets they made by name
// from the API server, so that the operator needs no right to list or watch
// Secrets cluster-wide (docs/security.md, RBAC). ConfigMaps (the pools'
// published lists, which hold no credentials) are cached only when the
// operator made them (they carry its managed-by label). Provider types add
// their own needs (see provider.Type.Cache); the operator's setup merges
// them. Cached objects lose their managedFields, which no controller reads
// and which were the largest part of a cached Proxy (docs/performance.md,
// Memory).
func CacheOptions() cache.Options {
	managed := labels.SelectorFromSet(labels.Set{shared.LabelManagedBy: shared.LabelManagedByValue})
	byObject := map[client.Object]cache.ByObject{&corev1.ConfigMap{}: {Label: managed}}
	// A gateway's own objects (proxygateway.CachedObjects) are cached only
	// when the operator made them.
	for _, obj := range proxygateway.CachedObjects() {
		byObject[obj] = cache.ByObject{Label: managed}
	}
	return cache.Options{
		ByObject:         byObject,
		DefaultTransform: cache.TransformStripManagedFields(),
	}
}

// SetupWithManager adds the Proxy and ProxyPool reconcilers, garbage
// collection, the health reporter and (with a Registerer) the proxies
// collector to mgr.
func SetupWithManager(mgr ctrl.Manager, o Options) error {
	recorder := fittingRecorder{mgr.GetEventRecorder(EventSource)}
	refusals := &refusalLog{}
	gate := &ownershipGate{recorder: recorder, metrics: o.Metrics}
	r := &ProxyReconciler{refusals: refusals, ownership: gate,
		Client: mgr.GetClient(), APIReader: mgr.GetAPIReader(), Recorder: recorder, Config: o.Config, Providers: o.Providers, Metrics: o.Metrics,
		Now: o.Now, PollInterval: o.PollInterval, ResyncInterval: o.ResyncInterval, MaxConcurrentReconciles: o.MaxConcurrentReconciles, Replacement: o.Replacement,
		Tracer: o.Tracer, skipNameValidation: o.SkipNameValidation,
		Prober: o.Prober, ProbeInterval: o.ProbeInterval, ProbeFailureThreshold: o.ProbeFailureThreshold,
	}
	if err := r.SetupWithManager(mgr); err != nil {
		return fmt.Errorf("setting up the proxy controller: %w", err)
	}
	pools := &proxypool.Reconciler{
		Client: mgr.GetClient(), APIReader: mgr.GetAPIReader(), Recorder: recorder, Config: o.Config, Metrics: o.Metrics, Now: o.Now, Engines: o.Engines,
		ResyncInterval: o.PoolResyncInterval, SkipNameValidation: o.SkipNameValidation,
	}
	if err := pools.SetupWithManager(mgr); err != nil {
		return fmt.Errorf("setting up the proxy pool controller: %w", err)
	}
	gateways := &proxygateway.Reconciler{Client: mgr.GetClient(), APIReader: mgr.GetAPIReader(), Recorder: recorder, Image: o.GatewayImage,
		Now: o.Now, SkipNameValidation: o.SkipNameValidation}
	if err := gateways.SetupWithManager(mgr); err != nil {
		return fmt.Errorf("setting up the proxy gateway controller: %w", err)
	}
	gc := &GarbageCollector{refusals: refusals, ownership: gate,
		Reader: mgr.GetAPIReader(), Providers: o.Providers, Recorder: recorder, Metrics: o.Metrics,
		Interval: o.GCInterval, GracePeriod: o.GCGracePeriod, Now: o.Now, Log: mgr.GetLogger(),
	}
	if err := mgr.Add(gc); err != nil {
		return fmt.Errorf("adding garbage collection: %w", err)
	}
	var keyID func() string
	if o.Ownership != nil {
		keyID = o.Ownership.KeyID
	}
	h := &HealthReporter{refusals: refusals, ownership: gate, KeyID: keyID, Client: mgr.GetClient(), Config: o.Config, Providers: o.Providers, Interval: o.HealthInterval, Now: o.Now, Log: mgr.GetLogger()}
	if err := mgr.Add(h); err != nil {
		return fmt.Errorf("adding the health reporter: %w", err)
	}
	if o.Registerer != nil {
		if err := o.Registerer.Register(&metrics.ProxiesCollector{Reader: mgr.GetClient()}); err != nil {
			return fmt.Errorf("registering the proxies collector: %w", err)
		}
		if err := o.Registerer.Register(&metrics.ObjectsCollector{Reader: mgr.GetClient()}); err != nil {
			return fmt.Errorf("registering the pools and provider health collector: %w", err)
		}
	}
	return nil
}
