package gateway

// Environment variables of a gateway replica, set by the operator in the
// ProxyGateway's Deployment and read by `egress-proxies-operator gateway`:
// one name for both sides.
const (
	// EnvUsername and EnvPassword are the gateway's own credentials, from
	// its credentials Secret (secretKeyRef); both unset when the gateway
	// has no authentication.
	EnvUsername = "GATEWAY_USERNAME"
	EnvPassword = "GATEWAY_PASSWORD"
	// EnvNamespace is the pod's namespace (the downward API), where its
	// pools are.
	EnvNamespace = "POD_NAMESPACE"
)
