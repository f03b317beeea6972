#!/usr/bin/env bash
# The deployed tier (docs/testing.md, "make test-e2e"): test/e2e, CAPDMP's suite on Cluster API's
# e2e framework. The suite makes everything the way users do, with the framework where it can: the
# local clusterctl repository (clusterctl.CreateRepository, from the components make
# clusterctl-repository renders), the kind management cluster (hack/kind-management.sh cluster:
# see its usage for what the framework's kind provider cannot do here), the images of make images
# loaded (bootstrap.LoadImagesToKindCluster) and clusterctl init; and deletes the cluster after.
# This script starts the engine, runs the suite and removes what a suite that died left.
#
# Environment (defaults in brackets):
#   E2E_FOCUS            ginkgo focus, a regular expression over the specs' names [Cluster API's
#                        specs, the move, and the table's upgrade both at once in both orders;
#                        . runs every scenario of the table too]
#   E2E_SKIP             ginkgo skip [none]
#   E2E_KEEP_CLUSTER     true keeps the management cluster and the workload clusters [false]
#   E2E_TIMEOUT          go test timeout [3h]
#   E2E_ARTIFACTS        artifacts folder: suite log, resource dumps, controller logs [_artifacts/e2e]
#   KUBERNETES_VERSION_MANAGEMENT and the e2e config's other variables override it (test/e2e/config)
set -euo pipefail
ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
# The e2e config's managementClusterName; the move spec makes NAME-move.
NAME=capdmp-e2e
ARTIFACTS="${E2E_ARTIFACTS:-${ROOT}/_artifacts/e2e}"
KEEP="${E2E_KEEP_CLUSTER:-false}"
DEFAULT_FOCUS='quick-start|MachinePools|clusterctl move|Scenario (both-at-once/controlplane-first|both-at-once/machinepool-first):'
log() { printf '[test-e2e %s] %s\n' "$(date +%H:%M:%S)" "$*" >&2; }

eval "$("${ROOT}/hack/docker-engine.sh" start)"
export DOCKER_HOST
mkdir -p "${ARTIFACTS}"
start=${SECONDS}

# What the suite made and could not delete (it died, or was interrupted): its management clusters.
leftovers() {
	local cluster
	if [ "${KEEP}" = true ]; then
		log "E2E_KEEP_CLUSTER=true: keeping ${NAME}; delete it with: KIND_MANAGEMENT_NAME=${NAME} KIND_MANAGEMENT_DIR=${ARTIFACTS}/kind/${NAME} hack/kind-management.sh delete"
		return
	fi
	for cluster in "${NAME}" "${NAME}-move"; do
		KIND_MANAGEMENT_NAME="${cluster}" KIND_MANAGEMENT_DIR="${ARTIFACTS}/kind/${cluster}" \
			"${ROOT}/hack/kind-management.sh" delete || log "deleting ${cluster} failed"
	done
}
trap leftovers EXIT

args=(-e2e.config=config/capdmp.yaml -e2e.artifacts-folder="${ARTIFACTS}"
	-ginkgo.v -ginkgo.no-color -ginkgo.timeout="${E2E_TIMEOUT:-3h}")
args+=(-ginkgo.focus="${E2E_FOCUS:-${DEFAULT_FOCUS}}")
[ -n "${E2E_SKIP:-}" ] && args+=(-ginkgo.skip="${E2E_SKIP}")
[ "${KEEP}" = true ] && args+=(-e2e.skip-resource-cleanup=true)

suite=${SECONDS}
status=0
(cd "${ROOT}/test/e2e" && go test -tags e2e -count=1 -v -timeout "${E2E_TIMEOUT:-3h}" . -args "${args[@]}") 2>&1 |
	tee "${ARTIFACTS}/suite.log" || status=$?
echo
# Each spec's name and time, the monitors' figures, and ginkgo's verdict.
grep -E '^(When |Scenario |• |  (STEP: )?(monitor|gate re-open|VIOLATION)|Ran [0-9]+ of|(SUCCESS|FAIL)!|--- (PASS|FAIL))' "${ARTIFACTS}/suite.log" || true
log "suite: $((SECONDS - suite)) s; in all $((SECONDS - start)) s; exit ${status}"
exit "${status}"
