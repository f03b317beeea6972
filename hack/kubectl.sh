#!/usr/bin/env bash
# Prints the path of a kubectl of one Kubernetes version for `make run` (bin/kubectl links to it),
# built from source only when nothing else has one. In this order:
#   1. the Kubernetes build of VERSION in the node-images cache (hack/node-images/kube-binaries.sh);
#   2. /usr/bin/kubectl of the node image kindest/node:VERSION (NODE_IMAGES_REPOSITORY), when the
#      image is of this host's OS and architecture: copied out of a container that is created and
#      never started, into the cache, keyed by the image's ID; a published kind image holds the
#      kubectl of its version, so a developer with published images builds no Kubernetes;
#   3. where no source build can be made (it is made on linux/amd64 only), a kubectl on PATH;
#   4. a source build of VERSION (kube-binaries.sh).
# Usage: hack/kubectl.sh VERSION
set -euo pipefail
source "$(dirname "${BASH_SOURCE[0]}")/node-images/kube-binaries.sh"

VERSION="${1:?usage: hack/kubectl.sh VERSION}"
NODE_REPO="${NODE_IMAGES_REPOSITORY:-kindest/node}"
# CAPDMP's stub node image (test/stubnode) carries no kubectl.
STUB_LABEL=test.capdmp.dev/stub-node
log() { printf '[kubectl] %s\n' "$*" >&2; }

# client_version KUBECTL: the version KUBECTL reports (v1.37.2), empty when it does not run here.
client_version() {
  "$1" version --client -o json 2>/dev/null | sed -n 's/.*"gitVersion": *"\([^"]*\)".*/\1/p' | head -n1
}

# engine: a Docker engine answers, found as build.sh finds it.
engine() {
  docker version >/dev/null 2>&1 && return 0
  local env
  env="$("${REPO_ROOT}/hack/docker-engine.sh" env 2>/dev/null)" || return 1
  eval "${env}"
  export DOCKER_HOST
}

# from_node_image: prints the path of the node image's kubectl, copied into the cache.
from_node_image() {
  local image="${NODE_REPO}:${VERSION}"
  command -v docker >/dev/null 2>&1 && engine || return 1
  local facts
  facts="$(docker image inspect -f "{{.Id}} {{.Os}}/{{.Architecture}} {{index .Config.Labels \"${STUB_LABEL}\"}}" "${image}" 2>/dev/null)" || return 1
  local id platform stub
  read -r id platform stub <<<"${facts}"
  [[ "${stub}" != "true" ]] || return 1
  if [[ "${platform}" != "$(go env GOOS)/$(go env GOARCH)" ]]; then
    log "${image} is ${platform}: its kubectl does not run on this $(go env GOOS)/$(go env GOARCH) host"
    return 1
  fi
  local short="${id#sha256:}"
  local dst="${NODE_IMAGES_CACHE}/bin/kubectl-${VERSION}-image-${short:0:12}"
  if [[ ! -x "${dst}/kubectl" ]]; then
    local cid rc=0
    cid="$(docker create --pull=never --network none --entrypoint /usr/bin/kubectl "${image}")" || return 1
    mkdir -p "${dst}.tmp"
    docker cp -L "${cid}:/usr/bin/kubectl" "${dst}.tmp/kubectl" >/dev/null 2>&1 || rc=$?
    docker rm -f "${cid}" >/dev/null 2>&1 || true
    if ((rc != 0)); then
      rm -rf "${dst}.tmp"
      log "${image} has no /usr/bin/kubectl"
      return 1
    fi
    rm -rf "${dst}"
    mv "${dst}.tmp" "${dst}"
  fi
  local v; v="$(client_version "${dst}/kubectl")"
  if [[ "${v}" != "${VERSION}" ]]; then
    log "${image}'s /usr/bin/kubectl reports ${v:-no version}, not ${VERSION}: not used"
    return 1
  fi
  log "kubectl ${VERSION}: taken from ${image} (${short:0:12}), nothing built (${dst})"
  echo "${dst}/kubectl"
}

main() {
  local dir; dir="$(kube_binaries_dir "${VERSION}")"
  if [[ -x "${dir}/kubectl" ]]; then
    log "kubectl ${VERSION}: cached build (${dir})"
    echo "${dir}/kubectl"
    return 0
  fi
  from_node_image && return 0
  if [[ "$(uname -s)" != Linux || "$(uname -m)" != x86_64 ]] && command -v kubectl >/dev/null 2>&1; then
    # kubectl's skew policy: one minor version either side of the API server.
    local v; v="$(client_version kubectl)"
    local minor="${v#v1.}" want="${VERSION#v1.}"
    minor="${minor%%.*}" want="${want%%.*}"
    if [[ "${minor}" =~ ^[0-9]+$ ]] && ((minor >= want - 1 && minor <= want + 1)); then
      log "kubectl ${VERSION}: none built or in a node image for $(uname -s)/$(uname -m); using $(command -v kubectl) (${v})"
      command -v kubectl
      return 0
    fi
    log "$(command -v kubectl) is ${v:-of an unknown version}, more than one minor version from ${VERSION}: not used"
  fi
  if [[ "$(uname -s)" != Linux || "$(uname -m)" != x86_64 ]]; then
    die "no kubectl of ${VERSION} for $(uname -s)/$(uname -m), and Kubernetes is built from source on linux/amd64 only: put a kubectl within one minor version of ${VERSION} on PATH (on Linux, kind's published node image ${NODE_REPO}:${VERSION} holds one)"
  fi
  local built; built="$(kube_binaries "${VERSION}")"
  echo "${built}/kubectl"
}

main
