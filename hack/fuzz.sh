#!/usr/bin/env bash
# Runs every fuzz target of the modules for FUZZTIME each (default 30s), one at a time: go test
# refuses -fuzz with several packages or a pattern that matches several targets. The targets are
# found in the test files `go list` gives for every package, so a new one is never forgotten.
#
# Prints a line per target (package, executions and new interesting inputs from the last
# "fuzz: elapsed: ..." line Go prints, result) and writes them to _artifacts/fuzz/summary.txt,
# each target's output beside it. Runs all targets, then fails if one failed; a failing input is
# written by Go to the package's testdata/fuzz/<target>/, where it stays as a regression seed.
#
# FUZZ_PARALLEL is the number of fuzzing workers (go test -parallel), one a core by default.
# FUZZMINIMIZETIME bounds the minimization of each new input (go test -fuzzminimizetime, 60s by
# default): a worker does not fuzz while it minimizes, and minimizing one of the seeds CABPK
# renders (kilobytes) would take a short run's whole time. A failing input is written minimized
# or not.
set -euo pipefail

FUZZTIME="${FUZZTIME:-30s}"
FUZZ_PARALLEL="${FUZZ_PARALLEL:-$(nproc)}"
FUZZMINIMIZETIME="${FUZZMINIMIZETIME:-1s}"
ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
OUT="${ROOT}/_artifacts/fuzz"
SUMMARY="${OUT}/summary.txt"
cd "${ROOT}"
mkdir -p "${OUT}"

log() { printf '[fuzz] %s\n' "$*" >&2; }

# deadline_race tells whether a run failed only with the bare "context deadline exceeded" that Go's
# fuzz coordinator can report as -fuzztime ends (golang/go#75804): one failure, that message and
# no failing input. A finding always has a failing input.
deadline_race() {
  local output="$1" target="$2"
  ! grep -q 'Failing input written to' "${output}" &&
    [[ "$(grep -c -- '--- FAIL: ' "${output}")" -eq 1 ]] &&
    grep -A1 -E -- "^--- FAIL: ${target} \(" "${output}" | tail -n 1 | grep -qx '    context deadline exceeded'
}

# "<package dir> <target>" for every func FuzzXxx(f *testing.F) in a test file of the modules: the
# provider's, pkg/skew's and the harness's (test/), modules of their own.
MODULES=(. pkg/skew test)
test_files="$(for module in "${MODULES[@]}"; do
  go -C "${module}" list -f '{{$d := .Dir}}{{range .TestGoFiles}}{{$d}}/{{.}}{{"\n"}}{{end}}{{range .XTestGoFiles}}{{$d}}/{{.}}{{"\n"}}{{end}}' ./...
done | sort)"
targets=()
while IFS= read -r file; do
  [[ -n "${file}" ]] || continue
  while IFS= read -r name; do
    targets+=("./$(realpath --relative-to="${ROOT}" "$(dirname "${file}")") ${name}")
  done < <(sed -nE 's/^func (Fuzz[A-Za-z0-9_]*)\(.*\*testing\.F\).*/\1/p' "${file}")
done <<<"${test_files}"

if [[ ${#targets[@]} -eq 0 ]]; then
  log "no fuzz target found in the module's test files"
  exit 1
fi
log "${#targets[@]} fuzz targets, ${FUZZTIME} each, ${FUZZ_PARALLEL} workers"

lines=()
failed=0
for entry in "${targets[@]}"; do
  pkg="${entry% *}"
  target="${entry#* }"
  name="${pkg#./}"
  output="${OUT}/${name//\//_}.${target}.log"
  result=ok
  # From the package's folder: go test takes a package of the module it runs in.
  if go -C "${pkg}" test -run '^$' -fuzz "^${target}\$" -fuzztime "${FUZZTIME}" -fuzzminimizetime "${FUZZMINIMIZETIME}" -parallel "${FUZZ_PARALLEL}" . >"${output}" 2>&1; then
    :
  elif deadline_race "${output}" "${target}"; then
    result="ok (no failing input; Go's fuzztime deadline race, golang/go#75804)"
  else
    failed=$((failed + 1))
    input="$(sed -nE 's/.*Failing input written to (.*)$/\1/p' "${output}" | tail -n 1)"
    if [[ -n "${input}" ]]; then
      result="FAIL (input ${pkg}/${input})"
    else
      result="FAIL (see ${output#"${ROOT}"/})"
    fi
  fi
  # fuzz: elapsed: 21s, execs: 123456 (5879/sec), new interesting: 3 (total: 40)
  last="$(grep -E '^fuzz: elapsed: .*, execs: [0-9]+' "${output}" | tail -n 1 || true)"
  execs="$(sed -nE 's/.*, execs: ([0-9]+).*/\1/p' <<<"${last}")"
  interesting="$(sed -nE 's/.*, new interesting: ([0-9]+).*/\1/p' <<<"${last}")"
  if [[ -z "${execs}" && "${result}" == ok* ]]; then
    # Go reports nothing until it has run the seeds and the corpus it cached from earlier runs.
    result="ok, but nothing fuzzed: FUZZTIME went on the seeds and the cached corpus; raise it"
  fi
  line="$(printf '%-36s %-22s execs %10s  new interesting %4s  %s' "${target}" "${pkg}" "${execs:--}" "${interesting:--}" "${result}")"
  echo "${line}"
  lines+=("${line}")
done

{
  echo "fuzztime ${FUZZTIME} per target, ${FUZZ_PARALLEL} workers, minimize time ${FUZZMINIMIZETIME}, $(go env GOVERSION)"
  printf '%s\n' "${lines[@]}"
  echo "${#targets[@]} targets, ${failed} failed"
} >"${SUMMARY}"
log "${#targets[@]} targets, ${failed} failed; summary in ${SUMMARY#"${ROOT}"/}"
if [[ ${failed} -gt 0 ]]; then
  exit 1
fi
