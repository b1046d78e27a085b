#!/usr/bin/env bash
# Pins every k8s.io module lull uses to the one Kubernetes version in
# hack/versions.env.
#
# k8s.io/kubernetes requires its staging modules at v0.0.0 and relies on
# replace directives to resolve them, so a module importing it must replace
# all 31 of them; replacing only those in use breaks the next import (it
# resolves to v0.0.0 and the proxy refuses it). This script writes the whole
# block from hack/staging-modules.txt.
#
# The lease module (lease/go.mod, imported by other tools without any
# replace line) requires the same staging modules and the k8s.io/utils
# version lull's module resolves: its tests run with what lull ships.
#
#   hack/update-k8s-deps.sh            rewrite both go.mod files and run go mod tidy
#   hack/update-k8s-deps.sh --verify   fail if a go.mod disagrees with the pin
set -euo pipefail
ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
# shellcheck source=versions.env
source "${ROOT}/hack/versions.env"

edit_args=(-require="k8s.io/kubernetes@${KUBE_VERSION}"
           -require="sigs.k8s.io/controller-runtime@${CONTROLLER_RUNTIME_VERSION}")
while read -r m; do
  [[ -z "$m" ]] && continue
  edit_args+=(-replace="k8s.io/${m}=k8s.io/${m}@${KUBE_STAGING_VERSION}")
done <"${ROOT}/hack/staging-modules.txt"

# lease_pins fills lease_edit with go mod edit arguments for lease/go.mod
# (run after lull's go.mod is pinned: k8s.io/utils follows the version lull
# resolves).
lease_pins() {
  local m utils
  utils=$(cd "$ROOT" && go list -m -f '{{.Version}}' k8s.io/utils) ||
    { echo "update-k8s-deps: cannot resolve k8s.io/utils in lull's module" >&2; return 1; }
  lease_edit=(-require="k8s.io/utils@${utils}")
  for m in api apimachinery client-go; do
    lease_edit+=(-require="k8s.io/${m}@${KUBE_STAGING_VERSION}")
  done
}

# verify_lease: lease/go.mod requires what lease_pins pins.
verify_lease() { # $1: scratch folder
  lease_pins || return 1
  cp "${ROOT}/lease/go.mod" "$1/lease.go.mod"
  (cd "$1" && go mod edit "${lease_edit[@]}" lease.go.mod)
  if ! diff -u "${ROOT}/lease/go.mod" "$1/lease.go.mod"; then
    echo "lease/go.mod disagrees with hack/versions.env (KUBE_STAGING_VERSION=${KUBE_STAGING_VERSION}) or lull's k8s.io/utils; run 'make update-deps'" >&2
    return 1
  fi
}

if [[ "${1:-}" == "--verify" ]]; then
  tmp=$(mktemp -d)
  trap 'rm -rf "$tmp"' EXIT
  cp "${ROOT}/go.mod" "$tmp/go.mod"
  (cd "$tmp" && go mod edit "${edit_args[@]}" go.mod)
  if ! diff -u "${ROOT}/go.mod" "$tmp/go.mod"; then
    echo "go.mod disagrees with hack/versions.env (KUBE_VERSION=${KUBE_VERSION}); run 'make update-deps'" >&2
    exit 1
  fi
  # Every staging module the build resolves must come from the pinned version.
  bad=$(cd "$ROOT" && go list -m -f '{{if .Replace}}{{.Path}} {{.Replace.Version}}{{end}}' all 2>/dev/null |
        awk -v v="${KUBE_STAGING_VERSION}" '$1 ~ /^k8s.io\// && $2 != v')
  if [[ -n "$bad" ]]; then
    echo "k8s.io modules replaced to a version other than ${KUBE_STAGING_VERSION}:" >&2
    echo "$bad" >&2
    exit 1
  fi
  verify_lease "$tmp"
  echo "go.mod pins k8s.io/kubernetes ${KUBE_VERSION} and ${KUBE_STAGING_VERSION} staging modules; so does lease/go.mod"
  exit 0
fi

cd "$ROOT"
go mod edit "${edit_args[@]}"
go mod tidy
lease_pins
(cd lease && go mod edit "${lease_edit[@]}" && go mod tidy)
echo "go.mod pinned to k8s.io/kubernetes ${KUBE_VERSION}, lease/go.mod to ${KUBE_STAGING_VERSION}"
