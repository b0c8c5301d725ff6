package main

import (
	"github.com/egress-proxies/egress-proxies-operator/internal/config"
	"github.com/egress-proxies/egress-proxies-operator/internal/provider"
)

// providerType ties a provider type's configuration block to the code that
// builds its provider from a configured entry.
type providerType struct {
	// block returns a pointer to a zero block, for the config package.
	block func() config.Block
	// build returns the provider of one entry. It must not contact the
	// infrastructure: an unreachable provider shows in ProviderHealth, it
	// does not stop the operator.
	build func(e *config.Entry) (provider.Provider, error)
}

// providerTypes is the one place where provider types are registered. The
// proxmox, libvirt and kubernetes types are added here as they land; until
// then a providers configuration has no type to name, and the operator says
// so at start.
var providerTypes = map[string]providerType{}

// registry returns the config.Registry of the registered types.
func registry() config.Registry {
	r := config.Registry{}
	for name, t := range providerTypes {
		r[name] = t.block
	}
	return r
}
