package setup

import (
	"github.com/egress-proxies/egress-proxies-operator/internal/provider"
	"github.com/egress-proxies/egress-proxies-operator/internal/provider/kubernetes"
	"github.com/egress-proxies/egress-proxies-operator/internal/provider/libvirt"
	"github.com/egress-proxies/egress-proxies-operator/internal/provider/proxmox"
)

// Types are the provider types this build of the operator supports. A new
// provider type is one line here, naming the Type its own package exports.
var Types = provider.Types{
	kubernetes.Type,
	libvirt.KVMType,
	libvirt.KVM2Type,
	proxmox.Type,
}
