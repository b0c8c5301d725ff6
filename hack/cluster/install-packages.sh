#!/usr/bin/env bash
# Installs the Debian packages the test cluster (internal/testing/kubelab)
# needs, only those that are missing: the container runtime and the CNI
# plugins, and the tools the world runs. A developer's machine that has them
# is left alone.
#
# containerd's postinst may start the machine's own containerd service:
# harmless, the world never talks to it (its containerd has its own root,
# state and sockets under the world's directory).
set -euo pipefail

packages=(
  containerd                  # the CRI runtime (and ctr, to import the images)
  runc                        # containerd's OCI runtime
  containernetworking-plugins # bridge, host-local, portmap, loopback in /usr/lib/cni
  iptables                    # kube-proxy, portmap
  iproute2                    # ip: the world's network namespace and veth pair
  util-linux                  # nsenter, unshare, mount
)

missing=()
for p in "${packages[@]}"; do
  if ! dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q '^install ok installed$'; then
    missing+=("$p")
  fi
done
if [ "${#missing[@]}" -eq 0 ]; then
  exit 0
fi
if [ "$(id -u)" != 0 ]; then
  echo "hack/cluster/install-packages.sh: missing Debian packages: ${missing[*]}; run this script as root (or install them)" >&2
  exit 1
fi
echo "installing: ${missing[*]}" >&2
export DEBIAN_FRONTEND=noninteractive
apt_opts=(-o DPkg::Lock::Timeout=600)
need_update=false
for p in "${missing[@]}"; do
  if ! apt-cache policy "$p" 2>/dev/null | grep -q 'Candidate: [0-9]'; then
    need_update=true
    break
  fi
done
if $need_update; then
  apt-get "${apt_opts[@]}" update -qq
fi
apt-get "${apt_opts[@]}" install -y -qq --no-install-recommends "${missing[@]}" >/dev/null
