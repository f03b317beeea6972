#!/usr/bin/env bash
# Builds CAPDMP's stand-ins for the published kindest/node images, for machines where no image
# registry can be reached: for each Kubernetes version a node image tagged kindest/node:VERSION,
# laid out like kind's, with the control-plane images kubeadm expects preloaded; and the haproxy
# load-balancer image CAPD's DockerCluster uses. Everything is built from Debian's packages and Go
# sources and cached outside the clone (see docs/node-images.md).
#
# Usage: build.sh [VERSION...]     default: ${NODE_IMAGE_VERSIONS} or the node versions of
#                                  internal/kubeversions/versions.txt
#
# What is there already decides (docs/node-images.md, "What is built, pulled or left alone"): an
# image of this recipe is kept; an image under the tag with no recipe label (pulled from kind's
# releases, loaded by a user) is used as it is, never rebuilt, retagged or removed; only an image
# an older recipe built here is replaced. A missing or replaced image is pulled first (pull.sh,
# published.txt), then loaded from the cache, then built.
# Environment:
#   CAPDMP_CACHE / NODE_IMAGES_CACHE   cache folder (default ~/.cache/capdmp/node-images)
#   NODE_IMAGES_REPOSITORY             repository of the node images (default kindest/node), e.g.
#                                      capdmp.local/node: builds capdmp.local/node:<v> and never
#                                      touches kindest/node
#   NODE_IMAGES_LB_IMAGE               the load balancer's tag (default: the one CAPD runs)
#   NODE_IMAGES_PUBLISHED              list of published images to pull (default published.txt
#                                      beside this script; empty: none listed)
#   CAPDMP_PULL=never                  pull nothing (see pull.sh; CAPDMP_PULL_TIMEOUT too)
#   NODE_IMAGES_PRUNE=false            keep the base images of other recipes
#   NODE_IMAGES_COREDNS=false          skip CoreDNS (the kubeadm addon/coredns phase must be skipped)
#   NODE_IMAGES_SAVE=false             do not keep `docker save` tarballs of the images in the cache
#   CRICTL_VERSION                     default v1.37.0
#   NODE_IMAGES_ETCD_VERSION           build this etcd once and carry it under every etcd tag
#                                      kubeadm names (default: the version each tag names)
#   NODE_IMAGES_COREDNS_VERSION        the same for CoreDNS (default here: each tag's version;
#                                      `make node-images` passes v1.14.2, see node-images.mk)
set -euo pipefail
source "$(dirname "${BASH_SOURCE[0]}")/lib.sh"
source "${NODE_IMAGES_DIR}/kube-binaries.sh"
source "${NODE_IMAGES_DIR}/rootfs.sh"
source "${NODE_IMAGES_DIR}/pull.sh"

read -r -a VERSIONS <<<"${*:-${NODE_IMAGE_VERSIONS:-$(awk '$1 ~ /^(oldest|older|newer)$/ { print $2 }' "${REPO_ROOT}/internal/kubeversions/versions.txt")}}"
CRICTL_VERSION="${CRICTL_VERSION:-v1.37.0}"
NODE_IMAGES_COREDNS="${NODE_IMAGES_COREDNS:-true}"
NODE_IMAGES_SAVE="${NODE_IMAGES_SAVE:-true}"
NODE_IMAGES_PRUNE="${NODE_IMAGES_PRUNE:-true}"
NODE_REPO="${NODE_IMAGES_REPOSITORY:-kindest/node}"
NODE_IMAGES_PUBLISHED="${NODE_IMAGES_PUBLISHED-${NODE_IMAGES_DIR}/published.txt}"
RECIPE_LABEL=io.capdmp.node-images.recipe
# CAPDMP's stub node image (test/stubnode) carries it: tagged kindest/node:<v> for the fast tests,
# it is no real node and is neither used nor replaced here.
STUB_LABEL=test.capdmp.dev/stub-node
# "true" on a node image that carries CoreDNS: the blocking real tier builds without it (its
# scenarios skip the addon), the full tier and the smoke test of CoreDNS need it.
COREDNS_LABEL=io.capdmp.node-images.coredns
BIN_CACHE="${NODE_IMAGES_CACHE}/bin"
IMAGE_CACHE="${NODE_IMAGES_CACHE}/images"

