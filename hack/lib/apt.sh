# Sourced by the install scripts of the test tools that Debian packages
# (hack/node, hack/prometheus, hack/tinyproxy): one way to install a
# package when a command is missing, waiting for apt's lock when another
# install holds it, and to stop the service a package may start (the tests
# run their own daemons on loopback, never the system's).

# apt_install_missing SCRIPT PACKAGE COMMAND...: installs PACKAGE unless every
# COMMAND is on PATH; SCRIPT names the caller in its messages.
apt_install_missing() {
  local script=$1 pkg=$2
  shift 2
  local missing=0 c
  for c in "$@"; do
    command -v "$c" >/dev/null 2>&1 || missing=1
  done
  [ "$missing" = 0 ] && return 0
  if [ "$(id -u)" != 0 ]; then
    echo "$script: $* missing; run this script as root, or apt-get install $pkg" >&2
    return 1
  fi
  echo "installing: $pkg" >&2
  export DEBIAN_FRONTEND=noninteractive
  local apt_opts=(-o DPkg::Lock::Timeout=600)
  if ! apt-cache policy "$pkg" 2>/dev/null | grep -q 'Candidate: [0-9]'; then
    apt-get "${apt_opts[@]}" update -qq
  fi
  apt-get "${apt_opts[@]}" install -y -qq --no-install-recommends "$pkg" >/dev/null
  for c in "$@"; do
    command -v "$c" >/dev/null
  done
}

# stop_service NAME: stops and disables a service its package started.
stop_service() {
  if command -v systemctl >/dev/null 2>&1 && [ -d /run/systemd/system ]; then
    systemctl disable --now "$1" >/dev/null 2>&1 || true
  elif command -v service >/dev/null 2>&1; then
    service "$1" stop >/dev/null 2>&1 || true
  fi
}
