# Node images built from source, for machines where no image registry can be reached
# (docs/node-images.md). Included by the Makefile; every target here is niced, the machine is shared.
#
#   make node-images                       kindest/node:<v> for each NODE_IMAGE_VERSIONS, and CAPD's
#                                          haproxy load-balancer image; cached outside the clone
#   make node-images NODE_IMAGE_VERSIONS=v1.37.0
#   make node-images-binaries              only the Kubernetes binaries (no Docker needed)
#   make test-smoke                     smoke test: control plane + worker + pod per version
#   make node-images-clean                 remove the cache folder (not the images in Docker)

NODE_IMAGE_VERSIONS ?= $(KUBERNETES_OLDEST) $(KUBERNETES_OLDER) $(KUBERNETES_NEWER)
CAPDMP_CACHE ?= $(HOME)/.cache/capdmp
NODE_IMAGES_NICE ?= nice -n 19
# One CoreDNS build carried under the CoreDNS tag each kubeadm names: a CoreDNS build costs about
# as much CPU as one Kubernetes version, and three of them do not fit a cold CI run. Empty builds
# each tag's own version.
NODE_IMAGES_COREDNS_VERSION ?= v1.14.2
# false: no CoreDNS in the images (the blocking real tier skips the addon; an image built with it
# serves too).
NODE_IMAGES_COREDNS ?= true
NODE_IMAGES_ENV = CAPDMP_CACHE="$(CAPDMP_CACHE)" NODE_IMAGE_VERSIONS="$(NODE_IMAGE_VERSIONS)" NODE_IMAGES_COREDNS="$(NODE_IMAGES_COREDNS)" NODE_IMAGES_COREDNS_VERSION="$(NODE_IMAGES_COREDNS_VERSION)"
SMOKE_TEST_TIMEOUT ?= 45m

.PHONY: node-images node-images-binaries node-images-clean test-smoke

node-images: ## Build kindest/node:<version> images and CAPD's haproxy image from source (cached)
	$(NODE_IMAGES_ENV) $(NODE_IMAGES_NICE) hack/node-images/build.sh $(NODE_IMAGE_VERSIONS)

node-images-binaries: ## Build only the static Kubernetes binaries of NODE_IMAGE_VERSIONS (cached)
	@for v in $(NODE_IMAGE_VERSIONS); do \
	  $(NODE_IMAGES_ENV) $(NODE_IMAGES_NICE) hack/node-images/kube-binaries.sh $$v || exit 1; \
	done

test-smoke: node-images ## Smoke test of the node images (build tag e2e_local): kubeadm init, join, pod
	eval "$$(hack/docker-engine.sh start)" && $(NODE_IMAGES_ENV) \
	  $(NODE_IMAGES_NICE) go -C $(ROOT)/test test -tags e2e_local -count=1 -timeout $(SMOKE_TEST_TIMEOUT) -v ./smoke/...

node-images-clean: ## Remove the node-images cache folder
	rm -rf "$(CAPDMP_CACHE)/node-images"
