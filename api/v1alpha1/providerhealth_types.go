package v1alpha1

import (
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// TargetHealth is the verdict of one check of one target of a provider entry:
// a Proxmox VE node, a libvirt host, a zone of the Kubernetes cluster.
type TargetHealth struct {
	// name is the target: a node or host name.
	// +required
	Name string `json:"name"`

	// healthy is true when the target can serve new and existing proxies.
	// +required
	Healthy bool `json:"healthy"`

	// reason is a CamelCase word for the verdict, for example Reachable,
	// Unreachable, Unauthorized or StorageMissing.
	// +optional
	Reason string `json:"reason,omitempty"`

	// message says what is wrong and what to do, in a sentence.
	// +optional
	Message string `json:"message,omitempty"`

	// latency is how long the check of this target took, for example 35ms.
	// +optional
	Latency metav1.Duration `json:"latency,omitzero"`

	// lastCheckTime is when this target was last checked.
	// +optional
	LastCheckTime metav1.Time `json:"lastCheckTime,omitzero"`
}

// ProviderHealthStatus is the outcome of the operator's latest check of one
// provider entry.
type ProviderHealthStatus struct {
	// type is the provider type of the entry, for example proxmox, libvirt or
	// kubernetes.
	// +optional
	Type string `json:"type,omitempty"`

	// targets has one verdict per node or host of the entry, sorted by name.
	// +optional
	// +listType=map
	// +listMapKey=name
	Targets []TargetHealth `json:"targets,omitempty"`

	// lastCheckTime is when the entry was last checked.
	// +optional
	LastCheckTime *metav1.Time `json:"lastCheckTime,omitempty"`

	// conditions hold Healthy: True when the entry can serve (all targets, or
	// some of them: see the reason), False when no target can, Unknown when
	// the provider type has no health check.
	// +optional
	// +listType=map
	// +listMapKey=type
	// +patchStrategy=merge
	// +patchMergeKey=type
	Conditions []metav1.Condition `json:"conditions,omitempty" patchStrategy:"merge" patchMergeKey:"type"`
}

// ProviderHealth reports whether one configured provider entry can serve. The
// operator creates one per entry of its providers configuration, named after
// the entry, refreshes it on an interval and deletes it when the entry leaves
// the configuration. It is read-only for users.
//
// +kubebuilder:object:root=true
// +kubebuilder:subresource:status
// +kubebuilder:resource:scope=Cluster,categories=egress
// +kubebuilder:printcolumn:name="Type",type=string,JSONPath=`.status.type`
// +kubebuilder:printcolumn:name="Healthy",type=string,JSONPath=`.status.conditions[?(@.type=="Healthy")].status`
// +kubebuilder:printcolumn:name="Reason",type=string,JSONPath=`.status.conditions[?(@.type=="Healthy")].reason`
// +kubebuilder:printcolumn:name="Checked",type=date,JSONPath=`.status.lastCheckTime`
// +kubebuilder:printcolumn:name="Message",type=string,JSONPath=`.status.conditions[?(@.type=="Healthy")].message`,priority=1
type ProviderHealth struct {
	metav1.TypeMeta   `json:",inline"`
	metav1.ObjectMeta `json:"metadata,omitempty"`

	// status is the outcome of the latest check.
	// +optional
	Status ProviderHealthStatus `json:"status,omitzero"`
}

// ProviderHealthList is a list of ProviderHealth objects.
//
// +kubebuilder:object:root=true
type ProviderHealthList struct {
	metav1.TypeMeta `json:",inline"`
	metav1.ListMeta `json:"metadata,omitempty"`
	// Items are the ProviderHealth objects.
	Items []ProviderHealth `json:"items"`
}
