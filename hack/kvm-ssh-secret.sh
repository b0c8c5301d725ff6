#!/usr/bin/env bash
# Creates (or updates) the Secret kvm-ssh, which the operator mounts
# read-only at /etc/proxy-operator/kvm-ssh for the libvirt provider types
# (kvm, kvm2): key ssh-privatekey (the private key the operator logs in to
# the hosts with) and, when given, key known_hosts (the hosts' public keys).
# It checks the files' shape first and never prints the key.
#
#   KVM_SSH_KEY_FILE=./id_ed25519 [KVM_SSH_KNOWN_HOSTS_FILE=./known_hosts] \
#   [KUBECTL=kubectl] [NAMESPACE=egress-proxies-system] hack/kvm-ssh-secret.sh
set -euo pipefail

kubectl=${KUBECTL:-kubectl}
namespace=${NAMESPACE:-egress-proxies-system}
name=kvm-ssh

fail() { echo "make kvm-ssh-secret: $*" >&2; exit 1; }

key_file=${KVM_SSH_KEY_FILE:-}
known_hosts=${KVM_SSH_KNOWN_HOSTS_FILE:-}
[ -n "$key_file" ] || fail "set KVM_SSH_KEY_FILE to the SSH private key file the operator logs in to the libvirt hosts with"
[ -f "$key_file" ] && [ -r "$key_file" ] || fail "cannot read the key file KVM_SSH_KEY_FILE=$key_file"
grep -Eq -- '-----BEGIN ([A-Z]+ )?PRIVATE KEY-----' "$key_file" ||
  fail "the key file $key_file holds no private key (no BEGIN ... PRIVATE KEY line; a .pub file is the public half)"
args=(--from-file=ssh-privatekey="$key_file")
if [ -n "$known_hosts" ]; then
  [ -f "$known_hosts" ] && [ -r "$known_hosts" ] || fail "cannot read the known hosts file KVM_SSH_KNOWN_HOSTS_FILE=$known_hosts"
  args+=(--from-file=known_hosts="$known_hosts")
fi

KUBECTL=$kubectl "$(dirname "$0")/require-cluster.sh" kvm-ssh-secret
"$kubectl" get namespace "$namespace" >/dev/null 2>&1 ||
  fail "namespace $namespace does not exist: run 'make deploy' first, or set NAMESPACE"
"$kubectl" -n "$namespace" create secret generic "$name" "${args[@]}" \
  --dry-run=client -o yaml | "$kubectl" apply -f - >/dev/null
echo "make kvm-ssh-secret: Secret $namespace/$name holds ssh-privatekey${known_hosts:+ and known_hosts} (mounted at /etc/proxy-operator/kvm-ssh)"
