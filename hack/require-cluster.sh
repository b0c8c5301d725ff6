#!/usr/bin/env bash
# Fails with a clear message when kubectl ($KUBECTL) is missing or no cluster
# answers at the current kubeconfig context. Make targets that talk to a
# cluster run it first, so that they fail before doing anything.
#
#   KUBECTL=kubectl hack/require-cluster.sh TARGET
set -euo pipefail

target=${1:?usage: $0 TARGET}
kubectl=${KUBECTL:-kubectl}

fail() { echo "make $target: $*" >&2; exit 1; }

command -v "$kubectl" >/dev/null 2>&1 ||
  fail "kubectl not found: KUBECTL=$kubectl is not an executable on PATH (install kubectl or set KUBECTL=/path/to/kubectl)"
context=$("$kubectl" config current-context 2>/dev/null || true)
"$kubectl" get --raw=/readyz --request-timeout=10s >/dev/null 2>&1 ||
  fail "no cluster answers at the kubeconfig context '${context:-none}' (KUBECONFIG=${KUBECONFIG:-~/.kube/config}); start one, for example 'kind create cluster', or point KUBECONFIG at one"