# lb_image: the load balancer's tag: NODE_IMAGES_LB_IMAGE, else the one CAPD runs.
lb_image() { echo "${NODE_IMAGES_LB_IMAGE:-$(capd_lb_image)}"; }

# capd_lb_image: the load balancer image CAPD's DockerCluster runs when spec.loadBalancer names
# none, read from CAPD's source in the module cache so that it cannot drift from the CAPD in go.mod.
capd_lb_image() {
  local dir const
  dir="$(cd "${REPO_ROOT}" && go list -m -f '{{.Dir}}' sigs.k8s.io/cluster-api/test 2>/dev/null || true)"
  const="${dir}/infrastructure/docker/internal/loadbalancer/const.go"
  if [[ -f "${const}" ]]; then
    local repo image tag
    repo="$(sed -n 's/.*DefaultImageRepository = "\(.*\)"/\1/p' "${const}")"
    image="$(sed -n 's/.*\bImage = "\(.*\)"/\1/p' "${const}")"
    tag="$(sed -n 's/.*DefaultImageTag = "\(.*\)"/\1/p' "${const}")"
    echo "${repo}/${image}:${tag}"
  else
    echo "kindest/haproxy:v20230606-42a2262b" # CAPD v1.14.2
  fi
}

# recipe_hash: everything that decides the images' content besides the cached inputs' own keys.
recipe_hash() {
  {
    # Not pull.sh and published.txt: what is pulled decides nothing in an image built here.
    (cd "${NODE_IMAGES_DIR}" && find . -type f ! -name '*.md' ! -name '*.mk' ! -name pull.sh ! -name published.txt -print0 | sort -z |
      while IFS= read -r -d '' file; do sha256sum "${file}"; done)
    sha256sum "${REPO_ROOT}/hack/runc-wrapper" | cut -d' ' -f1
    # Not NODE_IMAGES_COREDNS: an image with CoreDNS serves where none is needed (COREDNS_LABEL).
    echo "${CRICTL_VERSION} ${NODE_IMAGES_ETCD_VERSION:-} ${NODE_IMAGES_COREDNS_VERSION:-} $(go version)"
  } | sha256sum | cut -c1-12
}

ensure_docker() {
  if ! docker version >/dev/null 2>&1; then
    eval "$("${REPO_ROOT}/hack/docker-engine.sh" start)"
    export DOCKER_HOST
  fi
}

image_exists() { docker image inspect "$1" >/dev/null 2>&1; }
image_label() { docker image inspect -f "{{ index .Config.Labels \"$2\" }}" "$1" 2>/dev/null || true; }
image_recipe() { image_label "$1" "${RECIPE_LABEL}"; }
# serves IMAGE: IMAGE is of this recipe and carries CoreDNS if this build asks for it.
serves() {
  [[ "$(image_recipe "$1")" == "${RECIPE}" ]] || return 1
  [[ "$1" != "${NODE_REPO}":* || "${NODE_IMAGES_COREDNS}" != "true" || "$(image_label "$1" "${COREDNS_LABEL}")" == "true" ]]
}

# image_origin IMAGE: what the engine holds under the tag IMAGE:
#   absent   nothing
#   current  an image of this recipe (with CoreDNS when this build asks for it): kept
#   stale    an image built here by another recipe, or without the CoreDNS asked for: replaced
#   foreign  an image without the recipe label (an empty one counts as none): pulled from kind's
#            releases or loaded by a user; used as it is, never rebuilt, retagged or removed
#   stub     CAPDMP's stub node image (STUB_LABEL): neither used nor replaced
image_origin() {
  image_exists "$1" || { echo absent; return 0; }
  if [[ -z "$(image_recipe "$1")" ]]; then
    [[ "$(image_label "$1" "${STUB_LABEL}")" == "true" ]] && echo stub || echo foreign
  elif serves "$1"; then
    echo current
  else
    echo stale
  fi
}

