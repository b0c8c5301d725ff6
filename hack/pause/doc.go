// Command pause is the test cluster's pod sandbox process
// (internal/testing/kubelab): it does nothing until SIGTERM or SIGINT, then
// exits 0. Built static (CGO_ENABLED=0) and put in a one-layer image by
// hack/image, so that the cluster needs no registry.
package main
