// Package proxycmd runs the product's forward proxy as a command: its
// flags, the checks that refuse an open proxy, its metrics, and serving
// its client and admin ports in shutdown order. It is the one engine of
// every member: the operator's `proxy` subcommand runs it in a kubernetes
// member's pod, and the guest binary cmd/egress-proxy runs it in a VM
// member (docs/guest-engine.md).
//
// It imports the forward proxy and the destination policy, never the API
// machinery (client-go, controller-runtime), so that the guest binary,
// which links only this package, stays small; internal/archtest holds it
// to that. proxycmd.go holds Run and its flags; serve.go the pieces the
// gateway's replica (internal/setup) shares with it: the client port's
// limit flags, the admin server and ServeWithAdmin.
package proxycmd
