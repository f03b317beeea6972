#!/usr/bin/env bash
# Makes sure of the envtest binaries (kube-apiserver, etcd) that the tests and `make run` find
# through KUBEBUILDER_ASSETS, building them from source only when no prebuilt ones are there
# (none can be downloaded on these machines). In this order:
#   1. KUBEBUILDER_ASSETS, when it names a folder other than bin/envtest: used as it is (the
#      tests and the management plane read it, so nothing is copied or built);
#   2. this script's cache of earlier source builds of KUBERNETES_VERSION;
#   3. setup-envtest's folder of KUBERNETES_VERSION for this OS and architecture
#      (~/.local/share/kubebuilder-envtest/k8s/1.37.0-linux-amd64 on Linux);
#   4. the binaries controller-tools publishes for this OS and architecture, downloaded by
#      setup-envtest into its folder (ENVTEST_INDEX names another index, a mirror's; skipped with
#      CAPDMP_PULL=never);
#   5. a source build, on linux/amd64 only, cached outside the clone, keyed by version.
# 2, 3 and 4 are copied into bin/envtest (ENVTEST_BIN_DIR), KUBEBUILDER_ASSETS' default in the
# Makefile.
#
# Both are static (CGO_ENABLED=0, -trimpath), built the way hack/node-images builds Kubernetes:
# kube-apiserver's packages then land in Go's build cache exactly as the node image of the same
# version needs them, and a cold machine compiles them once for both.
set -euo pipefail

ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
# Default: envtest's version in internal/kubeversions/versions.txt.
KUBERNETES_VERSION="${KUBERNETES_VERSION:-$(awk '$1 == "envtest" { print $2 }' "${ROOT}/internal/kubeversions/versions.txt")}"
ETCD_VERSION="${ETCD_VERSION:-v3.6.16}"
CACHE="${CAPDMP_CACHE:-${HOME}/.cache/capdmp}/envtest"
OUT="${ENVTEST_BIN_DIR:-${ROOT}/bin/envtest}"
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

# setup_envtest_dir: where setup-envtest keeps KUBERNETES_VERSION for this OS and architecture
# (its default data folder: XDG_DATA_HOME on Linux, Application Support on macOS).
setup_envtest_dir() {
  local data="${XDG_DATA_HOME:-${HOME}/.local/share}/kubebuilder-envtest"
  [[ "$(go env GOOS)" != darwin ]] || data="${HOME}/Library/Application Support/io.kubebuilder.envtest"
  echo "${data}/k8s/${KUBERNETES_VERSION#v}-$(go env GOOS)-$(go env GOARCH)"
}

# has_binaries DIR: DIR holds an executable kube-apiserver and etcd.
has_binaries() { [[ -x "$1/kube-apiserver" && -x "$1/etcd" ]]; }

# apiserver_version DIR: the version DIR's kube-apiserver reports ("v1.37.0").
apiserver_version() { "$1/kube-apiserver" --version 2>/dev/null | awk '{print $2}'; }

# build_supported: the source builds are made and tested on linux/amd64 only.
build_supported() {
  [[ "$(uname -s)" == Linux && "$(uname -m)" == x86_64 ]] && return 0
  log "ERROR: no envtest binaries of Kubernetes ${KUBERNETES_VERSION} here, and they are built from source on linux/amd64 only, not on $(uname -s)/$(uname -m): install prebuilt ones with setup-envtest (go run sigs.k8s.io/controller-runtime/tools/setup-envtest@latest use ${KUBERNETES_VERSION#v}), or set KUBEBUILDER_ASSETS to a folder holding kube-apiserver and etcd"
  exit 1
}

# fetch_published: setup-envtest downloads KUBERNETES_VERSION's published binaries and prints
# their folder; its output goes to the log only when it fails (no registry here is no error).
fetch_published() {
  [[ "${CAPDMP_PULL:-}" != never ]] || return 1
  local index=() out
  if [[ -n "${ENVTEST_INDEX:-}" ]]; then index=(--index "${ENVTEST_INDEX}"); fi
  out="$(cd "${ROOT}" && go tool -modfile=hack/tools/go.mod setup-envtest use "${KUBERNETES_VERSION#v}" -p path ${index[@]+"${index[@]}"} 2>&1)" || {
    log "setup-envtest could not fetch ${KUBERNETES_VERSION} (${ENVTEST_INDEX:-the default index}): $(echo "${out}" | tail -n 1)"
    return 1
  }
  out="$(echo "${out}" | tail -n 1)"
  has_binaries "${out}" || { log "setup-envtest printed ${out}, which holds no kube-apiserver and etcd"; return 1; }
  echo "${out}"
}

# physical DIR: DIR without symbolic links, or as it is when it does not exist.
physical() { (cd "$1" 2>/dev/null && pwd -P) || echo "$1"; }

if [[ -n "${KUBEBUILDER_ASSETS:-}" && "$(physical "${KUBEBUILDER_ASSETS}")" != "$(physical "${OUT}")" ]]; then
  has_binaries "${KUBEBUILDER_ASSETS}" ||
    { log "ERROR: KUBEBUILDER_ASSETS=${KUBEBUILDER_ASSETS} holds no executable kube-apiserver and etcd; unset it to use bin/envtest"; exit 1; }
  v="$(apiserver_version "${KUBEBUILDER_ASSETS}")"
  [[ "${v}" == "${KUBERNETES_VERSION}" ]] ||
    log "warning: the kube-apiserver in KUBEBUILDER_ASSETS is ${v:-of an unknown version}, not ${KUBERNETES_VERSION}, the one the tests are made with"
  log "using KUBEBUILDER_ASSETS=${KUBEBUILDER_ASSETS} (kube-apiserver ${v:-?}) as it is; nothing built"
  echo "${KUBEBUILDER_ASSETS}"
  exit 0
fi

apiserver="${CACHE}/kube-apiserver-${KUBERNETES_VERSION}-static" etcd="${CACHE}/etcd-${ETCD_VERSION}-static"
prebuilt="$(setup_envtest_dir)"
if [[ -x "${apiserver}" && -x "${etcd}" ]]; then
  log "kube-apiserver ${KUBERNETES_VERSION} and etcd ${ETCD_VERSION}: cached"
elif has_binaries "${prebuilt}" && [[ "$(apiserver_version "${prebuilt}")" == "${KUBERNETES_VERSION}" ]]; then
  log "using setup-envtest's ${prebuilt} (kube-apiserver ${KUBERNETES_VERSION}); nothing built"
  apiserver="${prebuilt}/kube-apiserver" etcd="${prebuilt}/etcd"
elif fetched="$(fetch_published)"; then
  log "fetched with setup-envtest into ${fetched} (kube-apiserver $(apiserver_version "${fetched}")); nothing built"
  apiserver="${fetched}/kube-apiserver" etcd="${fetched}/etcd"
else
  build_supported
  mkdir -p "${CACHE}"
  build_kube_apiserver
  build_etcd
fi
mkdir -p "${OUT}"
# cp and chmod rather than install, which POSIX does not have.
cp -f "${apiserver}" "${OUT}/kube-apiserver"
cp -f "${etcd}" "${OUT}/etcd"
chmod 0755 "${OUT}/kube-apiserver" "${OUT}/etcd"
log "ready in ${OUT}"
echo "${OUT}"
