package kubernetes

import (
	"fmt"
	"maps"
	"slices"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1validation "k8s.io/apimachinery/pkg/apis/meta/v1/validation"
	"k8s.io/apimachinery/pkg/util/validation"
	"k8s.io/apimachinery/pkg/util/validation/field"

	"github.com/egress-proxies/egress-proxies-operator/internal/config"
)

// TypeName is the provider type that runs each Proxy as a pod in the
// operator's own cluster.
const TypeName = "kubernetes"

// DefaultZoneLabel is the node label a zone name is matched against when the
// block gives no node selector for it.
const DefaultZoneLabel = "topology.kubernetes.io/zone"

// Block is the `kubernetes:` block of an entry of type kubernetes.
type Block struct {
	// Namespace is where the proxy pods run. Required.
	Namespace string `json:"namespace"`
	// Image is the container image of the proxy pods. Empty means the
	// operator's own image, which carries the `proxy` subcommand.
	Image string `json:"image,omitempty"`
	// Images maps entries of the catalogue's images to container images;
	// an image not listed here uses Image.
	Images map[string]string `json:"images,omitempty"`
	// Zones maps each catalogue zone to the nodes that serve it. A zone not
	// listed here selects nodes labelled topology.kubernetes.io/zone=<zone>.
	Zones map[string]Zone `json:"zones,omitempty"`
	// Resources overrides, per machine type, the pod's resources. A machine
	// type not listed here requests and is limited to its catalogue CPUs and
	// memory.
	Resources map[string]corev1.ResourceRequirements `json:"resources,omitempty"`
	// HostNetwork runs the proxies in the nodes' network namespace, so that
	// they egress from the node's own address. The proxy port is then also
	// a host port: the scheduler never puts two proxies with the same port
	// on one node.
	HostNetwork bool `json:"hostNetwork,omitempty"`
	// AllowPrivilegedHostPorts lets proxies with hostNetwork listen on a
	// node port below 1024. Off by default: such a port (22, 53, 80, 443 of
	// the node) belongs to the node's own services, and a Proxy's author
	// must not be able to take it; an administrator may allow it.
	AllowPrivilegedHostPorts bool `json:"allowPrivilegedHostPorts,omitempty"`
	// ServiceAccountName is the pods' service account; empty means the
	// namespace's default. The proxy needs no API access, so its token is
	// never mounted.
	ServiceAccountName string `json:"serviceAccountName,omitempty"`
	// ImagePullSecrets are Secrets in Namespace used to pull the image.
	ImagePullSecrets []string `json:"imagePullSecrets,omitempty"`
}

// Zone says which nodes serve a zone.
type Zone struct {
	// NodeSelector are the node labels of the zone.
	NodeSelector map[string]string `json:"nodeSelector"`
}

// NodeSelector returns the node selector of a zone.
func (b *Block) NodeSelector(zone string) map[string]string {
	if z, ok := b.Zones[zone]; ok {
		return z.NodeSelector
	}
	return map[string]string{DefaultZoneLabel: zone}
}

// ImageFor returns the container image for a catalogue image, or "" when the
// operator's own image is meant.
func (b *Block) ImageFor(image string) string {
	if img, ok := b.Images[image]; ok {
		return img
	}
	return b.Image
}

// ResourcesFor returns the pod resources of a machine type.
func (b *Block) ResourcesFor(mt config.MachineType) corev1.ResourceRequirements {
	if r, ok := b.Resources[mt.Name]; ok {
		return r
	}
	list := corev1.ResourceList{
		corev1.ResourceCPU:    *resource.NewQuantity(int64(mt.Cores), resource.DecimalSI),
		corev1.ResourceMemory: *resource.NewQuantity(int64(mt.MemoryMiB)<<20, resource.BinarySI),
	}
	return corev1.ResourceRequirements{Requests: list, Limits: list.DeepCopy()}
}

// Validate implements Block.
func (b *Block) Validate(path *field.Path, e *config.Entry) field.ErrorList {
	var errs field.ErrorList
	if b.Namespace == "" {
		errs = append(errs, field.Required(path.Child("namespace"), "the namespace the proxy pods run in"))
	}
	for _, msg := range validation.IsDNS1123Label(b.Namespace) {
		if b.Namespace != "" {
			errs = append(errs, field.Invalid(path.Child("namespace"), b.Namespace, msg))
		}
	}
	for _, name := range slices.Sorted(maps.Keys(b.Images)) {
		if !slices.Contains(e.Images, name) {
			errs = append(errs, field.NotSupported(path.Child("images").Key(name), name, e.Images))
		}
		if b.Images[name] == "" {
			errs = append(errs, field.Required(path.Child("images").Key(name), "a container image reference"))
		}
	}
	for _, zone := range slices.Sorted(maps.Keys(b.Zones)) {
		p := path.Child("zones").Key(zone)
		if !slices.Contains(e.Zones, zone) {
			errs = append(errs, field.NotSupported(p, zone, e.Zones))
		}
		if len(b.Zones[zone].NodeSelector) == 0 {
			errs = append(errs, field.Required(p.Child("nodeSelector"), "at least one node label"))
		}
		errs = append(errs, metav1validation.ValidateLabels(b.Zones[zone].NodeSelector, p.Child("nodeSelector"))...)
	}
	machineTypes := e.MachineTypeNames()
	for _, name := range slices.Sorted(maps.Keys(b.Resources)) {
		if !slices.Contains(machineTypes, name) {
			errs = append(errs, field.NotSupported(path.Child("resources").Key(name), name, machineTypes))
		}
	}
	if b.ServiceAccountName != "" {
		for _, msg := range validation.IsDNS1123Subdomain(b.ServiceAccountName) {
			errs = append(errs, field.Invalid(path.Child("serviceAccountName"), b.ServiceAccountName, msg))
		}
	}
	for i, s := range b.ImagePullSecrets {
		for _, msg := range validation.IsDNS1123Subdomain(s) {
			errs = append(errs, field.Invalid(path.Child("imagePullSecrets").Index(i), s, msg))
		}
	}
	return errs
}

// String summarises the block for --check-config.
func (b *Block) String() string {
	return fmt.Sprintf("namespace %s, hostNetwork %t, allowPrivilegedHostPorts %t", b.Namespace, b.HostNetwork, b.AllowPrivilegedHostPorts)
}
