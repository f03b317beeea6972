#!/usr/bin/env bash
# Builds the controller images a deployed management cluster needs, for machines where no image
# registry can be reached: Cluster API's core manager, KubeadmConfig (CABPK) and
# KubeadmControlPlane, CAPD, CAPDMP and cert-manager's controller, webhook and cainjector. Each is
# a static Go binary built here, in a FROM scratch image tagged with the name the provider's
# components reference, so that components rendered from the modules' own config/ and
# `kind load docker-image` use them unchanged (docs/node-images.md, "Controller images").
#
# Usage: build.sh [NAME...]   build (or keep) these images; default: all
#        build.sh --list      print NAME and TAG of every image; needs no Docker engine
# Environment:
#   CAPDMP_CACHE / IMAGES_CACHE  cache folder (default ~/.cache/capdmp/images): binaries, logs
#   CAPDMP_IMG                   CAPDMP's tag (default capdmp-controller:dev, the Makefile's IMG)
#   CAPDMP_BASE_IMAGE            base of CAPDMP's image (default scratch; the Dockerfile's BASE_IMAGE)
#   IMAGES_NICE                  prefix of go build and docker build (default `nice -n 19`: the
#                                machines are shared); the rest is not niced, so that a warm run
#                                stays quick on a loaded machine
#   IMAGES_PUBLISHED             list of published images to pull (default published.txt beside
#                                this script; empty: none listed)
#   CAPDMP_PULL=never            pull nothing (hack/node-images/pull.sh; CAPDMP_PULL_TIMEOUT too)
#   IMAGE_ARCH                   architecture of the images (default: the Docker engine's, which
#                                is not the host's on every machine); binaries are built for
#                                linux/IMAGE_ARCH, and the smoke test runs only on that engine
#
# An image is rebuilt only when its inputs change: the label io.capdmp.images.inputs holds a hash
# of the versions of every module its binary links, the main module's source files, the build
# flags, this script and the Go version. Binaries are cached under the same hash. An image under
# the tag without that label (pulled, loaded by a user) is used as it is, never rebuilt. A missing
# image, or one built here from other inputs, is pulled first: the providers' published images
# (published_default), or what IMAGES_PUBLISHED pins; built when the pull fails.
set -euo pipefail
IMAGES_DIR="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
# step, heartbeat and GOGC come from the node images' library; log and die are this script's.
source "${IMAGES_DIR}/../node-images/lib.sh"
IMAGES_CACHE="${IMAGES_CACHE:-${CAPDMP_CACHE}/images}"
log() { printf '[images] %s\n' "$*" >&2; }
die() { log "ERROR: $*"; exit 1; }
PULL_LOG_DIR="${IMAGES_CACHE}/logs"
source "${IMAGES_DIR}/../node-images/pull.sh"
IMAGES_PUBLISHED="${IMAGES_PUBLISHED-${IMAGES_DIR}/published.txt}"
# step writes its log under ${NODE_IMAGES_CACHE}/logs: point it at this cache.
image_step() { NODE_IMAGES_CACHE="${IMAGES_CACHE}" step "$@"; }

INPUTS_LABEL=io.capdmp.images.inputs
SOURCE_LABEL=io.capdmp.images.source
CAPDMP_IMG="${CAPDMP_IMG:-capdmp-controller:dev}"
CAPDMP_BASE_IMAGE="${CAPDMP_BASE_IMAGE:-scratch}"
IMAGES_NICE="${IMAGES_NICE-nice -n 19}"
CAPI=sigs.k8s.io/cluster-api
CERT_MANAGER=github.com/cert-manager/cert-manager
export DOCKER_BUILDKIT=0 # the legacy builder: Debian's docker.io 20.10 has no buildx

