#!/usr/bin/env bash
# Shared functions for hack/node-images/*.sh. Source it; it defines no side effects beyond
# variables with defaults.

NODE_IMAGES_DIR="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
REPO_ROOT="$(cd "${NODE_IMAGES_DIR}/../.." && pwd)"
CAPDMP_CACHE="${CAPDMP_CACHE:-${HOME}/.cache/capdmp}"
NODE_IMAGES_CACHE="${NODE_IMAGES_CACHE:-${CAPDMP_CACHE}/node-images}"
# The Go compiler collects garbage less often: about 7 % less wall time for a cold build here
# (`go build std` into an empty cache: 57.3 and 58.8 s at GOGC=400 against 62.9 and 62.0 s at
# 100, alternated), memory is plentiful, and a cold run builds Kubernetes three times.
export GOGC="${GOGC:-400}"

# macOS has no coreutils sha256sum; Perl's shasum prints the same lines.
if ! command -v sha256sum >/dev/null 2>&1; then
  sha256sum() { shasum -a 256 "$@"; }
fi

log() { printf '[node-images] %s\n' "$*" >&2; }
die() { log "ERROR: $*"; exit 1; }

# heartbeat NAME: prints "NAME: still running" with the elapsed time every HEARTBEAT_SECONDS (60)
# in the background, so that a cold build is never silent for minutes; prints the PID to kill.
heartbeat() {
  local name="$1" parent=$$ start; start="$(date +%s)"
  (
    trap 'exit 0' TERM
    while sleep "${HEARTBEAT_SECONDS:-60}" && kill -0 "${parent}" 2>/dev/null; do
      log "    ${name}: still running, $(($(date +%s) - start))s"
    done
  ) >/dev/null &
  echo $!
}

# step NAME CMD...: runs CMD with its output in a log file, prints the step's name and duration,
# and on failure names the step, the log and its last lines.
step() {
  local name="$1"; shift
  local logdir="${NODE_IMAGES_CACHE}/logs"; mkdir -p "${logdir}"
  local logfile="${logdir}/$(printf '%s' "${name}" | tr -c 'A-Za-z0-9._-' '_').log"
  local start=${SECONDS}
  log "==> ${name}"
  # A subshell outside any condition, so that errexit holds inside the step's functions.
  local rc=0 beat
  beat="$(heartbeat "${name}")"
  set +e
  (set -e; "$@") >"${logfile}" 2>&1
  rc=$?
  set -e
  kill "${beat}" 2>/dev/null || true
  if ((rc == 0)); then
    log "    ${name}: done in $((SECONDS - start))s"
  else
    log "FAILED step: ${name} (exit ${rc}, after $((SECONDS - start))s); log: ${logfile}"
    tail -n 30 "${logfile}" | sed 's/^/    | /' >&2
    exit "${rc}"
  fi
}

# kube_staging_version v1.X.Y -> v0.X.Y (the published version of the staging modules).
kube_staging_version() { echo "${1/v1./v0.}"; }

# kube_wrapper_module DIR VERSION: makes DIR a Go module that requires k8s.io/kubernetes at
# VERSION. k8s.io/kubernetes points every staging module at ./staging, which a module requiring
# it cannot follow; each one is replaced by the same module at its published v0.X.Y.
kube_wrapper_module() {
  local dir="$1" version="$2"
  local staging; staging="$(kube_staging_version "${version}")"
  (
    cd "${dir}"
    [[ -f go.mod ]] || go mod init capdmp.local/kube-binaries >/dev/null 2>&1
    go mod edit -require="k8s.io/kubernetes@${version}"
    local gomod
    gomod="$(go mod download -json "k8s.io/kubernetes@${version}" | sed -n 's/.*"GoMod": "\(.*\)",/\1/p')"
    [[ -n "${gomod}" ]] || { echo "cannot download k8s.io/kubernetes@${version}" >&2; exit 1; }
    grep -oE '^\s*k8s\.io/[a-z0-9-]+ => \./staging' "${gomod}" | awk '{print $1}' | while read -r mod; do
      go mod edit -replace="${mod}=${mod}@${staging}"
    done
  )
}

# kube_version_ldflags VERSION: component-base version ldflags (without them binaries report
# v0.0.0-master, and kubeadm's preflight cannot parse `kubelet --version`).
kube_version_ldflags() {
  local version="$1" pkg=k8s.io/component-base/version
  local minor; minor="$(echo "${version}" | cut -d. -f2)"
  echo "-X ${pkg}.gitVersion=${version} -X ${pkg}.gitMajor=1 -X ${pkg}.gitMinor=${minor} -X ${pkg}.gitTreeState=clean -X ${pkg}.buildDate=1970-01-01T00:00:00Z"
}