# cached_go_binary NAME KEY BUILDER ARGS...: DST = ${BIN_CACHE}/NAME-KEY, built once.
cached_go_binary() {
  local name="$1" key="$2"; shift 2
  local dst="${BIN_CACHE}/${name}-${key}"
  if [[ ! -x "${dst}" ]]; then
    mkdir -p "${BIN_CACHE}"
    step "${name}: build (${key})" "$@" "${dst}" >&2
  fi
  echo "${dst}"
}

build_crictl() {
  local dst="$1" gobin; gobin="$(mktemp -d)"
  CGO_ENABLED=0 GOBIN="${gobin}" nice -n 19 go install -trimpath \
    -ldflags "-s -w -X sigs.k8s.io/cri-tools/pkg/version.Version=${CRICTL_VERSION}" \
    "sigs.k8s.io/cri-tools/cmd/crictl@${CRICTL_VERSION}"
  mv "${gobin}/crictl" "${dst}"; rm -rf "${gobin}"
}
build_pause() {
  (cd "${NODE_IMAGES_DIR}" && CGO_ENABLED=0 nice -n 19 go build -trimpath -ldflags "-s -w" -o "$1" ./cmd/pause)
}
build_etcd() { build_go_tool "$2" "go.etcd.io/etcd/server/v3@$1" go.etcd.io/etcd/server/v3; }
build_coredns() { build_go_tool "$2" "github.com/coredns/coredns@$1" github.com/coredns/coredns; }

go_tools_hash() { { declare -f build_go_tool build_crictl build_pause build_etcd build_coredns; go version; } | sha256sum | cut -c1-12; }

# --- images -------------------------------------------------------------------------------------

# docker_build TAG CONTEXT: builds CONTEXT/Dockerfile, never pulling (every FROM is local).
docker_build() { docker build --pull=false --label "${RECIPE_LABEL}=${RECIPE}" -t "$1" "$2"; }

rootfs_image() {
  local tar="$1" tag; tag="capdmp/node-rootfs:$(basename "${tar}" .tar | sed 's/^rootfs-//')"
  if ! image_exists "${tag}"; then
    step "import root filesystem as ${tag}" docker import "${tar}" "${tag}"
  fi
  echo "${tag}"
}

