#!/usr/bin/env bash
# Installs Debian's tinyproxy package when tinyproxy is missing, for the
# gateway's tests with a real tinyproxy member, the proxy the VM guests run
# (internal/gateway's TestAHostileOriginBehindTinyproxyNeverGetsTheNextRequest).
# The tests run their own tinyproxy on loopback with a file of their own; the
# package's service is stopped and disabled if it started (it would listen on
# :8888).
set -euo pipefail
. "$(dirname "$0")/../lib/apt.sh"
if ! command -v tinyproxy >/dev/null 2>&1; then
  apt_install_missing hack/tinyproxy/install.sh tinyproxy tinyproxy
  stop_service tinyproxy
fi
