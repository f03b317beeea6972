#!/usr/bin/env bash
# The distribution registry (the reference OCI registry behind Docker Hub's, registry:2's binary),
# built from its Go module, for tests that need a registry where none can be reached: the loopback
# test of published images (test/published, docs/node-images.md, "Published images").
#
# Usage: registry.sh build   prints the registry binary's path, building it first when missing
#
# It is github.com/distribution/distribution/v3/cmd/registry at REGISTRY_VERSION, built through the
# Go module proxy (go install MODULE@VERSION: the module has no replace directive, and
# sum.golang.org checks it) into CAPDMP_CACHE/tools/registry-REGISTRY_VERSION, static, with the
# version its own Makefile sets (`registry --version`). Run it with `registry serve CONFIG`.
#
# Environment (defaults in brackets):
#   REGISTRY_VERSION  [v3.1.2]
#   CAPDMP_CACHE      [~/.cache/capdmp]
#   REGISTRY          a registry binary to use instead of building one
#   NICE              prefix of the build [nice -n 19]
set -euo pipefail
REGISTRY_VERSION="${REGISTRY_VERSION:-v3.1.2}"
CAPDMP_CACHE="${CAPDMP_CACHE:-${HOME}/.cache/capdmp}"
REGISTRY="${REGISTRY:-${CAPDMP_CACHE}/tools/registry-${REGISTRY_VERSION}}"
NICE="${NICE-nice -n 19}"
MODULE=github.com/distribution/distribution/v3

log() { printf '[registry %s] %s\n' "$(date +%H:%M:%S)" "$*" >&2; }
die() { log "ERROR: $*"; exit 1; }

# build: a subshell, so that its trap stays in it.
build() (
	[ -x "${REGISTRY}" ] && exit 0
	t0=${SECONDS}
	gobin="$(mktemp -d)"
	trap 'rm -rf "${gobin}"' EXIT
	log "building the distribution registry ${REGISTRY_VERSION} into ${REGISTRY} ..."
	mkdir -p "$(dirname "${REGISTRY}")"
	# Outside any module (the repository's go.mod must not decide its dependencies).
	# shellcheck disable=SC2086 # NICE is a word list
	(cd "${gobin}" && CGO_ENABLED=0 GOBIN="${gobin}" GOFLAGS=-buildvcs=false ${NICE} go install -trimpath \
		-ldflags "-s -w -X ${MODULE}/version.version=${REGISTRY_VERSION} -X ${MODULE}/version.mainpkg=${MODULE}" \
		"${MODULE}/cmd/registry@${REGISTRY_VERSION}") ||
		die "go install ${MODULE}/cmd/registry@${REGISTRY_VERSION} failed"
	mv "${gobin}/registry" "${REGISTRY}.tmp"
	mv "${REGISTRY}.tmp" "${REGISTRY}"
	log "built in $((SECONDS - t0)) s: $("${REGISTRY}" --version)"
)

case "${1:-}" in
build) build && echo "${REGISTRY}" ;;
*) die "usage: $0 build" ;;
esac
