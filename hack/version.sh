#!/usr/bin/env bash
# Prints the -ldflags that set CAPDMP's version package (github.com/capdmp/capdmp/version) for a
# build of this tree, as Cluster API's hack/scripts/release/version.sh does for its own. make build,
# make docker-build (hack/images/build.sh) and make run-binaries pass them to go build.
#
# - gitVersion: git describe of the newest v* tag as a semantic version (v0.1.0, or
#   v0.1.0-3-0123456789abcd between tags); without a tag, a pre-release of the version this tree
#   will be released as (hack/release/VERSION, the one place it is written) in the form Go gives
#   a commit before a release: v0.1.0-0.20261202114500-0123456789ab, which sorts before v0.1.0.
#   -dirty when git status lists changes (untracked files too: they may be Go files).
#   GIT_VERSION overrides it: make release-image sets it to the release's VERSION.
# - gitCommit, gitTreeState (clean or dirty).
# - buildDate: the commit's date, UTC, so that a build of one commit reproduces (and
#   hack/images/build.sh's cache holds); SOURCE_DATE_EPOCH overrides it.
#
# Usage: hack/version.sh   prints "-X ...version.gitVersion=... -X ..." (no -s -w: the caller adds them)
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."
pkg=github.com/capdmp/capdmp/version

commit="$(git rev-parse HEAD 2>/dev/null || echo unknown)"
tree=clean
if [[ "${commit}" == unknown || -n "$(git status --porcelain 2>/dev/null)" ]]; then
  tree=dirty
fi
epoch="${SOURCE_DATE_EPOCH:-$(git log -1 --format=%ct 2>/dev/null || date +%s)}"
date="$(date -u --date="@${epoch}" +%Y-%m-%dT%H:%M:%SZ)"

version="${GIT_VERSION:-}"
next="$(cat hack/release/VERSION)"
if [[ -z "${version}" ]]; then
  if described="$(git describe --tags --abbrev=14 --match 'v[0-9]*' 2>/dev/null)"; then
    # v0.1.0-3-g0123456789abcd (distance to the tag) -> v0.1.0-3-0123456789abcd, as Cluster API's.
    version="$(sed 's/-g\([0-9a-f]\{14\}\)$/-\1/' <<<"${described}")"
  elif [[ "${commit}" != unknown ]]; then
    version="${next}-0.$(date -u --date="@$(git log -1 --format=%ct)" +%Y%m%d%H%M%S)-${commit:0:12}"
  else
    version="${next}-0.unknown"
  fi
  [[ "${tree}" == clean ]] || version+="-dirty"
fi

echo "-X ${pkg}.gitVersion=${version} -X ${pkg}.gitCommit=${commit} -X ${pkg}.gitTreeState=${tree} -X ${pkg}.buildDate=${date}"
