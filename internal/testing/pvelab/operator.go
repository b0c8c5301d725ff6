package pvelab

import (
	"context"
	"fmt"

	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/client-go/rest"
	ctrl "sigs.k8s.io/controller-runtime"

	"github.com/egress-proxies/egress-proxies-operator/internal/controller"
	"github.com/egress-proxies/egress-proxies-operator/internal/provider"
	"github.com/egress-proxies/egress-proxies-operator/internal/provider/proxmox"
	"github.com/egress-proxies/egress-proxies-operator/internal/setup"
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
	// Controller holds the intervals and workers; the setup fills in the
	// rest.
	Controller controller.Options
}

// NewProvider builds the proxmox provider of the lab's entry, as the
// operator's setup would.
func (l *Lab) NewProvider() (provider.Provider, error) {
	return proxmox.Type.New(&l.Config.Providers[0], provider.Deps{})
}

// StartOperator runs the operator against the lab through the operator's
// setup, as the binary wires it. stop ends the run, waits for it and returns
// the manager's error.
func (l *Lab) StartOperator(ctx context.Context, o OperatorOptions) (stop func() error, err error) {
	so := setup.Options{
		RestConfig: o.RestConfig,
		Config:     l.Config,
		Manager:    ctrl.Options{Scheme: o.Scheme},
		Controller: o.Controller,
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
