package v1alpha1

import (
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/intstr"
)

// ProxyPoolSpec is what a crawler team asks for: a number of proxies made
// from one template, spread over provider entries and zones, replaced when
// they age or fail.
//
// +kubebuilder:validation:XValidation:rule="!(has(self.rotation) && has(self.rotation.maxSurge) && string(self.rotation.maxSurge) in ['0', '0%'] && (!has(self.rotation.maxUnavailable) || string(self.rotation.maxUnavailable) in ['0', '0%']))",message="rotation.maxSurge 0 needs a rotation.maxUnavailable above 0: otherwise a rotation could never make progress"
type ProxyPoolSpec struct {
	// replicas is how many member Proxies the pool keeps. The scale
	// subresource sets it (kubectl scale proxypool/x --replicas=20).
	// +optional
	// +kubebuilder:default=1
	// +kubebuilder:validation:Minimum=0
	// +kubebuilder:validation:Maximum=1000
	Replicas *int32 `json:"replicas,omitempty"`

	// template is the Proxy every member is made from. Its provider and zone
	// are the default placement; entries of placement override them.
	// +required
	Template ProxyTemplate `json:"template"`

	// placement spreads the members over provider entries and zones. Each
	// member goes to one entry, in proportion to the weights (an even spread
	// when every weight is the default 1), so that losing one hypervisor or
	// uplink takes only its share of the pool. Empty means every member uses
	// the template's provider and zone.
	// +optional
	// +listType=atomic
	// +kubebuilder:validation:MaxItems=32
	Placement []PlacementEntry `json:"placement,omitempty"`

	// rotation says when members are replaced and how many at once.
	// +optional
	Rotation *RotationPolicy `json:"rotation,omitempty"`
}

// ProxyTemplate is the template of the pool's members.
type ProxyTemplate struct {
	// metadata holds labels and annotations copied to every member.
	// +optional
	Metadata ProxyTemplateMetadata `json:"metadata,omitzero"`

	// spec is the members' Proxy spec. With placement, each member's provider
	// and zone come from its placement entry.
	// +required
	Spec ProxySpec `json:"spec"`
}

// ProxyTemplateMetadata is the part of a member's metadata the template sets.
type ProxyTemplateMetadata struct {
	// labels are added to every member (the pool adds its own label
	// crawl.example.com/pool as well).
	// +optional
	Labels map[string]string `json:"labels,omitempty"`
	// annotations are added to every member.
	// +optional
	Annotations map[string]string `json:"annotations,omitempty"`
}

// PlacementEntry is one place members can go.
type PlacementEntry struct {
	// provider is a provider entry; empty means the template's provider.
	// +optional
	// +kubebuilder:validation:MaxLength=63
	// +kubebuilder:validation:Pattern=`^([a-z0-9]([-a-z0-9]*[a-z0-9])?)?$`
	Provider string `json:"provider,omitempty"`
	// zone is a zone of that entry; empty means the template's zone (or the
	// entry's only zone).
	// +optional
	// +kubebuilder:validation:MaxLength=63
	Zone string `json:"zone,omitempty"`
	// weight is this place's share of the members relative to the others.
	// +optional
	// +kubebuilder:default=1
	// +kubebuilder:validation:Minimum=1
	// +kubebuilder:validation:Maximum=100
	Weight int32 `json:"weight,omitempty"`
}

// RotationPolicy says when members are replaced and how many may be replaced
// at once. A replacement is surge first by default: the new member serves
// before the old one is deleted.
type RotationPolicy struct {
	// maxAge replaces a member once it is that old (for example 24h), so
	// that the egress addresses of the pool change over time. Empty means
	// members are replaced only when they fail, the template changes, or a
	// rotation is asked for.
	// +optional
	MaxAge *metav1.Duration `json:"maxAge,omitempty"`
	// maxSurge is how many members may exist above replicas during a
	// rotation: an absolute number or a percentage of replicas, rounded up.
	// Default 1.
	// +optional
	// +kubebuilder:validation:XIntOrString
	MaxSurge *intstr.IntOrString `json:"maxSurge,omitempty"`
	// maxUnavailable is how many members may be out of service during a
	// rotation (an old member deleted before its successor serves): an
	// absolute number or a percentage of replicas, rounded down. Default 0.
	// +optional
	// +kubebuilder:validation:XIntOrString
	MaxUnavailable *intstr.IntOrString `json:"maxUnavailable,omitempty"`
}

