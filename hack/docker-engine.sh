#!/usr/bin/env bash
# Starts, stops and locates the Docker engine used by CAPDMP's container tests.
#
#   hack/docker-engine.sh start   use an engine that answers, else start our own dockerd;
#                                 prints `export DOCKER_HOST=...` on stdout
#   hack/docker-engine.sh env     prints `export DOCKER_HOST=...` for the engine that answers
#   hack/docker-engine.sh stop    stops the dockerd this script started (nothing else)
#
#   eval "$(hack/docker-engine.sh start)"
#
# An engine that already answers (DOCKER_HOST, the docker CLI's current context, our socket, then
# /var/run/docker.sock) is used as it is. Otherwise this script installs Debian's docker.io if
# dockerd is missing and starts dockerd in the background with its own socket, pidfile and
# exec-root under CAPDMP_DOCKER_DIR, so it never touches a system daemon. Containers are kept off outside networks: no IP forwarding, no
# masquerading, DNS pointed at 127.0.0.1 (nothing answers there), and a DOCKER-USER rule drops
# forwarded traffic leaving a Docker bridge for any other interface. Tests publish ports on
# 127.0.0.1 only and use --network host to reach loopback servers.
#
# hack/runc-wrapper is registered as the default runtime: it removes capabilities the host's
# bounding set lacks (CAP_SYS_RESOURCE here) before runc sees them, so --privileged works.
#
# Environment:
#   CAPDMP_DOCKER_DIR        state dir (socket, pidfile, exec-root, log); /run/capdmp-docker
#   CAPDMP_DOCKER_DATA_ROOT  dockerd --data-root; dockerd's default (/var/lib/docker) if unset
#   CAPDMP_DOCKER_IPTABLES   true (default) or false: dockerd --iptables
#   CAPDMP_DOCKER_BRIDGE     dockerd --bridge: an existing bridge interface for the default
#                            network of a second engine beside the first (docker0 is the first's).
#                            Never "none": dockerd then deletes docker0, the first engine's.
#   CAPDMP_DOCKER_GROUP      dockerd --group: the group that may use the socket (dockerd's default:
#                            docker, where that group exists)
#   CAPDMP_DOCKER_REGISTRY_MIRROR  dockerd --registry-mirror: a mirror of docker.io (a registry on
#                            loopback in make test-published-path)
#   CAPDMP_DOCKER_OWN=true   ignore engines that already answer and start our own
#
# Only starting and stopping our own dockerd needs root. With an engine that answers (Docker
# Desktop, a system dockerd whose socket the user's group may use), start and env create, lock and
# install nothing, as any user.
set -euo pipefail

ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
STATE_DIR="${CAPDMP_DOCKER_DIR:-/run/capdmp-docker}"
SOCK="${STATE_DIR}/docker.sock"
OUR_HOST="unix://${SOCK}"
PIDFILE="${STATE_DIR}/dockerd.pid"
EXEC_ROOT="${STATE_DIR}/exec"
LOG="${STATE_DIR}/dockerd.log"
WRAPPER="${STATE_DIR}/runc-wrapper"
IPTABLES="${CAPDMP_DOCKER_IPTABLES:-true}"
START_TIMEOUT=60

log() { printf '[docker-engine] %s\n' "$*" >&2; }
die() { log "ERROR: $*"; exit 1; }

# answers HOST: true if a Docker engine answers `docker version` at HOST (within 10 s where
# coreutils' timeout exists: macOS has none).
answers() {
  command -v docker >/dev/null 2>&1 || return 1
  local limit=()
  if command -v timeout >/dev/null 2>&1; then limit=(timeout 10); fi
  DOCKER_HOST="$1" ${limit[@]+"${limit[@]}"} docker version --format '{{.Server.Version}}' >/dev/null 2>&1
}

# context_host prints the endpoint of the docker CLI's current context (DOCKER_CONTEXT, else the one
# `docker context use` chose) when it is not the default: Docker Desktop, Colima and OrbStack
# listen where only their context says, and the Go client of the tests and the manager reads
# DOCKER_HOST alone.
context_host() {
  command -v docker >/dev/null 2>&1 || return 0
  local name
  name="$(docker context show 2>/dev/null || true)"
  [[ -n "${name}" && "${name}" != default ]] || return 0
  docker context inspect --format '{{.Endpoints.docker.Host}}' "${name}" 2>/dev/null || true
}

# candidates prints the engines tried, in order, for messages.
candidates() {
  if [[ "${CAPDMP_DOCKER_OWN:-false}" != "true" ]]; then
    local context; context="$(context_host)"
    if [[ -n "${DOCKER_HOST:-}" ]]; then printf '%s ' "${DOCKER_HOST}"; fi
    if [[ -n "${context}" ]]; then printf '%s ' "${context}"; fi
  fi
  printf '%s' "${OUR_HOST}"
  if [[ "${CAPDMP_DOCKER_OWN:-false}" != "true" ]]; then printf ' %s' "unix:///var/run/docker.sock"; fi
}

