# CAPDMP: Cluster API infrastructure provider for Docker MachinePools.
SHELL := /usr/bin/env bash -o pipefail
.DEFAULT_GOAL := help

ROOT := $(abspath .)
BIN := $(ROOT)/bin
TOOLS := go tool -modfile=$(ROOT)/hack/tools/go.mod
export KUBEBUILDER_ASSETS ?= $(BIN)/envtest
GO_TEST_FLAGS ?= -timeout 30m

IMG ?= capdmp-controller:dev

# The Kubernetes versions of make run, the tiers and the demo, from their one place
# (internal/kubeversions/versions.txt): OLDER is upgraded to NEWER; OLDEST is the full tier's third.
kube_version = $(shell awk '$$1 == "$(1)" { print $$2 }' $(ROOT)/internal/kubeversions/versions.txt)
KUBERNETES_OLDEST := $(call kube_version,oldest)
KUBERNETES_OLDER := $(call kube_version,older)
KUBERNETES_NEWER := $(call kube_version,newer)
# The version of the manager, its git commit and build date (hack/version.sh), as Cluster API's
# Makefile sets its own.
LDFLAGS = $(shell hack/version.sh)

##@ General
.PHONY: help
help: ## Show the targets
	@awk 'BEGIN {FS = ":.*##"} /^[a-zA-Z0-9_-]+:.*?##/ { printf "  \033[36m%-20s\033[0m %s\n", $$1, $$2 } /^##@/ { printf "\n\033[1m%s\033[0m\n", substr($$0, 5) }' $(MAKEFILE_LIST)

##@ Development
.PHONY: generate
generate: ## Generate deepcopy, CRDs, RBAC and webhook manifests
	$(TOOLS) controller-gen object paths=./api/...
	$(TOOLS) controller-gen crd paths=./api/... output:crd:dir=./config/crd/bases
	$(TOOLS) controller-gen rbac:roleName=manager-role paths=. paths=./controllers/... paths=./internal/... output:rbac:dir=./config/rbac
	$(TOOLS) controller-gen webhook paths=./internal/webhooks/... output:webhook:dir=./config/webhook

.PHONY: verify
verify: generate ## Fail when generated files or go.mod are out of date, code is not gofmt-clean, build-tagged tests do not compile or the manager links a test package
	go mod tidy -diff
	$(foreach m,$(NESTED_MODULES) $(TEST_MODULE),cd $(ROOT)/$(m) && go mod tidy -diff && ) true
	cd hack/tools && go mod tidy -diff
	cd hack/tools/helm && go mod tidy -diff
	cd hack/images/cert-manager && go mod tidy -diff
	cd test && go vet -tags e2e,e2e_local,bench,kind,published ./...
	@if [ -n "$$(git status --porcelain -- api config go.mod go.sum)" ]; then \
		git status --porcelain -- api config go.mod go.sum; git --no-pager diff -- api config | head -50; \
		echo "generated files are out of date: run 'make generate' and commit"; exit 1; fi
	@test -z "$$(gofmt -l $$(git ls-files '*.go'))" || { gofmt -l $$(git ls-files '*.go'); echo "not gofmt-clean"; exit 1; }
	@if go list -deps . | grep -E '^github.com/capdmp/capdmp/(internal/)?test(/|$$)'; then \
		echo "the manager (main.go, the image's binary) links the test packages above"; exit 1; fi
	@# Every module the manager's go.mod requires directly is one the manager links.
	@unlinked="$$(comm -13 <(go list -deps -f '{{with .Module}}{{.Path}}{{end}}' . | sort -u) \
		<(go list -m -f '{{if not .Indirect}}{{.Path}}{{end}}' all | sort -u))"; \
	if [ -n "$$unlinked" ]; then echo "go.mod requires modules the manager does not link (move what needs them to test/):"; echo "$$unlinked"; exit 1; fi

# Where developers run the management plane, the tools and the tests: every one of them builds
# and vets there. What runs in containers (the manager image, the stub node) is built for Linux on
# the engine's architecture (hack/images/build.sh, test/stubnode), so Linux covers it. Not in
# make verify: each platform compiles every dependency once more, minutes on a cold cache, which
# a cold CI run has no room for; run it before a change to what runs on the host is resolved.
HOST_PLATFORMS ?= darwin/arm64 darwin/amd64 linux/arm64 linux/amd64