build_base_image() {
  local rootfs="$1" tag="$2" ctx; ctx="$(mktemp -d)"
  cp -a "${NODE_IMAGES_DIR}/node" "${ctx}/node"
  cp "${REPO_ROOT}/hack/runc-wrapper" "${ctx}/runc-wrapper"
  cat >"${ctx}/Dockerfile" <<DOCKERFILE
FROM ${rootfs}
COPY node/entrypoint node/capdmp-cni /usr/local/bin/
COPY runc-wrapper /usr/local/sbin/runc-capdmp
COPY node/kubelet.service node/capdmp-cni.service /etc/systemd/system/
COPY node/10-kubeadm.conf /etc/systemd/system/kubelet.service.d/10-kubeadm.conf
COPY node/containerd-config.toml /etc/containerd/config.toml
COPY node/crictl.yaml /etc/crictl.yaml
COPY node/collect-files.sh /usr/local/share/capdmp/collect-files.sh
# systemd in a container, as kind's base image prepares it: no udev, getty, kernel log, or
# units that expect a machine; containerd, the kubelet and the pod network enabled.
RUN set -eux; \
    find /lib/systemd/system/sysinit.target.wants/ -name systemd-tmpfiles-setup.service -delete; \
    rm -f /lib/systemd/system/multi-user.target.wants/* /etc/systemd/system/*.wants/* \
      /lib/systemd/system/local-fs.target.wants/* /lib/systemd/system/sockets.target.wants/*udev* \
      /lib/systemd/system/sockets.target.wants/*initctl* /lib/systemd/system/basic.target.wants/*; \
    echo "ReadKMsg=no" >>/etc/systemd/journald.conf; \
    systemctl mask getty@tty1.service systemd-udevd.service systemd-modules-load.service \
      systemd-remount-fs.service sys-kernel-debug.mount sys-kernel-tracing.mount; \
    systemctl enable containerd.service kubelet.service capdmp-cni.service; \
    systemctl set-default multi-user.target; \
    mkdir -p /opt/cni /etc/cni/net.d /kind /etc/kubernetes/manifests; ln -s /usr/lib/cni /opt/cni/bin; \
    chmod 0755 /usr/local/sbin/runc-capdmp
ENV container=docker
STOPSIGNAL SIGRTMIN+3
ENTRYPOINT ["/usr/local/bin/entrypoint", "/sbin/init"]
DOCKERFILE
  docker_build "${tag}" "${ctx}"
  rm -rf "${ctx}"
}

# component_image TAG BINARY [NAME]: FROM scratch image of one static binary in /usr/local/bin.
component_image() {
  local tag="$1" bin="$2" name="${3:-$(basename "$2")}" ctx; ctx="$(mktemp -d)"
  cp "${bin}" "${ctx}/${name}"
  cat >"${ctx}/Dockerfile" <<DOCKERFILE
FROM scratch
COPY ${name} /usr/local/bin/${name}
ENV PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin
ENTRYPOINT ["/usr/local/bin/${name}"]
DOCKERFILE
  docker_build "${tag}" "${ctx}"
  rm -rf "${ctx}"
}

# kube_proxy_image TAG BINARY BASE: kube-proxy plus iptables (nft), nft and conntrack with their
# libraries, taken from the node's root filesystem.
kube_proxy_image() {
  local tag="$1" bin="$2" base="$3" ctx; ctx="$(mktemp -d)"
  cp "${bin}" "${ctx}/kube-proxy"
  cat >"${ctx}/Dockerfile" <<DOCKERFILE
FROM ${base} AS tools
RUN set -eux; mkdir /out; \
    /usr/local/share/capdmp/collect-files.sh /out /usr/sbin/xtables-nft-multi /usr/sbin/nft \
      /usr/sbin/conntrack /usr/lib/x86_64-linux-gnu/xtables/*.so; \
    cp -L --parents /etc/protocols /etc/services /etc/ethertypes /out/; \
    cd /out/usr/sbin; \
    for n in iptables iptables-save iptables-restore ip6tables ip6tables-save ip6tables-restore; do \
      ln -s xtables-nft-multi "\$n"; ln -s xtables-nft-multi "\${n%%-*}-nft\${n#\${n%%-*}}"; \
    done; \
    mkdir -p /out/run /out/tmp
FROM scratch
COPY --from=tools /out/ /
COPY kube-proxy /usr/local/bin/kube-proxy
ENV PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin
ENTRYPOINT ["/usr/local/bin/kube-proxy"]
DOCKERFILE
  docker_build "${tag}" "${ctx}"
  rm -rf "${ctx}"
}

# lb_image_build TAG BASE: haproxy from Debian (2.6) with its libraries, busybox for the mkdir,
# cp and cat CAPD runs in it to write and read back its configuration, FROM scratch; `haproxy` on
# PATH is node/haproxy-wrapper, which fits maxconn to the container's file descriptor limit.
lb_image_build() {
  local tag="$1" base="$2" ctx; ctx="$(mktemp -d)"
  mkdir -p "${ctx}/debs"
  (cd "${ctx}/debs" && apt-get download haproxy liblua5.3-0 libopentracing-c-wrapper0 libopentracing1 busybox-static)
  cat >"${ctx}/haproxy.cfg" <<'CFG'
# Default configuration of CAPDMP's load balancer image. CAPD writes its own configuration here
# once control-plane nodes exist, then sends SIGHUP (haproxy -W reloads on it).
global
  log stdout format raw local0

defaults
  log global
  mode tcp
  timeout connect 5s
  timeout client 50s
  timeout server 50s

frontend stats
  mode http
  bind *:8404
  stats enable
  stats uri /stats
CFG
  cp "${NODE_IMAGES_DIR}/node/haproxy-wrapper" "${ctx}/haproxy-wrapper"
  cat >"${ctx}/Dockerfile" <<DOCKERFILE
FROM ${base} AS tools
COPY debs/ /debs/
COPY haproxy.cfg haproxy-wrapper /
RUN set -eux; mkdir /pkgs /out; for d in /debs/*.deb; do dpkg-deb -x "\$d" /pkgs; done; \
    cp -a /pkgs/usr/. /usr/; \
    /usr/local/share/capdmp/collect-files.sh /out /usr/sbin/haproxy; \
    install -D -m 0755 /pkgs/bin/busybox /out/bin/busybox; \
    for a in sh mkdir cp cat ls rm mv kill ps; do ln -s busybox "/out/bin/\$a"; done; \
    install -D -m 0644 /haproxy.cfg /out/usr/local/etc/haproxy/haproxy.cfg; \
    install -D -m 0755 /haproxy-wrapper /out/usr/local/sbin/haproxy; \
    mkdir -p /out/run /out/tmp /out/var/lib/haproxy
FROM scratch
COPY --from=tools /out/ /
ENV PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin
ENTRYPOINT ["haproxy", "-W", "-db", "-f", "/usr/local/etc/haproxy/haproxy.cfg"]
DOCKERFILE
  docker_build "${tag}" "${ctx}"
  rm -rf "${ctx}"
}

# preload NODE_TAG BUILD_TAG COREDNS IMAGES...: imports IMAGES into the node's containerd the way kind
# does (ctr import --no-unpack in a build container), then commits the result as NODE_TAG.
preload() {
  local node="$1" build="$2" coredns="$3"; shift 3
  local cid
  cid="$(docker run -d --pull=never --privileged --tmpfs /run --tmpfs /tmp --entrypoint /bin/sleep "${build}" infinity)"
  # shellcheck disable=SC2064
  trap "docker rm -f ${cid} >/dev/null 2>&1 || true" RETURN
  docker exec -d "${cid}" containerd
  local i
  for i in $(seq 1 60); do
    docker exec "${cid}" ctr version >/dev/null 2>&1 && break
    sleep 0.5
  done
  docker save "$@" | docker exec -i "${cid}" ctr -n k8s.io images import --no-unpack --all-platforms -
  local listed missing=()
  listed="$(docker exec "${cid}" ctr -n k8s.io images ls -q)"
  for i in "$@"; do grep -qx "${i}" <<<"${listed}" || missing+=("${i}"); done
  ((${#missing[@]} == 0)) || { echo "not in the node's containerd: ${missing[*]}" >&2; return 1; }
  docker exec "${cid}" sh -c 'kill $(pgrep -x containerd); while pgrep -x containerd >/dev/null; do sleep 0.2; done'
  docker commit \
    --change 'ENTRYPOINT ["/usr/local/bin/entrypoint", "/sbin/init"]' --change 'CMD []' \
    --change "LABEL ${RECIPE_LABEL}=${RECIPE}" --change "LABEL ${COREDNS_LABEL}=${coredns}" "${cid}" "${node}" >/dev/null
}

# save_image IMAGE FILE: keeps IMAGE in the cache; older files for the same image are removed.
save_image() {
  local image="$1" file="$2"
  [[ "${NODE_IMAGES_SAVE}" == "true" ]] || return 0
  mkdir -p "$(dirname "${file}")"
  rm -f "${file%-*}"-*.tar
  docker save -o "${file}.tmp" "${image}"
  mv "${file}.tmp" "${file}"
}

# use_foreign IMAGE KEY: IMAGE has no recipe label: it is used as it is. A node image must hold
# the version KEY by its /kind/version, or the run fails: the gate would refuse it anyway.
use_foreign() {
  local image="$1" key="$2" v
  if [[ "${key}" == load-balancer ]]; then
    log "${image}: present, not built here (no recipe label): used as it is"
    return 0
  fi
  v="$(image_kind_version "${image}")" ||
    die "${image}: present, not built here (no recipe label), and it has no readable /kind/version: no node image. It is left as it is; remove or retag it yourself, or build into a repository of its own (NODE_IMAGES_REPOSITORY=capdmp.local/node)"
  [[ "${v}" == "${key}" ]] ||
    die "${image}: present, not built here (no recipe label), but its /kind/version names ${v:-nothing}, not ${key}: CAPDMP's gate refuses an image whose content names another release than its tag. It is left as it is; remove or retag it yourself, or build into a repository of its own (NODE_IMAGES_REPOSITORY=capdmp.local/node)"
  log "${image}: present, not built here (no recipe label): used as it is; version read from /kind/version: ${v}"
  # No label can say whether it holds CoreDNS; kind's published node images preload it.
  [[ "${NODE_IMAGES_COREDNS}" != "true" ]] || log "    ${image}: CoreDNS not checked (kind's published images preload it)"
}

# verify_node_version V REF: a pulled node image holds V by its /kind/version.
verify_node_version() {
  local want="$1" ref="$2" v
  v="$(image_kind_version "${ref}")" || die "pulled ${ref}: it has no readable /kind/version: no node image"
  [[ "${v}" == "${want}" ]] || die "pulled ${ref}: its /kind/version names ${v:-nothing}, not ${want}; not tagged (check the list ${NODE_IMAGES_PUBLISHED})"
}

# ready IMAGE FILE KEY: true when IMAGE need not be built: up to date or foreign (kept as it is),
# else pulled (the reference NODE_IMAGES_PUBLISHED pins for KEY, a version or load-balancer, or
# IMAGE by tag), else loaded from FILE, the cache's tarball of this recipe.
ready() {
  local image="$1" file="$2" key="$3"
  case "$(image_origin "${image}")" in
    current)
      log "${image}: up to date in Docker (recipe ${RECIPE})"
      return 0 ;;
    foreign)
      use_foreign "${image}" "${key}"
      return 0 ;;
    stub)
      die "${image} is CAPDMP's stub node image (test/stubnode, label ${STUB_LABEL}), no real node: it is left as it is. Remove it (docker rmi ${image}) or build into a repository of its own (NODE_IMAGES_REPOSITORY=capdmp.local/node)" ;;
    stale)
      if [[ "$(image_recipe "${image}")" == "${RECIPE}" ]]; then
        log "${image}: built here without CoreDNS, which NODE_IMAGES_COREDNS=true asks for: replacing it"
      else
        log "${image}: built here by recipe $(image_recipe "${image}"), not ${RECIPE}: replacing it"
      fi ;;
  esac
  local verify=()
  [[ "${key}" == load-balancer ]] || verify=(verify_node_version "${key}")
  pull_published "${image}" "${key}" "${NODE_IMAGES_PUBLISHED}" "${image}" "${verify[@]}" && return 0
  if [[ -f "${file}" ]]; then
    step "${image}: docker load from cache" docker load -i "${file}"
    serves "${image}" && return 0
  fi
  return 1
}

kubeadm_images() { "$1" config images list --kubernetes-version "$2"; }

lb_file() { echo "${IMAGE_CACHE}/$(tr '/:' '__' <<<"$(lb_image)")-${RECIPE}.tar"; }
node_file() { echo "${IMAGE_CACHE}/$(tr '/:' '__' <<<"${NODE_REPO}")_$1-${RECIPE}.tar"; }

build_lb() {
  local lb file; lb="$(lb_image)"; file="$(lb_file)"
  step "load balancer image ${lb}" lb_image_build "${lb}" "${BASE_IMAGE}"
  step "${lb}: save to cache" save_image "${lb}" "${file}"
}

build_version() {
  local v="$1"
  local node="${NODE_REPO}:${v}" file; file="$(node_file "${v}")"

  local bin; bin="$(kube_binaries "${v}")"
  local images; images="$(kubeadm_images "${bin}/kubeadm" "${v}")"
  local preload_images=() pause_image="" coredns=false ref name tag
  while read -r ref; do
    name="${ref%:*}"; tag="${ref##*:}"
    case "${name##*/}" in
      kube-apiserver | kube-controller-manager | kube-scheduler)
        step "${ref}: image" component_image "${ref}" "${bin}/${name##*/}" ;;
      kube-proxy)
        step "${ref}: image" kube_proxy_image "${ref}" "${bin}/kube-proxy" "${BASE_IMAGE}" ;;
      etcd)
        local ev="${NODE_IMAGES_ETCD_VERSION:-v${tag%-*}}"
        [[ "${ev}" == "v${tag%-*}" ]] || log "${ref} carries etcd ${ev} (NODE_IMAGES_ETCD_VERSION)"
        local etcd; etcd="$(cached_go_binary "etcd-${ev}" "$(go_tools_hash)" build_etcd "${ev}")"
        step "${ref}: image" component_image "${ref}" "${etcd}" etcd ;;
      pause)
        pause_image="${ref}"
        step "${ref}: image" component_image "${ref}" "${PAUSE_BIN}" pause ;;
      coredns)
        if [[ "${NODE_IMAGES_COREDNS}" != "true" ]]; then log "${ref}: skipped (NODE_IMAGES_COREDNS=false)"; continue; fi
        local cv="${NODE_IMAGES_COREDNS_VERSION:-${tag}}"
        [[ "${cv}" == "${tag}" ]] || log "${ref} carries CoreDNS ${cv} (NODE_IMAGES_COREDNS_VERSION)"
        local coredns_bin; coredns_bin="$(cached_go_binary "coredns-${cv}" "$(go_tools_hash)" build_coredns "${cv}")"
        step "${ref}: image" component_image "${ref}" "${coredns_bin}" coredns
        coredns=true ;;
      *) die "kubeadm ${v} names an image this recipe does not know: ${ref}" ;;
    esac
    preload_images+=("${ref}")
  done <<<"${images}"
  [[ -n "${pause_image}" ]] || die "kubeadm ${v} names no pause image"

  local ctx; ctx="$(mktemp -d)"
  cp "${bin}/kubelet" "${bin}/kubeadm" "${bin}/kubectl" "${CRICTL_BIN}" "${ctx}/"
  cat >"${ctx}/Dockerfile" <<DOCKERFILE
