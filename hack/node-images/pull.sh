#!/usr/bin/env bash
# Published images, pulled through the Docker engine before anything is built: shared by
# hack/node-images/build.sh (node and load-balancer images) and hack/images/build.sh (controller
# images); docs/node-images.md, "Published images". Source it after lib.sh and a log function.
# It is not part of the node images' recipe (build.sh leaves it and published.txt out of the
# hash): what is pulled, or listed to be pulled, decides nothing in an image built here.
#
# Environment:
#   CAPDMP_PULL          try (default): pull a missing image first, build it only when the pull
#                        fails; never: no pull at all (offline machines)
#   CAPDMP_PULL_TIMEOUT  seconds one pull may take in all [900]. The engine gives up by itself
#                        on a registry that does not answer (about 25 s measured here for one that
#                        accepts connections and says nothing, well under a second when the name
#                        does not resolve); this bounds a transfer that stalls.
# Pulls are `docker pull` on DOCKER_HOST's engine, so its mirrors and proxies apply.

CAPDMP_PULL="${CAPDMP_PULL:-try}"
CAPDMP_PULL_TIMEOUT="${CAPDMP_PULL_TIMEOUT:-900}"
case "${CAPDMP_PULL}" in
  try | never) ;;
  *) die "CAPDMP_PULL=${CAPDMP_PULL}: try (pull first, build when the pull fails) or never" ;;
esac
# Where the output of each pull goes (the calling script sets its own).
PULL_LOG_DIR="${PULL_LOG_DIR:-${NODE_IMAGES_CACHE}/logs}"

# published_ref LIST KEY: the reference the list file LIST pins for KEY, empty when it names none.
# A line is `KEY REFERENCE`; `#` starts a comment. An empty LIST names nothing.
published_ref() {
  local list="$1" key="$2"
  [[ -n "${list}" ]] || return 0
  [[ -f "${list}" ]] || die "published image list ${list} does not exist"
  awk -v k="${key}" '{ sub(/#.*/, "") } $1 == k { print $2; exit }' "${list}"
}

# pull_ref REF LOGFILE: docker pull REF, bounded by CAPDMP_PULL_TIMEOUT; prints why it failed.
pull_ref() {
  local ref="$1" logfile="$2" rc=0
  mkdir -p "$(dirname "${logfile}")"
  local limit=()
  # macOS has no timeout: the pull is bounded by the engine's own timeouts there.
  if command -v timeout >/dev/null 2>&1; then limit=(timeout -k 10 "${CAPDMP_PULL_TIMEOUT}"); fi
  ${limit[@]+"${limit[@]}"} docker pull "${ref}" >"${logfile}" 2>&1 || rc=$?
  case "${rc}" in
    0) return 0 ;;
    124 | 137) echo "timed out after ${CAPDMP_PULL_TIMEOUT}s (CAPDMP_PULL_TIMEOUT)" ;;
    *) tail -n 1 "${logfile}" ;;
  esac
  return 1
}

# pull_published TAG KEY LIST DEFAULT [VERIFY...]: makes TAG from a published image when CAPDMP_PULL
# allows it, and says which happened. The image is the reference LIST pins for KEY (by digest:
# pulled, then tagged TAG), else DEFAULT pulled by tag; neither: nothing to pull. VERIFY... REF, when
# given, checks the pulled image before it is tagged (it fails the run). The caller has made sure
# that TAG is absent or holds an image built here that is to be replaced. Returns 1 when TAG was
# not made (the caller builds it).
pull_published() {
  local tag="$1" key="$2" list="$3" default="$4" verify=("${@:5}")
  local ref how
  # Called in a condition, where errexit does not hold: a list that cannot be read ends the run.
  ref="$(published_ref "${list}" "${key}")" || exit 1
  if [[ -n "${ref}" ]]; then
    how="pinned in ${list}"
  elif [[ -n "${default}" ]]; then
    ref="${default}" how="no pinned digest for ${key}: pulled by tag"
  else
    log "${tag}: no published image (${list:-no list} names none for ${key}): building it"
    return 1
  fi
  if [[ "${CAPDMP_PULL}" == never ]]; then
    log "${tag}: not pulled (CAPDMP_PULL=never; published: ${ref}): building it"
    return 1
  fi
  # Pulling a reference by tag writes that tag: never over an image that is there already (a
  # user's, or one this run must not replace); such an image is taken as it is.
  local pulled=true
  if [[ "${ref}" != *@* && "${ref}" != "${tag}" ]] && docker image inspect "${ref}" >/dev/null 2>&1; then
    pulled=false
  else
    local start=${SECONDS} why
    log "==> ${tag}: pulling ${ref} (${how})"
    if ! why="$(pull_ref "${ref}" "${PULL_LOG_DIR}/pull_$(printf '%s' "${ref}" | tr -c 'A-Za-z0-9._-' '_').log")"; then
      log "${tag}: pull of ${ref} failed after $((SECONDS - start))s (${why}): building it"
      return 1
    fi
  fi
  ((${#verify[@]} == 0)) || "${verify[@]}" "${ref}"
  # Called in a condition, where errexit does not hold: every failure is checked.
  if [[ "${ref}" != "${tag}" ]]; then docker tag "${ref}" "${tag}" || die "docker tag ${ref} ${tag} failed"; fi
  local id; id="$(docker image inspect -f '{{.Id}}' "${tag}")" || die "${tag}: not in Docker after the pull of ${ref}"
  if [[ "${pulled}" == true ]]; then
    log "${tag}: pulled ${ref} (${how}), image ${id#sha256:}"
  else
    log "${tag}: tagged from ${ref}, present already and not pulled again, image ${id#sha256:}"
  fi
  PULLED_FROM="${ref}"
}

# image_kind_version IMAGE: the Kubernetes version IMAGE's /kind/version records, read as the gate
# reads it (internal/nodeimage): from a container that is created and never started. Fails when
# the file cannot be read.
image_kind_version() {
  local id v rc=0
  id="$(docker create --pull=never --network none --entrypoint /kind/version "$1")" || return 1
  v="$(docker cp "${id}:/kind/version" - | tar -xO)" || rc=$?
  docker rm -f "${id}" >/dev/null 2>&1 || true
  ((rc == 0)) || return 1
  v="$(tr -d '[:space:]' <<<"${v}")"
  [[ -z "${v}" || "${v}" == v* ]] || v="v${v}"
  printf '%s' "${v}"
}
