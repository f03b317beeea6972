# The CAPDMP manager image, capdmp-controller:dev (make docker-build; make images builds it with
# the other controller images).
#
# The manager is built on the host, not in a builder stage, so that no Go image has to be pulled:
# make docker-build (hack/images/build.sh capdmp) builds a static binary (CGO_ENABLED=0,
# -trimpath, -ldflags '-s -w' and the version flags of hack/version.sh: `/manager --version`
# prints them) and runs `docker build --pull=false` on a context that holds this
# file and the binary as `manager`. Plain `docker build` works the same way on any folder holding
# both. The base is scratch; BASE_IMAGE=gcr.io/distroless/static:nonroot (CAPDMP_BASE_IMAGE in
# make) selects distroless where it can be pulled.
#
# Plain Dockerfile syntax, no RUN: the engine's legacy builder builds it, on a base without a shell.

ARG BASE_IMAGE=scratch
FROM ${BASE_IMAGE}
COPY manager /manager
# Non-root by default. The Deployment in config/manager runs it as root because the host's Docker
# socket belongs to root.
USER 65532:65532
ENTRYPOINT ["/manager"]
