#!/usr/bin/env bash
# Installs Debian's nodejs package when node is missing, for the tests that
# drive the gateway and the forward proxy with a real Node.js client
# (internal/gateway's TestNodeKeepAliveAgent): Node's own http module, no
# npm package. A machine that has node is left alone.
set -euo pipefail
. "$(dirname "$0")/../lib/apt.sh"
apt_install_missing hack/node/install.sh nodejs node
