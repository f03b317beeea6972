#!/usr/bin/env bash
# Runs a command N times beside a noisy neighbour: a busy loop pinned to one core for the whole
# of each run, as a shared CI machine has. Prints each run's result, time and the remediations
# the real suite reported, then the pass rate.
#
#   hack/noisy-neighbour.sh [RUNS] [-- COMMAND...]   default: 3 runs of make test-e2e-local
#
# The busy loop is bounded (NOISY_MAX_SECONDS, 2 hours by default) and stopped by this script
# after each run, also when the run fails or is interrupted.
set -euo pipefail
ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
RUNS="${1:-3}"
shift || true
[[ "${1:-}" == "--" ]] && shift
CMD=("$@")
((${#CMD[@]} > 0)) || CMD=(make -C "${ROOT}" test-e2e-local)
CORE="${NOISY_CORE:-0}"
MAX="${NOISY_MAX_SECONDS:-7200}"
LOGDIR="${ROOT}/_artifacts/noisy-neighbour"
mkdir -p "${LOGDIR}"

hog=""
stop_hog() {
  if [[ -n "${hog}" ]]; then
    kill "${hog}" 2>/dev/null || true
    wait "${hog}" 2>/dev/null || true
    hog=""
  fi
}
trap stop_hog EXIT INT TERM

passed=0
for run in $(seq 1 "${RUNS}"); do
  # One core kept busy at normal priority, its own session (a scheduler autogroup of its own),
  # as another job on the machine would be.
  setsid taskset -c "${CORE}" timeout "${MAX}" sh -c 'while :; do :; done' &
  hog=$!
  start=$(date +%s)
  rc=0
  "${CMD[@]}" >"${LOGDIR}/run-${run}.log" 2>&1 || rc=$?
  elapsed=$(($(date +%s) - start))
  stop_hog
  verdict=FAIL
  if ((rc == 0)); then verdict=pass; passed=$((passed + 1)); fi
  echo "run ${run}: ${verdict} (exit ${rc}) in ${elapsed}s; log ${LOGDIR}/run-${run}.log"
  # The suite's summary stands twice in the log (go test's output, then make's excerpt of it).
  grep -E '^(s[0-9]-\S+ +(pass|FAIL)|\S+ remediation:|skew-violations:|[0-9]+ passed, [0-9]+ failed)' "${LOGDIR}/run-${run}.log" |
    awk '!seen[$0]++' | sed 's/^/    /' || true
done
echo "noisy neighbour: ${passed} of ${RUNS} runs passed (busy loop on core ${CORE})"
((passed == RUNS))
