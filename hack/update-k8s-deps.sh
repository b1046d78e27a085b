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
#   hack/update-k8s-deps.sh            rewrite go.mod and run go mod tidy
#   hack/update-k8s-deps.sh --verify   fail if go.mod disagrees with the pin
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
  echo "go.mod pins k8s.io/kubernetes ${KUBE_VERSION} and ${KUBE_STAGING_VERSION} staging modules"
  exit 0
fi

cd "$ROOT"
go mod edit "${edit_args[@]}"
go mod tidy
echo "go.mod pinned to k8s.io/kubernetes ${KUBE_VERSION}"