.PHONY: verify-platforms
verify-platforms: ## Vet every module for HOST_PLATFORMS (macOS and Linux, arm64 and amd64)
	for platform in $(HOST_PLATFORMS); do \
	  export GOOS="$${platform%/*}" GOARCH="$${platform#*/}"; echo "go vet for $$platform"; \
	  go vet ./... && (cd $(TEST_MODULE) && go vet -tags e2e,e2e_local,bench,kind,published ./...) || exit 1; \
	  for m in $(NESTED_MODULES); do (cd "$$m" && go vet ./...) || exit 1; done; \
	done

.PHONY: lint
lint: ## Run golangci-lint (build-tagged e2e, real-tier and bench code included)
	$(TOOLS) golangci-lint run ./...
	cd $(TEST_MODULE) && $(TOOLS) golangci-lint run --build-tags e2e,e2e_local,bench,kind,published ./...
	$(foreach m,$(NESTED_MODULES),cd $(ROOT)/$(m) && $(TOOLS) golangci-lint run ./... && ) true

.PHONY: manifests
manifests: ## Render the clusterctl components (out/infrastructure-components.yaml)
	mkdir -p out
	$(TOOLS) kustomize build config/default > out/infrastructure-components.yaml

# The local clusterctl repository (docs/clusterctl.md): out/ is build output, not in git.
CLUSTERCTL_REPOSITORY ?= $(ROOT)/out/clusterctl-repository

.PHONY: clusterctl-repository
clusterctl-repository: manifests ## A local clusterctl repository of Cluster API, kubeadm, CAPD, CAPDMP and cert-manager, with its clusterctl.yaml (out/clusterctl-repository)
	CAPDMP_VERSION=$(VERSION) hack/clusterctl-repository.sh $(CLUSTERCTL_REPOSITORY) out/infrastructure-components.yaml

##@ Test
.PHONY: envtest-binaries
envtest-binaries: ## Build kube-apiserver and etcd for envtest (cached)
	hack/envtest-binaries.sh

.PHONY: docker-engine
docker-engine: ## Start a Docker engine if none answers
	hack/docker-engine.sh start

.PHONY: host-packages
host-packages: ## Install (as root) or check the Debian packages the tests need
	hack/host-packages.sh all

TEST_JSON := $(ROOT)/_artifacts/go-test.json
# Modules of their own whose tests `make test` runs (go test ./... stops at a nested go.mod):
# pkg/skew, and examples/skew-importer, which imports it pinned to an older Cluster API.
NESTED_MODULES := pkg/skew examples/skew-importer

# The harness (test/, a module of its own): the test tiers, their framework and the management
# plane of `make run` (test/devtools). `make test` runs its unit tests beside the manager's.
TEST_MODULE := test

# The stub-node tier (tier 1): the scenario table, the pool's lifecycle and the fault tests on stub
# nodes, a package of its own that `make test` leaves to `make test-stub-tier`. STUB_TIER_RUN
# selects tests (go test's -run), e.g. STUB_TIER_RUN=TestScenarios/both-at-once/machinepool-first.
STUB_TIER_PACKAGE := github.com/capdmp/capdmp/test/scenarios/stubnodes
STUB_TIER_RUN ?=

.PHONY: test
test: envtest-binaries docker-engine ## Run the unit, API and engine tests of every module, verify, lint (the stub-node tier is make test-stub-tier)
	hack/host-packages.sh test
	mkdir -p $(dir $(TEST_JSON))
	$(MAKE) test-modules
	$(TOOLS) gotestsum --format pkgname-and-test-fails --format-hide-empty-pkg --jsonfile $(TEST_JSON) -- $(GO_TEST_FLAGS) ./...
	cd $(TEST_MODULE) && pkgs="$$(go list ./...)" && $(TOOLS) gotestsum --format pkgname-and-test-fails --format-hide-empty-pkg \
	  --jsonfile $(ROOT)/_artifacts/go-test-harness.json -- $(GO_TEST_FLAGS) $$(grep -vxF $(STUB_TIER_PACKAGE) <<<"$$pkgs")
	$(MAKE) verify
	$(MAKE) lint

