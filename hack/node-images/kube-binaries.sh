#!/usr/bin/env bash
# Builds static Kubernetes binaries for one version from k8s.io/kubernetes, plus etcd and crictl,
# into the cache folder (outside the clone), keyed by version and by a hash of this recipe.
# Usage: kube-binaries.sh VERSION   -> prints the folder holding the binaries of VERSION.
# No Docker needed.
set -euo pipefail
source "$(dirname "${BASH_SOURCE[0]}")/lib.sh"

KUBE_COMPONENTS=(kubelet kubeadm kubectl kube-apiserver kube-controller-manager kube-scheduler kube-proxy)

# binaries_recipe_hash: what decides the bytes of the kube binaries.
binaries_recipe_hash() {
  {
    declare -f kube_wrapper_module kube_version_ldflags kube_staging_version build_kube
    echo "${KUBE_COMPONENTS[*]}"
    go version
  } | sha256sum | cut -c1-12
}

build_kube() {
  local version="$1" dst="$2"
  local work; work="$(mktemp -d)"
  kube_wrapper_module "${work}" "${version}"
  local pkgs=() c
  for c in "${KUBE_COMPONENTS[@]}"; do pkgs+=("k8s.io/kubernetes/cmd/${c}"); done
  (
    cd "${work}"
    printf 'package main\n\nimport (\n' >main.go
    for c in "${pkgs[@]}"; do printf '\t_ "%s"\n' "${c}" >>main.go; done
    printf ')\n' >>main.go
    GOFLAGS=-mod=mod nice -n 19 go mod tidy
    rm main.go
    mkdir -p "${dst}.tmp"
    CGO_ENABLED=0 GOFLAGS=-mod=mod nice -n 19 go build -trimpath \
      -ldflags "-s -w $(kube_version_ldflags "${version}")" -o "${dst}.tmp/" "${pkgs[@]}"
  )
  rm -rf "${work}" "${dst}"
  mv "${dst}.tmp" "${dst}"
}

# build_go_tool DST MODULE@VERSION PACKAGE: a static binary from a wrapper module.
build_go_tool() {
  local dst="$1" modver="$2" pkg="$3"
  local work; work="$(mktemp -d)"
  (
    cd "${work}"
    go mod init capdmp.local/tool >/dev/null 2>&1
    go mod edit -require="${modver}"
    printf 'package main\n\nimport _ "%s"\n' "${pkg}" >main.go
    GOFLAGS=-mod=mod nice -n 19 go mod tidy
    rm main.go
    CGO_ENABLED=0 GOFLAGS=-mod=mod nice -n 19 go build -trimpath -ldflags "-s -w ${4:-}" -o "${dst}.tmp" "${pkg}"
  )
  rm -rf "${work}"
  mv "${dst}.tmp" "${dst}"
}

# kube_binaries_dir VERSION: the cache folder of VERSION's binaries by this recipe, built or not.
kube_binaries_dir() { echo "${NODE_IMAGES_CACHE}/bin/kubernetes-$1-$(binaries_recipe_hash)"; }

# kube_build_supported VERSION: the binaries go into linux/amd64 node images; they are built on
# linux/amd64 only.
kube_build_supported() {
  [[ "$(uname -s)" == Linux && "$(uname -m)" == x86_64 ]] ||
    die "Kubernetes ${1} is built from source on linux/amd64 only, not on $(uname -s)/$(uname -m): use kind's published node images (docker pull kindest/node:${1}), which make node-images and make run use as they are"
}

kube_binaries() {
  local version="${1:?usage: kube-binaries.sh VERSION}"
  local dst; dst="$(kube_binaries_dir "${version}")"
  mkdir -p "${NODE_IMAGES_CACHE}/bin"
  # One build per version at a time (make -j, or two people sharing the cache).
  exec 8>"${dst}.lock"
  flock 8
  if [[ -x "${dst}/kubelet" ]]; then
    log "kubernetes ${version} binaries: cached (${dst})"
  else
    kube_build_supported "${version}"
    step "kubernetes ${version}: build ${KUBE_COMPONENTS[*]} (cold: 6+ min)" build_kube "${version}" "${dst}"
  fi
  echo "${dst}"
}

if [[ "${BASH_SOURCE[0]}" == "${0}" ]]; then kube_binaries "$@"; fi
