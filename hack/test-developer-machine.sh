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
#     own (modules from the proxy), a PATH that holds only Go, make, git, docker, bash, POSIX tools
#     and busybox (no flock, timeout, setpriv, sysctl, ip or package manager), and envtest binaries
#     in setup-envtest's folder: envtest-binaries
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
# DEV_MACHINE_IMAGES=mirror (`make test-published-path`) is a machine with the internet instead,
# made on loopback: the label-less copies are pushed under their published names to a registry on
# 127.0.0.1 (the distribution registry, hack/registry.sh), and envtest's binaries are served there
# in controller-tools' layout (an index and an archive, as setup-envtest downloads them). The user
# runs on an engine of the test's own (its own data root, so nothing is there before the pull)
# whose registry mirror for docker.io is that registry, with a published list pinning the pushed
# digests (NODE_IMAGES_PUBLISHED) and ENVTEST_INDEX naming the served index. make run must pull
# every image and fetch envtest's binaries, building nothing from source; then the user runs
# `make test` (DEV_MACHINE_MAKE_TEST, true in that mode) on it.
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
#   DEV_MACHINE_IMAGES        present (default): label-less images on the shared engine; mirror:
#                             pulled through a loopback registry mirror by an engine of the test's own
#   DEV_MACHINE_MAKE_TEST     true: the user runs `make test` after make run (default: true with
#                             mirror, else false)
#   DEV_TEST_TIMEOUT          seconds the user's make test may take (default 5400)
set -euo pipefail

ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
read -r -a VERSIONS <<<"${RUN_NODE_IMAGE_VERSIONS:-$(awk '$1 ~ /^(older|newer)$/ { print $2 }' "${ROOT}/internal/kubeversions/versions.txt")}"
DEV_USER="${CAPDMP_DEV_USER:-capdmp-dev}"
PLANE_TIMEOUT="${DEV_PLANE_TIMEOUT:-3600}"
CLUSTER_TIMEOUT="${DEV_CLUSTER_TIMEOUT:-900}"
IMAGES_MODE="${DEV_MACHINE_IMAGES:-present}"
case "${IMAGES_MODE}" in
  present) MAKE_TEST="${DEV_MACHINE_MAKE_TEST:-false}" ;;
  mirror) MAKE_TEST="${DEV_MACHINE_MAKE_TEST:-true}" ;;
  *) echo "DEV_MACHINE_IMAGES=${IMAGES_MODE}: present or mirror" >&2; exit 2 ;;
esac
TEST_TIMEOUT="${DEV_TEST_TIMEOUT:-5400}"
CLUSTER=devmachine
NODE_REPO=kindest/node
RECIPE_LABEL=io.capdmp.node-images.recipe
BACKUP_REPO=capdmp-test-developer-machine/backup
ART="${ROOT}/_artifacts/test-developer-machine"
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
if [[ "${IMAGES_MODE}" == mirror ]]; then
  for c in ip python3 sha512sum tar; do command -v "${c}" >/dev/null 2>&1 || die "${c} is missing on this host (DEV_MACHINE_IMAGES=mirror)"; done
fi
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
# The loopback registry, the envtest file server and the user's engine (mirror mode).
MIRROR_PIDS=()
USER_ENGINE_ENV=()
USER_ENGINE_BRIDGE=""
USER_DOCKER_HOST=""
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

# stop_user_engine: removes the user's engine of mirror mode with its containers, data and bridge.
stop_user_engine() {
  [[ -n "${USER_DOCKER_HOST}" ]] || return 0
  local ids
  ids="$(DOCKER_HOST="${USER_DOCKER_HOST}" docker ps -aq 2>/dev/null)"
  # shellcheck disable=SC2086 # a list of IDs
  [[ -z "${ids}" ]] || DOCKER_HOST="${USER_DOCKER_HOST}" docker rm -f -v ${ids} >/dev/null 2>&1
  env "${USER_ENGINE_ENV[@]}" "${ROOT}/hack/docker-engine.sh" stop >/dev/null 2>&1 || log "could not stop the user's engine at ${USER_DOCKER_HOST}"
  local m
  for m in $(awk -v d="${WORK}/" 'index($2, d) == 1 { print $2 }' /proc/mounts | sort -r); do umount -l "${m}" 2>/dev/null; done
  [[ -z "${USER_ENGINE_BRIDGE}" ]] || ip link del "${USER_ENGINE_BRIDGE}" 2>/dev/null
  USER_DOCKER_HOST=""
  log "stopped the user's engine, removed its data and bridge"
}

