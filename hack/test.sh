#!/usr/bin/env bash
# Runs one layer of tests with a readable summary.
#   hack/test.sh unit|integration|e2e [go test flags...]
set -euo pipefail
ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
cd "$ROOT"
# The same build configuration as hack/build-binaries.sh and the images.
export CGO_ENABLED="${CGO_ENABLED:-0}"
kind=${1:?usage: hack/test.sh unit|integration|e2e}; shift
case "$kind" in
  unit)        pkgs=$(go list ./... | grep -v '/test/' | grep -v '/hack/') ; timeout=10m ;;
  integration) pkgs=$(go list ./test/integration/... ./test/install) ; timeout=20m ;;   # install: kustomize, Helm chart, release
  # One cluster at a time (-p 1): each e2e package brings up its own, and
  # the real node is one per machine.
  e2e)         pkgs=$(go list ./test/e2e/...) ; timeout=40m ; set -- -p 1 "$@" ;;
  *) echo "unknown test layer '$kind'" >&2; exit 2 ;;
esac
mkdir -p _output
go build -o _output/testsummary ./hack/testsummary
echo "== ${kind} tests"
set +e
# shellcheck disable=SC2086 # $pkgs is a list of packages: split on purpose
{
  go test -json -timeout "$timeout" "$@" $pkgs
  # Nested modules (their own go.mod, listed in hack/nested-modules.txt:
  # the lease library, tools kept out of lull's module) test with the unit
  # layer.
  if [[ "$kind" == unit ]]; then
    while read -r m; do
      [[ -z "$m" ]] && continue
      (cd "$m" && go test -json -timeout "$timeout" ./... </dev/null)
    done <hack/nested-modules.txt
  fi
} | _output/testsummary "$kind"
rc=${PIPESTATUS[1]}
exit "$rc"