# The images, in build order: NAME MODULE PACKAGE USER BINARY-PATH. MODULE says where the package
# is built: capi (the test module's dependency graph, test/go.mod: the Cluster API the plane runs
# in-process),
# cert-manager (hack/images/cert-manager, a module of its own), capdmp (this repository, with its
# Dockerfile). USER is the image's user, as upstream's: CAPD runs as root (it needs the Docker
# socket; its Deployment is privileged), Cluster API's managers and cert-manager as non-root.
IMAGES=(
  "cluster-api capi ${CAPI}/core 65532:65532 /manager"
  "kubeadm-bootstrap capi ${CAPI}/bootstrap/kubeadm 65532:65532 /manager"
  "kubeadm-control-plane capi ${CAPI}/controlplane/kubeadm 65532:65532 /manager"
  "capd capi ${CAPI}/test/infrastructure/docker root /manager"
  "capdmp capdmp . - /manager"
  "cert-manager-controller cert-manager ${CERT_MANAGER}/cmd/controller 65532:65532 /app/cmd/controller/controller"
  "cert-manager-webhook cert-manager ${CERT_MANAGER}/cmd/webhook 65532:65532 /app/cmd/webhook/webhook"
  "cert-manager-cainjector cert-manager ${CERT_MANAGER}/cmd/cainjector 65532:65532 /app/cmd/cainjector/cainjector"
)

# capi_modfile: a copy of test/go.mod and go.sum to build Cluster API's main packages with. They
# link a few modules (github.com/valyala/fastjson) that CAPDMP's packages do not, so the go.sum
# copy gains their sums; the repository's go.mod and go.sum stay untouched.
# One folder for the whole run, removed at exit: capi_modfile runs in command substitutions,
# subshells that cannot keep what they made for the next call.
CAPI_MODFILE_DIR="$(mktemp -d)"
trap 'rm -rf "${CAPI_MODFILE_DIR}"' EXIT
capi_modfile() {
  if [[ ! -f "${CAPI_MODFILE_DIR}/go.mod" ]]; then
    cp "${REPO_ROOT}/test/go.mod" "${REPO_ROOT}/test/go.sum" "${CAPI_MODFILE_DIR}/"
  fi
  echo "${CAPI_MODFILE_DIR}/go.mod"
}

# go_in MODULE SUBCOMMAND ARGS...: runs the go command where MODULE's packages are built, prefixed
# by GO_PREFIX (e.g. nice).
GO_PREFIX=""
go_in() {
  local module="$1" sub="$2"; shift 2
  case "${module}" in
    capi) (cd "${REPO_ROOT}/test" && ${GO_PREFIX} go "${sub}" -modfile="$(capi_modfile)" -mod=mod "$@") ;;
    capdmp) (cd "${REPO_ROOT}" && ${GO_PREFIX} go "${sub}" "$@") ;;
    cert-manager) (cd "${IMAGES_DIR}/cert-manager" && ${GO_PREFIX} go "${sub}" "$@") ;;
    *) die "unknown module ${module}" ;;
  esac
}

# module_dir MODULE PATH: the folder of module PATH as MODULE's build sees it (downloaded if needed).
module_dir() { go_in "$1" mod download -json "$2" | sed -n 's/^\s*"Dir": "\(.*\)",$/\1/p'; }
# main_version MODULE PATH: the version of PATH in MODULE's graph.
main_version() { go_in "$1" list -m -f '{{.Version}}' "$2"; }

# image_tag NAME MODULE PACKAGE: the name the provider's components give the image.
# - Cluster API and CAPD: the image config/default/manager_image_patch.yaml of each provider sets
#   (what a kustomize build of the module's config/default references);
# - cert-manager: the repository its Helm chart names (the release manifests are rendered from
#   it) and the module's version, the chart's appVersion;
# - CAPDMP: CAPDMP_IMG, the image config/manager names (test/manifests checks both agree).
image_tag() {
  local name="$1" module="$2" pkg="$3"
  case "${module}" in
    capi)
      local dir sub patch
      if [[ "${pkg}" == "${CAPI}/test/"* ]]; then
        dir="$(module_dir capdmp "${CAPI}/test")"; sub="${pkg#"${CAPI}/test/"}"
      else
        dir="$(module_dir capdmp "${CAPI}")"; sub="${pkg#"${CAPI}/"}"
      fi
      patch="${dir}/${sub}/config/default/manager_image_patch.yaml"
      [[ -f "${patch}" ]] || die "${name}: no ${patch} (is the module downloaded? go mod download)"
      sed -n 's/^ *- image: *\([^ ]*\).*/\1/p' "${patch}" | head -n1
      ;;
    cert-manager)
      local dir version component="${name#cert-manager-}" repo
      dir="$(module_dir cert-manager "${CERT_MANAGER}")"
      version="$(main_version cert-manager "${CERT_MANAGER}")"
      repo="$(sed -n "s|^ *repository: *\([^ ]*/cert-manager-${component}\) *$|\1|p" \
        "${dir}/deploy/charts/cert-manager/values.yaml" | head -n1)"
      [[ -n "${repo}" ]] || die "${name}: no image repository in cert-manager's chart values"
      echo "${repo}:${version}"
      ;;
    capdmp) echo "${CAPDMP_IMG}" ;;
  esac
}