cleanup() {
  local rc=$?
  set +e
  stop_run
  local ids
  ids="$(docker ps -aq --filter "label=io.x-k8s.kind.cluster=${CLUSTER}")"
  # shellcheck disable=SC2086 # a list of IDs
  [[ -z "${ids}" ]] || { log "removing the containers of cluster ${CLUSTER}"; docker rm -f -v ${ids} >/dev/null; }
  stop_user_engine
  local pid
  for pid in ${MIRROR_PIDS[@]+"${MIRROR_PIDS[@]}"}; do kill "${pid}" 2>/dev/null; done
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
# label_less_copy IMAGE TAG: builds TAG from IMAGE with the recipe label emptied, as kind publishes.
label_less_copy() {
  printf 'FROM %s\nLABEL %s=""\n' "$1" "${RECIPE_LABEL}" | docker build --pull=false -q -t "$2" - >"${WORK}/copy.log" 2>&1 ||
    { cat "${WORK}/copy.log" >&2; die "building the label-less copy of $1 failed"; }
}
# published_key IMAGE: IMAGE's key in a published list, its version or load-balancer.
published_key() { if [[ "$1" == "${LB_IMAGE}" ]]; then echo load-balancer; else echo "${1#"${NODE_REPO}":}"; fi; }
# recipe_images: the IDs of images whose recipe label has a value (built by hack/node-images), and
# of its intermediate images.
recipe_images() {
  docker images -a --no-trunc --format '{{.ID}}' | sort -u | while read -r id; do
    if [[ -n "$(label_of "${id}" 2>/dev/null)" ]]; then echo "${id}"; fi
  done
  docker images -a --no-trunc --format '{{.ID}} {{.Repository}}' | awk '$2 ~ /^capdmp\/node-/ {print $1}'
}

# --- mirror mode: a registry, envtest's binaries and an engine, on loopback -------------------------

# free_port: a TCP port on 127.0.0.1 nothing listens on.
free_port() {
  local port
  for _ in $(seq 1 50); do
    port=$((20000 + RANDOM % 10000))
    if ! (echo >"/dev/tcp/127.0.0.1/${port}") 2>/dev/null; then echo "${port}"; return 0; fi
  done
  die "no free port on 127.0.0.1"
}

# wait_http URL: until URL answers.
wait_http() {
  for _ in $(seq 1 100); do
    curl -fsS -o /dev/null "$1" 2>/dev/null && return 0
    sleep 0.2
  done
  die "nothing answers at $1"
}

# setup_mirror: the registry with the label-less copies under their published names, the envtest
# index and archive, and the user's engine whose docker.io mirror is that registry.
setup_mirror() {
  local registry port reg image copy digest
  registry="$("${ROOT}/hack/registry.sh" build)" || die "building the distribution registry failed"
  port="$(free_port)"
  reg="127.0.0.1:${port}"
  mkdir -p "${WORK}/registry"
  printf 'version: 0.1\nlog:\n  level: warn\nstorage:\n  filesystem:\n    rootdirectory: %s\nhttp:\n  addr: %s\n' \
    "${WORK}/registry" "${reg}" >"${WORK}/registry.yaml"
  "${registry}" serve "${WORK}/registry.yaml" >"${ART}/registry.log" 2>&1 &
  MIRROR_PIDS+=($!)
  wait_http "http://${reg}/v2/"
  log "registry on ${reg} ($("${registry}" --version))"

  # The copies are pushed from the shared engine under the registry's name and untagged after:
  # its own tags stay as they were.
  : >"${WORK}/published.txt"
  local push_started=${SECONDS}
  for image in "${IMAGES[@]}"; do
    docker image inspect "${image}" >/dev/null 2>&1 || die "${image} is not on the engine after make node-images"
    copy="${reg}/${image}"
    label_less_copy "${image}" "${copy}"
    docker push "${copy}" >"${WORK}/push.log" 2>&1 || { cat "${WORK}/push.log" >&2; die "docker push ${copy} failed"; }
    digest="$(docker image inspect -f '{{range .RepoDigests}}{{println .}}{{end}}' "${copy}" | awk -F@ -v r="${reg}/${image%:*}" '$1 == r { print $2; exit }')"
    [[ -n "${digest}" ]] || die "no digest of ${copy} after the push"
    docker rmi "${copy}" >/dev/null
    echo "$(published_key "${image}") ${image}@${digest}" >>"${WORK}/published.txt"
    log "pushed ${image} as published, without the recipe label: ${digest}"
  done
  chmod 0644 "${WORK}/published.txt"
  MIRROR_PUSH_SECONDS=$((SECONDS - push_started))

  # envtest's binaries as controller-tools publishes them: an archive and setup-envtest's index.
  local version files archive sum
  version="$(awk '$1 == "envtest" { print $2 }' "${ROOT}/internal/kubeversions/versions.txt")"
  files="${WORK}/envtest"
  archive="envtest-${version}-linux-$(go env GOARCH).tar.gz"
  mkdir -p "${files}/stage/controller-tools/envtest"
  cp "${ROOT}/bin/envtest/kube-apiserver" "${ROOT}/bin/envtest/etcd" "${files}/stage/controller-tools/envtest/"
  tar -C "${files}/stage" -czf "${files}/${archive}" controller-tools
  sum="$(sha512sum "${files}/${archive}" | cut -d' ' -f1)"
  port="$(free_port)"
  printf 'releases:\n  %s:\n    %s:\n      hash: %s\n      selfLink: http://127.0.0.1:%s/%s\n' \
    "${version}" "${archive}" "${sum}" "${port}" "${archive}" >"${files}/envtest-releases.yaml"
  chmod -R a+rX "${files}"
  python3 -m http.server --bind 127.0.0.1 --directory "${files}" "${port}" >"${ART}/envtest-server.log" 2>&1 &
  MIRROR_PIDS+=($!)
  ENVTEST_INDEX_URL="http://127.0.0.1:${port}/envtest-releases.yaml"
  wait_http "${ENVTEST_INDEX_URL}"
  log "envtest ${version} served at ${ENVTEST_INDEX_URL}"

  # The user's engine: its own data root (nothing pulled before), docker.io mirrored by the
  # registry, a bridge of its own for its default network, no iptables rules beside the shared
  # engine's.
  USER_ENGINE_BRIDGE="capdmp-mr$(printf '%04x' "${RANDOM}")"
  ip link add name "${USER_ENGINE_BRIDGE}" type bridge
  ip addr add "10.199.$((200 + RANDOM % 50)).1/24" dev "${USER_ENGINE_BRIDGE}"
  USER_ENGINE_ENV=(CAPDMP_DOCKER_DIR="${WORK}/engine/run" CAPDMP_DOCKER_DATA_ROOT="${WORK}/engine/data" CAPDMP_DOCKER_IPTABLES=false
    CAPDMP_DOCKER_BRIDGE="${USER_ENGINE_BRIDGE}" CAPDMP_DOCKER_OWN=true CAPDMP_DOCKER_GROUP="${SOCK_GROUP}"
    CAPDMP_DOCKER_REGISTRY_MIRROR="http://${reg}")
  local out
  out="$(env "${USER_ENGINE_ENV[@]}" "${ROOT}/hack/docker-engine.sh" start 2>"${ART}/user-engine.log")" || { cat "${ART}/user-engine.log" >&2; die "starting the user's engine failed"; }
  USER_DOCKER_HOST="${out#export DOCKER_HOST=}"
  chmod 0755 "${WORK}/engine" "${WORK}/engine/run"
  [[ -z "$(DOCKER_HOST="${USER_DOCKER_HOST}" docker images -aq)" ]] || die "the user's engine at ${USER_DOCKER_HOST} has images before the run"
  DOCKER_HOST="${USER_DOCKER_HOST}" docker info --format '{{.RegistryConfig.Mirrors}}' | grep -qF "http://${reg}/" ||
    die "the user's engine does not mirror docker.io to ${reg}"
  log "the user's engine: ${USER_DOCKER_HOST}, no image, docker.io mirrored by http://${reg}"
  : >"${WORK}/recipe-images.before"
}

# --- published-style copies -------------------------------------------------------------------------

declare -A ID_BEFORE=() TAGS_BEFORE=()
if [[ "${IMAGES_MODE}" == present ]]; then
  declare -A ID_BEFORE=() TAGS_BEFORE=()
  for image in "${IMAGES[@]}"; do
    docker image inspect "${image}" >/dev/null 2>&1 || die "${image} is not on the engine after make node-images"
    if [[ -n "$(label_of "${image}")" ]]; then
      backup="${BACKUP_REPO}:$(tr '/:' '__' <<<"${image}")"
      docker tag "${image}" "${backup}"
      BACKED_UP[${image}]="${backup}"
      label_less_copy "${backup}" "${image}"
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
else
  setup_mirror
  # What follows, the cluster's containers and the images, is on the user's engine.
  export DOCKER_HOST="${USER_DOCKER_HOST}"
fi

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
ENVTEST_VERSION="$("${ROOT}/bin/envtest/kube-apiserver" --version | awk '{print $2}')"
ASSETS="${HOME_DIR}/.local/share/kubebuilder-envtest/k8s/${ENVTEST_VERSION#v}-linux-amd64"
if [[ "${IMAGES_MODE}" == present ]]; then
  # envtest binaries where setup-envtest keeps them.
  mkdir -p "${ASSETS}"
  cp "${ROOT}/bin/envtest/kube-apiserver" "${ROOT}/bin/envtest/etcd" "${ASSETS}/"
  chown -R "${DEV_USER}:" "${HOME_DIR}/.local"
fi
chown -R "${DEV_USER}:" "${CLONE}"
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

# The user's PATH holds only what the README asks for, Go, make, git, docker and a shell with
# POSIX tools, each linked from this host; no flock, timeout, setpriv, sysctl, ip or package
# manager (their shims fail). The one other: busybox, which make test's engine tests copy into
# their 2 MB image (internal/container/containertest) until a Go-built binary replaces it.
USER_PATH="${WORK}/path"
mkdir -p "${USER_PATH}"
for tool in go gofmt make git bash sh env cat cp mv rm mkdir rmdir ln ls chmod touch tr cut sort uniq head tail wc \
  grep sed awk find xargs date sleep kill ps id uname dirname basename tar gzip mktemp printf test tee comm od expr \
  true false pwd nice nohup diff readlink cmp seq sha256sum hostname getconf stat busybox; do
  path="$(PATH="/usr/local/go/bin:/usr/bin:/bin" command -v "${tool}")" || die "${tool} is missing on this host"
  ln -s "${path}" "${USER_PATH}/${tool}"
done
chmod 0755 "${USER_PATH}"
USER_ENV=()
if [[ "${IMAGES_MODE}" == mirror ]]; then
  USER_ENV=(DOCKER_HOST="${USER_DOCKER_HOST}" NODE_IMAGES_PUBLISHED="${WORK}/published.txt" ENVTEST_INDEX="${ENVTEST_INDEX_URL}")
fi

# as_user CMD [NAME=VALUE...]: runs the bash command line CMD as the user, in the clone, with
# the environment of a login of its own (and NAME=VALUE...): the shim first on PATH; Go's cache,
# GOPATH and module cache the defaults in its home, cold.
as_user() {
  local line="$1"; shift
  runuser -u "${DEV_USER}" -- env -i HOME="${HOME_DIR}" USER="${DEV_USER}" LOGNAME="${DEV_USER}" SHELL=/bin/bash \
    LANG=C.UTF-8 TERM=dumb PATH="${SHIM}:${USER_PATH}" ${USER_ENV[@]+"${USER_ENV[@]}"} "$@" bash -o pipefail -c "cd '${CLONE}' && ${line}"
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

envtest_started=${SECONDS}
if [[ "${IMAGES_MODE}" == present ]]; then
  log "as ${DEV_USER}: hack/envtest-binaries.sh without KUBEBUILDER_ASSETS (setup-envtest's folder holds ${ENVTEST_VERSION})"
else
  log "as ${DEV_USER}: hack/envtest-binaries.sh with ENVTEST_INDEX=${ENVTEST_INDEX_URL} (nothing in setup-envtest's folder)"
fi
as_user "hack/envtest-binaries.sh" >"${ART}/envtest-binaries.log" 2>&1 || { cat "${ART}/envtest-binaries.log" >&2; die "hack/envtest-binaries.sh failed as ${DEV_USER}"; }
ENVTEST_SECONDS=$((SECONDS - envtest_started))
if [[ "${IMAGES_MODE}" == present ]]; then
  grep -q "using setup-envtest's ${ASSETS}" "${ART}/envtest-binaries.log" || fail "hack/envtest-binaries.sh did not take setup-envtest's folder: $(tr '\n' ' ' <"${ART}/envtest-binaries.log")"
else
  grep -q "fetched with setup-envtest into ${ASSETS} " "${ART}/envtest-binaries.log" || fail "hack/envtest-binaries.sh did not fetch with setup-envtest: $(tr '\n' ' ' <"${ART}/envtest-binaries.log")"
  grep -q '"GET /envtest-' "${ART}/envtest-server.log" || fail "nothing downloaded the envtest archive from ${ENVTEST_INDEX_URL%/*}"
fi
! grep -q "building" "${ART}/envtest-binaries.log" || fail "hack/envtest-binaries.sh built from source"

# --- make run ---------------------------------------------------------------------------------------------

RUN_LOG="${ART}/make-run.log"
PIDFILE="${WORK}/make-run.pid"
install -m 0666 /dev/null "${PIDFILE}"
RUN_ENV=()
if [[ "${IMAGES_MODE}" == present ]]; then
  RUN_ENV=(KUBEBUILDER_ASSETS="${ASSETS}")
  log "as ${DEV_USER}: make run with KUBEBUILDER_ASSETS=${ASSETS} (cold Go cache; log ${RUN_LOG})"
else
  log "as ${DEV_USER}: make run on ${USER_DOCKER_HOST}, NODE_IMAGES_PUBLISHED=${WORK}/published.txt (cold Go cache; log ${RUN_LOG})"
fi
run_started=${SECONDS}
# setsid: make run leads a process group of its own, as in a terminal, for Ctrl-C.
as_user "exec $(command -v setsid) bash -c 'echo \$\$ >${PIDFILE}; exec nice -n 10 make run'" ${RUN_ENV[@]+"${RUN_ENV[@]}"} >"${RUN_LOG}" 2>&1 &
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
NODES_READY=$((SECONDS - run_started))
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

# --- make test as the user -----------------------------------------------------------------------------

# The docker calls of make run; make test's engine tests build images of their own by design.
cp "${DOCKER_CALLS}" "${WORK}/docker-calls-make-run"
TEST_SECONDS=""
if [[ "${MAKE_TEST}" == true ]]; then
  log "as ${DEV_USER}: make test (log ${ART}/make-test.log)"
  test_started=${SECONDS}
  as_user "nice -n 10 make test" >"${ART}/make-test.log" 2>&1 &
  wait_pid=$!
  while kill -0 "${wait_pid}" 2>/dev/null; do
    if ((SECONDS - test_started > TEST_TIMEOUT)); then
      fail "make test did not end within ${TEST_TIMEOUT} s: its processes killed"
      for pid in $(user_pids); do kill -KILL "${pid}" 2>/dev/null || true; done
      break
    fi
    sleep 10
  done
  test_rc=0
  wait "${wait_pid}" || test_rc=$?
  TEST_SECONDS=$((SECONDS - test_started))
  if ((test_rc == 0)); then
    log "make test passed as ${DEV_USER} in ${TEST_SECONDS} s"
  else
    tail -n 60 "${ART}/make-test.log" >&2
    fail "make test failed as ${DEV_USER} after ${TEST_SECONDS} s (${ART}/make-test.log)"
  fi
  grep -E -- '--- (FAIL|SKIP)' "${ART}/make-test.log" >"${ART}/make-test-fails-and-skips.txt" || true
fi

# --- what the run did not do -----------------------------------------------------------------------

host_files | sort >"${WORK}/files.after"
changed="$(comm -13 "${WORK}/files.before" "${WORK}/files.after" | cut -d' ' -f1,4)"
removed="$(comm -23 "${WORK}/files.before" "${WORK}/files.after" | cut -d' ' -f1 | while read -r p; do [[ -e "${p}" ]] || echo "${p}"; done)"
[[ -z "${changed}" ]] || fail "created or changed during the user's run (path owner): $(tr '\n' ';' <<<"${changed}")"
[[ -z "${removed}" ]] || fail "removed during the user's run: $(tr '\n' ' ' <<<"${removed}")"

for image in "${IMAGES[@]}"; do
  if [[ "${IMAGES_MODE}" == mirror ]]; then
    ref="$(awk -v k="$(published_key "${image}")" '$1 == k { print $2 }' "${WORK}/published.txt")"
    grep -qF "${image}: pulled ${ref} " "${RUN_LOG}" || fail "make run's log does not say ${image} was pulled as ${ref}"
    image_id "${image}" >/dev/null 2>&1 || fail "${image} is not on the user's engine after make run"
    continue
  fi
  id="$(image_id "${image}" 2>/dev/null || true)"
  [[ "${id}" == "${ID_BEFORE[${image}]}" ]] || { fail "${image} is now ${id:-gone}, was ${ID_BEFORE[${image}]}"; continue; }
  # The engine's view: another client of a shared engine shows here too (CI has it to itself).
  [[ "$(tags_of "${id}")" == "${TAGS_BEFORE[${image}]}" ]] ||
    fail "tags of ${image}'s image changed: $(tags_of "${id}" | tr '\n' ' ') (were: $(tr '\n' ' ' <<<"${TAGS_BEFORE[${image}]}"); the user's docker calls are in ${ART}/docker-calls.log)"
  grep -qF "${image}: present, not built here (no recipe label): used as it is" "${RUN_LOG}" || fail "make run's log does not say ${image} was used as it is"
done
# Every docker call of the user's run; one that writes images fails the test wherever it came from.
# In mirror mode the pulls, and the tags a pull by digest gets, are the point.
writes='image (build|tag|import|load|pull|push|rm|prune)|buildx build|build|tag|commit|import|load|pull|push|rmi'
[[ "${IMAGES_MODE}" == present ]] || writes='image (build|import|load|push|rm|prune)|buildx build|build|commit|import|load|push|rmi'
grep -E "^docker (${writes})( |\$)" "${WORK}/docker-calls-make-run" >"${WORK}/image-writes" &&
  fail "the user's make run wrote images: $(tr '\n' ';' <"${WORK}/image-writes")"
cp "${DOCKER_CALLS}" "${ART}/docker-calls.log"
new_recipe="$(recipe_images | sort -u | comm -13 "${WORK}/recipe-images.before" -)"
[[ -z "${new_recipe}" ]] || fail "images of the recipe built during the run: $(tr '\n' ' ' <<<"${new_recipe}")"
[[ ! -s "${CALLS}" ]] || fail "package managers called: $(tr '\n' ';' <"${CALLS}")"
[[ "${IMAGES_MODE}" == mirror ]] || grep -q "\[envtest-binaries\] using KUBEBUILDER_ASSETS=${ASSETS} " "${RUN_LOG}" ||
  fail "make run's log does not say the envtest binaries of KUBEBUILDER_ASSETS were used"
grep -q "\[kubectl\] kubectl ${VERSIONS[-1]}: taken from ${NODE_REPO}:${VERSIONS[-1]}" "${RUN_LOG}" || fail "make run's log does not say kubectl was taken from ${NODE_REPO}:${VERSIONS[-1]}"
# Every build, pull or load of node-images, kube-binaries and envtest-binaries is a step ("==> ")
# or says "building".
# In mirror mode, pulls are the steps expected.
grep -E '^\[[a-z-]+\] ==> |building|: replacing it' "${RUN_LOG}" | { if [[ "${IMAGES_MODE}" == mirror ]]; then grep -v '^\[node-images\] ==> .*: pulling '; else cat; fi; } >"${WORK}/builds" || true
[[ ! -s "${WORK}/builds" ]] || fail "make run built, pulled or loaded: $(tr '\n' ';' <"${WORK}/builds")"

changed_sysctls=()
for s in "${SYSCTLS[@]}"; do
  now="$(cat "/proc/sys/${s}")"
  [[ "${now}" == "${SYSCTL_BEFORE[${s}]}" ]] || changed_sysctls+=("${s//\//.}: ${SYSCTL_BEFORE[${s}]} -> ${now}")
done
((${#changed_sysctls[@]} == 0)) || log "note: host sysctls the nodes' kubelets changed, which a user's plane cannot put back (put back after): ${changed_sysctls[*]}"

# --- summary ------------------------------------------------------------------------------------------

log "summary: plane ready after ${PLANE_READY} s (cold Go cache), cluster up after ${CLUSTER_READY} s (every Node Ready ${NODES_READY} s after make run started), whole test $(elapsed)"
[[ "${IMAGES_MODE}" == present ]] || log "mirror: pushes ${MIRROR_PUSH_SECONDS} s, envtest fetch ${ENVTEST_SECONDS} s, make test ${TEST_SECONDS:-not run} s"
if ((${#failures[@]} > 0)); then
  log "${#failures[@]} failure(s):"
  printf '  - %s\n' "${failures[@]}" >&2
  exit 1
fi
if [[ "${IMAGES_MODE}" == mirror ]]; then
  log "PASS: as ${DEV_USER} with only Go, make, git, docker and POSIX tools, make run pulled ${IMAGES[*]} through the loopback mirror and fetched envtest's binaries, built no image, called no package manager, touched nothing of root's${TEST_SECONDS:+; make test passed}"
else
  log "PASS: make run as ${DEV_USER} used ${IMAGES[*]} as they are, built and retagged no image, called no package manager, touched nothing of root's"
fi
