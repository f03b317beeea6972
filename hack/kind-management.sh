#!/usr/bin/env bash
# A kind management cluster the way users deploy CAPDMP (docs/clusterctl.md, "make kind-management"):
# a kind cluster on the node image built here (hack/node-images), the controller images of
# `make images` loaded with `kind load docker-image`, and `clusterctl init --core cluster-api
# --bootstrap kubeadm --control-plane kubeadm --infrastructure docker,capdmp` from the local
# repository of `make clusterctl-repository`. Nothing is pulled.
#
# Usage: kind-management.sh create|cluster|delete|kubeconfig|kubectl
#   create      makes whatever is missing, step by step, and waits until every provider is Available;
#               run again, it checks and changes nothing that is there
#   cluster     the kind cluster alone (host settings, kind config, kind create), as the deployed
#               tier (test/e2e) asks for it: the suite loads the images and runs clusterctl init
#               with Cluster API's e2e framework. Kind's cluster itself is made here, not by the
#               framework's kind provider: that one mounts /var/run/docker.sock only (the engine
#               hack/docker-engine.sh starts listens elsewhere), always lets kind apply its default
#               CNI (the node images built here have none: their own service serves the pod
#               network) and cannot patch the controller-manager (the host-path provisioner).
#   delete      deletes the kind cluster, the workload clusters' containers CAPD and CAPDMP made
#               from it, and puts back the host settings create changed
#   kubeconfig  prints the kubeconfig's path
#   kubectl     prints the path of the kubectl create uses (the node image's version)
#
# Environment (defaults in brackets):
#   KIND_MANAGEMENT_NAME         kind cluster name [capdmp-management]
#   KIND_MANAGEMENT_NODE_IMAGE   node image [kindest/node:<older of internal/kubeversions/versions.txt>]
#   KIND_MANAGEMENT_DIR          state: kubeconfig, kind config, logs [_artifacts/kind-management/NAME]
#   CLUSTERCTL_REPOSITORY        local repository [out/clusterctl-repository]
#   KIND_MANAGEMENT_INIT_FLAGS   extra clusterctl init flags []
#   NICE                         prefix of go builds [nice -n 19]
set -euo pipefail
ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
NAME="${KIND_MANAGEMENT_NAME:-capdmp-management}"
NODE_IMAGE="${KIND_MANAGEMENT_NODE_IMAGE:-kindest/node:$(awk '$1 == "older" { print $2 }' "${ROOT}/internal/kubeversions/versions.txt")}"
DIR="${KIND_MANAGEMENT_DIR:-${ROOT}/_artifacts/kind-management/${NAME}}"
REPO="${CLUSTERCTL_REPOSITORY:-${ROOT}/out/clusterctl-repository}"
NICE="${NICE-nice -n 19}"
KUBECONFIG_FILE="${DIR}/kubeconfig"
BIN="${ROOT}/bin"
KIND="${BIN}/kind"
CLUSTERCTL="${BIN}/clusterctl"
LOGS="${DIR}/logs"
# The namespaces clusterctl init creates, one Deployment or more each.
NAMESPACES=(cert-manager capi-system capi-kubeadm-bootstrap-system capi-kubeadm-control-plane-system capd-system capdmp-system)
# Kernel settings: the kubelet changes the first three, no container namespace isolates them;
# the inotify limits are raised as kind's known issues ask (test/devtools/hostsysctl has the same lists).
KUBELET_SYSCTLS=(vm/overcommit_memory kernel/panic kernel/panic_on_oops)
declare -A RAISE_SYSCTLS=([fs/inotify/max_user_instances]=8192 [fs/inotify/max_user_watches]=524288)

start_all=${SECONDS}
log() { printf '[kind-management %s] %s\n' "$(date +%H:%M:%S)" "$*" >&2; }
die() { log "ERROR: $*"; exit 1; }

