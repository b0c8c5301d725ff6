#!/usr/bin/env bash
# Creates (or updates) the Secret that holds the Proxmox VE API token and CA
# certificate, after checking the files' shape. It never prints the secret.
#
#   hack/proxmox-secret.sh TOKEN_FILE CA_FILE [NAMESPACE] [SECRET_NAME]
#
# TOKEN_FILE: exactly one line, user@realm!tokenid=secret
# CA_FILE:    a PEM file with at least one certificate
set -euo pipefail

token_file=${1:?usage: $0 TOKEN_FILE CA_FILE [NAMESPACE] [SECRET_NAME]}
ca_file=${2:?usage: $0 TOKEN_FILE CA_FILE [NAMESPACE] [SECRET_NAME]}
namespace=${3:-egress-proxies-system}
name=${4:-egress-proxies-proxmox}

fail() { echo "proxmox-secret: $*" >&2; exit 1; }

[ -r "$token_file" ] || fail "cannot read the token file $token_file"
[ -r "$ca_file" ] || fail "cannot read the CA file $ca_file"
lines=$(grep -c '' "$token_file" || true)
[ "$lines" = 1 ] || fail "$token_file must hold exactly one line (it has $lines)"
# The pattern is checked without echoing the line.
grep -Eq '^[^@[:space:]]+@[^!@[:space:]]+![^=[:space:]]+=[^[:space:]]+[[:space:]]*$' "$token_file" ||
  fail "$token_file is not of the form user@realm!tokenid=secret"
grep -q 'BEGIN CERTIFICATE' "$ca_file" || fail "$ca_file holds no PEM certificate (BEGIN CERTIFICATE)"

command -v kubectl >/dev/null 2>&1 || fail "kubectl is not on PATH"
# --dry-run + apply creates or updates; the output names the Secret only.
kubectl -n "$namespace" create secret generic "$name" \
  --from-file=token="$token_file" --from-file=ca.pem="$ca_file" \
  --dry-run=client -o yaml | kubectl apply -f - >/dev/null
echo "proxmox-secret: secret $namespace/$name holds token and ca.pem (mounted at /etc/egress-proxies/proxmox)"
