# Controller images built from Go sources, for machines where no image registry can be reached
# (docs/node-images.md, "Controller images"). Included by the Makefile; the script nices every
# go build and docker build with IMAGES_NICE.
#
#   make images                 every controller image a deployed management cluster needs, tagged
#                               as the providers' components name them; cached outside the clone
#   make images IMAGES=capdmp   some of them (names: make images-list)
#   make images-list            names and tags (no Docker needed)
#   make images-clean           remove the cache folder (not the images in Docker)

IMAGES ?=
IMAGES_NICE ?= nice -n 19
# Base of CAPDMP's image: scratch, or an image that can be pulled or is loaded already
# (gcr.io/distroless/static:nonroot).
CAPDMP_BASE_IMAGE ?= scratch
IMAGES_ENV = CAPDMP_CACHE="$(CAPDMP_CACHE)" CAPDMP_IMG="$(IMG)" CAPDMP_BASE_IMAGE="$(CAPDMP_BASE_IMAGE)" IMAGES_NICE="$(IMAGES_NICE)"

.PHONY: images images-list images-clean

images: ## Build the controller images (Cluster API, CABPK, KCP, CAPD, CAPDMP, cert-manager) from Go sources, FROM scratch (cached)
	$(IMAGES_ENV) hack/images/build.sh $(IMAGES)

images-list: ## Print the images make images builds and their tags
	@$(IMAGES_ENV) hack/images/build.sh --list

images-clean: ## Remove the controller images' cache folder (binaries, logs)
	rm -rf "$(CAPDMP_CACHE)/images"
