// Package provider is the contract between the operator's controllers and the
// infrastructure that runs proxies: a Proxmox VE cluster, libvirt hosts, the
// Kubernetes cluster itself. A provider is one configured entry of one type;
// the controllers only ever see the Provider interface, the types of this
// package and its error classes, never a provider's SDK or API types.
//
// docs/providers.md walks through the same contract with an example; this
// package's doc comments are the authoritative text.
package provider
