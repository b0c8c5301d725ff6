// Package testenv starts the shared envtest control plane (a real
// kube-apiserver and etcd, built by hack/envtest/setup.sh) for the packages
// whose tests need one, and holds the polling helpers those tests use instead
// of sleeping.
package testenv
