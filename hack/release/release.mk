# A release of CAPDMP (docs/release.md). Included by the Makefile.
#
#   make release VERSION=vX.Y.Z     RELEASE_DIR (out/release): components running RELEASE_IMG,
#                                   metadata.yaml, templates, cluster-template.yaml,
#                                   clusterctl-settings.json (hack/release/release.sh)
#   make release-image              the manager image RELEASE_IMG, its --version VERSION
#   make release-kind-load          release-image, loaded into the kind management cluster
#   make test-release-kind          the release installed by clusterctl on that cluster (test/kind)
#
# The version is written in one place, hack/release/VERSION: the version this tree is released
# as. VERSION=... on the command line overrides it for one run. The local repository (make
# clusterctl-repository) files CAPDMP under it, and hack/version.sh makes the development version
# of an untagged tree a pre-release of it. Bump the file after a release.
VERSION ?= $(shell cat $(ROOT)/hack/release/VERSION)
# The release image, as Cluster API's Makefile names its own (REGISTRY/IMAGE_NAME:RELEASE_TAG);
# without a registry, Docker's short name (docker.io/library/capdmp-controller in the components).
REGISTRY ?=
IMAGE_NAME ?= capdmp-controller
RELEASE_IMG ?= $(if $(REGISTRY),$(REGISTRY)/)$(IMAGE_NAME):$(VERSION)
RELEASE_DIR ?= $(ROOT)/out/release

##@ Release
.PHONY: release release-image release-kind-load test-release-kind release-version

release: ## Write the release of VERSION (hack/release/VERSION) to RELEASE_DIR (out/release), its manager image RELEASE_IMG (REGISTRY, IMAGE_NAME)
	VERSION="$(VERSION)" RELEASE_IMG="$(RELEASE_IMG)" hack/release/release.sh "$(RELEASE_DIR)"

release-version: ## Print VERSION
	@echo "$(VERSION)"

# Cluster API builds its release binaries with GIT_VERSION=RELEASE_TAG: the same here.
release-image: ## Build the manager image RELEASE_IMG (capdmp-controller:VERSION) from this tree, its --version VERSION
	GIT_VERSION="$(VERSION)" $(MAKE) --no-print-directory docker-build IMG="$(RELEASE_IMG)"

release-kind-load: release-image ## Load RELEASE_IMG into the kind management cluster (KIND_MANAGEMENT_NAME; make kind-management first)
	@test -x $(BIN)/kind || { echo "no $(BIN)/kind: make kind-management first"; exit 1; }
	eval "$$(hack/docker-engine.sh env)" && $(BIN)/kind load docker-image --name "$(KIND_MANAGEMENT_NAME)" "$(RELEASE_IMG)"

# make test-kind runs test/kind's release test too (TestReleaseInstalls): it needs the release
# folder, which it reads from RELEASE_DIR, and its image in the cluster.
export RELEASE_DIR
test-kind: release release-kind-load

test-release-kind: release release-kind-load ## On the kind management cluster: clusterctl init of CAPDMP from RELEASE_DIR, its image and default flavor; the development provider put back
	KUBECONFIG="$$($(KIND_MANAGEMENT_ENV) hack/kind-management.sh kubeconfig)" KUBECTL="$$($(KIND_MANAGEMENT_ENV) hack/kind-management.sh kubectl)" \
	  CLUSTERCTL=$(BIN)/clusterctl CLUSTERCTL_CONFIG=$(CLUSTERCTL_REPOSITORY)/clusterctl.yaml RELEASE_DIR="$(RELEASE_DIR)" \
	  go -C $(ROOT)/test test -tags kind -count=1 -v -timeout 20m -run '^TestReleaseInstalls$$' ./kind/