// ProxyPoolStatus is what the operator observed of the pool.
type ProxyPoolStatus struct {
	// replicas is how many members exist (the scale subresource's status).
	// +optional
	Replicas int32 `json:"replicas"`
	// desired is spec.replicas as last acted upon.
	// +optional
	Desired int32 `json:"desired"`
	// ready is how many members are Ready (the instance runs).
	// +optional
	Ready int32 `json:"ready"`
	// serving is how many members are Serving (the probe through the proxy
	// passed): the length of the published list.
	// +optional
	Serving int32 `json:"serving"`
	// distinctEgressAddresses is how many distinct egress addresses the
	// Serving members have, as seen by the probe's check URL.
	// +optional
	DistinctEgressAddresses int32 `json:"distinctEgressAddresses"`
	// selector is the label selector of the members, for the scale
	// subresource.
	// +optional
	Selector string `json:"selector,omitempty"`
	// rotations counts members replaced by rotation (age, request, template
	// change or failed probes).
	// +optional
	Rotations int64 `json:"rotations,omitempty"`
	// nextMemberSerial is the serial number the next member gets. Members
	// are named after the pool's UID and their serial, which is never
	// reused.
	// +optional
	NextMemberSerial int64 `json:"nextMemberSerial,omitempty"`
	// listSecretName is the Secret with the published list (with
	// credentials); listConfigMapName the ConfigMap with the same list
	// without credentials.
	// +optional
	ListSecretName string `json:"listSecretName,omitempty"`
	// +optional
	ListConfigMapName string `json:"listConfigMapName,omitempty"`
	// observedGeneration is the generation this status was computed for.
	// +optional
	ObservedGeneration int64 `json:"observedGeneration,omitempty"`
	// conditions: Ready (every desired member serves), Rotating and
	// EgressDistinct; the reasons are documented in conditions.go.
	// +optional
	// +listType=map
	// +listMapKey=type
	Conditions []metav1.Condition `json:"conditions,omitempty"`
}

// ProxyPool keeps a number of Proxies made from one template, spreads them
// over provider entries and zones, checks them through the proxy, rotates
// them, and publishes the list of serving ones in a Secret and a ConfigMap.
//
// +kubebuilder:object:root=true
// +kubebuilder:subresource:status
// +kubebuilder:subresource:scale:specpath=.spec.replicas,statuspath=.status.replicas,selectorpath=.status.selector
// +kubebuilder:resource:categories=egress,shortName=ppool
// +kubebuilder:validation:XValidation:rule="size(self.metadata.name) <= 50",message="metadata.name must be at most 50 characters: members are named <pool>-<hash> and must stay within 63"
// +kubebuilder:printcolumn:name="Desired",type=integer,JSONPath=`.spec.replicas`
// +kubebuilder:printcolumn:name="Ready",type=integer,JSONPath=`.status.ready`
// +kubebuilder:printcolumn:name="Serving",type=integer,JSONPath=`.status.serving`
// +kubebuilder:printcolumn:name="Age",type=date,JSONPath=`.metadata.creationTimestamp`
// +kubebuilder:printcolumn:name="Egress",type=integer,JSONPath=`.status.distinctEgressAddresses`,priority=1
// +kubebuilder:printcolumn:name="Reason",type=string,JSONPath=`.status.conditions[?(@.type=="Ready")].reason`,priority=1
type ProxyPool struct {
	metav1.TypeMeta   `json:",inline"`
	metav1.ObjectMeta `json:"metadata,omitempty"`

	// spec is what the team asks for.
	// +required
	Spec ProxyPoolSpec `json:"spec"`

	// status is what the operator observed.
	// +optional
	Status ProxyPoolStatus `json:"status,omitzero"`
}

// ProxyPoolList is a list of ProxyPool objects.
//
// +kubebuilder:object:root=true
type ProxyPoolList struct {
	metav1.TypeMeta `json:",inline"`
	metav1.ListMeta `json:"metadata,omitempty"`
	// Items are the ProxyPool objects.
	Items []ProxyPool `json:"items"`
}
