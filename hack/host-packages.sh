#!/usr/bin/env bash
# Installs, or checks for, the Debian packages a target needs on the host. `.ci/run` and the make
# targets call it alike, so that the README's commands set up a fresh machine outside CI too.
#
#   hack/host-packages.sh engine        dockerd, jq, iptables (hack/docker-engine.sh starting its own
#                                       dockerd; jq serves its runc wrapper)
#   hack/host-packages.sh test          the engine's, and busybox-static (the 2 MB shell image)
#   hack/host-packages.sh node-images   the engine's, and debootstrap (the node root filesystem)
#   hack/host-packages.sh all           all of the above
#
# When a Docker engine already answers (Docker Desktop, a system dockerd), test, node-images and
# all need only its docker CLI, not the engine's packages: nothing here starts a dockerd then.
# As root with apt-get, what is missing is installed; otherwise the script names the command that
# installs it and fails.
set -euo pipefail

ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
log() { printf '[host-packages] %s\n' "$*" >&2; }

# engine_packages: the engine's packages, or only the docker CLI where an engine answers.
engine_packages() {
  if [[ "${ENGINE_ANSWERS}" == "true" ]]; then echo "docker.io:docker"; else need engine; fi
}

# need GROUP: prints "package:probe" pairs; a probe is a command name or an absolute path.
need() {
  case "$1" in
    engine) echo "docker.io:dockerd jq:jq iptables:iptables" ;;
    test) engine_packages; echo "busybox-static:/bin/busybox" ;;
    node-images) engine_packages; echo "debootstrap:debootstrap" ;;
    all) need test; need node-images ;;
    *) log "unknown group '$1' (engine, test, node-images, all)"; exit 2 ;;
  esac
}

present() {
  if [[ "$1" == /* ]]; then [[ -x "$1" ]]; else command -v "$1" >/dev/null 2>&1; fi
}

ENGINE_ANSWERS=false
if [[ "${1:-all}" != engine ]] && "${ROOT}/hack/docker-engine.sh" env >/dev/null 2>&1; then ENGINE_ANSWERS=true; fi

missing=()
for pair in $(need "${1:-all}"); do
  pkg="${pair%%:*}" probe="${pair#*:}"
  if ! present "${probe}" && [[ " ${missing[*]} " != *" ${pkg} "* ]]; then missing+=("${pkg}"); fi
done
((${#missing[@]} == 0)) && exit 0

if [[ "$(id -u)" != 0 ]] || ! command -v apt-get >/dev/null 2>&1; then
  log "missing Debian packages: ${missing[*]}"
  log "install them with: sudo apt-get update && sudo apt-get install --no-install-recommends ${missing[*]}"
  exit 1
fi
log "installing ${missing[*]}"
DEBIAN_FRONTEND=noninteractive apt-get update -qq >&2
DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends "${missing[@]}" >/dev/null
