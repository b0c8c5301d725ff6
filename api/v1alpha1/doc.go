// Package v1alpha1 holds the crawl.example.com/v1alpha1 API: Proxy, the
// egress proxy a crawler team asks for, and ProviderHealth, the operator's
// report on each configured provider entry.
//
// +kubebuilder:object:generate=true
// +groupName=crawl.example.com
package v1alpha1