FROM ${BASE_IMAGE}
COPY kubelet kubeadm kubectl $(basename "${CRICTL_BIN}") /usr/bin/
RUN set -eux; mv /usr/bin/$(basename "${CRICTL_BIN}") /usr/bin/crictl; \
    sed -i "s|@PAUSE_IMAGE@|${pause_image}|" /etc/containerd/config.toml; \
    echo "${v}" >/kind/version
DOCKERFILE
  local build="capdmp/node-build:${v}"
  step "${node}: node layer (kubelet, kubeadm, kubectl, crictl)" docker_build "${build}" "${ctx}"
  rm -rf "${ctx}"
  step "${node}: preload ${#preload_images[@]} images into containerd and commit" preload "${node}" "${build}" "${coredns}" "${preload_images[@]}"
  docker rmi "${build}" "${preload_images[@]}" >/dev/null 2>&1 || true
  step "${node}: save to cache" save_image "${node}" "${file}"
}

# prune_stale_images: removes base and root filesystem images of other recipes (their layers are
# shared with nothing current).
prune_stale_images() {
  local keep_base="$1" keep_rootfs="$2" ref
  for ref in $(docker images --format '{{.Repository}}:{{.Tag}}' capdmp/node-base) \
    $(docker images --format '{{.Repository}}:{{.Tag}}' capdmp/node-rootfs); do
    if [[ "${ref}" != "${keep_base}" && "${ref}" != "${keep_rootfs}" ]]; then
      docker rmi "${ref}" >/dev/null 2>&1 && log "removed stale image ${ref}" || true
    fi
  done
}