# published_default NAME MODULE TAG: the image the provider publishes for what TAG is built from,
# pulled by tag when IMAGES_PUBLISHED pins none:
# - Cluster API and CAPD: registry.k8s.io/cluster-api/<the tag's image name>:<module version>,
#   where Cluster API's releases publish the image its release components name (the components
#   rendered from the module's config/ name the staging tag :main; the pulled image is tagged so);
# - cert-manager: TAG itself, the image and version its chart names;
# - CAPDMP: none is published.
published_default() {
  local name="$1" module="$2" tag="$3"
  case "${module}" in
    capi)
      local repo="${tag%:*}" mod="${CAPI}"
      [[ "${name}" != capd ]] || mod="${CAPI}/test"
      echo "registry.k8s.io/cluster-api/${repo##*/}:$(main_version capi "${mod}")"
      ;;
    cert-manager) echo "${tag}" ;;
    capdmp) ;;
  esac
}

# ldflags MODULE PACKAGE: stripped, with the version where the project sets one at build time.
ldflags() {
  local module="$1" flags="-s -w"
  case "${module}" in
    capi)
      # Cluster API's version package, as its release builds set it (no commit: the module
      # proxy does not say; the build date is the version's date, so that builds reproduce).
      local version time pkg="${CAPI}/version"
      version="$(main_version capi "${CAPI}")"
      time="$(cd "${REPO_ROOT}" && go list -m -f '{{with .Time}}{{.UTC.Format "2006-01-02T15:04:05Z"}}{{end}}' "${CAPI}")"
      local minor="${version#v*.}"; minor="${minor%%.*}"
      flags+=" -X ${pkg}.gitVersion=${version} -X ${pkg}.gitMajor=1 -X ${pkg}.gitMinor=${minor}"
      flags+=" -X ${pkg}.gitTreeState=clean -X ${pkg}.buildDate=${time:-1970-01-01T00:00:00Z}"
      ;;
    cert-manager)
      flags+=" -X ${CERT_MANAGER}/pkg/util.AppVersion=$(main_version cert-manager "${CERT_MANAGER}")"
      ;;
    capdmp)
      # The version, commit and commit date of the tree (the date, not now: the cache holds
      # until the tree changes), as make build sets them.
      flags+=" $("${REPO_ROOT}/hack/version.sh")"
      ;;
  esac
  echo "${flags}"
}

# Cluster API's release images are built with -tags=fieldsv1string (its Dockerfile).
build_tags() { [[ "$1" == capi ]] && echo fieldsv1string || true; }

# inputs_hash NAME MODULE PACKAGE USER BINARY-PATH: what decides the image: every module the binary
# links (path, version, replacement), the main module's files it compiles or embeds, the flags,
# the image's user and path, this script, the Go version; for CAPDMP its Dockerfile and base.
inputs_hash() {
  local name="$1" module="$2" pkg="$3"
  {
    echo "$*"
    go_in "${module}" list -deps -tags "$(build_tags "${module}")" -f \
      '{{if and (not .Standard) .Module}}{{if .Module.Version}}{{.Module.Path}}@{{.Module.Version}}{{with .Module.Replace}} => {{.Path}}@{{.Version}}{{end}}{{else}}{{range .GoFiles}}{{$.Dir}}/{{.}}{{"\n"}}{{end}}{{range .EmbedFiles}}{{$.Dir}}/{{.}}{{"\n"}}{{end}}{{end}}{{end}}' \
      "${pkg}" | sort -u | while read -r line; do
      if [[ -f "${line}" ]]; then sha256sum "${line}" | sed "s|${REPO_ROOT}/||"; else echo "${line}"; fi
    done
    ldflags "${module}"
    build_tags "${module}"
    sha256sum "${IMAGES_DIR}/build.sh" | cut -d' ' -f1
    go version
    echo "linux/${IMAGE_ARCH}"
    if [[ "${module}" == capdmp ]]; then
      sha256sum "${REPO_ROOT}/Dockerfile" | cut -d' ' -f1
      echo "${CAPDMP_BASE_IMAGE}"
    fi
  } | sha256sum | cut -c1-12
}

