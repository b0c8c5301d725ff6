// Package egress is the one model of a proxy's destination policy: the
// Policy type that the providers configuration decodes into, the CONNECT
// port ranges and their parsing, the built-in deny list, the default
// CONNECT ports, and the decision (deny, then allow, then built-in) that the
// Go forward proxy enforces and that the guests' nftables rules and the
// proxy pods' flags render.
//
// It imports nothing of the project's own, so that every layer can use it:
// internal/config validates into it, internal/forwardproxy enforces it,
// internal/cloudinit and the kubernetes provider render it. Cases is the
// table of decisions each of them is tested against.
package egress
