# Controller images built from Go sources, for machines where no image registry can be reached
# (docs/node-images.md, "Controller images"). Included by the Makefile; the script nices every
# go build and docker build with IMAGES_NICE.
#
#   make images                 every controller image a deployed management cluster needs, tagged
#                               as the providers' components name them; cached outside the clone
#   make images IMAGES=capdmp   some of them (names: make images-list)
#   make images-list            names and tags (no Docker needed)
#   make images-clean           remove the cache folder (not the images in Docker)
#   make registry               the distribution registry, built from its Go module (hack/registry.sh)
#   make test-published-images  the published-images path of the image scripts, for real, against
#                               that registry on loopback (test/published, build tag published)

IMAGES ?=
IMAGES_NICE ?= nice -n 19
# Base of CAPDMP's image: scratch, or an image that can be pulled or is loaded already
# (gcr.io/distroless/static:nonroot).
CAPDMP_BASE_IMAGE ?= scratch
IMAGES_ENV = CAPDMP_CACHE="$(CAPDMP_CACHE)" CAPDMP_IMG="$(IMG)" CAPDMP_BASE_IMAGE="$(CAPDMP_BASE_IMAGE)" IMAGES_NICE="$(IMAGES_NICE)"

.PHONY: images images-list images-clean registry test-published-images

images: ## Build the controller images (Cluster API, CABPK, KCP, CAPD, CAPDMP, cert-manager) from Go sources, FROM scratch (cached)
	$(IMAGES_ENV) hack/images/build.sh $(IMAGES)

images-list: ## Print the images make images builds and their tags
	@$(IMAGES_ENV) hack/images/build.sh --list

images-clean: ## Remove the controller images' cache folder (binaries, logs)
	rm -rf "$(CAPDMP_CACHE)/images"

registry: ## Build the distribution registry (REGISTRY_VERSION, v3.1.2) from its Go module into ~/.cache/capdmp/tools when missing
	CAPDMP_CACHE="$(CAPDMP_CACHE)" NICE="$(IMAGES_NICE)" hack/registry.sh build

# Its last step builds CAPDMP's manager image (a go build of the manager: seconds with a warm Go
# build cache, about ten minutes on a cold one on 2 busy cores); the rest takes seconds.
PUBLISHED_TEST_TIMEOUT ?= 30m
test-published-images: registry docker-engine ## Pull-first image scripts against a registry on loopback: pinned digests pulled, nothing built, wrong release refused, build when the registry is gone (build tag published)
	hack/host-packages.sh test
	eval "$$(hack/docker-engine.sh start)" && CAPDMP_CACHE="$(CAPDMP_CACHE)" IMAGES_NICE="$(IMAGES_NICE)" \
	  $(IMAGES_NICE) go -C $(ROOT)/test test -tags published -count=1 -timeout $(PUBLISHED_TEST_TIMEOUT) -v ./published/...
