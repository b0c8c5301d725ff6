#!/usr/bin/env bash
# Installs Debian's nodejs package when node is missing, for the tests that
# drive the gateway and the forward proxy with a real Node.js client
# (internal/gateway's TestNodeKeepAliveAgent): Node's own http module, no
# npm package. A machine that has node is left alone.
set -euo pipefail

if command -v node >/dev/null 2>&1; then
  exit 0
fi
if [ "$(id -u)" != 0 ]; then
  echo "hack/node/install.sh: node is missing; run this script as root, or apt-get install nodejs" >&2
  exit 1
fi
echo "installing: nodejs" >&2
export DEBIAN_FRONTEND=noninteractive
apt_opts=(-o DPkg::Lock::Timeout=600)
if ! apt-cache policy nodejs 2>/dev/null | grep -q 'Candidate: [0-9]'; then
  apt-get "${apt_opts[@]}" update -qq
fi
apt-get "${apt_opts[@]}" install -y -qq --no-install-recommends nodejs >/dev/null
command -v node >/dev/null
