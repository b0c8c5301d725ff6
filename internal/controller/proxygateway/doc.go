// Package proxygateway holds the ProxyGateway reconciler (Reconciler): it
// runs each ProxyGateway as a Deployment of the operator's own image (the
// gateway subcommand) with a Service, a PodDisruptionBudget, a
// NetworkPolicy, a ServiceAccount whose Role reads only the pools'
// published Secrets, and the gateway's credentials Secret (resources.go),
// and patches the status once (status.go).
//
// It shares with the gateway's replica (internal/gateway) only
// api/v1alpha1/published, never its code; with the other loops only
// internal/controller/shared. It imports neither its parent nor its sibling
// internal/controller/proxypool (internal/archtest).
// internal/controller.SetupWithManager registers it, and
// internal/controller.CacheOptions caches its objects (CachedObjects).
package proxygateway
