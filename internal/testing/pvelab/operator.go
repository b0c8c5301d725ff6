package pvelab

import (
	"context"
	"fmt"

	"github.com/prometheus/client_golang/prometheus"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/client-go/rest"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/cache"
	metricsserver "sigs.k8s.io/controller-runtime/pkg/metrics/server"

	"github.com/egress-proxies/egress-proxies-operator/internal/controller"
	"github.com/egress-proxies/egress-proxies-operator/internal/metrics"
	"github.com/egress-proxies/egress-proxies-operator/internal/provider"
	"github.com/egress-proxies/egress-proxies-operator/internal/provider/instrumented"
	"github.com/egress-proxies/egress-proxies-operator/internal/provider/proxmox"
)

// OperatorOptions shape one run of the operator against the lab.
type OperatorOptions struct {
	// RestConfig and Scheme reach the API server.
	RestConfig *rest.Config
	Scheme     *runtime.Scheme
	// Namespace confines the operator's cache; empty watches every
	// namespace.
	Namespace string
	// Provider is reused when set (its caches survive a restart); nil
	// builds a fresh proxmox provider, as a restarted binary would.
	Provider provider.Provider
	// Controller holds the intervals and workers; its Config, Providers
	// and Metrics are filled in.
	Controller controller.Options
}

// NewProvider builds the proxmox provider of the lab's entry.
func (l *Lab) NewProvider() (provider.Provider, error) {
	return proxmox.New(proxmox.Options{Entry: &l.Config.Providers[0]})
}

// StartOperator runs the controllers with the lab's proxmox provider,
// instrumented as the binary wires them. stop ends the run, waits for it and
// returns the manager's error.
func (l *Lab) StartOperator(ctx context.Context, o OperatorOptions) (stop func() error, err error) {
	cacheOpts := controller.CacheOptions()
	if o.Namespace != "" {
		cacheOpts.DefaultNamespaces = map[string]cache.Config{o.Namespace: {}}
	}
	mgr, err := ctrl.NewManager(o.RestConfig, ctrl.Options{
		Scheme: o.Scheme, Metrics: metricsserver.Options{BindAddress: "0"}, HealthProbeBindAddress: "0", Cache: cacheOpts,
	})
	if err != nil {
		return nil, fmt.Errorf("building the manager: %w", err)
	}
	m, err := metrics.New(prometheus.NewRegistry())
	if err != nil {
		return nil, fmt.Errorf("building the metrics: %w", err)
	}
	p := o.Provider
	if p == nil {
		if p, err = l.NewProvider(); err != nil {
			return nil, fmt.Errorf("building the proxmox provider: %w", err)
		}
	}
	e := &l.Config.Providers[0]
	co := o.Controller
	co.Config, co.Metrics = l.Config, m
	co.Providers = map[string]provider.Provider{e.Name: instrumented.Wrap(p, instrumented.Options{Name: e.Name, Type: e.Type, Metrics: m})}
	// Tests and the bench start several operators in one process.
	co.SkipNameValidation = true
	if err := controller.SetupWithManager(mgr, co); err != nil {
		return nil, fmt.Errorf("setting up the controllers: %w", err)
	}
	ctx, cancel := context.WithCancel(ctx)
	done := make(chan error, 1)
	go func() { done <- mgr.Start(ctx) }()
	return func() error {
		cancel()
		if err := <-done; err != nil {
			return fmt.Errorf("operator: %w", err)
		}
		return nil
	}, nil
}
