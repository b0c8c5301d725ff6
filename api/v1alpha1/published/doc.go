// Package published holds the formats the operator publishes for its users,
// so that a crawler, a gateway or a script can read them without importing
// the control plane: the list of a ProxyPool's Serving members (a Secret and
// a ConfigMap, ListName), the keys of a Proxy's credentials Secret, and the
// one way a proxy's URL is written. It imports only the standard library.
package published
