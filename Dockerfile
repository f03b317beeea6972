# The CAPDMP manager image, capdmp-controller:dev (make docker-build).
#
# Building it needs the golang and distroless base images, from a registry or already loaded into
# the Docker engine (make docker-build passes --pull=false). On machines without a registry it
# cannot be built, and CI does not build it: CI runs the manager in-process or with go run.
# Cluster API's Tilt does not use this file either; it builds the binary and its own image.
#
# Plain Dockerfile syntax (no BuildKit cache mounts), so the engine's legacy builder works too.

ARG GO_IMAGE=golang:1.26
ARG BASE_IMAGE=gcr.io/distroless/static:nonroot

FROM ${GO_IMAGE} AS builder
WORKDIR /workspace

# Dependencies first, so that a source change does not download modules again.
COPY go.mod go.sum ./
RUN go mod download

# The packages the manager is built from (keep in sync with test/manifests/build_test.go, which
# checks that these cover every local package main.go imports).
COPY main.go ./
COPY api/ api/
COPY controllers/ controllers/
COPY internal/ internal/
COPY pkg/ pkg/

ARG TARGETOS=linux
ARG TARGETARCH
RUN CGO_ENABLED=0 GOOS=${TARGETOS} GOARCH=${TARGETARCH} go build -trimpath -ldflags="-s -w" -o /out/manager .

# A static binary on a distroless base, running as a non-root user by default. The Deployment in
# config/manager runs it as root because the host's Docker socket belongs to root.
FROM ${BASE_IMAGE}
COPY --from=builder /out/manager /manager
USER 65532:65532
ENTRYPOINT ["/manager"]
