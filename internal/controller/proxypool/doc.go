// Package proxypool holds the ProxyPool reconciler (Reconciler): it keeps a
// pool's members as Proxies, rotates them within the pool's budgets from a
// pure plan (plan.go, rotation.go), publishes the Serving ones (list.go, in
// the format of api/v1alpha1/published) and patches the status once
// (status.go). What it remembers of each pool between reconciles is in
// memory.go, forgotten when the pool is gone.
//
// It only writes Kubernetes objects: it never reaches a provider, and its
// members' instances are the Proxy reconciler's (internal/controller). It
// shares with the other loops only internal/controller/shared, and imports
// neither its parent nor its sibling internal/controller/proxygateway
// (internal/archtest). internal/controller.SetupWithManager registers it.
package proxypool