# go_build MODULE PACKAGE DST: a static binary.
go_build() {
  local module="$1" pkg="$2" dst="$3"
  CGO_ENABLED=0 GOOS=linux GOARCH="${IMAGE_ARCH}" GO_PREFIX="${IMAGES_NICE}" go_in "${module}" build -trimpath -tags "$(build_tags "${module}")" \
    -ldflags "$(ldflags "${module}")" -o "${dst}.tmp" "${pkg}"
  mv "${dst}.tmp" "${dst}"
}

# docker_image TAG KEY SOURCE USER PATH BINARY: FROM scratch, the binary at PATH and a /tmp
# anyone may write to, as distroless has (CAPD exits at start without /tmp and unpacks image
# tarballs there). The legacy builder's COPY drops a folder's mode; ADD of a tarball keeps it.
# CAPDMP's image comes from the repository's Dockerfile instead (USER "-"), the binary as
# `manager` in the build context, as make docker-build builds it.
docker_image() {
  local tag="$1" key="$2" source="$3" user="$4" path="$5" bin="$6" ctx
  ctx="$(mktemp -d)"
  cp "${bin}" "${ctx}/$(basename "${path}")"
  local args=(--pull=false --platform "linux/${IMAGE_ARCH}" --label "${INPUTS_LABEL}=${key}" --label "${SOURCE_LABEL}=${source}" -t "${tag}")
  if [[ "${user}" == "-" ]]; then
    cp "${REPO_ROOT}/Dockerfile" "${ctx}/Dockerfile"
    args+=(--build-arg "BASE_IMAGE=${CAPDMP_BASE_IMAGE}")
  else
    mkdir -p "${ctx}/root/tmp"
    chmod 1777 "${ctx}/root/tmp"
    tar --numeric-owner --owner=0 --group=0 --mtime=@0 -C "${ctx}/root" -cf "${ctx}/root.tar" tmp
    {
      echo "FROM scratch"
      echo "ADD root.tar /"
      echo "COPY $(basename "${path}") ${path}"
      [[ "${user}" == root ]] || echo "USER ${user}"
      echo "ENTRYPOINT [\"${path}\"]"
    } >"${ctx}/Dockerfile"
  fi
  ${IMAGES_NICE} docker build "${args[@]}" "${ctx}"
  rm -rf "${ctx}"
}

# smoke TAG: the image's binary starts and prints its help (exit 0), offline.
smoke() {
  if [[ "${IMAGE_ARCH}" != "${ENGINE_ARCH}" ]]; then
    log "$1 is linux/${IMAGE_ARCH}, the engine runs ${ENGINE_ARCH}: not started"
    return 0
  fi
  local limit=()
  if command -v timeout >/dev/null 2>&1; then limit=(timeout 120); fi # macOS has none
  ${limit[@]+"${limit[@]}"} docker run --rm --pull=never --network none "$1" --help
}

image_label() { docker image inspect -f "{{ index .Config.Labels \"$2\" }}" "$1" 2>/dev/null || true; }

ensure_docker() {
  if ! docker version >/dev/null 2>&1; then
    eval "$("${REPO_ROOT}/hack/docker-engine.sh" start)" || true
    export DOCKER_HOST
  fi
  docker version >/dev/null 2>&1 ||
    die "no Docker engine answers (DOCKER_HOST=${DOCKER_HOST:-unset}); make images needs one: hack/docker-engine.sh start"
  ENGINE_ARCH="$(docker version -f '{{.Server.Arch}}')"
  IMAGE_ARCH="${IMAGE_ARCH:-${ENGINE_ARCH}}"
}