# step NAME CMD...: runs CMD with its output in logs/NAME.log, prints the duration, and on failure
# the log's last lines.
step() {
	local name=$1 t0=${SECONDS}
	shift
	mkdir -p "${LOGS}"
	log "${name} ..."
	# A subshell outside any condition, so that set -e holds inside the functions it runs.
	local rc=0
	set +e
	(set -e; "$@") > "${LOGS}/${name}.log" 2>&1
	rc=$?
	set -e
	if [ "${rc}" -eq 0 ]; then
		log "${name}: done in $((SECONDS - t0)) s"
	else
		log "${name}: FAILED (exit ${rc}) after $((SECONDS - t0)) s; ${LOGS}/${name}.log ends:"
		tail -n 25 "${LOGS}/${name}.log" >&2
		exit "${rc}"
	fi
}

kubectl() { "${KUBECTL}" --kubeconfig "${KUBECONFIG_FILE}" "$@"; }
cluster_exists() { "${KIND}" get clusters 2>/dev/null | grep -qx "${NAME}"; }
node_version() { printf '%s' "${NODE_IMAGE##*:}"; }

engine() {
	eval "$("${ROOT}/hack/docker-engine.sh" start)"
	export DOCKER_HOST
	SOCKET="${DOCKER_HOST#unix://}"
	[ -S "${SOCKET}" ] || die "the Docker engine's socket ${SOCKET} is not a socket"
}

tools() {
	# kind at the module's version, clusterctl of Cluster API's module, and the node image's own
	# kubectl (hack/node-images caches the Kubernetes binaries it built the image from).
	[ -x "${KIND}" ] || (cd "${ROOT}/test" && ${NICE} go build -o "${KIND}" sigs.k8s.io/kind)
	[ -x "${CLUSTERCTL}" ] || (cd "${ROOT}/test" && ${NICE} go build -o "${CLUSTERCTL}" sigs.k8s.io/cluster-api/cmd/clusterctl)
	local kube
	kube="$(${NICE} "${ROOT}/hack/node-images/kube-binaries.sh" "$(node_version)")"
	KUBECTL="${kube}/kubectl"
	[ -x "${KUBECTL}" ] || die "no kubectl in ${kube}"
	echo "${KUBECTL}" > "${DIR}/kubectl"
}

