#!/usr/bin/env bash
# The developer-machine test (`make test-developer-machine`, run as root by CI): `make run` by a
# normal user, as on a developer's own machine with kind's published node images, and a cluster
# made on it as the README shows. It checks that such a run builds, retags, installs and touches
# nothing that only root may:
#
#   - a user (CAPDMP_DEV_USER, capdmp-dev) in the Docker socket's group, made here and removed
#     after (with its home) unless it was there already;
#   - published-style node images: each kindest/node:<v> of RUN_NODE_IMAGE_VERSIONS, and the load
#     balancer image, of this repository's recipe is kept under a backup tag of this test's and
#     replaced by a copy whose recipe label is empty (hack/node-images/build.sh counts that as
#     none, as for kind's published images); put back after;
#   - as that user, in a clone of this repository's HEAD in its home, with a cold Go cache of its
#     own (modules from the proxy) and envtest binaries in setup-envtest's folder: envtest-binaries
#     alone takes them from there; `make run` with KUBEBUILDER_ASSETS naming them, in the
#     background, until the plane is ready; a cluster of templates/cluster-template-machinepool.yaml
#     applied with bin/clusterctl and bin/kubectl; its control-plane and pool Machines Running and
#     its three Nodes Ready; the cluster deleted, its containers gone; Ctrl-C (SIGINT to make run's
#     process group), and no process of the user left;
#   - then: the images' IDs and tags as before, no image of the recipe built, no file under
#     /run/capdmp-docker (but the engine's exec-root and log), /etc or /var/lib (but the engine's
#     data root) created or changed, no package manager or sudo called (a PATH shim records and
#     fails every call), and make run's log says the images, the envtest binaries and kubectl were
#     used as they are.
#
# Before that, as root and cached: `make envtest-binaries` and `make node-images` of the versions
# (with CoreDNS, which the template's clusters run), the images the copies are made from.
#
# Written in bash rather than as a Go test: it drives users, the engine, make and the host's
# files from outside the repository, as CI does, and has nothing to share with the Go test
# packages.
#
# Environment:
#   RUN_NODE_IMAGE_VERSIONS   the versions make run makes sure of (default: older and newer of
#                             internal/kubeversions/versions.txt)
#   CAPDMP_DEV_USER           the user (default capdmp-dev)
#   DEV_PLANE_TIMEOUT         seconds until the plane is ready (default 3600: a cold Go build)
#   DEV_CLUSTER_TIMEOUT       seconds until the cluster's Nodes are Ready (default 900)
set -euo pipefail

ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
read -r -a VERSIONS <<<"${RUN_NODE_IMAGE_VERSIONS:-$(awk '$1 ~ /^(older|newer)$/ { print $2 }' "${ROOT}/internal/kubeversions/versions.txt")}"
DEV_USER="${CAPDMP_DEV_USER:-capdmp-dev}"
PLANE_TIMEOUT="${DEV_PLANE_TIMEOUT:-3600}"
CLUSTER_TIMEOUT="${DEV_CLUSTER_TIMEOUT:-900}"
CLUSTER=devmachine
NODE_REPO=kindest/node
RECIPE_LABEL=io.capdmp.node-images.recipe
BACKUP_REPO=capdmp-test-developer-machine/backup
ART="${ROOT}/_artifacts/test-developer-machine"
# Debian's PATH of a normal user (no sbin), Go's folder first as its installer says.
USER_PATH=/usr/local/go/bin:/usr/local/bin:/usr/bin:/bin
PACKAGE_MANAGERS=(apt apt-get aptitude dpkg dnf yum microdnf rpm apk brew port pacman zypper snap sudo)

START=${SECONDS}
log() { printf '[test-developer-machine] %s\n' "$*" >&2; }
die() { log "FAIL: $*"; exit 1; }
failures=()
fail() { log "FAIL: $*"; failures+=("$*"); }
elapsed() { printf '%dm%02ds' $(((SECONDS - START) / 60)) $(((SECONDS - START) % 60)); }

# --- preconditions --------------------------------------------------------------------------------

[[ "$(id -u)" == 0 ]] || die "run as root (it creates a user and retags the node images): sudo make test-developer-machine"
for c in docker git make runuser useradd userdel getent setsid flock find stat /usr/local/go/bin/go; do
  command -v "${c}" >/dev/null 2>&1 || die "${c} is missing on this host"
