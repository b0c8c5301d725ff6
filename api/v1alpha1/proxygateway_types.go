package v1alpha1

import (
	corev1 "k8s.io/api/core/v1"
	networkingv1 "k8s.io/api/networking/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// GatewayStrategy is how a gateway picks a member for each plain request and
// each tunnel.
// +kubebuilder:validation:Enum=roundRobin;random;leastConnections
type GatewayStrategy string

const (
	// GatewayRoundRobin takes the members in turn (the default).
	GatewayRoundRobin GatewayStrategy = "roundRobin"
	// GatewayRandom takes a member at random.
	GatewayRandom GatewayStrategy = "random"
	// GatewayLeastConnections takes a member with the fewest requests and
	// tunnels in flight through that gateway replica.
	GatewayLeastConnections GatewayStrategy = "leastConnections"
)

// ProxyGatewaySpec is one endpoint in front of the Serving members of one or
// more ProxyPools: a crawler sends every request to the gateway, which
// rotates them over the members and chains to each member with the member's
// credentials, which the crawler never sees.
//
// +kubebuilder:validation:XValidation:rule="self.auth != 'None' || (has(self.allowedSourceRanges) && size(self.allowedSourceRanges) > 0)",message="auth None needs allowedSourceRanges: a gateway without authentication must be limited to known source addresses"
// +kubebuilder:validation:XValidation:rule="self.auth != 'None' || !has(self.allowedSourceRanges) || self.allowedSourceRanges.all(r, !isCIDR(r) || cidr(r).prefixLength() > 0)",message="auth None cannot allow every address (a /0 range such as 0.0.0.0/0 or ::/0): that is an open proxy; use auth Basic or name the clients' networks"
type ProxyGatewaySpec struct {
	// pools are the names of ProxyPools in the gateway's namespace whose
	// Serving members it sends to (their published Secrets <pool>-proxies).
	// A pool that does not exist yet adds no member until it does.
	// +required
	// +listType=set
	// +kubebuilder:validation:MinItems=1
	// +kubebuilder:validation:MaxItems=16
	// +kubebuilder:validation:items:MaxLength=50
	// +kubebuilder:validation:items:Pattern=`^[a-z0-9]([-a-z0-9]*[a-z0-9])?$`
	Pools []string `json:"pools"`

	// replicas is the number of gateway pods. Every replica places sessions
	// the same way, so any number may serve one crawler.
	// +optional
	// +kubebuilder:default=2
	// +kubebuilder:validation:Minimum=0
	// +kubebuilder:validation:Maximum=100
	Replicas *int32 `json:"replicas,omitempty"`

	// resources are the gateway container's CPU and memory requests and
	// limits. Unset, the gateway asks for 100m CPU and 128Mi and is
	// limited to 512Mi: what its bounded tables take when full, with the
	// default connection cap's idle tunnels and room for plain requests in
	// flight (docs/gateway.md, "Memory"). A memory limit also sets the Go
	// runtime's soft limit (GOMEMLIMIT) to 90% of it, so that the gateway
	// collects garbage harder before it is killed.
	// +optional
	Resources *corev1.ResourceRequirements `json:"resources,omitempty"`

	// strategy picks a member for each plain request and each tunnel:
	// roundRobin (the default), random or leastConnections.
	// +optional
	// +kubebuilder:default=roundRobin
	Strategy GatewayStrategy `json:"strategy,omitempty"`

	// auth is how crawlers authenticate to the gateway. Basic (the default)
	// generates a username and password into the Secret
	// <gateway>-gateway-credentials, whose url key is ready to use; None
	// serves without authentication and is only accepted together with
	// allowedSourceRanges.
	// +optional
	// +kubebuilder:default=Basic
	Auth ProxyAuth `json:"auth,omitempty"`

	// allowedSourceRanges lists the CIDRs whose clients may use the gateway.
	// Empty means any source with the credentials.
	// +optional
	// +listType=set
	// +kubebuilder:validation:MaxItems=64
	// +kubebuilder:validation:items:MaxLength=43
	// +kubebuilder:validation:items:XValidation:rule="isCIDR(self)",message="must be a CIDR such as 203.0.113.0/24 or 2001:db8::/32"
	AllowedSourceRanges []string `json:"allowedSourceRanges,omitempty"`

	// port is the port of the gateway's Service and pods.
	// +optional
	// +kubebuilder:default=3128
	// +kubebuilder:validation:Minimum=1
	// +kubebuilder:validation:Maximum=65535
	Port int32 `json:"port,omitempty"`

	// maxConcurrentPerMember caps the requests and tunnels one member
	// carries at once through each gateway pod. A request whose member is
	// at its cap goes to another member; when every member it may use is at
	// its cap, it is answered 429 with Retry-After (a session does not move
	// for a cap: it gets the 429).
	// +optional
	// +kubebuilder:default=128
	// +kubebuilder:validation:Minimum=1
	// +kubebuilder:validation:Maximum=100000
	MaxConcurrentPerMember int32 `json:"maxConcurrentPerMember,omitempty"`

	// memberHostRequestsPerMinute, when set, caps the requests and tunnels
	// per minute through one member to one destination host, per gateway
	// pod (bursts of up to a second's worth, at least one): so that when one
	// egress address is banned, the others do not take its load all at once
	// and get banned too. Past it, as past maxConcurrentPerMember.
	// +optional
	// +kubebuilder:validation:Minimum=1
	// +kubebuilder:validation:Maximum=600000
	MemberHostRequestsPerMinute int32 `json:"memberHostRequestsPerMinute,omitempty"`

	// maxAttempts bounds the members one request or tunnel tries when a
	// member fails before any byte reached the client (failover); 1 turns
	// failover off.
	// +optional
	// +kubebuilder:default=3
	// +kubebuilder:validation:Minimum=1
	// +kubebuilder:validation:Maximum=10
	MaxAttempts int32 `json:"maxAttempts,omitempty"`

	// ejectAfter member failures in a row take the member out of a pod's
	// picks for ejectSeconds; the pool's probe still decides whether it
	// stays a member.
	// +optional
	// +kubebuilder:default=3
	// +kubebuilder:validation:Minimum=1
	// +kubebuilder:validation:Maximum=100
	EjectAfter int32 `json:"ejectAfter,omitempty"`

	// ejectSeconds is how long an ejected member gets no new request or
	// tunnel.
	// +optional
	// +kubebuilder:default=30
	// +kubebuilder:validation:Minimum=1
	// +kubebuilder:validation:Maximum=3600
	EjectSeconds int32 `json:"ejectSeconds,omitempty"`

	// banStatuses are the answers of a destination to a plain HTTP request
	// that mean it banned the member's egress address: the member gets no
	// request or tunnel to that host for banSeconds, and the request, when
	// idempotent and without a body, goes to another member. 429 by
	// default; add 403 for sites that refuse banned addresses with it. 407,
	// 502 and 503 are a member's own failures (failover), never bans.
	// +optional
	// +kubebuilder:default={429}
	// +listType=set
	// +kubebuilder:validation:MinItems=1
	// +kubebuilder:validation:MaxItems=8
	// +kubebuilder:validation:items:Minimum=400
	// +kubebuilder:validation:items:Maximum=599
	// +kubebuilder:validation:items:XValidation:rule="self != 407 && self != 502 && self != 503",message="407, 502 and 503 are a member's failures (failover), not a destination's ban"
	BanStatuses []int32 `json:"banStatuses,omitempty"`

	// banSeconds is how long a member banned by a destination host (by a
	// ban status, or a crawler's ban report) gets no request or tunnel to
	// that host, in each gateway pod.
	// +optional
	// +kubebuilder:default=300
	// +kubebuilder:validation:Minimum=1
	// +kubebuilder:validation:Maximum=86400
	BanSeconds int32 `json:"banSeconds,omitempty"`

	// bans are an administrator's bans of members from destination hosts
	// (kubectl egress ban): every gateway pod watches this object and sends
	// no request or tunnel to the host through the member until the ban
	// expires, as for a ban it learned itself. An entry that expired is
	// ignored (kubectl egress ban prunes them when it writes). At most 256.
	// +optional
	// +listType=map
	// +listMapKey=pool
	// +listMapKey=member
	// +listMapKey=host
	// +kubebuilder:validation:MaxItems=256
	Bans []GatewayBan `json:"bans,omitempty"`

	// networkPolicy says who may reach the gateway's pods: the operator
	// renders a NetworkPolicy <gateway>-gateway that admits the proxy port
	// from clients and the admin port (/healthz, /readyz, /metrics) from
	// metrics, and nothing else. The node's own traffic (the kubelet's
	// probes) is always admitted by Kubernetes. Without it, the clients
	// are the pods of the gateway's namespace (and allowedSourceRanges),
	// the scrapers the pods of the namespace named monitoring.
	// +optional
	NetworkPolicy *GatewayNetworkPolicy `json:"networkPolicy,omitempty"`
}

// GatewayNetworkPolicy are the peers admitted to a gateway's pods.
type GatewayNetworkPolicy struct {
	// clients may reach the proxy port. Empty: the pods of the gateway's
	// own namespace. The ranges of allowedSourceRanges are always added
	// as ipBlock peers. [{namespaceSelector: {}}] admits every namespace.
	// +optional
	// +kubebuilder:validation:MaxItems=64
	Clients []networkingv1.NetworkPolicyPeer `json:"clients,omitempty"`
	// metrics may reach the admin port (/metrics for Prometheus). Empty:
	// the pods of the namespace named monitoring.
	// +optional
	// +kubebuilder:validation:MaxItems=16
	Metrics []networkingv1.NetworkPolicyPeer `json:"metrics,omitempty"`
}

// GatewayBan keeps one member of a gateway away from one destination host
// until it expires.
type GatewayBan struct {
	// pool is the ProxyPool of the member.
	// +required
	// +kubebuilder:validation:MinLength=1
	// +kubebuilder:validation:MaxLength=50
	// +kubebuilder:validation:Pattern=`^[a-z0-9]([-a-z0-9]*[a-z0-9])?$`
	Pool string `json:"pool"`

	// member is the member's name (the Proxy's name), as the pool's
	// published list names it.
	// +required
	// +kubebuilder:validation:MinLength=1
	// +kubebuilder:validation:MaxLength=253
	// +kubebuilder:validation:Pattern=`^[a-z0-9]([-a-z0-9.]*[a-z0-9])?$`
	Member string `json:"member"`

	// host is the destination host the member must not reach, in lower
	// case and without a port (shop.example.com, 198.51.100.7, 2001:db8::1),
	// as the gateway compares a request's host.
	// +required
	// +kubebuilder:validation:MinLength=1
	// +kubebuilder:validation:MaxLength=253
	// +kubebuilder:validation:Pattern=`^[a-z0-9]([-a-z0-9.:]*[a-z0-9])?$`
	// +kubebuilder:validation:XValidation:rule="!self.contains(':') || isIP(self)",message="a host has no port: a name, an IPv4 or an IPv6 address (without brackets)"
	Host string `json:"host"`

	// expires is when the ban ends.
	// +required
	Expires metav1.Time `json:"expires"`

	// reason says why, for whoever lists the bans; never a credential.
	// +optional
	// +kubebuilder:validation:MaxLength=200
	Reason string `json:"reason,omitempty"`
}

// ProxyGatewayStatus is what the operator observed of the gateway.
type ProxyGatewayStatus struct {
	// endpoint is the gateway's address inside the cluster,
	// http://<service>.<namespace>.svc:<port>, without credentials (the
	// credentials Secret's url key has them).
	// +optional
	Endpoint string `json:"endpoint,omitempty"`
	// credentialsSecretName is the Secret with username, password and url;
	// empty with auth None.
	// +optional
	CredentialsSecretName string `json:"credentialsSecretName,omitempty"`
	// replicas is the number of gateway pods, readyReplicas those ready (a
	// pod is ready only once it has members to send to).
	// +optional
	Replicas int32 `json:"replicas"`
	// +optional
	ReadyReplicas int32 `json:"readyReplicas"`
	// members is the number of Serving members of the gateway's pools,
	// which its pods send to.
	// +optional
	Members int32 `json:"members"`
	// observedGeneration is the generation this status was computed for.
	// +optional
	ObservedGeneration int64 `json:"observedGeneration,omitempty"`
	// conditions: Ready; the reasons are documented in conditions.go.
	// +optional
	// +listType=map
	// +listMapKey=type
	Conditions []metav1.Condition `json:"conditions,omitempty"`
}

// ProxyGateway runs one endpoint (a Deployment of the operator's image, a
// Service and a PodDisruptionBudget) in front of the Serving members of one
// or more ProxyPools: it rotates plain requests and CONNECT tunnels over
// them, chaining to each member with the member's credentials.
//
// +kubebuilder:object:root=true
// +kubebuilder:subresource:status
// +kubebuilder:resource:categories=egress,shortName=pgw
// +kubebuilder:validation:XValidation:rule="size(self.metadata.name) <= 50",message="metadata.name must be at most 50 characters: its objects are named <gateway>-gateway and must stay within 63"
// +kubebuilder:printcolumn:name="Pools",type=string,JSONPath=`.spec.pools`
// +kubebuilder:printcolumn:name="Ready",type=string,JSONPath=`.status.conditions[?(@.type=="Ready")].status`
// +kubebuilder:printcolumn:name="Replicas",type=integer,JSONPath=`.status.readyReplicas`
// +kubebuilder:printcolumn:name="Members",type=integer,JSONPath=`.status.members`
// +kubebuilder:printcolumn:name="Endpoint",type=string,JSONPath=`.status.endpoint`
// +kubebuilder:printcolumn:name="Age",type=date,JSONPath=`.metadata.creationTimestamp`
// +kubebuilder:printcolumn:name="Strategy",type=string,JSONPath=`.spec.strategy`,priority=1
// +kubebuilder:printcolumn:name="Reason",type=string,JSONPath=`.status.conditions[?(@.type=="Ready")].reason`,priority=1
type ProxyGateway struct {
	metav1.TypeMeta   `json:",inline"`
	metav1.ObjectMeta `json:"metadata,omitempty"`

	// spec is what the team asks for.
	// +required
	Spec ProxyGatewaySpec `json:"spec"`

	// status is what the operator observed.
	// +optional
	Status ProxyGatewayStatus `json:"status,omitzero"`
}

// ProxyGatewayList is a list of ProxyGateway objects.
//
// +kubebuilder:object:root=true
type ProxyGatewayList struct {
	metav1.TypeMeta `json:",inline"`
	metav1.ListMeta `json:"metadata,omitempty"`
	// Items are the ProxyGateway objects.
	Items []ProxyGateway `json:"items"`
}
