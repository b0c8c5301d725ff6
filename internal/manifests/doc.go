// Package manifests holds no code of the operator: its tests render the
// kustomize trees under config/ with the kustomize library, as
// `make build-installer` renders them with the kustomize tool, and check that
// what would be applied fits together.
//
// They check that every rendered document decodes strictly into a kind the
// client-go, apiextensions or crawl.example.com schemes know; that names
// still resolve after kustomize's prefix and namespace transformations (role
// bindings, the Deployment's service account, ConfigMap and Secret volumes);
// that the Deployment mounts the providers configuration where
// --providers-config points and is granted the pod rights in every namespace
// a kubernetes entry names; that the operator runs non-root, read-only and
// without privileges; and that the sample Proxies resolve against the sample
// providers configuration, parsed by the operator's own config package.
package manifests