done
export PATH="/usr/local/go/bin:${PATH}"
# The user's run gets its own; `make test-developer-machine` exports the Makefile's.
unset KUBEBUILDER_ASSETS
DOCKER_ENV="$("${ROOT}/hack/docker-engine.sh" env)" || die "no Docker engine answers (hack/docker-engine.sh start starts one)"
eval "${DOCKER_ENV}"
export DOCKER_HOST
SOCK="${DOCKER_HOST#unix://}"
[[ "${DOCKER_HOST}" == unix://* && -S "${SOCK}" ]] || die "the engine at ${DOCKER_HOST} has no unix socket whose group a user can join"
SOCK_GROUP="$(stat -c %G "${SOCK}")"
SOCK_MODE="$(stat -c %a "${SOCK}")"
[[ "${SOCK_GROUP}" != root && $((${SOCK_MODE: -2:1} & 6)) == 6 ]] ||
  die "${SOCK} is $(stat -c '%U:%G %a' "${SOCK}"): no group may use it (hack/docker-engine.sh starts dockerd with --group docker where that group exists)"
DATA_ROOT="$(docker info --format '{{.DockerRootDir}}')"
STATE_DIR="$(dirname "${SOCK}")"
mkdir -p "${ART}"
WORK="$(mktemp -d /tmp/capdmp-test-developer-machine.XXXXXX)"
chmod 0755 "${WORK}"
log "engine ${DOCKER_HOST} (socket group ${SOCK_GROUP}, data root ${DATA_ROOT}); versions ${VERSIONS[*]}; logs in ${ART}"

# --- cleanup ----------------------------------------------------------------------------------------

CREATED_USER=false
RUN_PGID=""
declare -A BACKED_UP=() COPY_ID=()
# The kernel settings the nodes' kubelets change on the host, which a user's plane cannot put
# back (test/devtools/hostsysctl). Not the inotify limits: a user's plane cannot raise them, and another
# run on this host may hold them raised.
SYSCTLS=(vm/overcommit_memory kernel/panic kernel/panic_on_oops)
declare -A SYSCTL_BEFORE=()
for s in "${SYSCTLS[@]}"; do SYSCTL_BEFORE[${s}]="$(cat "/proc/sys/${s}")"; done
NETWORK_EXISTED=false
docker network inspect kind >/dev/null 2>&1 && NETWORK_EXISTED=true

# user_pids: the processes of the test's user, by ID.
user_pids() { ps -o pid= -u "${DEV_USER}" 2>/dev/null | tr -d ' ' || true; }

stop_run() {
  [[ -n "${RUN_PGID}" ]] || return 0
  if kill -0 -- "-${RUN_PGID}" 2>/dev/null; then
    log "stopping make run (SIGINT to process group ${RUN_PGID})"
    kill -INT -- "-${RUN_PGID}" 2>/dev/null || true
    for _ in $(seq 1 120); do kill -0 -- "-${RUN_PGID}" 2>/dev/null || break; sleep 1; done
    kill -KILL -- "-${RUN_PGID}" 2>/dev/null || true
  fi
  RUN_PGID=""
}

cleanup() {
  local rc=$?
  set +e
  stop_run
  local ids
  ids="$(docker ps -aq --filter "label=io.x-k8s.kind.cluster=${CLUSTER}")"
  # shellcheck disable=SC2086 # a list of IDs
  [[ -z "${ids}" ]] || { log "removing the containers of cluster ${CLUSTER}"; docker rm -f -v ${ids} >/dev/null; }
  if id "${DEV_USER}" >/dev/null 2>&1; then
    local pid
    for pid in $(user_pids); do kill -KILL "${pid}" 2>/dev/null; done
  fi
  local image
  for image in "${!BACKED_UP[@]}"; do
    if docker tag "${BACKED_UP[${image}]}" "${image}" && docker rmi "${BACKED_UP[${image}]}" >/dev/null; then
      log "put back ${image} (the recipe's image)"
    else
      log "could not put back ${image} from ${BACKED_UP[${image}]}"
    fi
    [[ -z "${COPY_ID[${image}]:-}" ]] || docker rmi "${COPY_ID[${image}]}" >/dev/null 2>&1
  done
  local s
  for s in "${SYSCTLS[@]}"; do
    if [[ "$(cat "/proc/sys/${s}")" != "${SYSCTL_BEFORE[${s}]}" ]]; then
      echo "${SYSCTL_BEFORE[${s}]}" >"/proc/sys/${s}" && log "put back sysctl ${s//\//.}=${SYSCTL_BEFORE[${s}]}"
    fi
  done
  [[ "${NETWORK_EXISTED}" == true ]] || docker network rm kind >/dev/null 2>&1
  if [[ "${CREATED_USER}" == true ]]; then
    find /tmp /var/tmp /dev/shm -xdev -maxdepth 1 -user "${DEV_USER}" -exec rm -rf {} + 2>/dev/null
    userdel -r "${DEV_USER}" 2>/dev/null
    if id "${DEV_USER}" >/dev/null 2>&1; then log "could not remove user ${DEV_USER}"; else log "removed user ${DEV_USER} and its home"; fi
  fi
  rm -rf "${WORK}"
  log "ended after $(elapsed) (exit ${rc})"
  exit "${rc}"
}
trap cleanup EXIT
trap 'exit 130' INT TERM
# Never a silent failure: a command that fails the script names itself.
trap 'log "FAIL: line ${LINENO}: ${BASH_COMMAND}"' ERR

# --- the recipe's images, as root ---------------------------------------------------------------

log "as root: make envtest-binaries and make node-images ${VERSIONS[*]} (cached; log ${ART}/prepare.log)"
(cd "${ROOT}" && make --no-print-directory envtest-binaries node-images NODE_IMAGE_VERSIONS="${VERSIONS[*]}") >"${ART}/prepare.log" 2>&1 ||
  { tail -n 30 "${ART}/prepare.log" >&2; die "preparing the recipe's images failed (${ART}/prepare.log)"; }
[[ -x "${ROOT}/bin/envtest/kube-apiserver" && -x "${ROOT}/bin/envtest/etcd" ]] || die "no envtest binaries in ${ROOT}/bin/envtest"
LB_IMAGE="$(cd "${ROOT}" && bash -c 'source hack/node-images/build.sh && lb_image')"
IMAGES=("${VERSIONS[@]/#/${NODE_REPO}:}" "${LB_IMAGE}")

label_of() { docker image inspect -f "{{ index .Config.Labels \"${RECIPE_LABEL}\" }}" "$1"; }
image_id() { docker image inspect -f '{{.Id}}' "$1"; }
# tags_of ID: every tag naming image ID, sorted.
tags_of() { docker image inspect -f '{{range .RepoTags}}{{println .}}{{end}}' "$1" | sed '/^$/d' | sort; }
# recipe_images: the IDs of images whose recipe label has a value (built by hack/node-images), and
# of its intermediate images.
recipe_images() {
  docker images -a --no-trunc --format '{{.ID}}' | sort -u | while read -r id; do
    if [[ -n "$(label_of "${id}" 2>/dev/null)" ]]; then echo "${id}"; fi
  done
  docker images -a --no-trunc --format '{{.ID}} {{.Repository}}' | awk '$2 ~ /^capdmp\/node-/ {print $1}'
}

# --- published-style copies -------------------------------------------------------------------------

declare -A ID_BEFORE=() TAGS_BEFORE=()
for image in "${IMAGES[@]}"; do
  docker image inspect "${image}" >/dev/null 2>&1 || die "${image} is not on the engine after make node-images"
  if [[ -n "$(label_of "${image}")" ]]; then
    backup="${BACKUP_REPO}:$(tr '/:' '__' <<<"${image}")"
    docker tag "${image}" "${backup}"
    BACKED_UP[${image}]="${backup}"
    printf 'FROM %s\nLABEL %s=""\n' "${backup}" "${RECIPE_LABEL}" | docker build --pull=false -q -t "${image}" - >"${WORK}/copy.log" 2>&1 ||
      { cat "${WORK}/copy.log" >&2; die "building the label-less copy of ${image} failed"; }
    COPY_ID[${image}]="$(image_id "${image}")"
    [[ -z "$(label_of "${image}")" ]] || die "the copy of ${image} still has a recipe label"
    log "${image}: the recipe's image kept as ${backup}; a label-less copy tagged ${image} (${COPY_ID[${image}]:7:12})"
  else
    log "${image}: already without a recipe label (published): used as it is"
  fi
  ID_BEFORE[${image}]="$(image_id "${image}")"
  TAGS_BEFORE[${image}]="$(tags_of "${ID_BEFORE[${image}]}")"
done
recipe_images | sort -u >"${WORK}/recipe-images.before"

# --- the user ------------------------------------------------------------------------------------------

if id "${DEV_USER}" >/dev/null 2>&1; then
  id -nG "${DEV_USER}" | tr ' ' '\n' | grep -qx "${SOCK_GROUP}" || die "user ${DEV_USER} exists but is not in group ${SOCK_GROUP}"
  [[ "$(id -u "${DEV_USER}")" != 0 ]] || die "user ${DEV_USER} is root"
  log "user ${DEV_USER} exists (kept after)"
else
  useradd --create-home --shell /bin/bash --groups "${SOCK_GROUP}" "${DEV_USER}"
  CREATED_USER=true
  log "created user ${DEV_USER} (groups: $(id -nG "${DEV_USER}"))"
fi
HOME_DIR="$(getent passwd "${DEV_USER}" | cut -d: -f6)"
CLONE="${HOME_DIR}/capdmp"
[[ ! -e "${CLONE}" ]] || die "${CLONE} exists already; remove it or name another user (CAPDMP_DEV_USER)"
git clone --quiet --no-hardlinks "${ROOT}" "${CLONE}"
[[ "$(git -C "${CLONE}" rev-parse HEAD)" == "$(git -C "${ROOT}" rev-parse HEAD)" ]] || die "the clone is not at HEAD of ${ROOT}"
log "clone of HEAD in ${CLONE}: $(git -C "${CLONE}" log --oneline -1)"
# envtest binaries where setup-envtest keeps them.
ENVTEST_VERSION="$("${ROOT}/bin/envtest/kube-apiserver" --version | awk '{print $2}')"
ASSETS="${HOME_DIR}/.local/share/kubebuilder-envtest/k8s/${ENVTEST_VERSION#v}-linux-amd64"
mkdir -p "${ASSETS}"
cp "${ROOT}/bin/envtest/kube-apiserver" "${ROOT}/bin/envtest/etcd" "${ASSETS}/"
chown -R "${DEV_USER}:" "${CLONE}" "${HOME_DIR}/.local"
# Package managers and sudo: every call is recorded and fails. docker: every call is recorded
# and passed on, to tell the user's image writes from another client's on a shared engine.
SHIM="${WORK}/shim"
CALLS="${WORK}/package-manager-calls"
DOCKER_CALLS="${WORK}/docker-calls"
mkdir -p "${SHIM}"
install -m 0666 /dev/null "${CALLS}"
install -m 0666 /dev/null "${DOCKER_CALLS}"
printf '#!/bin/sh
echo "docker $*" >>%s
exec %s "$@"
' "${DOCKER_CALLS}" "$(command -v docker)" >"${SHIM}/docker"
chmod 0755 "${SHIM}/docker"
for pm in "${PACKAGE_MANAGERS[@]}"; do
  # shellcheck disable=SC2016 # $* and $(date) belong to the shim
  printf '#!/bin/sh\necho "$(date +%%T) %s $*" >>%s\necho "test-developer-machine: %s called, which a developer run must not: $*" >&2\nexit 1\n' \
    "${pm}" "${CALLS}" "${pm}" >"${SHIM}/${pm}"
  chmod 0755 "${SHIM}/${pm}"
done

# as_user CMD [NAME=VALUE...]: runs the bash command line CMD as the user, in the clone, with
# the environment of a login of its own (and NAME=VALUE...): the shim first on PATH; Go's cache,
# GOPATH and module cache the defaults in its home, cold.
as_user() {
  local line="$1"; shift
  runuser -u "${DEV_USER}" -- env -i HOME="${HOME_DIR}" USER="${DEV_USER}" LOGNAME="${DEV_USER}" SHELL=/bin/bash \
    LANG=C.UTF-8 TERM=dumb PATH="${SHIM}:${USER_PATH}" "$@" bash -o pipefail -c "cd '${CLONE}' && ${line}"
}

# --- host state before --------------------------------------------------------------------------------

# host_files: path, mtime, size and owner of every entry under /etc and /var/lib (but the engine's
# data root) and the engine's state folder (but its exec-root and log, which the engine writes
# for any container).
host_files() {
  find /etc /var/lib -xdev -path "${DATA_ROOT}" -prune -o -printf '%p %T@ %s %u\n' 2>/dev/null
  find "${STATE_DIR}" -xdev \( -path "${STATE_DIR}/exec" -o -path "${STATE_DIR}/dockerd.log" \) -prune -o -printf '%p %T@ %s %u\n'
}
host_files | sort >"${WORK}/files.before"

# --- envtest binaries from setup-envtest's folder --------------------------------------------------

log "as ${DEV_USER}: hack/envtest-binaries.sh without KUBEBUILDER_ASSETS (setup-envtest's folder holds ${ENVTEST_VERSION})"
as_user "hack/envtest-binaries.sh" >"${ART}/envtest-binaries.log" 2>&1 || { cat "${ART}/envtest-binaries.log" >&2; die "hack/envtest-binaries.sh failed as ${DEV_USER}"; }
grep -q "using setup-envtest's ${ASSETS}" "${ART}/envtest-binaries.log" || fail "hack/envtest-binaries.sh did not take setup-envtest's folder: $(tr '\n' ' ' <"${ART}/envtest-binaries.log")"
! grep -q "building" "${ART}/envtest-binaries.log" || fail "hack/envtest-binaries.sh built from source"

# --- make run ---------------------------------------------------------------------------------------------

RUN_LOG="${ART}/make-run.log"
PIDFILE="${WORK}/make-run.pid"
install -m 0666 /dev/null "${PIDFILE}"
log "as ${DEV_USER}: make run with KUBEBUILDER_ASSETS=${ASSETS} (cold Go cache; log ${RUN_LOG})"
run_started=${SECONDS}
# setsid: make run leads a process group of its own, as in a terminal, for Ctrl-C.
as_user "exec setsid bash -c 'echo \$\$ >${PIDFILE}; exec nice -n 10 make run'" KUBEBUILDER_ASSETS="${ASSETS}" >"${RUN_LOG}" 2>&1 &
for _ in $(seq 1 50); do [[ -s "${PIDFILE}" ]] && break; sleep 0.2; done
RUN_PGID="$(cat "${PIDFILE}")"
[[ -n "${RUN_PGID}" ]] || die "make run did not start (${RUN_LOG})"
until grep -q "Management plane ready" "${RUN_LOG}"; do
  if ! kill -0 "${RUN_PGID}" 2>/dev/null; then
    tail -n 40 "${RUN_LOG}" >&2
    die "make run ended before the plane was ready (${RUN_LOG})"
  fi
  ((SECONDS - run_started < PLANE_TIMEOUT)) || { tail -n 40 "${RUN_LOG}" >&2; die "the plane was not ready after ${PLANE_TIMEOUT} s (${RUN_LOG})"; }
  sleep 5
done
PLANE_READY=$((SECONDS - run_started))
log "plane ready after ${PLANE_READY} s"

# --- a cluster, as the README shows ---------------------------------------------------------------

KUBE_ENV="export KUBECONFIG=\$PWD/_artifacts/management-plane/kubeconfig PATH=\$PWD/bin:\$PATH"
log "as ${DEV_USER}: clusterctl generate cluster ${CLUSTER} ... | kubectl apply -f -"
as_user "${KUBE_ENV} && clusterctl generate cluster ${CLUSTER} --from templates/cluster-template-machinepool.yaml \
  --kubernetes-version ${VERSIONS[0]} --worker-machine-count 2 | kubectl apply -f -" >"${ART}/apply.log" 2>&1 ||
  { cat "${ART}/apply.log" >&2; die "applying the cluster failed"; }

diagnostics() {
  {
    as_user "${KUBE_ENV} && kubectl get cluster,kcp,mp,dmp,dmpm,machines -o wide; kubectl describe dmp; kubectl get events --sort-by=.lastTimestamp | tail -n 40"
    docker ps -a --filter "label=io.x-k8s.kind.cluster=${CLUSTER}"
    tail -n 60 "${CLONE}/_artifacts/management-plane/logs/capdmp-manager.log"
    grep -E '^E|error' "${CLONE}/_artifacts/management-plane/logs/cluster-api.log" | tail -n 40
  } >"${ART}/diagnostics.log" 2>&1
  tail -n 80 "${ART}/diagnostics.log" >&2
}

# cluster-state prints the phases of the cluster's Machines (control plane and pool), then "|",
# then the workload cluster's Nodes as name=STATUS.
cat >"${WORK}/cluster-state" <<STATE
#!/usr/bin/env bash
${KUBE_ENV}
kubectl get machines -l cluster.x-k8s.io/cluster-name=${CLUSTER} -o jsonpath='{range .items[*]}{.status.phase}{" "}{end}'
echo -n '|'
kubeconfig="\$(mktemp)"
clusterctl get kubeconfig ${CLUSTER} >"\${kubeconfig}" 2>/dev/null &&
  kubectl --kubeconfig "\${kubeconfig}" get nodes --no-headers 2>/dev/null | awk '{printf "%s=%s ", \$1, \$2}'
rm -f "\${kubeconfig}"
STATE
chmod 0755 "${WORK}/cluster-state"

cluster_started=${SECONDS}
while :; do
  state="$(as_user "${WORK}/cluster-state" 2>/dev/null || true)"
  machines="${state%%|*}" nodes="${state#*|}"
  read -r -a phases <<<"${machines}"
  running="$(tr ' ' '\n' <<<"${machines}" | grep -cx Running || true)"
  ready="$(tr ' ' '\n' <<<"${nodes}" | grep -c '=Ready$' || true)"
  ((${#phases[@]} == 3 && running == 3 && ready == 3)) && break
  if ((SECONDS - cluster_started > CLUSTER_TIMEOUT)); then
    diagnostics
    die "cluster ${CLUSTER}: not 3 Machines Running and 3 Nodes Ready after ${CLUSTER_TIMEOUT} s (machines: ${machines}; nodes: ${nodes}; ${ART}/diagnostics.log)"
  fi
  ! kill -0 "${RUN_PGID}" 2>/dev/null && { tail -n 40 "${RUN_LOG}" >&2; die "make run ended while the cluster came up"; }
  sleep 10
done
CLUSTER_READY=$((SECONDS - cluster_started))
log "cluster ${CLUSTER} up after ${CLUSTER_READY} s: machines ${machines}; nodes ${nodes}"
as_user "${KUBE_ENV} && kubectl get cluster,kcp,mp,dmp,dmpm" >"${ART}/cluster.txt" 2>&1 || true

# --- delete it, stop the plane ----------------------------------------------------------------------

log "as ${DEV_USER}: kubectl delete cluster ${CLUSTER}"
as_user "${KUBE_ENV} && kubectl delete cluster ${CLUSTER} --timeout=5m" >>"${ART}/apply.log" 2>&1 || { diagnostics; fail "kubectl delete cluster ${CLUSTER} failed"; }
left="$(docker ps -aq --filter "label=io.x-k8s.kind.cluster=${CLUSTER}" | wc -l)"
((left == 0)) || fail "${left} containers of cluster ${CLUSTER} remain after it was deleted"

log "Ctrl-C: SIGINT to make run's process group ${RUN_PGID}"
kill -INT -- "-${RUN_PGID}"
for _ in $(seq 1 120); do kill -0 -- "-${RUN_PGID}" 2>/dev/null || break; sleep 1; done
if kill -0 -- "-${RUN_PGID}" 2>/dev/null; then
  fail "make run did not stop within 2 minutes of SIGINT: killed"
  kill -KILL -- "-${RUN_PGID}" 2>/dev/null || true
fi
RUN_PGID=""
grep -q "^Stopped. No cluster's container runs." "${RUN_LOG}" || fail "make run did not say it stopped with no cluster's container running (${RUN_LOG})"
sleep 2
left_pids="$(user_pids | tr '\n' ' ')"
if [[ -n "${left_pids// /}" ]]; then
  fail "processes of ${DEV_USER} outlived make run: $(ps -o pid=,args= -p "${left_pids// /,}" 2>/dev/null | cut -c1-120 | tr '\n' ';')"
  for pid in ${left_pids}; do kill -KILL "${pid}" 2>/dev/null || true; done
fi

# --- what the run did not do -----------------------------------------------------------------------

host_files | sort >"${WORK}/files.after"
changed="$(comm -13 "${WORK}/files.before" "${WORK}/files.after" | cut -d' ' -f1,4)"
removed="$(comm -23 "${WORK}/files.before" "${WORK}/files.after" | cut -d' ' -f1 | while read -r p; do [[ -e "${p}" ]] || echo "${p}"; done)"
[[ -z "${changed}" ]] || fail "created or changed during the user's run (path owner): $(tr '\n' ';' <<<"${changed}")"
[[ -z "${removed}" ]] || fail "removed during the user's run: $(tr '\n' ' ' <<<"${removed}")"

for image in "${IMAGES[@]}"; do
  id="$(image_id "${image}" 2>/dev/null || true)"
  [[ "${id}" == "${ID_BEFORE[${image}]}" ]] || { fail "${image} is now ${id:-gone}, was ${ID_BEFORE[${image}]}"; continue; }
  # The engine's view: another client of a shared engine shows here too (CI has it to itself).
  [[ "$(tags_of "${id}")" == "${TAGS_BEFORE[${image}]}" ]] ||
    fail "tags of ${image}'s image changed: $(tags_of "${id}" | tr '\n' ' ') (were: $(tr '\n' ' ' <<<"${TAGS_BEFORE[${image}]}"); the user's docker calls are in ${ART}/docker-calls.log)"
  grep -qF "${image}: present, not built here (no recipe label): used as it is" "${RUN_LOG}" || fail "make run's log does not say ${image} was used as it is"
done
# Every docker call of the user's run; one that writes images fails the test wherever it came from.
grep -E '^docker (image (build|tag|import|load|pull|push|rm|prune)|buildx build|build|tag|commit|import|load|pull|push|rmi)( |$)' "${DOCKER_CALLS}" >"${WORK}/image-writes" &&
  fail "the user's run wrote images: $(tr '\n' ';' <"${WORK}/image-writes")"
cp "${DOCKER_CALLS}" "${ART}/docker-calls.log"
new_recipe="$(recipe_images | sort -u | comm -13 "${WORK}/recipe-images.before" -)"
[[ -z "${new_recipe}" ]] || fail "images of the recipe built during the run: $(tr '\n' ' ' <<<"${new_recipe}")"
[[ ! -s "${CALLS}" ]] || fail "package managers called: $(tr '\n' ';' <"${CALLS}")"
grep -q "\[envtest-binaries\] using KUBEBUILDER_ASSETS=${ASSETS} " "${RUN_LOG}" || fail "make run's log does not say the envtest binaries of KUBEBUILDER_ASSETS were used"
grep -q "\[kubectl\] kubectl ${VERSIONS[-1]}: taken from ${NODE_REPO}:${VERSIONS[-1]}" "${RUN_LOG}" || fail "make run's log does not say kubectl was taken from ${NODE_REPO}:${VERSIONS[-1]}"
# Every build, pull or load of node-images, kube-binaries and envtest-binaries is a step ("==> ")
# or says "building".
! grep -E '^\[[a-z-]+\] ==> |building|: replacing it' "${RUN_LOG}" >"${WORK}/builds" || fail "make run built, pulled or loaded: $(tr '\n' ';' <"${WORK}/builds")"

changed_sysctls=()
for s in "${SYSCTLS[@]}"; do
  now="$(cat "/proc/sys/${s}")"
  [[ "${now}" == "${SYSCTL_BEFORE[${s}]}" ]] || changed_sysctls+=("${s//\//.}: ${SYSCTL_BEFORE[${s}]} -> ${now}")
done
((${#changed_sysctls[@]} == 0)) || log "note: host sysctls the nodes' kubelets changed, which a user's plane cannot put back (put back after): ${changed_sysctls[*]}"

# --- summary ------------------------------------------------------------------------------------------

log "summary: plane ready after ${PLANE_READY} s (cold Go cache), cluster up after ${CLUSTER_READY} s, whole test $(elapsed)"
if ((${#failures[@]} > 0)); then
  log "${#failures[@]} failure(s):"
  printf '  - %s\n' "${failures[@]}" >&2
  exit 1
fi
log "PASS: make run as ${DEV_USER} used ${IMAGES[*]} as they are, built and retagged no image, called no package manager, touched nothing of root's"
