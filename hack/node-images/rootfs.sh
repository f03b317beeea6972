#!/usr/bin/env bash
# Builds the node root filesystem with debootstrap from Debian's packages and caches it as a
# tarball keyed by a hash of the package list, suite, mirror and this script.
# Usage: rootfs.sh   -> prints the path of the cached tarball. Needs root; no Docker.
set -euo pipefail
source "$(dirname "${BASH_SOURCE[0]}")/lib.sh"

DEBIAN_SUITE="${DEBIAN_SUITE:-bookworm}"
# What a kind node has from its distribution, from Debian: systemd as init, containerd and runc,
# the CNI plugins, and the tools kubeadm, the kubelet and kube-proxy call. jq serves the runc
# capability wrapper (hack/runc-wrapper).
ROOTFS_PACKAGES=(
  systemd systemd-sysv dbus containerd runc containernetworking-plugins
  iptables nftables conntrack ethtool socat ebtables iproute2 kmod ca-certificates
  jq procps util-linux mount netbase libseccomp2
)

# debian_mirror prints the Debian mirror apt is configured with (deb822 or one-line sources).
debian_mirror() {
  if [[ -n "${DEBIAN_MIRROR:-}" ]]; then echo "${DEBIAN_MIRROR}"; return; fi
  local uri
  uri="$(cat /etc/apt/sources.list.d/*.sources 2>/dev/null | awk '/^URIs:/ {for (i = 2; i <= NF; i++) print $i}' | grep -v -- '-security' | grep -m1 debian || true)"
  if [[ -z "${uri}" ]]; then
    uri="$(cat /etc/apt/sources.list /etc/apt/sources.list.d/*.list 2>/dev/null | awk '$1 == "deb" {print $2}' | grep -v -- '-security' | grep -m1 debian || true)"
  fi
  echo "${uri:-http://deb.debian.org/debian}"
}

rootfs_recipe_hash() {
  { echo "${DEBIAN_SUITE} $(debian_mirror) ${ROOTFS_PACKAGES[*]}"; declare -f build_rootfs; } | sha256sum | cut -c1-12
}

build_rootfs() {
  local dst="$1"
  command -v debootstrap >/dev/null || DEBIAN_FRONTEND=noninteractive apt-get install -y -qq debootstrap
  local dir; dir="$(mktemp -d)"
  local pkgs; pkgs="$(IFS=,; echo "${ROOTFS_PACKAGES[*]}")"
  debootstrap --variant=minbase --include="${pkgs}" "${DEBIAN_SUITE}" "${dir}" "$(debian_mirror)"
  # Nothing of the build host stays behind: no package caches, lists or logs.
  rm -rf "${dir}"/var/cache/apt/archives/*.deb "${dir}"/var/lib/apt/lists/* "${dir}"/var/log/* \
    "${dir}"/debootstrap
  tar --numeric-owner --xattrs -C "${dir}" -cf "${dst}.tmp" .
  rm -rf "${dir}"
  mv "${dst}.tmp" "${dst}"
}

main_rootfs() {
  mkdir -p "${NODE_IMAGES_CACHE}/rootfs"
  local dst; dst="${NODE_IMAGES_CACHE}/rootfs/rootfs-${DEBIAN_SUITE}-$(rootfs_recipe_hash).tar"
  if [[ -f "${dst}" ]]; then
    log "root filesystem: cached (${dst})"
  else
    step "root filesystem: debootstrap ${DEBIAN_SUITE} (${#ROOTFS_PACKAGES[@]} packages)" build_rootfs "${dst}"
  fi
  echo "${dst}"
}

if [[ "${BASH_SOURCE[0]}" == "${0}" ]]; then main_rootfs "$@"; fi
