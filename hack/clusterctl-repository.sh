#!/usr/bin/env bash
# Writes a local clusterctl repository (docs/clusterctl.md, "A local repository"): every provider
# `clusterctl init --core cluster-api --bootstrap kubeadm --control-plane kubeadm
# --infrastructure docker,capdmp` installs, and cert-manager, as folders clusterctl reads through
# file:// URLs, with a clusterctl.yaml that points at them. Nothing is downloaded:
#
#   cluster-api/<v>/core-components.yaml                     kustomize build of the modules' own
#   bootstrap-kubeadm/<v>/bootstrap-components.yaml          config/default (sigs.k8s.io/cluster-api
#   control-plane-kubeadm/<v>/control-plane-components.yaml  and .../test at the version go.mod
#   infrastructure-docker/<v>/infrastructure-components.yaml requires), manager image set to the
#                                                            tag make images builds; metadata.yaml
#                                                            of the cluster-api module
#   infrastructure-capdmp/<CAPDMP_VERSION>/                  a release folder of CAPDMP
#                                                            (hack/release/release.sh) around make
#                                                            manifests' components: metadata.yaml,
#                                                            templates/, cluster-template.yaml
#   cert-manager/<v>/cert-manager.yaml                       cert-manager's Helm chart and CRDs from
#                                                            its module (hack/images/cert-manager),
#                                                            rendered by `helm template` as its
#                                                            release does (helm: hack/tools/helm)
#   clusterctl.yaml                                          providers: and cert-manager: entries
#
# Usage: clusterctl-repository.sh OUT_DIR CAPDMP_COMPONENTS
#   OUT_DIR            the repository folder (emptied first)
#   CAPDMP_COMPONENTS  CAPDMP's rendered components (out/infrastructure-components.yaml)
# Environment: CAPDMP_VERSION (default hack/release/VERSION, the one place the version is written;
# the Makefile passes its VERSION), NICE (default `nice -n 19`, for go builds).
set -euo pipefail
ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
log() { printf '[clusterctl-repository] %s\n' "$*" >&2; }
die() { log "ERROR: $*"; exit 1; }

