package setup

import (
	"errors"
	"fmt"
	"maps"
	"reflect"
	"slices"
	"time"

	"github.com/go-logr/logr"
	"github.com/prometheus/client_golang/prometheus"
	"go.opentelemetry.io/otel/trace"
	"k8s.io/apimachinery/pkg/runtime"
	clientgoscheme "k8s.io/client-go/kubernetes/scheme"
	"k8s.io/client-go/rest"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/cache"
	"sigs.k8s.io/controller-runtime/pkg/healthz"

	crawlv1alpha1 "github.com/egress-proxies/egress-proxies-operator/api/v1alpha1"
	"github.com/egress-proxies/egress-proxies-operator/internal/config"
	"github.com/egress-proxies/egress-proxies-operator/internal/controller"
	"github.com/egress-proxies/egress-proxies-operator/internal/metrics"
	"github.com/egress-proxies/egress-proxies-operator/internal/ownership"
	"github.com/egress-proxies/egress-proxies-operator/internal/provider"
	"github.com/egress-proxies/egress-proxies-operator/internal/provider/instrumented"
)

// LeaderElectionID is the name of the leader election lease.
const LeaderElectionID = "egress-proxies-operator.crawl.example.com"

// Options are everything one run of the operator is built from.
type Options struct {
	// RestConfig reaches the API server.
	RestConfig *rest.Config
	// Config is the decoded providers configuration.
	Config *config.Config
	// Types are the provider types entries are built with; nil means Types,
	// the build's registered types.
	Types provider.Types
	// Providers, when set for an entry name, is that entry's provider instead
	// of one built from its type: tests reuse a provider across operator
	// restarts this way. It is instrumented like any other.
	Providers map[string]provider.Provider
	// OwnImage is the operator's own container image (--proxy-image).
	OwnImage string
	// Ownership is the installation's identity and key, which every
	// provider signs and verifies its marks with (ownership.LoadOrCreate
	// reads it from the key Secret). Required: two operators with
	// different identities never touch each other's instances, so a
	// restarted operator must keep its own.
	Ownership *ownership.Identity
	// Namespaces are the namespaces the operator serves (--namespaces): the
	// cache, and so every controller, is confined to them, and the operator
	// needs the rights of NamespaceRole only there. A Proxy elsewhere is not
	// seen at all (another installation may serve it). Nil serves the whole
	// cluster. Tests that share a control plane use it to keep their
	// operators apart.
	Namespaces []string
	// Manager are the manager's options. New sets Scheme (when nil) and
	// Cache; an empty Metrics.BindAddress or HealthProbeBindAddress turns
	// that endpoint off, and an empty LeaderElectionID is LeaderElectionID.
	Manager ctrl.Options
	// Controller are the loops' options; New fills in Config, Providers,
	// Metrics, Registerer and Tracer.
	Controller controller.Options
	// Registerer receives the operator's metrics; nil means a new registry
	// that nothing serves.
	Registerer prometheus.Registerer
	// Tracer starts the spans of reconciles and provider calls; nil traces
	// nothing.
	Tracer trace.Tracer
	// Log is the logger of the providers' decorator and, when the manager
	// options name none, of the manager; the zero value is ctrl.Log.
	Log logr.Logger
}

// Operator is a built, not yet started, operator.
type Operator struct {
	// Manager runs the controllers; Start it.
	Manager ctrl.Manager
	// Providers are the entries' providers by entry name, instrumented.
	Providers map[string]provider.Provider
	// Metrics are the operator's collectors.
	Metrics *metrics.Metrics
}

