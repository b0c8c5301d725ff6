#!/usr/bin/env bash
# Creates (or updates) the Secret proxmox-token, which the operator mounts
# read-only at /etc/proxy-operator/proxmox: key token (the API token) and key
# ca.pem (the CA of the API certificate). It checks the files' shape first and
# never prints the token.
#
#   PROXMOX_TOKEN_FILE=./token PROXMOX_CA_FILE=./ca.pem [KUBECTL=kubectl] \
#   [NAMESPACE=egress-proxies-system] hack/proxmox-token-secret.sh
#
# PROXMOX_TOKEN_FILE: exactly one line, user@realm!tokenid=secret
# PROXMOX_CA_FILE:    a PEM file with at least one certificate
set -euo pipefail

kubectl=${KUBECTL:-kubectl}
namespace=${NAMESPACE:-egress-proxies-system}
name=proxmox-token

fail() { echo "make proxmox-token-secret: $*" >&2; exit 1; }

token_file=${PROXMOX_TOKEN_FILE:-}
ca_file=${PROXMOX_CA_FILE:-}
[ -n "$token_file" ] || fail "set PROXMOX_TOKEN_FILE to a file holding the API token (one line user@realm!tokenid=secret)"
[ -n "$ca_file" ] || fail "set PROXMOX_CA_FILE to the PEM file of the CA that signed the API certificate"
[ -f "$token_file" ] && [ -r "$token_file" ] || fail "cannot read the token file PROXMOX_TOKEN_FILE=$token_file"
[ -f "$ca_file" ] && [ -r "$ca_file" ] || fail "cannot read the CA file PROXMOX_CA_FILE=$ca_file"
# Shape checks that never echo the file's content.
lines=$(grep -c '' "$token_file" || true)
[ "$lines" = 1 ] || fail "the token file $token_file must hold exactly one line (it has $lines)"
grep -Eq '^[^@[:space:]!=]+@[^@[:space:]!=]+![^@[:space:]!=]+=[^[:space:]]+[[:space:]]*$' "$token_file" ||
  fail "the token file $token_file is not of the form user@realm!tokenid=secret"
grep -q 'BEGIN CERTIFICATE' "$ca_file" || fail "the CA file $ca_file holds no PEM certificate (no BEGIN CERTIFICATE line)"

KUBECTL=$kubectl "$(dirname "$0")/require-cluster.sh" proxmox-token-secret
"$kubectl" get namespace "$namespace" >/dev/null 2>&1 ||
  fail "namespace $namespace does not exist: run 'make deploy' first, or set NAMESPACE"
# Client-side dry run piped into apply: creates or updates; the output names
# the Secret only.
"$kubectl" -n "$namespace" create secret generic "$name" \
  --from-file=token="$token_file" --from-file=ca.pem="$ca_file" \
  --dry-run=client -o yaml | "$kubectl" apply -f - >/dev/null
echo "make proxmox-token-secret: Secret $namespace/$name holds token and ca.pem (mounted at /etc/proxy-operator/proxmox)"
