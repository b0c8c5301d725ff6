// Package cluster is the cluster tier of `make test`: the operator as it
// ships, on a real single-node cluster (internal/testing/kubelab). It builds
// the image with `make image` (the words the README gives users), imports
// it into the node, applies `kustomize build config/default` with only the
// providers configuration changed (as docs/configuration.md tells users),
// and proves it there: the shipped RBAC is the only RBAC, with real
// ServiceAccount tokens; the `kubernetes` provider's pods really run and
// really proxy (200 with the Secret's credentials, 407 without, 403 for a
// denied destination), with and without hostNetwork; a proxmox entry
// pointing at the Proxmox VE simulator on the node's network serves a pod
// that crawls through it (hack/crawler); a ProxyPool of three publishes its
// list; deleting everything leaves no pod, Secret, ConfigMap or VM behind.
//
// It needs root on Linux; it skips otherwise, except under CI=true, where it
// fails. On failure it prints the cluster's events, the operator's logs and
// the kubelet's last lines.
package cluster
