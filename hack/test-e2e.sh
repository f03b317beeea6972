#!/usr/bin/env bash
# The deployed tier (docs/testing.md, "make test-e2e"): test/e2e, CAPDMP's suite on Cluster API's
# e2e framework, run on a kind management cluster made the way users make one
# (hack/kind-management.sh: node image built here, images of make images loaded, clusterctl init
# from the local repository of make clusterctl-repository), then the management cluster deleted.
#
# Environment (defaults in brackets):
#   E2E_MANAGEMENT_NAME  kind cluster name [capdmp-e2e]
#   E2E_NODE_IMAGE       the management cluster's node image [kindest/node:v1.36.3]
#   E2E_FOCUS            ginkgo focus, a regular expression over the specs' names [Cluster API's
#                        specs, the move, and the table's upgrade both at once in both orders;
#                        . runs every scenario of the table too]
#   E2E_SKIP             ginkgo skip [none]
#   E2E_KEEP_CLUSTER     true keeps the management cluster and the workload clusters [false]
#   E2E_TIMEOUT          go test timeout [3h]
#   E2E_ARTIFACTS        artifacts folder: suite log, resource dumps, controller logs [_artifacts/e2e]
set -euo pipefail
ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
NAME="${E2E_MANAGEMENT_NAME:-capdmp-e2e}"
ARTIFACTS="${E2E_ARTIFACTS:-${ROOT}/_artifacts/e2e}"
KEEP="${E2E_KEEP_CLUSTER:-false}"
REPO="${CLUSTERCTL_REPOSITORY:-${ROOT}/out/clusterctl-repository}"
DEFAULT_FOCUS='quick-start|MachinePools|clusterctl move|Scenario (both-at-once/controlplane-first|both-at-once/machinepool-first):'
log() { printf '[test-e2e %s] %s\n' "$(date +%H:%M:%S)" "$*" >&2; }

export KIND_MANAGEMENT_NAME="${NAME}"
export KIND_MANAGEMENT_NODE_IMAGE="${E2E_NODE_IMAGE:-kindest/node:v1.36.3}"
export KIND_MANAGEMENT_DIR="${ARTIFACTS}/kind/${NAME}"
export CLUSTERCTL_REPOSITORY="${REPO}"
# clusterctl init reads them: the ClusterClass spec needs the topology controller.
export CLUSTER_TOPOLOGY=true EXP_MACHINE_POOL=true

eval "$("${ROOT}/hack/docker-engine.sh" start)"
export DOCKER_HOST
mkdir -p "${ARTIFACTS}"
start=${SECONDS}

delete() {
	if [ "${KEEP}" = true ]; then
		log "E2E_KEEP_CLUSTER=true: keeping ${NAME}; delete it with: KIND_MANAGEMENT_NAME=${NAME} KIND_MANAGEMENT_DIR=${KIND_MANAGEMENT_DIR} hack/kind-management.sh delete"
		return
	fi
	"${ROOT}/hack/kind-management.sh" delete || log "deleting ${NAME} failed"
}
trap delete EXIT

kubeconfig="$("${ROOT}/hack/kind-management.sh" create)"
log "management cluster ${NAME} ready after $((SECONDS - start)) s"

args=(-e2e.config=config/capdmp.yaml -e2e.use-existing-cluster=true
	-e2e.clusterctl-config="${REPO}/clusterctl.yaml" -e2e.artifacts-folder="${ARTIFACTS}"
	-ginkgo.v -ginkgo.no-color -ginkgo.timeout="${E2E_TIMEOUT:-3h}")
args+=(-ginkgo.focus="${E2E_FOCUS:-${DEFAULT_FOCUS}}")
[ -n "${E2E_SKIP:-}" ] && args+=(-ginkgo.skip="${E2E_SKIP}")
[ "${KEEP}" = true ] && args+=(-e2e.skip-resource-cleanup=true)

suite=${SECONDS}
status=0
(cd "${ROOT}/test/e2e" && KUBECONFIG="${kubeconfig}" go test -tags e2e -count=1 -v -timeout "${E2E_TIMEOUT:-3h}" . -args "${args[@]}") 2>&1 |
	tee "${ARTIFACTS}/suite.log" || status=$?
echo
# Each spec's name and time, the monitors' figures, and ginkgo's verdict.
grep -E '^(When |Scenario |• |  (STEP: )?(monitor|gate re-open|VIOLATION)|Ran [0-9]+ of|(SUCCESS|FAIL)!|--- (PASS|FAIL))' "${ARTIFACTS}/suite.log" || true
log "suite: $((SECONDS - suite)) s; in all $((SECONDS - start)) s; exit ${status}"
exit "${status}"
