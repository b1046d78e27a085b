#!/usr/bin/env bash
# Regenerates deepcopy functions (api/, plugins/) and CRD manifests (api/)
# with the pinned controller-gen.
#
#   hack/update-codegen.sh            regenerate in place
#   hack/update-codegen.sh --verify   fail if the committed output is stale
set -euo pipefail
ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
"${ROOT}/hack/build-binaries.sh" controller-gen >/dev/null
CG="${LULL_BIN_DIR:-${ROOT}/_output/bin}/controller-gen"

generate() { # $1: module root to generate in
  (cd "$1" && rm -rf manifests/crds && \
   "$CG" object:headerFile=hack/boilerplate.go.txt paths=./api/... paths=./plugins/... \
         crd paths=./api/... output:crd:dir=manifests/crds)
}

generated() { # $1: root; lists generated files relative to it
  (cd "$1" && find api plugins -name 'zz_generated.deepcopy.go' | sort; find manifests/crds -type f | sort)
}

if [[ "${1:-}" == "--verify" ]]; then
  tmp=$(mktemp -d)
  trap 'rm -rf "$tmp"' EXIT
  # Generate in a copy of the sources, then compare.
  (cd "$ROOT" && tar --exclude=./_output --exclude=./.cluster --exclude=./.git -cf - .) | tar -xf - -C "$tmp"
  generate "$tmp"
  stale=0
  for f in $( (generated "$ROOT"; generated "$tmp") | sort -u); do
    diff -u "${ROOT}/$f" "$tmp/$f" >/dev/null 2>&1 || { echo "stale: $f" >&2; diff -u "${ROOT}/$f" "$tmp/$f" 2>&1 | head -20 >&2; stale=1; }
  done
  if [[ $stale -ne 0 ]]; then
    echo "generated code is stale; run 'make generate' and commit the result" >&2
    exit 1
  fi
  echo "generated code is up to date"
  exit 0
fi

generate "$ROOT"
echo "generated deepcopy functions and manifests/crds"
