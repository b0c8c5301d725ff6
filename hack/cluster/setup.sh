#!/usr/bin/env bash
# Build (once) and cache the binaries of the test cluster
# (internal/testing/kubelab): kubelet, kube-controller-manager,
# kube-scheduler, kube-proxy and kubectl, with kube-apiserver, in ONE
# `go build` of the module hack/envtest/kube-apiserver (the same pins as
# envtest's kube-apiserver), into envtest's cache directory; etcd comes from
# hack/envtest/setup.sh.
#
#   dir="$(hack/cluster/setup.sh)"
#
# stdout: exactly one line, the absolute directory holding all seven.
# stderr: progress. ENVTEST_ASSETS_ROOT moves the cache as for envtest.
set -euo pipefail

HERE="$(cd -- "$(dirname -- "${BASH_SOURCE[0]}")" >/dev/null && pwd -P)"
MODDIR="${HERE}/../envtest/kube-apiserver"
log() { printf 'cluster-setup: %s\n' "$*" >&2; }
die() { log "ERROR: $*"; exit 1; }
command -v go >/dev/null 2>&1 || die "go not found in PATH"

# The one version the module pins; the cluster is not built at another.
VERSION="$(awk '$1 == "k8s.io/kubernetes" { print $2; exit }' "${MODDIR}/go.mod")"
[[ -n "${VERSION}" ]] || die "no k8s.io/kubernetes pin in ${MODDIR}/go.mod"
if [[ -n "${KUBE_APISERVER_VERSION:-}" && "v${KUBE_APISERVER_VERSION#v}" != "${VERSION}" ]]; then
  die "KUBE_APISERVER_VERSION=${KUBE_APISERVER_VERSION}: the test cluster is built only at the pinned ${VERSION}"
fi
GOOS="$(go env GOOS)"
GOARCH="$(go env GOARCH)"
ROOT="${ENVTEST_ASSETS_ROOT:-${XDG_DATA_HOME:-$HOME/.local/share}/kubebuilder-envtest}"
ASSETS="${ROOT}/k8s/${VERSION#v}-${GOOS}-${GOARCH}"
KUBE_BINS=(kube-apiserver kubelet kube-controller-manager kube-scheduler kube-proxy kubectl)

have_all() {
  local b
  for b in "${KUBE_BINS[@]}"; do [[ -x "${ASSETS}/${b}" ]] || return 1; done
}

mkdir -p -- "${ASSETS}"
ASSETS="$(cd -- "${ASSETS}" >/dev/null && pwd -P)"

if ! have_all; then
  # envtest's lock: its setup.sh waits instead of building kube-apiserver
  # beside this build; a second caller of this script waits too.
  exec 9>"${ASSETS}/.lock"
  if ! flock -n 9; then
    log "another build is writing into ${ASSETS}; waiting for it..."
    flock 9
  fi
  if ! have_all; then
    out="$(mktemp -d "${ASSETS}/.kube.tmp.XXXXXX")"
    trap 'rm -rf -- "${out}"' EXIT
    kv="${VERSION#v}"
    major="${kv%%.*}"
    minor="${kv#*.}"
    minor="${minor%%.*}"
    ld="-s -w"
    for p in k8s.io/component-base/version k8s.io/client-go/pkg/version; do
      ld+=" -X ${p}.gitVersion=${VERSION} -X ${p}.gitMajor=${major} -X ${p}.gitMinor=${minor} -X ${p}.gitTreeState=clean"
    done
    pkgs=()
    for b in "${KUBE_BINS[@]}"; do pkgs+=("k8s.io/kubernetes/cmd/${b}"); done
    log "building ${KUBE_BINS[*]} ${VERSION} from Go module sources in one go build;"
    log "  cold, this takes 20 to 40 minutes on 2 busy cores (a warm Go build cache: under a minute)."
    start=$SECONDS
    CGO_ENABLED=0 go -C "${MODDIR}" build -mod=readonly -trimpath -ldflags="${ld}" -o "${out}/" "${pkgs[@]}" >&2
    for b in "${KUBE_BINS[@]}"; do
      chmod 0755 "${out}/${b}"
      mv -f -- "${out}/${b}" "${ASSETS}/${b}"
    done
    log "built in $((SECONDS - start))s into ${ASSETS}"
  fi
  exec 9>&-
fi

# etcd (and a check of kube-apiserver) the way envtest has them.
envtest="$("${HERE}/../envtest/setup.sh")"
[[ "${envtest}" == "${ASSETS}" ]] || die "envtest's assets are in ${envtest}, not ${ASSETS}"
have_all || die "binaries missing after the build in ${ASSETS}"
printf '%s\n' "${ASSETS}"
