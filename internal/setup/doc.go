// Package setup builds the operator: the manager with its scheme and caches,
// one provider per configured entry (through the registered provider types),
// the instrumentation around each provider and the controllers. The binary,
// the simulated labs, the demo, the benchmark and the envtest suites all run
// the operator through New, so that tests exercise the wiring production runs.
//
// gateway.go holds one replica of a pool gateway as the binary's `gateway`
// subcommand runs it in a ProxyGateway's pod (RunGateway): its flags, member
// and bans watches, admin server and shutdown order. The demo and the tests
// that put a gateway in front of real members run it too. The `proxy`
// subcommand, the forward proxy of every member, is internal/proxycmd, which
// the guest binary links without this package's API machinery; the gateway
// shares its serve flags and admin server.
//
// types.go holds the list of provider types this build supports, one line per
// type; it is the only place outside a provider's own package that a new
// provider type touches (docs/providers.md walks through the steps).
package setup
