#!/usr/bin/env bash
# Builds CAPDMP's test node images (a stand-in for kindest/node, see README.md beside this file)
# and tags them kindest/node:<version> on the Docker engine that hack/docker-engine.sh names.
#
#   test/stubnode/build.sh                 # stubnode.DefaultVersions
#   test/stubnode/build.sh v1.33.1 v1.34.0 # these versions
#
# Prints the image references. Images whose recipe is unchanged are kept; an image of the same
# tag not built here (a real node image) is never replaced.
set -euo pipefail
ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)"
cd "${ROOT}"
if [[ -z "${DOCKER_HOST:-}" ]]; then
  eval "$(hack/docker-engine.sh env)"
fi
exec go -C test run ./stubnode/cmd/build "$@"
