#!/bin/bash
# collect-files.sh DEST FILE...: copies each FILE (following symlinks) and every shared library
# it needs, as ldd names them, into DEST at the same paths: enough for a FROM scratch image.
set -o errexit -o nounset -o pipefail
dest="$1"; shift
copy() { cp -L --parents "$1" "${dest}/"; }
for f in "$@"; do
  copy "${f}"
  if ldd "${f}" >/tmp/ldd.out 2>&1; then
    if grep -q 'not found' /tmp/ldd.out; then cat /tmp/ldd.out >&2; echo "missing libraries for ${f}" >&2; exit 1; fi
    awk '/=>/ {print $3} !/=>/ && $1 ~ /^\// {print $1}' /tmp/ldd.out | while read -r lib; do
      [[ -n "${lib}" ]] && copy "${lib}"
    done
  fi
done