.PHONY: test-stub-tier
test-stub-tier: envtest-binaries docker-engine ## Run the stub-node tier: the scenario table, the pool's lifecycle and the fault tests on stub nodes and envtest
	hack/host-packages.sh test
	mkdir -p $(dir $(TEST_JSON))
	cd $(TEST_MODULE) && $(TOOLS) gotestsum --format pkgname-and-test-fails --format-hide-empty-pkg --jsonfile $(ROOT)/_artifacts/go-test-stub-tier.json -- $(GO_TEST_FLAGS) \
	  $(if $(STUB_TIER_RUN),-v -run '$(STUB_TIER_RUN)') ./scenarios/stubnodes/

.PHONY: test-modules
test-modules: ## Run the tests of pkg/skew's own module and of examples/skew-importer (pkg/skew under Cluster API v1.13)
	$(foreach m,$(NESTED_MODULES),cd $(ROOT)/$(m) && $(TOOLS) gotestsum --format pkgname-and-test-fails --format-hide-empty-pkg --jsonfile $(ROOT)/_artifacts/go-test-$(subst /,-,$(m)).json -- $(GO_TEST_FLAGS) ./... && ) true

# The fault tests run in `make test-stub-tier` too; this runs them alone, with their moments in the log.
.PHONY: test-faults
test-faults: envtest-binaries docker-engine ## Run the fault tests alone: manager killed, conflicts, API server frozen and restarted, hung bootstrap, engine restarted, clusterctl move
	hack/host-packages.sh test
	cd $(TEST_MODULE) && go test $(GO_TEST_FLAGS) -count=1 -v -run '^TestFault' ./scenarios/stubnodes/

.PHONY: bench
bench: envtest-binaries docker-engine ## CAPDMP beside the Docker engine alone, gate re-open latency, cost at scale: _artifacts/bench/{results.json,chart.svg} (docs/benchmarks.md)
	hack/host-packages.sh test
	mkdir -p _artifacts/bench
	cd $(TEST_MODULE) && go test -tags bench $(GO_TEST_FLAGS) -count=1 -v -run '^(TestBench|TestBenchGateReopenProof)$$' ./scenarios/stubnodes/ | tee $(ROOT)/_artifacts/bench/bench.log | grep -E '^(bench:|--- FAIL|FAIL|ok)'

SCALE_SIZES ?= 1000,5000,10000
SCALE_ROLLOUT_SIZES ?= 1000

.PHONY: bench-scale
bench-scale: envtest-binaries ## One pool of SCALE_SIZES instances on envtest and the fake runtime, Cluster API's core in-process: writes, bytes, reconciles, CPU, object sizes
	mkdir -p _artifacts/bench
	CAPDMP_SCALE_SIZES=$(SCALE_SIZES) CAPDMP_SCALE_ROLLOUT_SIZES=$(SCALE_ROLLOUT_SIZES) go test -run '^$$' -bench '^BenchmarkPoolScale$$' -benchtime 1x -timeout 180m -v . | tee _artifacts/bench/scale.log | grep -vE '^\s*>'

.PHONY: bench-pools
bench-pools: envtest-binaries docker-engine ## Ten pools scaling at once beside one pool alone and the engine alone's creates, stub nodes: _artifacts/bench/results-pools.json
	hack/host-packages.sh test
	mkdir -p _artifacts/bench
	cd $(TEST_MODULE) && go test -tags bench -timeout 40m -count=1 -v -run '^TestBenchPools$$' ./scenarios/stubnodes/ | tee $(ROOT)/_artifacts/bench/pools.log | grep -E '^(bench:|--- FAIL|FAIL|ok)'

FUZZTIME ?= 30s

.PHONY: fuzz
fuzz: ## Run every fuzz target for FUZZTIME each (30s), one at a time; summary in _artifacts/fuzz/summary.txt
	FUZZTIME=$(FUZZTIME) hack/fuzz.sh

# The real tier comes in two sizes, as Cluster API's e2e does (PR-blocking and full):
# - test-e2e-local, the blocking tier CI runs: two versions without CoreDNS, and the scenarios that
#   exercise the gate, the bootstrap refresh and a manager restart with real kubelets;
# - test-e2e-full: three versions with CoreDNS and every scenario.
E2E_LOCAL_VERSIONS := $(KUBERNETES_OLDER) $(KUBERNETES_NEWER)
E2E_LOCAL_SCENARIOS := both-at-once/machinepool-first paused/outlives-token-ttl paused/provider-restart
# The blocking tier's tests (go test's -run); E2E_LOCAL_TESTS=TestScenarios runs the scenarios alone.
E2E_LOCAL_TESTS := ^(TestScenarios|TestRetaggedImageRefused)$$
E2E_FULL_VERSIONS := $(KUBERNETES_OLDEST) $(KUBERNETES_OLDER) $(KUBERNETES_NEWER)
E2E_LOCAL_PARALLEL ?= 2
E2E_LOCAL_TIMEOUT ?= 75m
E2E_LOCAL_LOG := $(ROOT)/_artifacts/e2e-local/suite.log

