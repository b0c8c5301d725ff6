#!/usr/bin/env bash
# Installs Debian's prometheus package (prometheus and promtool) when promtool
# is missing, for the monitoring tests (internal/monitoring). The tests run
# their own Prometheus on loopback; the package's own service is not used, and
# is stopped and disabled if the package started it (it would listen on
# :9090 on every interface).
set -euo pipefail

if command -v promtool >/dev/null 2>&1 && command -v prometheus >/dev/null 2>&1; then
  exit 0
fi
if [ "$(id -u)" != 0 ]; then
  echo "hack/prometheus/install.sh: promtool and prometheus are missing; run this script as root, or apt-get install prometheus" >&2
  exit 1
fi
echo "installing: prometheus" >&2
export DEBIAN_FRONTEND=noninteractive
apt_opts=(-o DPkg::Lock::Timeout=600)
if ! apt-cache policy prometheus 2>/dev/null | grep -q 'Candidate: [0-9]'; then
  apt-get "${apt_opts[@]}" update -qq
fi
apt-get "${apt_opts[@]}" install -y -qq --no-install-recommends prometheus >/dev/null
if command -v systemctl >/dev/null 2>&1 && [ -d /run/systemd/system ]; then
  systemctl disable --now prometheus >/dev/null 2>&1 || true
elif command -v service >/dev/null 2>&1; then
  service prometheus stop >/dev/null 2>&1 || true
fi
command -v promtool >/dev/null