# build_possible IMAGES...: IMAGES are missing and nothing can pull or load them. A build runs
# debootstrap, which needs root, and lays out a linux/amd64 node: elsewhere, one message saying
# what to do instead.
build_possible() {
  local pulls; pulls="$(printf 'docker pull %s; ' "$@")"
  pulls="${pulls%; }"
  if [[ "$(uname -s)" != Linux || "$(uname -m)" != x86_64 ]]; then
    die "missing: $*. Node images are built from source on linux/amd64 only, not on $(uname -s)/$(uname -m): load kind's published images instead (${pulls}), which are used as they are"
  fi
  [[ "$(id -u)" == 0 ]] ||
    die "missing: $*. Node images are built from source as root only (debootstrap), not as $(id -un): load kind's published images instead (${pulls}), which are used as they are, or build them once as root (sudo make node-images NODE_IMAGE_VERSIONS=\"${VERSIONS[*]}\"), into the same engine"
}

build_all() {
  local start=${SECONDS}
  RECIPE="$(recipe_hash)"
  log "recipe ${RECIPE}; versions: ${VERSIONS[*]}; repository: ${NODE_REPO}; cache: ${NODE_IMAGES_CACHE}"
  mkdir -p "${IMAGE_CACHE}" "${BIN_CACHE}"
  ensure_docker
  # What Docker has for this recipe or without a recipe, what can be pulled, or what the cache
  # can load, is not built.
  local missing=() lb_missing=false v
  ready "$(lb_image)" "$(lb_file)" load-balancer || lb_missing=true
  for v in "${VERSIONS[@]}"; do
    ready "${NODE_REPO}:${v}" "$(node_file "${v}")" "${v}" || missing+=("${v}")
  done
  if [[ "${lb_missing}" == "false" && ${#missing[@]} -eq 0 ]]; then
    log "done in $((SECONDS - start))s: ${VERSIONS[*]/#/${NODE_REPO}:} $(lb_image)"
    return 0
  fi
  local build=("${missing[@]/#/${NODE_REPO}:}")
  [[ "${lb_missing}" == "false" ]] || build+=("$(lb_image)")
  build_possible "${build[@]}"
  # A build needs debootstrap (and nothing else here does).
  "${REPO_ROOT}/hack/host-packages.sh" node-images
  # Cheap and shared by every version.
  CRICTL_BIN="$(cached_go_binary "crictl-${CRICTL_VERSION}" "$(go_tools_hash)" build_crictl)"
  PAUSE_BIN="$(cached_go_binary pause "$(go_tools_hash)-$(sha256sum "${NODE_IMAGES_DIR}/cmd/pause/main.go" | cut -c1-8)" build_pause)"
  local rootfs_tar; rootfs_tar="$(main_rootfs)"
  local rootfs; rootfs="$(rootfs_image "${rootfs_tar}")"
  BASE_IMAGE="capdmp/node-base:${RECIPE}"
  if ! image_exists "${BASE_IMAGE}"; then
    step "node base image ${BASE_IMAGE}" build_base_image "${rootfs}" "${BASE_IMAGE}"
  fi
  [[ "${lb_missing}" == "false" ]] || build_lb
  for v in "${missing[@]}"; do build_version "${v}"; done
  [[ "${NODE_IMAGES_PRUNE}" == "false" ]] || prune_stale_images "${BASE_IMAGE}" "${rootfs}"
  log "done in $((SECONDS - start))s: ${VERSIONS[*]/#/${NODE_REPO}:} $(lb_image)"
}

if [[ "${BASH_SOURCE[0]}" == "${0}" ]]; then build_all; fi
