// Package controller holds the operator's control loops:
//
//   - the Proxy reconciler (proxy_*.go): finalizer, spec resolution,
//     credentials, create, observe, replace and delete, with status computed
//     by a pure function (proxy_status.go) and patched once per reconcile;
//   - garbage collection (gc.go): deletes instances whose Proxy is gone;
//   - provider health (providerhealth_*.go): runs each provider's Checker and
//     writes the ProviderHealth objects.
//
// All three talk to infrastructure only through provider.Provider.
package controller