// New builds the operator: manager, providers and controllers. It contacts
// no provider: an unreachable one shows in ProviderHealth. The binary calls
// CheckNamespaceAccess first.
func New(o Options) (*Operator, error) {
	if o.Config == nil {
		return nil, errors.New("no providers configuration")
	}
	if o.Ownership == nil {
		return nil, errors.New("no ownership identity: the installation's ID and key sign every instance's mark")
	}
	types := o.Types
	if types == nil {
		types = Types
	}
	if err := types.Validate(); err != nil {
		return nil, err
	}
	for _, e := range o.Config.Providers {
		if _, known := types.Lookup(e.Type); !known && o.Providers[e.Name] == nil {
			return nil, fmt.Errorf("provider %q: type %q is not registered", e.Name, e.Type)
		}
	}
	log := o.Log
	if log.GetSink() == nil {
		log = ctrl.Log
	}
	reg := o.Registerer
	if reg == nil {
		reg = prometheus.NewRegistry()
	}
	m, err := metrics.New(reg)
	if err != nil {
		return nil, fmt.Errorf("registering metrics: %w", err)
	}

	mo := o.Manager
	if mo.Scheme == nil {
		if mo.Scheme, err = Scheme(); err != nil {
			return nil, err
		}
	}
	if mo.Cache, err = cacheOptions(o.Config, types, o.Namespaces); err != nil {
		return nil, err
	}
	if mo.Metrics.BindAddress == "" {
		mo.Metrics.BindAddress = "0"
	}
	if mo.HealthProbeBindAddress == "" {
		mo.HealthProbeBindAddress = "0"
	}
	if mo.LeaderElectionID == "" {
		mo.LeaderElectionID = LeaderElectionID
	}
	if mo.Logger.GetSink() == nil {
		mo.Logger = log
	}
	mgr, err := ctrl.NewManager(o.RestConfig, mo)
	if err != nil {
		return nil, fmt.Errorf("creating the manager: %w", err)
	}

	deps := provider.Deps{Client: mgr.GetClient(), APIReader: mgr.GetAPIReader(), OwnImage: o.OwnImage, Ownership: o.Ownership}
	for i := range o.Config.Providers {
		deps.Entries = append(deps.Entries, o.Config.Providers[i].Name)
	}
	providers := make(map[string]provider.Provider, len(o.Config.Providers))
	engines := make(map[string]string, len(o.Config.Providers))
	for i := range o.Config.Providers {
		e := &o.Config.Providers[i]
		if t, known := types.Lookup(e.Type); known && t.Engine != "" {
			engines[e.Name] = t.Engine
		}
		p, ok := o.Providers[e.Name]
		if !ok {
			t, _ := types.Lookup(e.Type)
			d := deps
			d.Log = log.WithName(e.Type)
			if p, err = t.New(e, d); err != nil {
				return nil, fmt.Errorf("provider %q: %w", e.Name, err)
			}
		}
		providers[e.Name] = instrumented.Wrap(p, instrumented.Options{
			Name: e.Name, Type: e.Type, Metrics: m, Tracer: o.Tracer, Log: log.WithName("provider"),
			Deadline: func(op provider.Op) time.Duration { return e.Deadlines.For(string(op)) },
		})
	}

	co := o.Controller
	co.Config, co.Providers, co.Engines, co.Metrics, co.Registerer, co.Tracer = o.Config, providers, engines, m, reg, o.Tracer
	co.Ownership = o.Ownership
	if co.GatewayImage == "" {
		co.GatewayImage = o.OwnImage
	}
	if err := controller.SetupWithManager(mgr, co); err != nil {
		return nil, err
	}
	if err := errors.Join(mgr.AddHealthzCheck("healthz", healthz.Ping), mgr.AddReadyzCheck("readyz", healthz.Ping)); err != nil {
		return nil, fmt.Errorf("adding probes: %w", err)
	}
	return &Operator{Manager: mgr, Providers: providers, Metrics: m}, nil
}

// EntryNames returns the names of the operator's provider entries, sorted.
func (op *Operator) EntryNames() []string {
	return slices.Sorted(maps.Keys(op.Providers))
}

// Scheme returns the scheme the operator works with: the built-in Kubernetes
// types and this operator's API.
func Scheme() (*runtime.Scheme, error) {
	s := runtime.NewScheme()
	if err := errors.Join(clientgoscheme.AddToScheme(s), crawlv1alpha1.AddToScheme(s)); err != nil {
		return nil, fmt.Errorf("building the scheme: %w", err)
	}
	return s, nil
}

// cacheOptions merges the controllers' cache needs with those of each
// provider type that has entries in cfg.
func cacheOptions(cfg *config.Config, types provider.Types, namespaces []string) (cache.Options, error) {
	opts := controller.CacheOptions()
	kinds := map[reflect.Type]string{}
	for obj := range opts.ByObject {
		kinds[reflect.TypeOf(obj)] = "the controllers"
	}
	for _, t := range types {
		if t.Cache == nil {
			continue
		}
		var entries []*config.Entry
		for i := range cfg.Providers {
			if cfg.Providers[i].Type == t.Name {
				entries = append(entries, &cfg.Providers[i])
			}
		}
		if len(entries) == 0 {
			continue
		}
		for obj, by := range t.Cache(entries) {
			k := reflect.TypeOf(obj)
			if who, taken := kinds[k]; taken {
				return cache.Options{}, fmt.Errorf("provider type %q asks to cache %s, which %s already configure", t.Name, k, who)
			}
			kinds[k] = fmt.Sprintf("provider type %q", t.Name)
			opts.ByObject[obj] = by
		}
	}
	if len(namespaces) > 0 {
		opts.DefaultNamespaces = map[string]cache.Config{}
		for _, ns := range namespaces {
			opts.DefaultNamespaces[ns] = cache.Config{}
		}
	}
	return opts, nil
}