.PHONY: test-e2e-local
test-e2e-local: ## Blocking real tier (CI): node images of two versions, smoke test, three upgrade scenarios and a retagged image refused, on real KCP, CAPD and CAPDMP nodes
	$(MAKE) real-tier NODE_IMAGE_VERSIONS="$(E2E_LOCAL_VERSIONS)" NODE_IMAGES_COREDNS=false E2E_LOCAL_RUN='$(E2E_LOCAL_TESTS)' SCENARIOS="$(E2E_LOCAL_SCENARIOS)"

.PHONY: test-e2e-full
test-e2e-full: ## Full real tier: node images of three versions with CoreDNS, smoke test, every real scenario
	$(MAKE) real-tier NODE_IMAGE_VERSIONS="$(E2E_FULL_VERSIONS)" NODE_IMAGES_COREDNS=true E2E_LOCAL_RUN=.

# The real benches: the skew and scale-up comparisons, then BENCH_REAL_TRIALS (10) gate re-opens.
BENCH_REAL_RUN ?= ^(TestBenchReal|TestBenchReopenReal)$$

.PHONY: bench-real
bench-real: ## make bench on real nodes: skew violations of CAPDMP's and upstream CAPD's pools in one upgrade, scale-up beside CAPD and the engine, gate re-open trials: _artifacts/bench/results-real.json, results-reopen-real.json
	@# CABPK's default token TTL: the real tier's 90 s expires the token the engine alone joins
	@# with before a large scale-up is done (kubeadm then finds no JWS signature for it).
	E2E_LOCAL_TOKEN_TTL=15m $(MAKE) real-tier NODE_IMAGE_VERSIONS="$(E2E_LOCAL_VERSIONS)" NODE_IMAGES_COREDNS=false E2E_LOCAL_RUN='$(BENCH_REAL_RUN)' E2E_LOCAL_TAGS=e2e_local,bench E2E_LOCAL_TIMEOUT=120m \
	  E2E_LOCAL_LOG=$(ROOT)/_artifacts/bench/real.log

.PHONY: bench-apply
bench-apply: ## From the apply of a cluster to every pool Node Ready, CAPDMP beside upstream CAPD, both at once on real nodes: _artifacts/bench/results-apply.json
	E2E_LOCAL_TOKEN_TTL=15m $(MAKE) real-tier NODE_IMAGE_VERSIONS="$(E2E_LOCAL_VERSIONS)" NODE_IMAGES_COREDNS=false E2E_LOCAL_RUN='^TestBenchApply$$' E2E_LOCAL_TAGS=e2e_local,bench \
	  E2E_LOCAL_LOG=$(ROOT)/_artifacts/bench/apply.log

E2E_LOCAL_TAGS ?= e2e_local

.PHONY: real-tier
real-tier: envtest-binaries test-smoke
	mkdir -p $(dir $(E2E_LOCAL_LOG))
	eval "$$(hack/docker-engine.sh start)" && cd $(TEST_MODULE) && CAPDMP_SCENARIOS="$(SCENARIOS)" go test -tags $(E2E_LOCAL_TAGS) -count=1 -v -timeout $(E2E_LOCAL_TIMEOUT) \
	  -parallel $(E2E_LOCAL_PARALLEL) -run '$(E2E_LOCAL_RUN)' ./scenarios/realnodes/ 2>&1 | tee $(E2E_LOCAL_LOG); \
	  status=$${PIPESTATUS[0]}; echo; grep -E '^(scenario  |both-at-once/|paused/|pool-alone/|run[0-9]-|kit-|bench-|retagged-|conformance kit|suite wall time|skew-violations:|[0-9]+ passed, [0-9]+ failed)' $(E2E_LOCAL_LOG); exit $$status

include hack/node-images/node-images.mk
include hack/images/images.mk
include hack/release/release.mk

