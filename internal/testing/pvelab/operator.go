package pvelab

import (
	"context"
	"errors"
	"fmt"

	"github.com/go-logr/logr"
	"github.com/prometheus/client_golang/prometheus"
	"go.opentelemetry.io/otel/trace"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/client-go/rest"
	ctrl "sigs.k8s.io/controller-runtime"
	metricsserver "sigs.k8s.io/controller-runtime/pkg/metrics/server"

	"github.com/egress-proxies/egress-proxies-operator/internal/controller"
	"github.com/egress-proxies/egress-proxies-operator/internal/ownership"
	"github.com/egress-proxies/egress-proxies-operator/internal/provider"
	"github.com/egress-proxies/egress-proxies-operator/internal/provider/proxmox"
	"github.com/egress-proxies/egress-proxies-operator/internal/setup"
	"github.com/egress-proxies/egress-proxies-operator/internal/testing/testenv"
)

// OperatorOptions shape one run of the operator against the lab.
type OperatorOptions struct {
	// RestConfig and Scheme reach the API server.
	RestConfig *rest.Config
	Scheme     *runtime.Scheme
	// ServiceAccount, when set, is the control plane RestConfig reaches:
	// the operator then runs as its ServiceAccount, with the shipped RBAC
	// (config/rbac/role.yaml) bound as config/default binds it for
	// Namespace (testenv.Env.AsOperator), instead of as RestConfig's user.
	// A rule the operator needs and the markers lack fails the run, and so
	// does a right the default install does not give. Tests set it; it
	// needs a Namespace.
	ServiceAccount *testenv.Env
	// Namespace confines the operator's cache; empty watches every
	// namespace.
	Namespace string
	// Provider is reused when set (its caches survive a restart); nil
	// builds a fresh proxmox provider, as a restarted binary would.
	Provider provider.Provider
	// Controller holds the intervals and workers; the setup fills in the
	// rest.
	Controller controller.Options
	// Ownership is the operator's installation identity; nil is the lab's
	// (Lab.Ownership). A second installation on the same lab gets its own.
	Ownership *ownership.Identity
	// Log receives the operator's log lines (manager, controllers and
	// providers); the zero value is ctrl.Log.
	Log logr.Logger
	// Tracer starts the operator's spans; nil traces nothing.
	Tracer trace.Tracer
	// Metrics is the manager's metrics server; the zero value serves none.
	// A run that serves them registers the operator's metrics on
	// Registerer, which should then be controller-runtime's registry (the
	// one the server serves), as the binary does.
	Metrics metricsserver.Options
	// Registerer receives the operator's metrics; nil is a registry of
	// their own that nothing serves.
	Registerer prometheus.Registerer
}

// NewProvider builds the proxmox provider of the lab's entry, as the
// operator's setup would, with the lab's installation identity.
func (l *Lab) NewProvider() (provider.Provider, error) {
	return l.NewProviderOf(l.Ownership)
}

// NewProviderOf builds the proxmox provider of the lab's entry for the
// installation id.
func (l *Lab) NewProviderOf(id *ownership.Identity) (provider.Provider, error) {
	return proxmox.Type.New(&l.Config.Providers[0], provider.Deps{Ownership: id})
}

// StartOperator runs the operator against the lab through the operator's
// setup, as the binary wires it. stop ends the run, waits for it and returns
// the manager's error.
func (l *Lab) StartOperator(ctx context.Context, o OperatorOptions) (stop func() error, err error) {
	restConfig := o.RestConfig
	if o.ServiceAccount != nil {
		if o.Namespace == "" {
			return nil, errors.New("running as the operator's ServiceAccount needs the namespace it serves")
		}
		var err error
		if restConfig, err = o.ServiceAccount.AsOperator(ctx, testenv.RBAC{Namespaces: []string{o.Namespace}}); err != nil {
			return nil, fmt.Errorf("running as the operator's ServiceAccount: %w", err)
		}
	}
	so := setup.Options{
		RestConfig: restConfig,
		Config:     l.Config,
		Manager:    ctrl.Options{Scheme: o.Scheme, Metrics: o.Metrics},
		Registerer: o.Registerer,
		Controller: o.Controller,
		Ownership:  o.Ownership,
		Log:        o.Log,
		Tracer:     o.Tracer,
	}
	if so.Ownership == nil {
		so.Ownership = l.Ownership
	}
	if o.Namespace != "" {
		so.Namespaces = []string{o.Namespace}
	}
	if o.Provider != nil {
		so.Providers = map[string]provider.Provider{l.Config.Providers[0].Name: o.Provider}
	}
	// Tests and the bench start several operators in one process.
	so.Controller.SkipNameValidation = true
	op, err := setup.New(so)
	if err != nil {
		return nil, fmt.Errorf("building the operator: %w", err)
	}
	ctx, cancel := context.WithCancel(ctx)
	done := make(chan error, 1)
	go func() { done <- op.Manager.Start(ctx) }()
	return func() error {
		cancel()
		if err := <-done; err != nil {
			return fmt.Errorf("operator: %w", err)
		}
		return nil
	}, nil
}
