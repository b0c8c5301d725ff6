// Package kubernetes is the provider that runs each Proxy as a pod in the
// operator's own cluster, for teams whose cluster nodes have the outbound
// addresses they want. The pod runs the operator's own image with the `proxy`
// subcommand; with hostNetwork it egresses from its node's address.
//
// The provider keeps the contract of internal/provider: a pod is ours only
// when it carries the operator's labels and the owner annotations and their
// signature (AnnotationSignature) verifies with the installation's key, Create
// adopts only such a pod, and Delete and ListByTag never touch another.
package kubernetes