# build_one NAME MODULE PACKAGE USER PATH: keeps the image if its label matches its inputs, or if
# it has no such label (not built here: used as it is); else pulls the published image, else
# builds the binary (cached by the same hash), the image, and smoke-tests it.
SUMMARY=()
build_one() {
  local name="$1" module="$2" pkg="$3" user="$4" path="$5"
  local start=${SECONDS} tag key="" source label
  tag="$(image_tag "${name}" "${module}" "${pkg}")"
  if docker image inspect "${tag}" >/dev/null 2>&1; then
    label="$(image_label "${tag}" "${INPUTS_LABEL}")"
    if [[ -z "${label}" ]]; then
      log "${tag}: present, not built here (no ${INPUTS_LABEL} label): used as it is"
      SUMMARY+=("${tag}|present, not built here: used as it is")
      return 0
    fi
    key="$(inputs_hash "$@")"
    if [[ "${label}" == "${key}" ]]; then
      log "${tag}: up to date (inputs ${key})"
      SUMMARY+=("${tag}|up to date")
      return 0
    fi
    log "${tag}: built here from other inputs (${label}, now ${key}): replacing it"
  fi
  PULLED_FROM=""
  if pull_published "${tag}" "${name}" "${IMAGES_PUBLISHED}" "$(published_default "${name}" "${module}" "${tag}")"; then
    SUMMARY+=("${tag}|pulled ${PULLED_FROM}")
    return 0
  fi
  [[ -n "${key}" ]] || key="$(inputs_hash "$@")"
  case "${module}" in
    capi) source="${pkg}@$(main_version capi "$([[ "${pkg}" == "${CAPI}/test/"* ]] && echo "${CAPI}/test" || echo "${CAPI}")")" ;;
    cert-manager) source="${pkg}@$(main_version cert-manager "${CERT_MANAGER}")" ;;
    capdmp) source="github.com/capdmp/capdmp@$(git -C "${REPO_ROOT}" describe --always --dirty 2>/dev/null || echo unknown)" ;;
  esac
  local bin="${IMAGES_CACHE}/bin/${name}-${key}"
  if [[ -x "${bin}" ]]; then
    log "${name}: binary cached (${bin})"
  else
    image_step "${name}: go build ${pkg}" go_build "${module}" "${pkg}" "${bin}"
    find "${IMAGES_CACHE}/bin" -maxdepth 1 -name "${name}-*" ! -name "$(basename "${bin}")" -delete
  fi
  local old; old="$(docker image inspect -f '{{.Id}}' "${tag}" 2>/dev/null || true)"
  image_step "${tag}: docker build" docker_image "${tag}" "${key}" "${source}" "${user}" "${path}" "${bin}"
  if ! (image_step "${tag}: smoke test (--help)" smoke "${tag}"); then
    docker rmi "${tag}" >/dev/null 2>&1 || true
    die "${tag} does not run; removed it"
  fi
  # The image this one replaces, now untagged.
  [[ -z "${old}" || "${old}" == "$(docker image inspect -f '{{.Id}}' "${tag}")" ]] || docker rmi "${old}" >/dev/null 2>&1 || true
  SUMMARY+=("${tag}|built in $((SECONDS - start))s")
}

selected() {
  local name="$1"; shift
  (($# == 0)) && return 0
  local n; for n in "$@"; do [[ "${n}" == "${name}" ]] && return 0; done
  return 1
}

main() {
  if [[ "${1:-}" == "--list" ]]; then
    local spec; for spec in "${IMAGES[@]}"; do
      read -r name module pkg _ <<<"${spec}"
      printf '%s\t%s\n' "${name}" "$(image_tag "${name}" "${module}" "${pkg}")"
    done
    return 0
  fi
  local known=() spec name
  for spec in "${IMAGES[@]}"; do known+=("${spec%% *}"); done
  for name in "$@"; do selected "${name}" "${known[@]}" || die "unknown image ${name}; images: ${known[*]}"; done

  local start=${SECONDS}
  mkdir -p "${IMAGES_CACHE}/bin"
  exec 9>"${IMAGES_CACHE}/build.lock"
  # One build at a time (make -j, two clones sharing the cache), where flock exists (macOS has none).
  if command -v flock >/dev/null 2>&1; then flock 9; fi
  ensure_docker
  log "cache: ${IMAGES_CACHE}; Docker: ${DOCKER_HOST:-default}"
  for spec in "${IMAGES[@]}"; do
    read -r -a fields <<<"${spec}"
    selected "${fields[0]}" "$@" || continue
    build_one "${fields[@]}"
  done
  log "done in $((SECONDS - start))s:"
  local entry tag size
  for entry in "${SUMMARY[@]}"; do
    tag="${entry%%|*}"
    size="$(docker image inspect -f '{{.Size}}' "${tag}" | awk '{printf "%.1fMB", $1 / 1000000}')"
    printf '[images]   %-70s %8s  %s\n' "${tag}" "${size}" "${entry#*|}" >&2
  done
}

main "$@"