##@ Kind
# A kind management cluster deployed as users deploy CAPDMP (docs/clusterctl.md, "make
# kind-management"): kind on the node image built here, the controller images loaded, clusterctl
# init from the local repository.
KIND_MANAGEMENT_NAME ?= capdmp-management
KIND_MANAGEMENT_NODE_IMAGE ?= kindest/node:$(KUBERNETES_OLDER)
KIND_MANAGEMENT_ENV = KIND_MANAGEMENT_NAME="$(KIND_MANAGEMENT_NAME)" KIND_MANAGEMENT_NODE_IMAGE="$(KIND_MANAGEMENT_NODE_IMAGE)" \
  CLUSTERCTL_REPOSITORY="$(CLUSTERCTL_REPOSITORY)" CAPDMP_CACHE="$(CAPDMP_CACHE)" IMG="$(IMG)"

.PHONY: kind-management kind-management-delete test-kind
kind-management: clusterctl-repository ## A kind management cluster (KIND_MANAGEMENT_NAME) with cert-manager, Cluster API, kubeadm, CAPD and CAPDMP from the local repository
	$(KIND_MANAGEMENT_ENV) hack/kind-management.sh create

kind-management-delete: ## Delete the kind management cluster, its workload clusters, and put back host settings
	$(KIND_MANAGEMENT_ENV) hack/kind-management.sh delete

test-kind: ## Test the kind management cluster (build tag kind): providers Available, manager RBAC, webhooks with cert-manager certificates, a machinepool-flavor cluster whose workers join
	KUBECONFIG="$$($(KIND_MANAGEMENT_ENV) hack/kind-management.sh kubeconfig)" KUBECTL="$$($(KIND_MANAGEMENT_ENV) hack/kind-management.sh kubectl)" \
	  CLUSTERCTL=$(BIN)/clusterctl CLUSTERCTL_CONFIG=$(CLUSTERCTL_REPOSITORY)/clusterctl.yaml \
	  go -C $(TEST_MODULE) test -tags kind -count=1 -v -timeout 30m ./kind/

# Tilt (docs/clusterctl.md, "Tilt"): tilt built from its Go module into CAPDMP_CACHE/tools, and
# `tilt ci` of the standalone Tiltfile against the kind management cluster (KIND_MANAGEMENT_NAME).
.PHONY: tilt tilt-ci
tilt: ## Build tilt (TILT_VERSION, v0.34.0) from its Go module into ~/.cache/capdmp/tools when missing
	CAPDMP_CACHE="$(CAPDMP_CACHE)" hack/tilt.sh build

tilt-ci: ## tilt ci of the standalone Tiltfile on the kind management cluster (make kind-management first; TILT_CI_FLAGS, CAPDMP_BASE_IMAGE)
	$(KIND_MANAGEMENT_ENV) hack/tilt.sh ci

# The deployed tier: test/e2e on Cluster API's e2e framework, on a kind management cluster of its
# own, which the suite makes (hack/kind-management.sh cluster, then the framework loads the images
# and runs clusterctl init) and deletes after (E2E_KEEP_CLUSTER=true keeps it).
# E2E_FOCUS selects specs by name (ginkgo's focus), e.g. E2E_FOCUS=quick-start.
E2E_VERSIONS := $(KUBERNETES_OLDER) $(KUBERNETES_NEWER)

.PHONY: test-e2e
test-e2e: clusterctl-repository ## Deployed tier: Cluster API's quick-start (machinepool and ClusterClass flavors), MachinePool spec, clusterctl move, upgrade both at once in both orders, on a kind management cluster
	$(MAKE) node-images NODE_IMAGE_VERSIONS="$(E2E_VERSIONS)"
	$(MAKE) images
	KUBERNETES_VERSION_MANAGEMENT=$(firstword $(E2E_VERSIONS)) CAPDMP_CACHE="$(CAPDMP_CACHE)" IMG="$(IMG)" hack/test-e2e.sh

##@ Run
# The node images `make run` makes sure of (bin/kubectl is of the newest: hack/kubectl.sh), and the
# flags of the management plane (test/devtools/cmd/management-plane: --data-dir, --fresh, ...).
RUN_NODE_IMAGE_VERSIONS ?= $(KUBERNETES_OLDER) $(KUBERNETES_NEWER)
RUN_FLAGS ?=

