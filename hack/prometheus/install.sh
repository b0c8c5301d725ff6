#!/usr/bin/env bash
# Installs Debian's prometheus package (prometheus and promtool) when promtool
# is missing, for the monitoring tests (internal/monitoring). The tests run
# their own Prometheus on loopback; the package's own service is not used, and
# is stopped and disabled if the package started it (it would listen on
# :9090 on every interface).
set -euo pipefail
. "$(dirname "$0")/../lib/apt.sh"
if ! command -v promtool >/dev/null 2>&1 || ! command -v prometheus >/dev/null 2>&1; then
  apt_install_missing hack/prometheus/install.sh prometheus promtool prometheus
  stop_service prometheus
fi
