// Package v1alpha1 holds the crawl.example.com/v1alpha1 API: Proxy, the
// egress proxy a crawler team asks for; ProxyPool, a number of Proxies from
// one template whose serving members are published as a list; and
// ProviderHealth, the operator's report on each configured provider entry.
// conditions.go holds the reasons of their conditions and the annotations
// the operator reads; a provider type's own target reasons stay in its
// package.
//
// +kubebuilder:object:generate=true
// +groupName=crawl.example.com
package v1alpha1