# no_engine_for_user: what a user who is not root does when no engine answers. Starting dockerd
# needs root; nothing here tries.
no_engine_for_user() {
  if ! command -v docker >/dev/null 2>&1; then
    die "no docker CLI on PATH: install Docker (Docker Desktop, or Debian/Ubuntu: sudo apt-get install docker.io; Fedora: sudo dnf install moby-engine) and add yourself to the docker group"
  fi
  local h sock
  for h in $(candidates); do
    sock="${h#unix://}"
    if [[ "${h}" == unix://* && -S "${sock}" && ! -w "${sock}" ]]; then
      die "the Docker engine's socket ${sock} is there but $(id -un) may not use it ($(stat -c '%U:%G %a' "${sock}" 2>/dev/null || echo 'no access')): join its group (sudo usermod -aG $(stat -c %G "${sock}" 2>/dev/null || echo docker) $(id -un)), then log in again"
    fi
  done
  die "no Docker engine answers at $(candidates) and only root can start one: start yours (Docker Desktop, or sudo systemctl start docker) and set DOCKER_HOST if it listens elsewhere; or run 'sudo hack/docker-engine.sh start', whose socket the docker group may use"
}

# our_pid prints the PID of the dockerd this script started, if it still runs.
our_pid() {
  [[ -f "${PIDFILE}" ]] || return 1
  local pid
  pid="$(cat "${PIDFILE}" 2>/dev/null || true)"
  [[ "${pid}" =~ ^[0-9]+$ ]] || return 1
  [[ -r "/proc/${pid}/cmdline" ]] || return 1
  # Guard against PID reuse: the process must be a dockerd serving our socket.
  tr '\0' ' ' <"/proc/${pid}/cmdline" | grep -q -- "dockerd.*${SOCK}" || return 1
  echo "${pid}"
}

# existing_host prints the DOCKER_HOST of an engine that answers, preferring the caller's.
existing_host() {
  local candidates=()
  if [[ "${CAPDMP_DOCKER_OWN:-false}" != "true" ]]; then
    [[ -n "${DOCKER_HOST:-}" ]] && candidates+=("${DOCKER_HOST}")
    local context; context="$(context_host)"
    [[ -n "${context}" ]] && candidates+=("${context}")
  fi
  candidates+=("${OUR_HOST}")
  if [[ "${CAPDMP_DOCKER_OWN:-false}" != "true" ]]; then
    candidates+=("unix:///var/run/docker.sock")
  fi
  local h
  for h in "${candidates[@]}"; do
    if answers "${h}"; then
      echo "${h}"
      return 0
    fi
  done
  return 1
}

# Debian's docker.io, jq and iptables, installed where missing (hack/host-packages.sh).
ensure_packages() { "${ROOT}/hack/host-packages.sh" engine; }

# Keep forwarded container traffic on Docker's own bridges. With --ip-forward=false and the
# host's ip_forward at 0 nothing is forwarded anyway; this holds where ip_forward is 1.
isolation_rules=(
  "-i docker0 ! -o docker0 -j DROP"
  "-i br-+ ! -o br-+ -j DROP"
)
add_isolation_rules() {
  [[ "${IPTABLES}" == "true" ]] || return 0
  local r
  for r in "${isolation_rules[@]}"; do
    # shellcheck disable=SC2086 # the rule is a list of words
    iptables -C DOCKER-USER ${r} 2>/dev/null || iptables -I DOCKER-USER ${r} ||
      log "warning: could not add DOCKER-USER rule: ${r}"
  done
}
remove_isolation_rules() {
  # An engine started without iptables added none; the rules there are another engine's.
  [[ "${IPTABLES}" == "true" ]] || return 0
  command -v iptables >/dev/null 2>&1 || return 0
  local r
  for r in "${isolation_rules[@]}"; do
    # shellcheck disable=SC2086
    while iptables -D DOCKER-USER ${r} 2>/dev/null; do :; done
  done
}

cmd_start() {
  local host
  # An engine that answers is used as it is: checked before anything is created or locked, so
  # that a user without root reaches it too.
  if host="$(existing_host)"; then
    log "Docker engine answers at ${host}"
    echo "export DOCKER_HOST=${host}"
    return 0
  fi
  [[ "$(id -u)" == 0 ]] || no_engine_for_user

  mkdir -p "${STATE_DIR}"
  exec 9>"${STATE_DIR}/lock"
  flock 9
  # Another start may have brought one up while this one waited for the lock.
  if host="$(existing_host)"; then
    log "Docker engine answers at ${host}"
    echo "export DOCKER_HOST=${host}"
    return 0
  fi
  if [[ -n "$(our_pid || true)" ]]; then
    die "dockerd (pid $(our_pid)) runs but does not answer at ${OUR_HOST}; see ${LOG} or run stop"
  fi

  ensure_packages
  install -m 0755 "${ROOT}/hack/runc-wrapper" "${WRAPPER}"
  mkdir -p "${EXEC_ROOT}"
  rm -f "${PIDFILE}" "${SOCK}"
  # An empty config file: flags below are the whole configuration, /etc/docker/daemon.json of a
  # system daemon does not leak in.
  echo '{}' >"${STATE_DIR}/daemon.json"

  local args=(
    --host "${OUR_HOST}"
    --config-file "${STATE_DIR}/daemon.json"
    --pidfile "${PIDFILE}"
    --exec-root "${EXEC_ROOT}"
    --ip-forward=false
    --ip-masq=false
    --iptables="${IPTABLES}"
    --dns 127.0.0.1
    --add-runtime "capdmp-runc=${WRAPPER}"
    --default-runtime capdmp-runc
  )
  [[ -n "${CAPDMP_DOCKER_DATA_ROOT:-}" ]] && args+=(--data-root "${CAPDMP_DOCKER_DATA_ROOT}")
  [[ -n "${CAPDMP_DOCKER_GROUP:-}" ]] && args+=(--group "${CAPDMP_DOCKER_GROUP}")
  [[ -n "${CAPDMP_DOCKER_REGISTRY_MIRROR:-}" ]] && args+=(--registry-mirror "${CAPDMP_DOCKER_REGISTRY_MIRROR}")
  if [[ -n "${CAPDMP_DOCKER_BRIDGE:-}" ]]; then
    [[ "${CAPDMP_DOCKER_BRIDGE}" != "none" ]] || die "CAPDMP_DOCKER_BRIDGE=none would make dockerd delete docker0; name a bridge of the engine's own"
    args+=(--bridge "${CAPDMP_DOCKER_BRIDGE}")
  fi

  log "Starting dockerd at ${OUR_HOST} (log: ${LOG})"
  local start=${SECONDS}
  # setsid, stdio redirected and every other inherited fd closed (our lock among them): dockerd
  # outlives this script and holds neither the caller's pipes nor our lock.
  (
    for fd in /proc/"${BASHPID}"/fd/*; do
      fd="${fd##*/}"
      if ((fd > 2)); then eval "exec ${fd}>&-"; fi
    done
    exec setsid dockerd "${args[@]}" </dev/null >>"${LOG}" 2>&1
  ) &
  local launcher=$!

  while ((SECONDS - start < START_TIMEOUT)); do
    if answers "${OUR_HOST}"; then
      add_isolation_rules
      log "dockerd (pid $(our_pid || echo '?')) answers after $((SECONDS - start)) s"
      echo "export DOCKER_HOST=${OUR_HOST}"
      return 0
    fi
    if ! kill -0 "${launcher}" 2>/dev/null && [[ -z "$(our_pid || true)" ]]; then
      tail -n 30 "${LOG}" >&2 || true
      die "dockerd exited during start"
    fi
    sleep 0.5
  done
  tail -n 30 "${LOG}" >&2 || true
  die "dockerd did not answer within ${START_TIMEOUT} s"
}

cmd_env() {
  local host
  if host="$(existing_host)"; then
    echo "export DOCKER_HOST=${host}"
    return 0
  fi
  log "no Docker engine answers; run: hack/docker-engine.sh start"
  return 1
}

cmd_stop() {
  local pid
  if ! pid="$(our_pid)"; then
    log "no dockerd started by this script is running"
    return 0
  fi
  [[ "$(id -u)" == 0 ]] || die "dockerd (pid ${pid}) was started as root; only root stops it: sudo hack/docker-engine.sh stop"
  exec 9>"${STATE_DIR}/lock"
  flock 9
  if ! pid="$(our_pid)"; then
    log "no dockerd started by this script is running"
    return 0
  fi
  log "Stopping dockerd (pid ${pid})"
  remove_isolation_rules
  kill -TERM "${pid}" 2>/dev/null || true
  # dockerd stops its containers on shutdown (15 s shutdown timeout by default).
  for _ in $(seq 1 60); do
    [[ -d "/proc/${pid}" ]] || break
    sleep 0.5
  done
  if [[ -d "/proc/${pid}" ]]; then
    log "dockerd (pid ${pid}) did not exit in 30 s, killing it"
    kill -KILL "${pid}" 2>/dev/null || true
  fi
  # A containerd shim can outlive dockerd (seen after a stop during container starts); its
  # -address under this engine's exec root makes it this engine's alone.
  if command -v pgrep >/dev/null 2>&1; then
    local shim
    for shim in $(pgrep -f -- "containerd-shim.* -address ${EXEC_ROOT}/" || true); do
      log "killing containerd-shim (pid ${shim}) left by dockerd"
      kill -KILL "${shim}" 2>/dev/null || true
    done
  fi
  # dockerd leaves its network namespace mounted under its exec-root; put the host back.
  local mnt
  for mnt in $(awk -v root="${EXEC_ROOT}/" 'index($2, root) == 1 { print $2 }' /proc/self/mounts); do
    umount -l "${mnt}" 2>/dev/null || true
  done
  rm -f "${PIDFILE}" "${SOCK}"
  log "stopped"
}

case "${1:-}" in
  start) cmd_start ;;
  stop) cmd_stop ;;
  env) cmd_env ;;
  *)
    echo "usage: $0 start|stop|env" >&2
    exit 2
    ;;
esac
