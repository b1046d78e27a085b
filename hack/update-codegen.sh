#!/usr/bin/env bash
# Regenerates deepcopy functions and CRD manifests from the Go types in api/
# with the pinned controller-gen.
#
#   hack/update-codegen.sh            regenerate in place
#   hack/update-codegen.sh --verify   fail if the committed output is stale
set -euo pipefail
ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
"${ROOT}/hack/build-binaries.sh" controller-gen >/dev/null
CG="${LULL_BIN_DIR:-${ROOT}/_output/bin}/controller-gen"

generate() { # $1: output root
  local out=$1
  mkdir -p "$out/api/v1alpha1" "$out/manifests/crds"
  cp -r "${ROOT}/api/." "$out/api/"
  (cd "$ROOT" && "$CG" object:headerFile=hack/boilerplate.go.txt paths=./api/... output:object:dir="$out/api/v1alpha1" \
     crd paths=./api/... output:crd:dir="$out/manifests/crds")
}

if [[ "${1:-}" == "--verify" ]]; then
  tmp=$(mktemp -d)
  trap 'rm -rf "$tmp"' EXIT
  generate "$tmp"
  stale=0
  diff -u "${ROOT}/api/v1alpha1/zz_generated.deepcopy.go" "$tmp/api/v1alpha1/zz_generated.deepcopy.go" || stale=1
  diff -ru "${ROOT}/manifests/crds" "$tmp/manifests/crds" || stale=1
  if [[ $stale -ne 0 ]]; then
    echo "generated code is stale; run 'make generate' and commit the result" >&2
    exit 1
  fi
  echo "generated code is up to date"
  exit 0
fi

rm -rf "${ROOT}/manifests/crds"
cd "$ROOT"
"$CG" object:headerFile=hack/boilerplate.go.txt paths=./api/... crd paths=./api/... output:crd:dir=manifests/crds
echo "generated api/v1alpha1/zz_generated.deepcopy.go and manifests/crds"
