package v1alpha1

import (
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// ProxyAuth says how clients authenticate to a proxy.
// +kubebuilder:validation:Enum=Basic;None
type ProxyAuth string

const (
	// ProxyAuthBasic requires HTTP basic proxy authentication with credentials
	// that the operator generates into a Secret owned by the Proxy.
	ProxyAuthBasic ProxyAuth = "Basic"
	// ProxyAuthNone serves without authentication. It is accepted only together
	// with allowedSourceRanges, so that no proxy is open to the world by default.
	ProxyAuthNone ProxyAuth = "None"
)

// ProxySpec is what a crawler team asks for. Every field shapes the instance
// (its VM, its cloud-init, its proxy configuration), so the whole spec is
// immutable once the Proxy exists: delete and recreate the Proxy to change it.
//
// +kubebuilder:validation:XValidation:rule="self.auth != 'None' || (has(self.allowedSourceRanges) && size(self.allowedSourceRanges) > 0)",message="auth None needs allowedSourceRanges: a proxy without authentication must be limited to known source addresses"
// +kubebuilder:validation:XValidation:rule="self.auth != 'None' || !has(self.allowedSourceRanges) || self.allowedSourceRanges.all(r, !isCIDR(r) || cidr(r).prefixLength() >= (cidr(r).ip().family() == 4 ? 8 : 32))",message="auth None cannot allow every address: each range must be at least a /8 (IPv4) or a /32 (IPv6), and the operator refuses ranges that together cover more; that would be an open proxy; use auth Basic or name the clients' networks"
type ProxySpec struct {
	// provider is the name of an entry in the operator's providers
	// configuration (a Proxmox VE cluster, a set of libvirt hosts, the
	// Kubernetes cluster itself). The ProviderHealth object of the same name
	// says whether that entry can serve.
	// +required
	// +kubebuilder:validation:MinLength=1
	// +kubebuilder:validation:MaxLength=63
	// +kubebuilder:validation:Pattern=`^[a-z0-9]([-a-z0-9]*[a-z0-9])?$`
	Provider string `json:"provider"`

	// zone is a zone of that provider entry (for example a rack, a site or an
	// uplink). It may be omitted when the entry has exactly one zone.
	// +optional
	// +kubebuilder:validation:MaxLength=63
	Zone string `json:"zone,omitempty"`

	// machineType names a size in the provider entry's machineTypes catalogue
	// (CPUs, memory and disk of the instance).
	// +required
	// +kubebuilder:validation:MinLength=1
	// +kubebuilder:validation:MaxLength=63
	MachineType string `json:"machineType"`

	// image names an operating system image in the provider entry's images
	// catalogue. The proxy software is installed from that image's
	// distribution packages.
	// +required
	// +kubebuilder:validation:MinLength=1
	// +kubebuilder:validation:MaxLength=63
	Image string `json:"image"`

	// port is the TCP port the proxy listens on.
	// +optional
	// +kubebuilder:default=3128
	// +kubebuilder:validation:Minimum=1
	// +kubebuilder:validation:Maximum=65535
	Port int32 `json:"port,omitempty"`

	// auth is how clients authenticate. Basic (the default) generates a
	// username and password into a Secret owned by this Proxy (see
	// status.credentialsSecretName); None serves without authentication and is
	// only accepted together with allowedSourceRanges.
	// +optional
	// +kubebuilder:default=Basic
	Auth ProxyAuth `json:"auth,omitempty"`

	// allowedSourceRanges lists the CIDRs (for example 203.0.113.0/24 or
	// 2001:db8::/32) whose clients may use the proxy. Empty means any source,
	// which is only accepted with auth Basic. With auth None the ranges
	// together may cover at most one IPv4 /8 and one IPv6 /32: admission
	// refuses a wider range, the operator a wider union.
	// +optional
	// +listType=set
	// +kubebuilder:validation:MaxItems=64
	// +kubebuilder:validation:items:MaxLength=43
	// +kubebuilder:validation:items:XValidation:rule="isCIDR(self)",message="must be a CIDR such as 203.0.113.0/24 or 2001:db8::/32"
	AllowedSourceRanges []string `json:"allowedSourceRanges,omitempty"`

	// extraUserData is cloud-init user-data that runs after the operator's
	// own: a #cloud-config document (merged into the operator's, lists
	// appended) or a script starting with #!. It runs on VM providers only
	// and is stored in this object in clear text, so it must not carry
	// secrets.
	// +optional
	// +kubebuilder:validation:MaxLength=32768
	// +kubebuilder:validation:XValidation:rule="self.startsWith('#cloud-config') || self.startsWith('#!')",message="must start with #cloud-config or #! (a script)"
	ExtraUserData string `json:"extraUserData,omitempty"`
}

// ProxyPhase is a one-word summary of where a Proxy is in its life. The
// conditions carry the detail.
// +kubebuilder:validation:Enum=Pending;Provisioning;Ready;Replacing;Failed;Deleting
type ProxyPhase string

const (
	// ProxyPhasePending means the operator has not asked the provider for an
	// instance yet (the spec is being resolved, or credentials generated).
	ProxyPhasePending ProxyPhase = "Pending"
	// ProxyPhaseProvisioning means an instance exists or is being created and
	// has no address yet.
	ProxyPhaseProvisioning ProxyPhase = "Provisioning"
	// ProxyPhaseReady means the instance runs and has an address: the proxy
	// can be used through status.url.
	ProxyPhaseReady ProxyPhase = "Ready"
	// ProxyPhaseReplacing means the instance stopped or vanished and the
	// operator is replacing it.
	ProxyPhaseReplacing ProxyPhase = "Replacing"
	// ProxyPhaseFailed means the operator cannot go on without a human: the
	// Ready condition says why and what to do.
	ProxyPhaseFailed ProxyPhase = "Failed"
	// ProxyPhaseDeleting means the Proxy is being deleted and its instance
	// removed.
	ProxyPhaseDeleting ProxyPhase = "Deleting"
)

// ProxyStatus is what the operator observed.
type ProxyStatus struct {
	// phase is a one-word summary: Pending, Provisioning, Ready, Replacing,
	// Failed or Deleting.
	// +optional
	Phase ProxyPhase `json:"phase,omitempty"`

	// zone is the zone the instance was placed in (spec.zone, or the provider
	// entry's only zone when spec.zone is empty).
	// +optional
	Zone string `json:"zone,omitempty"`

	// instanceID is the provider's identifier of the current instance (for
	// Proxmox VE, node and VMID). Empty until the provider accepted the create.
	// +optional
	InstanceID string `json:"instanceID,omitempty"`

	// instanceName is the deterministic name the operator gave the current
	// instance on the provider.
	// +optional
	InstanceName string `json:"instanceName,omitempty"`

	// node is the hypervisor node, host or Kubernetes node that runs the
	// instance.
	// +optional
	Node string `json:"node,omitempty"`

	// address is the IP address the proxy listens on.
	// +optional
	Address string `json:"address,omitempty"`

	// url is the proxy's URL without credentials, for example
	// http://198.51.100.7:3128. The Secret named in credentialsSecretName holds
	// a ready-to-use URL with credentials.
	// +optional
	URL string `json:"url,omitempty"`

	// credentialsSecretName is the Secret, in the Proxy's namespace, that holds
	// the keys username, password and url (with credentials). Empty with auth
	// None.
	// +optional
	CredentialsSecretName string `json:"credentialsSecretName,omitempty"`

	// replacements counts how many times the instance was replaced after it
	// stopped or vanished. It is also part of the instance name, so that a
	// replacement never collides with its predecessor.
	// +optional
	Replacements int32 `json:"replacements,omitempty"`

	// recentReplacements counts the replacements since
	// replacementWindowStart. The operator waits longer before each one
	// (exponential backoff) and stops with reason ReplacementLoop when there
	// are too many in the window.
	// +optional
	RecentReplacements int32 `json:"recentReplacements,omitempty"`

	// replacementWindowStart is when the first of recentReplacements
	// happened.
	// +optional
	ReplacementWindowStart *metav1.Time `json:"replacementWindowStart,omitempty"`

	// lastReplacementTime is when the instance was last replaced; the
	// successor is created after the backoff from then.
	// +optional
	LastReplacementTime *metav1.Time `json:"lastReplacementTime,omitempty"`

	// instanceCreationTime is when the provider accepted the create of the
	// current instance.
	// +optional
	InstanceCreationTime *metav1.Time `json:"instanceCreationTime,omitempty"`

	// egressPolicyHash identifies the provider entry's egress policy the
	// current instance was made with. An instance keeps the policy it was
	// made with: when the entry's policy changes, the condition
	// EgressPolicyCurrent turns False. Empty for instances made before the
	// operator recorded it.
	// +optional
	EgressPolicyHash string `json:"egressPolicyHash,omitempty"`

	// readyTime is when the current instance first became Ready.
	// +optional
	ReadyTime *metav1.Time `json:"readyTime,omitempty"`

	// egressIP is the address the world sees requests through this proxy
	// come from, as the last probe's check URL reported it. Empty when the
	// provider entry configures no check URL.
	// +optional
	EgressIP string `json:"egressIP,omitempty"`

	// lastProbeTime is when the operator last recorded a probe through the
	// proxy; probeLatency how long that probe took. A probe that passes as
	// the one before did, with the same egress address, is recorded at most
	// every 10 probe intervals (5 minutes at the default 30 s); a failure,
	// the pass after one and a new egress address are recorded at once.
	// Both are cleared while the proxy is not Ready: a new instance is
	// probed as soon as it runs.
	// +optional
	LastProbeTime *metav1.Time `json:"lastProbeTime,omitempty"`
	// +optional
	ProbeLatency *metav1.Duration `json:"probeLatency,omitempty"`

	// probeFailures counts consecutive failed probes; a successful probe
	// resets it. At the operator's failure threshold a pool member is
	// replaced and a lone Proxy is marked (Serving reason ProbeFailed).
	// +optional
	ProbeFailures int32 `json:"probeFailures,omitempty"`

	// observedGeneration is the metadata.generation this status was computed
	// for.
	// +optional
	ObservedGeneration int64 `json:"observedGeneration,omitempty"`

	// conditions hold the detail behind the phase. Ready is True when the
	// proxy can be used; its reason and message say otherwise what is going on
	// and, for a failure, what to do.
	// +optional
	// +listType=map
	// +listMapKey=type
	// +patchStrategy=merge
	// +patchMergeKey=type
	Conditions []metav1.Condition `json:"conditions,omitempty" patchStrategy:"merge" patchMergeKey:"type"`
}

// Proxy is an HTTP egress proxy with its own outbound address, run by the
// operator on a configured provider: a small VM (or pod) that the operator
// creates, configures through cloud-init, watches, replaces when it dies and
// removes when the Proxy is deleted.
//
// +kubebuilder:object:root=true
// +kubebuilder:subresource:status
// +kubebuilder:resource:categories=egress
// +kubebuilder:validation:XValidation:rule="size(self.metadata.name) <= 63",message="metadata.name must be at most 63 characters: it names the instance and the credentials Secret"
// +kubebuilder:printcolumn:name="Phase",type=string,JSONPath=`.status.phase`
// +kubebuilder:printcolumn:name="Provider",type=string,JSONPath=`.spec.provider`
// +kubebuilder:printcolumn:name="Zone",type=string,JSONPath=`.status.zone`
// +kubebuilder:printcolumn:name="Address",type=string,JSONPath=`.status.address`
// +kubebuilder:printcolumn:name="Serving",type=string,JSONPath=`.status.conditions[?(@.type=="Serving")].status`
// +kubebuilder:printcolumn:name="Age",type=date,JSONPath=`.metadata.creationTimestamp`
// +kubebuilder:printcolumn:name="Egress",type=string,JSONPath=`.status.egressIP`,priority=1
// +kubebuilder:printcolumn:name="Node",type=string,JSONPath=`.status.node`,priority=1
// +kubebuilder:printcolumn:name="URL",type=string,JSONPath=`.status.url`,priority=1
// +kubebuilder:printcolumn:name="Reason",type=string,JSONPath=`.status.conditions[?(@.type=="Ready")].reason`,priority=1
type Proxy struct {
	metav1.TypeMeta   `json:",inline"`
	metav1.ObjectMeta `json:"metadata,omitempty"`

	// spec is what the team asks for. It is immutable.
	// +required
	// +kubebuilder:validation:XValidation:rule="self == oldSelf",message="spec is immutable: it shapes the instance; delete and recreate the Proxy to change it"
	Spec ProxySpec `json:"spec"`

	// status is what the operator observed.
	// +optional
	Status ProxyStatus `json:"status,omitzero"`
}

// ProxyList is a list of Proxy objects.
//
// +kubebuilder:object:root=true
type ProxyList struct {
	metav1.TypeMeta `json:",inline"`
	metav1.ListMeta `json:"metadata,omitempty"`
	// Items are the Proxy objects.
	Items []Proxy `json:"items"`
}
