package main

import (
	"context"

	"github.com/go-logr/logr"
	"k8s.io/client-go/dynamic"
	"k8s.io/client-go/kubernetes"
	ctrl "sigs.k8s.io/controller-runtime"

	"github.com/egress-proxies/egress-proxies-operator/internal/setup"
)

// runGateway runs `egress-proxies-operator gateway`, a pool gateway's
// replica (setup.RunGateway), until ctx is done; then it drains and
// returns nil. It reaches the API server as its pod's ServiceAccount.
func runGateway(ctx context.Context, args []string, getenv func(string) string, log logr.Logger) error {
	return setup.RunGateway(ctx, args, setup.GatewayEnv{Getenv: getenv, Clients: inClusterClients, Log: log, Version: version})
}

// inClusterClients is how the gateway pod reaches the API server.
func inClusterClients() (setup.GatewayClients, error) {
	rc, err := ctrl.GetConfig()
	if err != nil {
		return setup.GatewayClients{}, err
	}
	core, err := kubernetes.NewForConfig(rc)
	if err != nil {
		return setup.GatewayClients{}, err
	}
	dyn, err := dynamic.NewForConfig(rc)
	if err != nil {
		return setup.GatewayClients{}, err
	}
	return setup.GatewayClients{Core: core, Dynamic: dyn}, nil
}
