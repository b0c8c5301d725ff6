// Package testenv starts the shared envtest control plane (a real
// kube-apiserver and etcd, built by hack/envtest/setup.sh) for the packages
// whose tests need one (Main, Need), and AsOperator, which binds the shipped
// RBAC as the install does and impersonates the operator's ServiceAccount.
// The tests poll with internal/testing/poll.
package testenv
