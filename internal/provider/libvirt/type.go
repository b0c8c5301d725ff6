package libvirt

import (
	"github.com/egress-proxies/egress-proxies-operator/api/v1alpha1/published"
	"github.com/egress-proxies/egress-proxies-operator/internal/config"
	"github.com/egress-proxies/egress-proxies-operator/internal/provider"
)

// KVM2Type registers the kvm2 provider type: libvirt's RPC protocol over
// SSH.
var KVM2Type = providerType(TypeKVM2)

// KVMType registers the kvm provider type: virsh over SSH.
var KVMType = providerType(TypeKVM)

func providerType(name string) provider.Type {
	return provider.Type{
		Name: name,
		// The guests run tinyproxy, installed by cloud-init.
		Engine:   published.EngineTinyproxy,
		NewBlock: func() config.Block { return &Block{} },
		New: func(e *config.Entry, d provider.Deps) (provider.Provider, error) {
			return New(e, d)
		},
	}
}
