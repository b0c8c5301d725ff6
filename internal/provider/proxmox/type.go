package proxmox

import (
	"github.com/egress-proxies/egress-proxies-operator/api/v1alpha1/published"
	"github.com/egress-proxies/egress-proxies-operator/internal/config"
	"github.com/egress-proxies/egress-proxies-operator/internal/provider"
)

// Type registers the proxmox provider type with the operator's setup. It
// needs nothing from the manager's cache: it talks to the Proxmox VE API only.
var Type = provider.Type{
	Name: TypeName,
	// The guests run tinyproxy, installed by cloud-init.
	Engine:   published.EngineTinyproxy,
	NewBlock: func() config.Block { return &Block{} },
	New: func(e *config.Entry, d provider.Deps) (provider.Provider, error) {
		return New(e, d)
	},
}
