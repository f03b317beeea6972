#!/usr/bin/env bash
# Builds the envtest binaries (kube-apiserver, etcd) from source, because no prebuilt binary can be
# downloaded on these machines. Results are cached outside the clone, keyed by version, and copied
# into bin/envtest so that every package's tests find them through KUBEBUILDER_ASSETS.
#
# Both are static (CGO_ENABLED=0, -trimpath), built the way hack/node-images builds Kubernetes:
# kube-apiserver's packages then land in Go's build cache exactly as the node image of the same
# version needs them, and a cold machine compiles them once for both.
set -euo pipefail

KUBERNETES_VERSION="${KUBERNETES_VERSION:-v1.36.3}"
ETCD_VERSION="${ETCD_VERSION:-v3.6.16}"
ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
CACHE="${CAPDMP_CACHE:-${HOME}/.cache/capdmp}/envtest"
OUT="${ROOT}/bin/envtest"
mkdir -p "${OUT}" "${CACHE}"
# As in hack/node-images/lib.sh: the compiler collects garbage less often (~7 % faster cold builds).
export GOGC="${GOGC:-400}"

# heartbeat (hack/node-images/lib.sh): a line a minute while a cold build runs.
source "${ROOT}/hack/node-images/lib.sh"
log() { printf '[envtest-binaries] %s\n' "$*" >&2; }

build_kube_apiserver() {
  local dst="${CACHE}/kube-apiserver-${KUBERNETES_VERSION}-static"
  if [[ -x "${dst}" ]]; then log "kube-apiserver ${KUBERNETES_VERSION}: cached"; return; fi
  log "kube-apiserver ${KUBERNETES_VERSION}: building from k8s.io/kubernetes (cold on two cores: about 10 minutes with etcd)"
  local work; work="$(mktemp -d)"
  trap 'rm -rf "${work}"' RETURN
  local staging="${KUBERNETES_VERSION/v1./v0.}"
  (
    cd "${work}"
    go mod init capdmp.local/kube-apiserver >/dev/null 2>&1
    go mod edit -require="k8s.io/kubernetes@${KUBERNETES_VERSION}"
    # k8s.io/kubernetes points every staging module at ./staging; a module that requires it must
    # name each one at its published version instead.
    local gomod; gomod="$(go mod download -json "k8s.io/kubernetes@${KUBERNETES_VERSION}" | sed -n 's/.*"GoMod": "\(.*\)",/\1/p')"
    grep -oE '^\s*k8s\.io/[a-z0-9-]+ => \./staging' "${gomod}" | awk '{print $1}' | while read -r mod; do
      go mod edit -replace="${mod}=${mod}@${staging}"
    done
    cat > main.go <<'GO'
package main

import _ "k8s.io/kubernetes/cmd/kube-apiserver"
GO
    GOFLAGS=-mod=mod go mod tidy >/dev/null 2>&1 || true
    local pkg=k8s.io/component-base/version
    local ldflags="-s -w -X ${pkg}.gitVersion=${KUBERNETES_VERSION} -X ${pkg}.gitMajor=1 -X ${pkg}.gitMinor=$(echo "${KUBERNETES_VERSION}" | cut -d. -f2) -X ${pkg}.gitTreeState=clean -X ${pkg}/verflag.programName=kube-apiserver"
    rm main.go
    local beat; beat="$(heartbeat "kube-apiserver ${KUBERNETES_VERSION}")"
    CGO_ENABLED=0 GOFLAGS=-mod=mod go build -trimpath -ldflags "${ldflags}" -o "${dst}.tmp" k8s.io/kubernetes/cmd/kube-apiserver
    kill "${beat}"
  )
  mv "${dst}.tmp" "${dst}"
}

build_etcd() {
  local dst="${CACHE}/etcd-${ETCD_VERSION}-static"
  if [[ -x "${dst}" ]]; then log "etcd ${ETCD_VERSION}: cached"; return; fi
  log "etcd ${ETCD_VERSION}: building from go.etcd.io/etcd/server/v3"
  local work; work="$(mktemp -d)"
  trap 'rm -rf "${work}"' RETURN
  (
    cd "${work}"
    go mod init capdmp.local/etcd >/dev/null 2>&1
    cat > main.go <<'GO'
package main

import _ "go.etcd.io/etcd/server/v3"
GO
    go mod edit -require="go.etcd.io/etcd/server/v3@${ETCD_VERSION}"
    GOFLAGS=-mod=mod go mod tidy >/dev/null 2>&1 || true
    rm main.go
    local beat; beat="$(heartbeat "etcd ${ETCD_VERSION}")"
    CGO_ENABLED=0 GOFLAGS=-mod=mod go build -trimpath -ldflags "-s -w" -o "${dst}.tmp" go.etcd.io/etcd/server/v3
    kill "${beat}"
  )
  mv "${dst}.tmp" "${dst}"
}

build_kube_apiserver
build_etcd
install -m 0755 "${CACHE}/kube-apiserver-${KUBERNETES_VERSION}-static" "${OUT}/kube-apiserver"
install -m 0755 "${CACHE}/etcd-${ETCD_VERSION}-static" "${OUT}/etcd"
log "ready in ${OUT}"
echo "${OUT}"
