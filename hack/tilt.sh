#!/usr/bin/env bash
# Tilt for CAPDMP's standalone Tiltfile (docs/clusterctl.md, "Tilt"): builds the tilt binary from
# its Go module, and runs `tilt ci` against the kind management cluster of `make kind-management`.
#
# Usage: tilt.sh build   prints the tilt binary's path, building it first when missing
#        tilt.sh ci      tilt ci [TILT_CI_FLAGS] against KIND_MANAGEMENT_NAME's cluster
#        tilt.sh up      tilt up, the same way (the UI on http://localhost:10350)
#
# Tilt is built from github.com/tilt-dev/tilt at TILT_VERSION through the Go module proxy, into
# CAPDMP_CACHE/tools/tilt-TILT_VERSION, in a copy of the module (the module cache is read-only).
# Its module zip holds vendor/modules.txt but no vendored code (Go strips vendor/ from module
# zips), so the build downloads the dependencies its go.sum lists; -mod=vendor cannot work.
# sum.golang.org has no entry for github.com/tilt-dev/tilt (404), hence GONOSUMDB for it; the
# dependencies are checked against tilt's own go.sum.
#
# Environment (defaults in brackets):
#   TILT_VERSION          [v0.34.0]
#   CAPDMP_CACHE          [~/.cache/capdmp]
#   TILT                  a tilt binary to use instead of building one
#   KIND_MANAGEMENT_NAME  the kind management cluster [capdmp-management]
#   TILT_CI_FLAGS         extra flags of tilt ci [--timeout 10m]
#   CAPDMP_BASE_IMAGE     base of the manager's image [scratch] (the Tiltfile reads it)
#   DOCKER_BUILDKIT       Tilt's image builder: 0 the legacy builder, 1 BuildKit [0]
#   NICE                  prefix of the tilt build and of tilt itself [nice -n 19]
set -euo pipefail
ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
TILT_VERSION="${TILT_VERSION:-v0.34.0}"
CAPDMP_CACHE="${CAPDMP_CACHE:-${HOME}/.cache/capdmp}"
TILT="${TILT:-${CAPDMP_CACHE}/tools/tilt-${TILT_VERSION}}"
NICE="${NICE-nice -n 19}"
TILT_CI_FLAGS="${TILT_CI_FLAGS:---timeout 10m}"

log() { printf '[tilt %s] %s\n' "$(date +%H:%M:%S)" "$*" >&2; }
die() { log "ERROR: $*"; exit 1; }

# build: a subshell, so that its trap and exports stay in it.
build() (
	[ -x "${TILT}" ] && exit 0
	t0=${SECONDS}
	work="$(mktemp -d)"
	trap 'chmod -R u+w "${work}" 2>/dev/null; rm -rf "${work}"' EXIT
	log "building tilt ${TILT_VERSION} into ${TILT} (several minutes of CPU) ..."
	export GONOSUMDB="${GONOSUMDB:+${GONOSUMDB},}github.com/tilt-dev/tilt"
	dir="$(cd "${work}" && go mod download -json "github.com/tilt-dev/tilt@${TILT_VERSION}" |
		sed -n 's/^[[:space:]]*"Dir": "\(.*\)",$/\1/p')"
	[ -n "${dir}" ] && [ -d "${dir}" ] || die "go mod download github.com/tilt-dev/tilt@${TILT_VERSION} failed"
	cp -r "${dir}" "${work}/tilt"
	chmod -R u+w "${work}/tilt"
	rm -rf "${work}/tilt/vendor"
	# Tilt's web UI is a JavaScript build (web/, yarn) that its releases embed from
	# pkg/assets/build; the module zip has none, and a release build refuses to start without an
	# index.html there. This one says so: tilt ci, tilt logs and the other commands need no UI.
	printf '%s\n' '<!doctype html><title>Tilt</title><p>Tilt was built here from its Go module without its web UI (hack/tilt.sh): use the tilt CLI (tilt get uiresources, tilt logs).</p>' \
		> "${work}/tilt/pkg/assets/build/index.html"
	mkdir -p "$(dirname "${TILT}")"
	# -trimpath: the copy's folder changes every build; without it no compiled package is reused.
	# shellcheck disable=SC2086 # NICE is a word list
	(cd "${work}/tilt" && GOFLAGS=-mod=mod ${NICE} go build -trimpath -ldflags "-X main.version=${TILT_VERSION#v}" -o "${TILT}.tmp" ./cmd/tilt)
	mv "${TILT}.tmp" "${TILT}"
	log "built in $((SECONDS - t0)) s: $("${TILT}" version)"
)

# run CMD...: tilt CMD in the repository, against the kind management cluster: its kubeconfig
# (context kind-NAME, which Tilt takes as local and loads images into with `kind load`), bin/kind
# and the cluster's kubectl first in PATH, and the Docker engine of hack/docker-engine.sh.
run() {
	build
	local kubeconfig kubectl
	kubeconfig="$("${ROOT}/hack/kind-management.sh" kubeconfig)"
	[ -s "${kubeconfig}" ] || die "no kubeconfig at ${kubeconfig}: make kind-management first (KIND_MANAGEMENT_NAME=${KIND_MANAGEMENT_NAME:-capdmp-management})"
	kubectl="$("${ROOT}/hack/kind-management.sh" kubectl 2>/dev/null || true)"
	eval "$("${ROOT}/hack/docker-engine.sh" env)"
	export DOCKER_HOST KUBECONFIG="${kubeconfig}"
	# The engine's legacy builder, as make images uses (hack/images/build.sh): the one checked here.
	# DOCKER_BUILDKIT=1 lets Tilt use the engine's BuildKit instead.
	export DOCKER_BUILDKIT="${DOCKER_BUILDKIT:-0}"
	PATH="${ROOT}/bin${kubectl:+:$(dirname "${kubectl}")}:${PATH}"
	export PATH
	cd "${ROOT}"
	log "${TILT} $* (KUBECONFIG=${KUBECONFIG}, context $(kubectl config current-context))"
	# shellcheck disable=SC2086 # NICE and the flags are word lists
	exec ${NICE} "${TILT}" "$@"
}

case "${1:-}" in
build) build && echo "${TILT}" ;;
ci) # shellcheck disable=SC2086
	run ci ${TILT_CI_FLAGS} ;;
up) run up ;;
*) die "usage: $0 build|ci|up" ;;
esac
