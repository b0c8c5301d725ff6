#!/usr/bin/env bash
# Build (once) and cache the envtest control-plane binaries, kube-apiserver
# and etcd, from Go module sources, in the directory layout setup-envtest uses.
#
#   export KUBEBUILDER_ASSETS="$(hack/envtest/setup.sh)"
#
# stdout: exactly one line, the absolute assets directory.
# stderr: progress messages.
#
# Environment overrides:
#   KUBE_APISERVER_VERSION  k8s.io/kubernetes version   (default below)
#   ETCD_VERSION            go.etcd.io/etcd/server/v3 version (default below)
#   ENVTEST_ASSETS_ROOT     cache root (default ${XDG_DATA_HOME:-$HOME/.local/share}/kubebuilder-envtest)
#
# The default versions must match hack/envtest/{kube-apiserver,etcd}/go.mod;
# those builds use the committed go.sum with -mod=readonly. Any other version
# is built from a throw-away copy of the module that is re-resolved with
# `go mod tidy` (needs the Go module proxy). See hack/envtest/README.md.
set -euo pipefail

KUBE_APISERVER_VERSION="${KUBE_APISERVER_VERSION:-v1.37.2}"
ETCD_VERSION="${ETCD_VERSION:-v3.6.16}"

HERE="$(cd -- "$(dirname -- "${BASH_SOURCE[0]}")" >/dev/null && pwd -P)"

log() { printf 'envtest-setup: %s\n' "$*" >&2; }
die() { log "ERROR: $*"; exit 1; }

command -v go >/dev/null 2>&1 || die "go not found in PATH"

# Normalise: accept 1.37.2 as well as v1.37.2.
KUBE_APISERVER_VERSION="v${KUBE_APISERVER_VERSION#v}"
ETCD_VERSION="v${ETCD_VERSION#v}"

GOOS="$(go env GOOS)"
GOARCH="$(go env GOARCH)"
ROOT="${ENVTEST_ASSETS_ROOT:-${XDG_DATA_HOME:-$HOME/.local/share}/kubebuilder-envtest}"
ASSETS="${ROOT}/k8s/${KUBE_APISERVER_VERSION#v}-${GOOS}-${GOARCH}"
ETCD_STAMP="${ASSETS}/.etcd-version"

# Up to date = both binaries present and executable, and etcd was not built
# by this script at a different version than the one asked for now.
up_to_date() {
  [[ -x "${ASSETS}/kube-apiserver" && -x "${ASSETS}/etcd" ]] || return 1
  if [[ -f "${ETCD_STAMP}" && "$(<"${ETCD_STAMP}")" != "${ETCD_VERSION}" ]]; then
    return 1
  fi
  return 0
}

if up_to_date; then
  printf '%s\n' "${ASSETS}"
  exit 0
fi

mkdir -p -- "${ASSETS}"
ASSETS="$(cd -- "${ASSETS}" >/dev/null && pwd -P)"
ETCD_STAMP="${ASSETS}/.etcd-version"

# Serialise concurrent callers (e.g. several test packages at once): the
# second one waits and then finds the binaries already built.
if command -v flock >/dev/null 2>&1; then
  exec 9>"${ASSETS}/.lock"
  if ! flock -n 9; then
    log "another setup.sh is building into ${ASSETS}; waiting for it..."
    flock 9
  fi
  if up_to_date; then
    printf '%s\n' "${ASSETS}"
    exit 0
  fi
fi

TMPS=()
cleanup() {
  local t
  for t in "${TMPS[@]+"${TMPS[@]}"}"; do rm -rf -- "$t"; done
}
trap cleanup EXIT
trap 'exit 130' INT
trap 'exit 143' TERM

# Version the committed go.mod in $1 requires for module $2.
pinned_version() {
  awk -v m="$2" '$1 == m { print $2; exit } $1 == "require" && $2 == m { print $3; exit }' "$1/go.mod"
}

