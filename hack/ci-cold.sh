#!/usr/bin/env bash
# Runs `.ci/run` as it runs on a new CI machine, on this one: a fresh clone of HEAD, an empty Go
# build cache, an empty golangci-lint cache, an empty CAPDMP cache (no envtest binaries, no node
# images) and a Docker engine of its own on an empty data root. Only Go's module cache is shared
# (downloads, about a minute on a new machine). Prints each step's start and the total; the
# engine it started is stopped at the end and the folder is kept for its logs.
#
#   hack/ci-cold.sh [FOLDER]     default: a new folder under /tmp
#
# Another dockerd on the host shares docker0 and iptables with this one: stop it first
# (hack/docker-engine.sh stop).
set -euo pipefail
ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
WORK="${1:-$(mktemp -d /tmp/capdmp-cold.XXXXXX)}"
mkdir -p "${WORK}"
WORK="$(cd "${WORK}" && pwd)"
[[ -e "${WORK}/src" ]] && { echo "${WORK}/src exists: name an empty folder" >&2; exit 1; }

git clone -q "${ROOT}" "${WORK}/src"
export CI=true
export GOCACHE="${WORK}/go-build" GOLANGCI_LINT_CACHE="${WORK}/golangci-lint"
export CAPDMP_CACHE="${WORK}/capdmp-cache"
export CAPDMP_DOCKER_DIR="${WORK}/docker" CAPDMP_DOCKER_DATA_ROOT="${WORK}/docker-data" CAPDMP_DOCKER_OWN=true
unset DOCKER_HOST KUBEBUILDER_ASSETS
stop_engine() { (cd "${WORK}/src" && hack/docker-engine.sh stop) || true; }
trap stop_engine EXIT

echo "cold CI run in ${WORK} (log: ${WORK}/ci.log)"
start=$(date +%s)
rc=0
(cd "${WORK}/src" && bash .ci/run) >"${WORK}/ci.log" 2>&1 || rc=$?
echo "exit ${rc} after $(($(date +%s) - start))s"
grep -E '^=== \[' "${WORK}/ci.log" || true
exit "${rc}"