.PHONY: run
run: envtest-binaries docker-engine ## The main job: a whole Cluster API management plane on this machine, with CAPDMP (node images used as they are, built when missing)
	@echo "make run: node images $(RUN_NODE_IMAGE_VERSIONS) (present ones, such as kind's published images, used as they are; from source when missing: about 15 minutes a version, cached after)"
	$(MAKE) --no-print-directory node-images NODE_IMAGE_VERSIONS="$(RUN_NODE_IMAGE_VERSIONS)"
	$(MAKE) --no-print-directory run-binaries
	@eval "$$(hack/docker-engine.sh env)" && exec $(BIN)/management-plane $(RUN_FLAGS)

.PHONY: run-binaries
run-binaries: ## Build bin/manager, bin/management-plane, bin/clusterctl; link bin/kubectl (of the newest RUN_NODE_IMAGE_VERSIONS: its cached build, else its node image's, else built)
	go build -ldflags "$(LDFLAGS)" -o $(BIN)/manager .
	go -C $(TEST_MODULE) build -o $(BIN)/management-plane ./devtools/cmd/management-plane
	go -C $(TEST_MODULE) build -o $(BIN)/clusterctl sigs.k8s.io/cluster-api/cmd/clusterctl
	kubectl="$$($(NODE_IMAGES_ENV) $(NODE_IMAGES_NICE) hack/kubectl.sh $(lastword $(RUN_NODE_IMAGE_VERSIONS)))" && \
	  ln -sf "$$kubectl" $(BIN)/kubectl

# A developer's machine (docs/run.md, "On your own machine"): as root, it makes a user in the
# Docker socket's group and label-less copies of the node images, as kind publishes them; that
# user's `make run` in a clone of HEAD then makes a cluster, and must build, retag, install and
# touch as root nothing.
.PHONY: test-developer-machine
test-developer-machine: ## As root (CI): make run and a cluster as a non-root user in the docker group, on published-style node images; nothing rebuilt, retagged, installed or touched as root
	RUN_NODE_IMAGE_VERSIONS="$(RUN_NODE_IMAGE_VERSIONS)" hack/test-developer-machine.sh

# The same user online (README, "On Linux with the internet"), made on loopback: the node images
# and envtest's binaries pulled through a registry mirror and an index on 127.0.0.1 by an engine
# of the test's own, a PATH of Go, make, git, docker and POSIX tools only; then make test as that
# user. Not in CI (a cold Go build and make test as the user: about an hour).
.PHONY: test-published-path
test-published-path: ## As root: make run and make test as a non-root user whose engine pulls everything through a loopback registry mirror; nothing built from source
	DEV_MACHINE_IMAGES=mirror RUN_NODE_IMAGE_VERSIONS="$(RUN_NODE_IMAGE_VERSIONS)" hack/test-developer-machine.sh

DEMO_FROM ?= $(KUBERNETES_OLDER)
DEMO_TO ?= $(KUBERNETES_NEWER)
DEMO_SCENARIO ?= both-at-once/machinepool-first

.PHONY: demo
demo: envtest-binaries docker-engine ## Scenario 1 with real nodes as a live timeline (builds the two node images first; Ctrl-C cleans up)
	$(MAKE) node-images NODE_IMAGE_VERSIONS="$(DEMO_FROM) $(DEMO_TO)"
	go -C $(TEST_MODULE) build -o $(BIN)/demo ./framework/cmd/demo
	eval "$$(hack/docker-engine.sh env)" && $(BIN)/demo --scenario $(DEMO_SCENARIO) --versions $(DEMO_FROM),$(DEMO_TO)

.PHONY: build
build: ## Build the manager binary, its version set (bin/manager --version)
	CGO_ENABLED=0 go build -trimpath -ldflags "$(LDFLAGS)" -o $(BIN)/manager .

.PHONY: docker-build
docker-build: ## Build the manager image (IMG, capdmp-controller:dev) from a static binary built here, on scratch (CAPDMP_BASE_IMAGE)
	$(IMAGES_ENV) hack/images/build.sh capdmp

# The architectures docker-build-all builds, each tagged IMG-ARCH (capdmp-controller:dev-arm64).
ALL_ARCH ?= amd64 arm64

.PHONY: docker-build-all
docker-build-all: ## Build the manager image for each ALL_ARCH (amd64 arm64), tagged IMG-ARCH; the engine's own arch is smoke-tested
	for arch in $(ALL_ARCH); do $(IMAGES_ENV) IMAGE_ARCH=$$arch CAPDMP_IMG=$(IMG)-$$arch hack/images/build.sh capdmp || exit 1; done
