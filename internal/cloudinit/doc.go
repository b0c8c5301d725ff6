// Package cloudinit renders the cloud-init user-data that turns a fresh VM
// from a stock cloud image into an egress proxy: it installs tinyproxy from
// the image's own distribution packages, writes its configuration (port,
// basic-auth credentials, source allow-list, CONNECT ports), confines it with
// nftables rules for the egress policy, and starts it, then hands over to the
// user's extra user-data, if any. With an Engine (engine.go), it renders
// instead the operator's own forward proxy, the same engine as the
// kubernetes provider's pods: installed from the payload image after its
// digest is checked, run as a systemd service of its own user, with no
// package from a mirror (docs/guest-engine.md). Both forms take their
// nftables rules (egress.go) from the one egress.Policy.
//
// The output holds the proxy password: callers keep it in a
// provider.Sensitive and never log it.
//
// The package ships in the operator and only renders. Parsing user-data back
// (as a simulated guest does) belongs to the test world:
// internal/testing/cloudinitparse.
package cloudinit
