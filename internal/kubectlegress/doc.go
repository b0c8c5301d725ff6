// Package kubectlegress is the kubectl plugin `kubectl egress`
// (cmd/kubectl-egress): the fleet at a glance (status), a Proxy's or a
// pool's ready-to-use URLs (url, passwords hidden unless asked), and the
// actions the operator takes from annotations (rotate, retry, release). It
// follows kubectl's conventions: the kubeconfig flags of
// k8s.io/cli-runtime, -n and -A, -o json|yaml|wide, exit code 1 on an error
// that says what to do.
package kubectlegress
