#!/usr/bin/env bash
# Runs one layer of tests with a readable summary.
#   hack/test.sh unit|integration|e2e [go test flags...]
set -euo pipefail
ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
cd "$ROOT"
kind=${1:?usage: hack/test.sh unit|integration|e2e}; shift
case "$kind" in
  unit)        pkgs=$(go list ./... | grep -v '/test/' | grep -v '/hack/') ; timeout=10m ;;
  integration) pkgs=$(go list ./test/integration/...) ; timeout=20m ;;
  e2e)         pkgs=$(go list ./test/e2e/...) ; timeout=30m ;;
  *) echo "unknown test layer '$kind'" >&2; exit 2 ;;
esac
mkdir -p _output
go build -o _output/testsummary ./hack/testsummary
echo "== ${kind} tests"
set +e
# shellcheck disable=SC2086
go test -json -timeout "$timeout" "$@" $pkgs | _output/testsummary "$kind"
rc=${PIPESTATUS[1]}
exit "$rc"
