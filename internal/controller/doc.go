// Package controller holds the operator's control loops:
//
//   - the Proxy reconciler (proxy_*.go): finalizer, spec resolution,
//     credentials, create, observe, probe, replace and delete, with status
//     computed by a pure function (proxy_status.go) and patched once per
//     reconcile;
//   - the ProxyPool reconciler (proxypool_*.go): keeps a pool's members as
//     Proxies, rotates them within the pool's budgets from a pure plan
//     (proxypool_plan.go), publishes the Serving ones (proxypool_list.go, in
//     the format of api/v1alpha1/published) and patches the status once;
//   - garbage collection (gc.go): deletes instances whose Proxy is gone;
//   - provider health (providerhealth_*.go): runs each provider's Checker and
//     writes the ProviderHealth objects.
//
// Those that reach infrastructure (the Proxy reconciler, garbage collection,
// provider health) do so only through provider.Provider; the pool
// reconciler only writes Kubernetes objects. What the reconcilers remember
// of each object between reconciles is kept in the one form of
// remembered.go and forgotten when the object is gone.
package controller
