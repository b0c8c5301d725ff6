package published

import "strconv"

// The command line of a gateway replica: the operator writes it into a
// ProxyGateway's Deployment and `egress-proxies-operator gateway` parses
// it, both with these names, so that neither side imports the other.
const (
	// EnvGatewayUsername and EnvGatewayPassword are the gateway's own
	// credentials, from its credentials Secret (secretKeyRef); both unset
	// when the gateway has no authentication.
	EnvGatewayUsername = "GATEWAY_USERNAME"
	EnvGatewayPassword = "GATEWAY_PASSWORD"
	// EnvPodNamespace is the pod's namespace (the downward API), where its
	// pools are.
	EnvPodNamespace = "POD_NAMESPACE"
)

// Flags of the gateway subcommand that the operator sets.
const (
	GatewayFlagListen              = "listen"
	GatewayFlagAdminListen         = "admin-listen"
	GatewayFlagPools               = "pools"
	GatewayFlagStrategy            = "strategy"
	GatewayFlagGateway             = "gateway"
	GatewayFlagAllowedSourceRanges = "allowed-source-ranges"
	GatewayFlagMaxPerMember        = "max-per-member"
	GatewayFlagHostPerMinute       = "member-host-requests-per-minute"
	GatewayFlagMaxAttempts         = "max-attempts"
	GatewayFlagEjectAfter          = "eject-after"
	GatewayFlagEjectFor            = "eject-for"
	GatewayFlagBanStatuses         = "ban-statuses"
	GatewayFlagBanFor              = "ban-for"
)

// Flag writes a flag and its value as one argument, --name=value.
func Flag(name, value string) string { return "--" + name + "=" + value }

// FlagInt is Flag for an integer, with unit (such as "s") after it.
func FlagInt(name string, value int, unit string) string {
	return Flag(name, strconv.Itoa(value)+unit)
}
