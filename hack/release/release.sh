#!/usr/bin/env bash
# Writes a release of CAPDMP (docs/release.md): the files clusterctl reads from a release of an
# infrastructure provider, in one folder, as the assets of a GitHub release are:
#
#   infrastructure-components.yaml  the kustomize build of config/default, its manager image
#                                   RELEASE_IMG (tag VERSION), named in full as clusterctl wants
#   metadata.yaml                   the repository's; VERSION's major.minor must be a release series
#   cluster-template-*.yaml,        templates/
#   clusterclass-*.yaml
#   cluster-template.yaml           the machinepool flavor, the one clusterctl generate cluster
#                                   takes without --flavor
#   clusterctl-settings.json        what Cluster API's cmd/clusterctl/hack/create-local-repository.py
#                                   reads of a provider: its label, components file and version
#
# Usage: release.sh OUT_DIR   (the folder is emptied first)
# Environment:
#   VERSION      vMAJOR.MINOR.PATCH[-PRERELEASE]; default: hack/release/VERSION, the one place the
#                version is written (the Makefile, hack/clusterctl-repository.sh and hack/version.sh
#                read it there)
#   RELEASE_IMG  the manager image (default capdmp-controller:VERSION); its tag must be VERSION
#   COMPONENTS   components rendered already, copied as they are instead (the local repository of
#                make clusterctl-repository runs the development image IMG); RELEASE_IMG is unused
set -euo pipefail
ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)"
log() { printf '[release] %s\n' "$*" >&2; }
die() { log "ERROR: $*"; exit 1; }

[ $# -eq 1 ] || die "usage: $0 OUT_DIR"
VERSION="${VERSION:-$(cat "${ROOT}/hack/release/VERSION")}"
COMPONENTS="${COMPONENTS:-}"
RELEASE_IMG="${RELEASE_IMG:-capdmp-controller:${VERSION}}"

# The version: semantic, with clusterctl's leading v.
semver='^v(0|[1-9][0-9]*)\.(0|[1-9][0-9]*)\.(0|[1-9][0-9]*)(-[0-9A-Za-z.-]+)?(\+[0-9A-Za-z.-]+)?$'
[[ "${VERSION}" =~ ${semver} ]] || die "VERSION ${VERSION} is not a semantic version vMAJOR.MINOR.PATCH (v0.1.0)"
major="${BASH_REMATCH[1]}" minor="${BASH_REMATCH[2]}"

# clusterctl refuses a release whose metadata.yaml has no series for its major.minor ("does not
# match any release series"); say so before anything is written. metadata.yaml lists
# `- major: N` / `minor: M` pairs (test/manifests decodes it strictly).
series="$(awk '
	function flush() { if (major != "" && minor != "") print "v" major "." minor; major = ""; minor = "" }
	/^[[:space:]]*-[[:space:]]/ { flush() }
	{ line = $0; sub(/^[[:space:]]*-?[[:space:]]*/, "", line) }
	line ~ /^major:/ { sub(/^major:[[:space:]]*/, "", line); major = line }
	line ~ /^minor:/ { sub(/^minor:[[:space:]]*/, "", line); minor = line }
	END { flush() }' "${ROOT}/metadata.yaml")"
grep -qx "v${major}.${minor}" <<<"${series}" ||
	die "VERSION ${VERSION}: metadata.yaml has no release series ${major}.${minor} (it has: $(echo ${series})); add that series (major: ${major}, minor: ${minor}, its contract) to metadata.yaml's releaseSeries first"

# canonical IMAGE: the name in full (docker.io/library/capdmp-controller), as Docker and
# containerd both resolve a short name, and as the components name their image.
canonical() {
	local name="$1" first="${1%%/*}"
	if [[ "${name}" != */* ]]; then
		name="docker.io/library/${name}"
	elif [[ "${first}" != *.* && "${first}" != *:* && "${first}" != localhost ]]; then
		name="docker.io/${name}"
	fi
	printf '%s' "${name}"
}

out="$(mkdir -p "$1" && cd "$1" && pwd)"
[[ "${out}" != / && "${out}" != "${ROOT}" ]] || die "OUT_DIR ${out} would empty the repository or the root"
find "${out}" -mindepth 1 -delete
work="$(mktemp -d)"
trap 'rm -rf "${work}"' EXIT

if [ -n "${COMPONENTS}" ]; then
	[ -s "${COMPONENTS}" ] || die "COMPONENTS ${COMPONENTS} is missing or empty (make manifests)"
	log "${VERSION}: components ${COMPONENTS}"
	cp "${COMPONENTS}" "${out}/infrastructure-components.yaml"
else
	# RELEASE_IMG is NAME:TAG; a registry's port is not a tag.
	[[ "${RELEASE_IMG##*/}" == *:* ]] || die "RELEASE_IMG ${RELEASE_IMG} has no tag; it must be tagged ${VERSION}"
	tag="${RELEASE_IMG##*:}" name="${RELEASE_IMG%:*}"
	[ "${tag}" = "${VERSION}" ] || die "RELEASE_IMG ${RELEASE_IMG}: its tag must be the release's version ${VERSION}"
	image="$(canonical "${name}")"
	log "${VERSION}: kustomize build config/default, manager image ${image}:${tag}"
	(cd "${ROOT}" && go tool -modfile=hack/tools/go.mod kustomize build config/default) > "${work}/components.yaml"
	# The image config/manager names, whatever its tag (make manifests: :dev).
	managed="$(sed -n 's/^ *image: *\(docker.io\/library\/capdmp-controller\):.*/\1/p' "${work}/components.yaml" | sort -u)"
	[ "${managed}" = docker.io/library/capdmp-controller ] ||
		die "the components' manager image is not docker.io/library/capdmp-controller:<tag> (config/manager changed?): ${managed:-none}"
	cat > "${work}/kustomization.yaml" <<EOF
apiVersion: kustomize.config.k8s.io/v1beta1
kind: Kustomization
resources:
- components.yaml
images:
- name: ${managed}
  newName: ${image}
  newTag: ${tag}
EOF
	(cd "${ROOT}" && go tool -modfile=hack/tools/go.mod kustomize build "${work}") > "${out}/infrastructure-components.yaml"
	grep -q "image: ${image}:${tag}\$" "${out}/infrastructure-components.yaml" ||
		die "the rendered components do not run ${image}:${tag}"
fi

cp "${ROOT}/metadata.yaml" "${out}/metadata.yaml"
templates=("${ROOT}"/templates/cluster-template-*.yaml "${ROOT}"/templates/clusterclass-*.yaml)
cp "${templates[@]}" "${out}/"
[ -f "${ROOT}/templates/cluster-template-machinepool.yaml" ] || die "templates/cluster-template-machinepool.yaml, the default flavor, is missing"
cp "${ROOT}/templates/cluster-template-machinepool.yaml" "${out}/cluster-template.yaml"

cat > "${out}/clusterctl-settings.json" <<EOF
{
  "name": "infrastructure-capdmp",
  "config": {
    "componentsFile": "infrastructure-components.yaml",
    "nextVersion": "${VERSION}"
  }
}
EOF
log "${VERSION} written to ${out}: $(cd "${out}" && echo *)"
