// Package pvelab starts a simulated Proxmox VE cluster (internal/testing/pvesim)
// ready for the proxmox provider: a token with the privileges the provider
// needs (proxmox.RootPrivileges, and SeedStoragePrivileges on the seeds), its CA and token files, and the providers configuration that points
// an operator at it. The end-to-end tests, `make demo` and `make bench` use
// it, so that all three exercise the same cluster.
package pvelab
