package main

import (
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/egress-proxies/egress-proxies-operator/internal/config"
	"github.com/egress-proxies/egress-proxies-operator/internal/provider"
	"github.com/egress-proxies/egress-proxies-operator/internal/provider/kubernetes"
	"github.com/egress-proxies/egress-proxies-operator/internal/provider/proxmox"
)

// deps are what provider constructors may use. None of them may contact the
// infrastructure at construction: an unreachable provider shows in
// ProviderHealth, it does not stop the operator.
type deps struct {
	// client is the manager's client (cached reads, direct writes).
	client client.Client
	// apiReader reads from the API server.
	apiReader client.Reader
	// ownImage is the operator's own container image (--proxy-image).
	ownImage string
}

// providerType ties a provider type's configuration block to the code that
// builds its provider from a configured entry.
type providerType struct {
	// block returns a pointer to a zero block, for the config package.
	block func() config.Block
	// build returns the provider of one entry.
	build func(e *config.Entry, d deps) (provider.Provider, error)
}

// providerTypes is the one place where provider types are registered.
var providerTypes = map[string]providerType{
	kubernetes.TypeName: {
		block: func() config.Block { return &kubernetes.Block{} },
		build: func(e *config.Entry, d deps) (provider.Provider, error) {
			return kubernetes.New(kubernetes.Options{Entry: e, Client: d.client, APIReader: d.apiReader, DefaultImage: d.ownImage})
		},
	},
	proxmox.TypeName: {
		block: func() config.Block { return &proxmox.Block{} },
		build: func(e *config.Entry, _ deps) (provider.Provider, error) {
			return proxmox.New(proxmox.Options{Entry: e, Log: ctrl.Log.WithName("proxmox")})
		},
	},
}

// registry returns the config.Registry of the registered types.
func registry() config.Registry {
	r := config.Registry{}
	for name, t := range providerTypes {
		r[name] = t.block
	}
	return r
}

// podNamespaces returns the namespaces the kubernetes entries run pods in.
func podNamespaces(cfg *config.Config) []string {
	var out []string
	for _, e := range cfg.Providers {
		if b, ok := e.Block.(*kubernetes.Block); ok {
			out = append(out, b.Namespace)
		}
	}
	return out
}