# images: every controller image, built only where Docker lacks it (make images builds all).
declare -a IMAGES
images() {
	local name image missing=()
	while IFS=$'\t' read -r name image; do
		IMAGES+=("${image}")
		docker image inspect "${image}" > /dev/null 2>&1 || missing+=("${name}")
	done < <(CAPDMP_IMG="${IMG:-capdmp-controller:dev}" "${ROOT}/hack/images/build.sh" --list)
	if [ ${#missing[@]} -gt 0 ]; then
		log "images missing from Docker: ${missing[*]}; building them (make images)"
		step images-build env CAPDMP_IMG="${IMG:-capdmp-controller:dev}" "${ROOT}/hack/images/build.sh" "${missing[@]}"
	fi
	docker image inspect "${NODE_IMAGE}" > /dev/null 2>&1 ||
		die "node image ${NODE_IMAGE} is not in Docker: make node-images NODE_IMAGE_VERSIONS=$(node_version)"
}

repository() {
	if [ ! -s "${REPO}/clusterctl.yaml" ]; then
		step clusterctl-repository make -C "${ROOT}" clusterctl-repository CLUSTERCTL_REPOSITORY="${REPO}"
	fi
}

# Host settings are shared by every kind cluster on the host: the values before the first cluster
# are kept in SYSCTL_STATE/values, the clusters that need them raised in SYSCTL_STATE/holders, and
# the last cluster deleted puts the values back. Where another run (the real tier) has recorded the
# host's values in the shared state file of test/devtools/hostsysctl, its values are the host's, not
# what its kubelets wrote since.
SYSCTL_STATE="${CAPDMP_CACHE:-${HOME}/.cache/capdmp}/kind-host-sysctls"

# sysctls_holders keeps in SYSCTL_STATE/holders the clusters kind still has, and prints them.
sysctls_holders() {
	local live
	touch "${SYSCTL_STATE}/holders"
	live="$("${KIND}" get clusters 2> /dev/null || true)"
	grep -Fxf <(printf '%s\n' "${live}") "${SYSCTL_STATE}/holders" > "${SYSCTL_STATE}/holders.tmp" || true
	mv "${SYSCTL_STATE}/holders.tmp" "${SYSCTL_STATE}/holders"
	cat "${SYSCTL_STATE}/holders"
}

sysctls_record() {
	local shared="${CAPDMP_CACHE:-${HOME}/.cache/capdmp}/host-sysctls.json" name v
	mkdir -p "${SYSCTL_STATE}"
	exec 8> "${SYSCTL_STATE}/lock"
	flock 8
	if [ -z "$(sysctls_holders)" ]; then
		: > "${SYSCTL_STATE}/values.tmp"
		for name in "${KUBELET_SYSCTLS[@]}" "${!RAISE_SYSCTLS[@]}"; do
			v="$(cat "/proc/sys/${name}")"
			if [ -f "${shared}" ] && command -v jq > /dev/null; then
				v="$(jq -r --arg n "${name}" --arg v "${v}" '.values[$n] // $v' "${shared}")"
			fi
			printf '%s=%s\n' "${name}" "${v}" >> "${SYSCTL_STATE}/values.tmp"
		done
		mv "${SYSCTL_STATE}/values.tmp" "${SYSCTL_STATE}/values"
	fi
	grep -Fxq "${NAME}" "${SYSCTL_STATE}/holders" || echo "${NAME}" >> "${SYSCTL_STATE}/holders"
	for name in "${!RAISE_SYSCTLS[@]}"; do
		v="$(cat "/proc/sys/${name}")"
		if [ "${v}" -lt "${RAISE_SYSCTLS[${name}]}" ]; then
			if echo "${RAISE_SYSCTLS[${name}]}" > "/proc/sys/${name}" 2> /dev/null; then
				log "raised sysctl ${name//\//.} from ${v} to ${RAISE_SYSCTLS[${name}]} (put back when the last kind cluster is deleted)"
			else
				log "could not raise sysctl ${name//\//.} (${v}); nodes may start slowly"
			fi
		fi
	done
	flock -u 8
}

# sysctls_restore runs once NAME is deleted: the host's values come back when no other kind
# cluster needs them.
sysctls_restore() {
	local shared="${CAPDMP_CACHE:-${HOME}/.cache/capdmp}/host-sysctls.json" name v pid others
	[ -f "${SYSCTL_STATE}/values" ] || return 0
	exec 8> "${SYSCTL_STATE}/lock"
	flock 8
	others="$(sysctls_holders | grep -Fxv "${NAME}" || true)"
	printf '%s\n' "${others}" | grep -v '^$' > "${SYSCTL_STATE}/holders" || true
	if [ -n "${others}" ]; then
		log "host sysctls: kept raised for the kind clusters $(echo ${others})"
		return 0
	fi
	# A run that still holds the shared state file puts the host's values back when it ends; its
	# nodes still need the raised limits.
	pid="$(jq -r '.pid // 0' "${shared}" 2> /dev/null || echo 0)"
	if [ "${pid}" -gt 0 ] && kill -0 "${pid}" 2> /dev/null; then
		log "host sysctls: left to process ${pid}, which recorded them in ${shared} and still runs"
		rm -f "${SYSCTL_STATE}/values"
		return 0
	fi
	while IFS='=' read -r name v; do
		[ "$(cat "/proc/sys/${name}")" = "${v}" ] && continue
		if echo "${v}" > "/proc/sys/${name}" 2> /dev/null; then
			log "restored sysctl ${name//\//.}=${v}"
		else
			log "could not restore sysctl ${name//\//.}=${v}"
		fi
	done < "${SYSCTL_STATE}/values"
	rm -f "${SYSCTL_STATE}/values"
	flock -u 8
}

# image_has_default_cni: the node image holds kind's /kind/manifests/default-cni.yaml (kind's
# published images: kindnet, its image preloaded), read from a container that is never started.
image_has_default_cni() {
	local id rc=0
	id="$(docker create --pull=never --network none "${NODE_IMAGE}" /kind/none)" ||
		die "cannot create a container of ${NODE_IMAGE} to read it"
	docker cp "${id}:/kind/manifests/default-cni.yaml" - > /dev/null 2>&1 || rc=$?
	docker rm -f "${id}" > /dev/null 2>&1 || true
	return "${rc}"
}

kind_config() {
	# - disableDefaultCNI where the node image has no default-cni.yaml (this project's recipe
	#   images: their capdmp-cni.service writes a bridge CNI configuration for the node's podCIDR,
	#   docs/node-images.md, "A pod network"); where it has one (kind's published images), kind
	#   applies kindnet from it, as on any kind cluster.
	# - the engine's socket at /var/run/docker.sock, where CAPD's and CAPDMP's Deployments mount it
	#   from (CAPDMP_DOCKER_SOCKET keeps its default).
	# - the in-tree host-path provisioner, so that kind's fallback StorageClass "standard"
	#   (kubernetes.io/host-path; the node image has no local-path-provisioner) provisions volumes
	#   on a single-node cluster.
	local disable_cni=true
	if image_has_default_cni; then
		disable_cni=false
		log "${NODE_IMAGE} holds kind's default CNI (kindnet): kind applies it"
	else
		log "${NODE_IMAGE} holds no kind default CNI: its own capdmp-cni.service serves the pod network"
	fi
	cat <<EOF
kind: Cluster
apiVersion: kind.x-k8s.io/v1alpha4
name: ${NAME}
networking:
  disableDefaultCNI: ${disable_cni}
nodes:
- role: control-plane
  image: ${NODE_IMAGE}
  extraMounts:
  - hostPath: ${SOCKET}
    containerPath: /var/run/docker.sock
  kubeadmConfigPatches:
  - |
    kind: ClusterConfiguration
    controllerManager:
      extraArgs:
      - name: enable-hostpath-provisioner
        value: "true"
EOF
}

create_cluster() {
	kind_config > "${DIR}/kind-config.yaml"
	"${KIND}" create cluster --name "${NAME}" --config "${DIR}/kind-config.yaml" \
		--kubeconfig "${KUBECONFIG_FILE}" --wait 5m
}

load_images() {
	local image
	for image in "${IMAGES[@]}"; do
		"${KIND}" load docker-image --name "${NAME}" "${image}"
	done
}

providers_installed() {
	local n
	n="$(kubectl get providers.clusterctl.cluster.x-k8s.io -A --no-headers 2> /dev/null | wc -l)"
	[ "${n}" -ge 5 ]
}

clusterctl_init() {
	# shellcheck disable=SC2086 # flags split on purpose
	"${CLUSTERCTL}" init --kubeconfig "${KUBECONFIG_FILE}" --config "${REPO}/clusterctl.yaml" \
		--core cluster-api --bootstrap kubeadm --control-plane kubeadm --infrastructure docker,capdmp \
		--wait-providers --wait-provider-timeout 600 ${KIND_MANAGEMENT_INIT_FLAGS:-}
}

wait_available() {
	local ns
	for ns in "${NAMESPACES[@]}"; do
		kubectl -n "${ns}" wait --for=condition=Available deployment --all --timeout=5m
	done
	kubectl get deployments -A -o wide
	kubectl get providers.clusterctl.cluster.x-k8s.io -A
}

# kind_cluster makes the kind cluster, or takes the one of NAME that exists.
kind_cluster() {
	sysctls_record
	if cluster_exists; then
		local running
		running="$(docker inspect -f '{{.Config.Image}}' "${NAME}-control-plane" 2> /dev/null || true)"
		log "kind cluster ${NAME} exists (node image ${running:-unknown})"
		[ "${running}" = "${NODE_IMAGE}" ] ||
			log "WARNING: ${NAME} runs ${running:-an unknown image}, not ${NODE_IMAGE}: make kind-management-delete first to change it"
		"${KIND}" get kubeconfig --name "${NAME}" > "${KUBECONFIG_FILE}"
	else
		step kind-create create_cluster
	fi
}

prepare() {
	mkdir -p "${DIR}" "${LOGS}"
	engine
	local t0=${SECONDS}
	log "tools: kind, clusterctl, kubectl ..."
	tools > "${LOGS}/tools.log" 2>&1 || { tail -n 25 "${LOGS}/tools.log" >&2; die "tools failed (${LOGS}/tools.log)"; }
	log "tools: done in $((SECONDS - t0)) s"
}

# cluster: the kind cluster alone, for the deployed tier's suite (see the usage above).
cluster() {
	prepare
	docker image inspect "${NODE_IMAGE}" > /dev/null 2>&1 ||
		die "node image ${NODE_IMAGE} is not in Docker: make node-images NODE_IMAGE_VERSIONS=$(node_version)"
	kind_cluster
	log "kind cluster ${NAME} ready in $((SECONDS - start_all)) s"
	echo "${KUBECONFIG_FILE}"
}

create() {
	prepare
	images
	repository
	kind_cluster
	step load-images load_images
	if providers_installed; then
		log "clusterctl init: the providers are installed"
	else
		step clusterctl-init clusterctl_init
	fi
	step providers-available wait_available
	log "management cluster ${NAME} ready in $((SECONDS - start_all)) s"
	log "export KUBECONFIG=${KUBECONFIG_FILE}"
	echo "${KUBECONFIG_FILE}"
}

# The containers of workload clusters made from this management cluster: CAPD and CAPDMP label
# theirs io.x-k8s.kind.cluster=<Cluster name>. Deleting the Clusters through the API lets the
# controllers remove them; what is left once kind's cluster is gone is removed by that label.
delete_workloads() {
	if [ -s "${KUBECONFIG_FILE}" ] && kubectl get --raw=/readyz > /dev/null 2>&1; then
		# No Cluster CRD (clusterctl init never ran, or failed): no workload cluster to delete.
		if ! kubectl get crd clusters.cluster.x-k8s.io > /dev/null 2>&1; then
			log "no Cluster API CRDs on ${NAME}: no workload cluster to delete"
			return 0
		fi
		kubectl get clusters.cluster.x-k8s.io -A -o jsonpath='{range .items[*]}{.metadata.name}{"\n"}{end}' > "${DIR}/workload-clusters"
		kubectl delete clusters.cluster.x-k8s.io --all -A --wait --timeout=5m || log "deleting the workload clusters through the API did not finish"
	fi
}

remove_leftovers() {
	local cluster ids
	[ -s "${DIR}/workload-clusters" ] || { rm -f "${DIR}/workload-clusters"; return 0; }
	while read -r cluster; do
		[ -n "${cluster}" ] || continue
		ids="$(docker ps -aq --filter "label=io.x-k8s.kind.cluster=${cluster}")"
		if [ -n "${ids}" ]; then
			log "removing containers of workload cluster ${cluster} the controllers left: $(echo ${ids})"
			# shellcheck disable=SC2086 # one id a word
			docker rm -f -v ${ids} > /dev/null
		fi
	done < "${DIR}/workload-clusters"
	rm -f "${DIR}/workload-clusters"
}

delete() {
	engine
	[ -x "${KIND}" ] || (cd "${ROOT}/test" && ${NICE} go build -o "${KIND}" sigs.k8s.io/kind)
	if cluster_exists; then
		KUBECTL="$(command -v kubectl || true)"
		[ -s "${DIR}/kubectl" ] && KUBECTL="$(cat "${DIR}/kubectl")"
		[ -n "${KUBECTL}" ] && step delete-workloads delete_workloads
		step kind-delete "${KIND}" delete cluster --name "${NAME}" --kubeconfig "${KUBECONFIG_FILE}"
	else
		log "kind cluster ${NAME} does not exist"
	fi
	remove_leftovers
	sysctls_restore
	rm -f "${KUBECONFIG_FILE}"
	log "deleted in $((SECONDS - start_all)) s"
}

case "${1:-}" in
create) create ;;
cluster) cluster ;;
delete) delete ;;
kubeconfig) echo "${KUBECONFIG_FILE}" ;;
kubectl) cat "${DIR}/kubectl" 2> /dev/null || die "no ${DIR}/kubectl: run create first" ;;
*) die "usage: $0 create|cluster|delete|kubeconfig|kubectl" ;;
esac