[ $# -eq 2 ] || die "usage: $0 OUT_DIR CAPDMP_COMPONENTS"
out="$(mkdir -p "$1" && cd "$1" && pwd)"
capdmp_components="$2"
[ -s "${capdmp_components}" ] || die "${capdmp_components} is missing or empty (make manifests)"
CAPDMP_VERSION="${CAPDMP_VERSION:-$(cat "${ROOT}/hack/release/VERSION")}"
NICE="${NICE-nice -n 19}"
kustomize() { (cd "${ROOT}" && go tool -modfile=hack/tools/go.mod kustomize "$@"); }
helm() { (cd "${ROOT}/hack/tools/helm" && ${NICE} go tool helm "$@"); }
module() { (cd "$1" && go list -m -f "{{.$3}}" "$2"); }

capi_dir="$(module "${ROOT}" sigs.k8s.io/cluster-api Dir)"
capi_test_dir="$(module "${ROOT}" sigs.k8s.io/cluster-api/test Dir)"
capi_version="$(module "${ROOT}" sigs.k8s.io/cluster-api Version)"
capi_test_version="$(module "${ROOT}" sigs.k8s.io/cluster-api/test Version)"
[ "${capi_version}" = "${capi_test_version}" ] || die "sigs.k8s.io/cluster-api ${capi_version} and /test ${capi_test_version} differ"
cm_dir="$(module "${ROOT}/hack/images/cert-manager" github.com/cert-manager/cert-manager Dir)"
cm_version="$(module "${ROOT}/hack/images/cert-manager" github.com/cert-manager/cert-manager Version)"
[ -n "${capi_dir}" ] && [ -n "${capi_test_dir}" ] && [ -n "${cm_dir}" ] || die "a module is not in the module cache (go mod download)"

# The tag of each image make images builds, by name.
declare -A tag
while IFS=$'\t' read -r name image; do tag[${name}]="${image}"; done < <(CAPDMP_IMG= "${ROOT}/hack/images/build.sh" --list)

find "${out}" -mindepth 1 -delete
work="$(mktemp -d)"
trap 'rm -rf "${work}"' EXIT

# provider: LABEL COMPONENTS_FILE MODULE_DIR CONFIG IMAGE_NAME
provider() {
	local label=$1 file=$2 dir=$3 config=$4 image=$5
	local dest="${out}/${label}/${capi_version}"
	log "${label} ${capi_version}: kustomize build ${config}, image ${tag[${image}]}"
	mkdir -p "${dest}" "${work}/${label}"
	kustomize build "${dir}/${config}" > "${work}/${label}/components.yaml"
	# Each provider has one Deployment, whose first container is its manager. Its components say
	# imagePullPolicy: Always (a registry's :main tag), which no kubelet here can satisfy: the
	# images are loaded into the node (kind load), as Cluster API's own e2e configurations do it
	# (a replacement of "imagePullPolicy: Always" by IfNotPresent).
	cat > "${work}/${label}/kustomization.yaml" <<EOF
apiVersion: kustomize.config.k8s.io/v1beta1
kind: Kustomization
resources:
- components.yaml
patches:
- target:
    kind: Deployment
  patch: |-
    - op: replace
      path: /spec/template/spec/containers/0/image
      value: ${tag[${image}]}
    - op: add
      path: /spec/template/spec/containers/0/imagePullPolicy
      value: IfNotPresent
EOF
	kustomize build "${work}/${label}" > "${dest}/${file}"
	cp "${capi_dir}/metadata.yaml" "${dest}/metadata.yaml"
}
provider cluster-api core-components.yaml "${capi_dir}" core/config/default cluster-api
provider bootstrap-kubeadm bootstrap-components.yaml "${capi_dir}" bootstrap/kubeadm/config/default kubeadm-bootstrap
provider control-plane-kubeadm control-plane-components.yaml "${capi_dir}" controlplane/kubeadm/config/default kubeadm-control-plane
provider infrastructure-docker infrastructure-components.yaml "${capi_test_dir}" infrastructure/docker/config/default capd

# CAPDMP's folder is what a release of it holds (make release), with the development image's
# components.
log "infrastructure-capdmp ${CAPDMP_VERSION}: hack/release/release.sh with ${capdmp_components}"
capdmp="${out}/infrastructure-capdmp/${CAPDMP_VERSION}"
VERSION="${CAPDMP_VERSION}" COMPONENTS="${capdmp_components}" "${ROOT}/hack/release/release.sh" "${capdmp}"

# cert-manager publishes cert-manager.yaml with its releases only; its module carries the chart's
# templates and values and the CRDs' sources. Its Makefile (make/manifests.mk) packs them into a
# chart with the release's version, the CRDs wrapped in `if .Values.installCRDs`, and renders it
# with `helm template`; this does the same, CRDs included, with the Namespace first.
log "cert-manager ${cm_version}: helm template of ${cm_dir}/deploy/charts/cert-manager"
chart="${work}/cert-manager-chart"
mkdir -p "${chart}/templates"
sed -e "s/^version: .*/version: ${cm_version}/" -e "s/^appVersion: .*/appVersion: ${cm_version}/" \
	-e 's/"{{IS_PRERELEASE}}"/"false"/' "${cm_dir}/deploy/charts/cert-manager/Chart.template.yaml" > "${chart}/Chart.yaml"
cp "${cm_dir}/deploy/charts/cert-manager/values.yaml" "${chart}/"
cp "${cm_dir}"/deploy/charts/cert-manager/templates/* "${chart}/templates/"
{
	echo '{{- if .Values.installCRDs }}'
	for crd in "${cm_dir}"/deploy/crds/crd-*.yaml; do echo '---'; cat "${crd}"; done
	echo '{{- end }}'
} > "${chart}/templates/crds.yaml"
chmod -R u+w "${chart}"
cm="${out}/cert-manager/${cm_version}"
mkdir -p "${cm}"
{
	cat "${cm_dir}/deploy/manifests/namespace.yaml"
	# --kube-version only passes the chart's kubeVersion check (>= 1.21; helm's default is older):
	# no template of this chart depends on it.
	helm template --kube-version="$(awk '$1 == "older" { print $2 }' "${ROOT}/internal/kubeversions/versions.txt")" --namespace=cert-manager --set=installCRDs=true \
		--set=creator=static --set=startupapicheck.enabled=false cert-manager "${chart}"
} > "${cm}/cert-manager.yaml"

log "clusterctl.yaml"
cat > "${out}/clusterctl.yaml" <<EOF
# Written by make clusterctl-repository (hack/clusterctl-repository.sh): the providers and
# cert-manager of this folder, for clusterctl --config $(basename "${out}")/clusterctl.yaml.
providers:
- name: cluster-api
  type: CoreProvider
  url: file://${out}/cluster-api/${capi_version}/core-components.yaml
- name: kubeadm
  type: BootstrapProvider
  url: file://${out}/bootstrap-kubeadm/${capi_version}/bootstrap-components.yaml
- name: kubeadm
  type: ControlPlaneProvider
  url: file://${out}/control-plane-kubeadm/${capi_version}/control-plane-components.yaml
- name: docker
  type: InfrastructureProvider
  url: file://${out}/infrastructure-docker/${capi_version}/infrastructure-components.yaml
- name: capdmp
  type: InfrastructureProvider
  url: file://${out}/infrastructure-capdmp/${CAPDMP_VERSION}/infrastructure-components.yaml
cert-manager:
  url: file://${out}/cert-manager/${cm_version}/cert-manager.yaml
  version: ${cm_version}
EOF
log "done: ${out} (clusterctl init --config ${out}/clusterctl.yaml ...)"