# prepare_module DIR MODULE VERSION -> sets MODDIR (the directory to build
# in) and MODFLAG. For the pinned version that is DIR itself (committed go.sum,
# -mod=readonly); otherwise a temp copy re-resolved at VERSION.
prepare_module() {
  local dir="$1" mod="$2" ver="$3" pinned tmp
  pinned="$(pinned_version "$dir" "$mod")"
  if [[ "$ver" == "$pinned" ]]; then
    MODDIR="$dir"
    MODFLAG="-mod=readonly"
    return
  fi
  log "${mod} ${ver} differs from the pinned ${pinned} in ${dir#"${HERE}/"}/go.mod;"
  log "  resolving ${ver} in a temporary copy (go mod tidy, needs the module proxy)..."
  tmp="$(mktemp -d "${TMPDIR:-/tmp}/envtest-mod.XXXXXX")"
  TMPS+=("$tmp")
  cp -- "$dir/go.mod" "$dir/go.sum" "$tmp/"
  go -C "$tmp" mod edit -require="${mod}@${ver}"
  if [[ "$mod" == "k8s.io/kubernetes" ]]; then
    # k8s.io/kubernetes vX.Y.Z requires its staging repos at v0.0.0 and
    # replaces them locally; pin every one of them to v0.Y.Z here. Take the
    # list from that release's own go.mod, since it changes between releases.
    local kdir staging=() s
    kdir="$(go mod download -json "${mod}@${ver}" | sed -n 's/^[[:space:]]*"Dir": "\(.*\)",$/\1/p')"
    [[ -n "$kdir" && -f "$kdir/go.mod" ]] || die "could not download ${mod}@${ver}"
    mapfile -t staging < <(sed -n 's#^[[:space:]]*\(k8s\.io/[A-Za-z0-9._-]*\) => \./staging/src/.*#\1#p' "$kdir/go.mod")
    # Drop the old replace list, then add the new one.
    local old=()
    mapfile -t old < <(sed -n 's#^[[:space:]]*\(k8s\.io/[A-Za-z0-9._-]*\) => k8s\.io/.*#\1#p' "$tmp/go.mod")
    for s in "${old[@]+"${old[@]}"}"; do go -C "$tmp" mod edit -dropreplace="$s"; done
    for s in "${staging[@]}"; do
      case "$s" in k8s.io/sample-cli-plugin|k8s.io/sample-controller) continue ;; esac
      go -C "$tmp" mod edit -replace="${s}=${s}@v0.${ver#v1.}"
    done
  fi
  go -C "$tmp" mod tidy >&2
  MODDIR="$tmp"
  MODFLAG="-mod=readonly"
}

# build NAME PACKAGE MODDIR MODFLAG LDFLAGS
build() {
  local name="$1" pkg="$2" dir="$3" modflag="$4" ldflags="$5" out start
  out="$(mktemp "${ASSETS}/.${name}.tmp.XXXXXX")"
  TMPS+=("$out")
  start=$SECONDS
  CGO_ENABLED=0 GOOS="$GOOS" GOARCH="$GOARCH" \
    go -C "$dir" build "$modflag" -trimpath -ldflags="$ldflags" -o "$out" "$pkg" >&2
  chmod 0755 "$out"
  mv -f -- "$out" "${ASSETS}/${name}"
  log "built ${ASSETS}/${name} in $((SECONDS - start))s"
}

log "envtest binaries for Kubernetes ${KUBE_APISERVER_VERSION} (${GOOS}/${GOARCH}) are missing or out of date in"
log "  ${ASSETS}"
log "building them from Go module sources with $(go env GOVERSION);"
log "the first build takes ~10 minutes (kube-apiserver ~8 min on 2 cores, etcd ~1 min)."
log "Later runs reuse the cached binaries and return instantly."

if [[ ! -x "${ASSETS}/etcd" ]] || { [[ -f "${ETCD_STAMP}" ]] && [[ "$(<"${ETCD_STAMP}")" != "${ETCD_VERSION}" ]]; }; then
  prepare_module "${HERE}/etcd" go.etcd.io/etcd/server/v3 "${ETCD_VERSION}"
  log "building etcd ${ETCD_VERSION} (go.etcd.io/etcd/server/v3)..."
  build etcd go.etcd.io/etcd/server/v3 "$MODDIR" "$MODFLAG" "-s -w"
  printf '%s\n' "${ETCD_VERSION}" >"${ETCD_STAMP}"
fi

if [[ ! -x "${ASSETS}/kube-apiserver" ]]; then
  prepare_module "${HERE}/kube-apiserver" k8s.io/kubernetes "${KUBE_APISERVER_VERSION}"
  kv="${KUBE_APISERVER_VERSION#v}"
  major="${kv%%.*}"
  minor="${kv#*.}"
  minor="${minor%%.*}"
  ld="-s -w"
  for p in k8s.io/component-base/version k8s.io/client-go/pkg/version; do
    ld+=" -X ${p}.gitVersion=${KUBE_APISERVER_VERSION}"
    ld+=" -X ${p}.gitMajor=${major} -X ${p}.gitMinor=${minor}"
    ld+=" -X ${p}.gitTreeState=clean"
  done
  log "building kube-apiserver ${KUBE_APISERVER_VERSION} (k8s.io/kubernetes/cmd/kube-apiserver), this is the slow one..."
  build kube-apiserver k8s.io/kubernetes/cmd/kube-apiserver "$MODDIR" "$MODFLAG" "$ld"
fi

up_to_date || die "binaries missing after build in ${ASSETS}"
log "done: export KUBEBUILDER_ASSETS=${ASSETS}"
printf '%s\n' "${ASSETS}"
