// Package controller holds the operator's control loops and registers them
// (SetupWithManager, CacheOptions). What lives where:
//
//   - internal/controller (this package): the loops that reach
//     infrastructure, and share live state (the ownership gate,
//     ownership_gate.go, and the log of refused provider reads,
//     refusals.go):
//   - the Proxy reconciler (proxy_*.go): finalizer, spec resolution,
//     credentials, create (in line for a slot of its entry,
//     proxy_slots.go and proxy_shares.go), observe, probe
//     (proxy_probe_runs.go), replace (proxy_replacement.go) and
//     delete, with status computed by a pure function (proxy_status.go)
//     and patched once per reconcile;
//   - garbage collection (gc.go): deletes instances whose Proxy is gone;
//   - provider health (providerhealth_*.go): runs each provider's Checker
//     and writes the ProviderHealth objects;
//   - internal/controller/proxypool: the ProxyPool reconciler, which keeps a
//     pool's members as Proxies, rotates them within the pool's budgets from
//     a pure plan, publishes the Serving ones (in the format of
//     api/v1alpha1/published) and patches the status once;
//   - internal/controller/proxygateway: the ProxyGateway reconciler, which
//     runs each gateway as a Deployment of the operator's own image with its
//     Service, PodDisruptionBudget, NetworkPolicy, RBAC and credentials;
//   - internal/controller/shared: the few helpers more than one loop needs
//     (the managed-by label, the cache delay, generated credentials, the
//     canonical form of an egress policy, Memo).
//
// The loops' packages import internal/controller/shared and nothing of each
// other or of this package (internal/archtest). Those that reach
// infrastructure (the Proxy reconciler, garbage collection, provider
// health) do so only through provider.Provider; the pool and gateway
// reconcilers only write Kubernetes objects. What the Proxy reconciler
// remembers of each object between reconciles is kept in the one form of
// remembered.go (shared.Memo) and forgotten when the object is gone.
package controller
