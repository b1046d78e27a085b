#!/usr/bin/env bash
# Lints lull (make verify runs it; make lint alone):
#   - golangci-lint (GOLANGCI_LINT_VERSION in hack/versions.env, built by
#     hack/build-binaries.sh; configured by .golangci.yaml) in the main
#     module and in every nested module of hack/nested-modules.txt;
#   - shellcheck (Debian's, hack/install-deps.sh lint; configured by
#     .shellcheckrc) on every shell script under hack/, .ci/ and test/:
#     *.sh files and files whose #! line names a shell, tracked or new.
# Every check runs (set -e does not stop one: they run under ||, and say
# themselves where they fail); the script fails if any found something.
#
#   hack/lint.sh           both
#   hack/lint.sh go        golangci-lint only
#   hack/lint.sh shell     shellcheck only
set -euo pipefail
ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
cd "$ROOT"
BIN="${LULL_BIN_DIR:-${ROOT}/_output/bin}"
# The same build configuration as hack/build-binaries.sh and the tests:
# golangci-lint type-checks from the same build cache.
export CGO_ENABLED="${CGO_ENABLED:-0}"

# shell_scripts lists the shell scripts under hack/, .ci/ and test/, one a
# line: git's tracked and new (not ignored) files, or every file without git.
shell_scripts() {
  local f files
  if git rev-parse --is-inside-work-tree >/dev/null 2>&1; then
    mapfile -t files < <(git ls-files --cached --others --exclude-standard -- hack .ci test | sort -u)
  else
    mapfile -t files < <(find hack .ci test -type f | sort)
  fi
  for f in "${files[@]}"; do
    [[ -f "$f" ]] || continue # deleted in the work tree
    if [[ "$f" == *.sh ]] || head -n 1 "$f" | grep -Eq '^#!.*[/ ](ba|da|k)?sh([[:space:]]|$)'; then
      echo "$f"
    fi
  done
}

lint_shell() {
  "${ROOT}/hack/install-deps.sh" lint || return 1
  local scripts
  mapfile -t scripts < <(shell_scripts)
  echo "shellcheck ($(shellcheck --version | sed -n 's/^version: //p')): ${#scripts[@]} scripts"
  shellcheck "${scripts[@]}" || return 1
  echo "shellcheck: ok"
}

lint_go() {
  "${ROOT}/hack/build-binaries.sh" golangci-lint || return 1
  local m modules rc=0
  mapfile -t modules < <(grep -v '^[[:space:]]*$' hack/nested-modules.txt)
  for m in . "${modules[@]}"; do
    echo "golangci-lint run ./... (in ${m})"
    (cd "$m" && "${BIN}/golangci-lint" run --config "${ROOT}/.golangci.yaml" ./...) || rc=1
  done
  [[ $rc -eq 0 ]] && echo "golangci-lint: ok"
  return "$rc"
}

what=("$@")
[[ ${#what[@]} -eq 0 ]] && what=(go shell)
rc=0
for w in "${what[@]}"; do
  case "$w" in
    go) lint_go || rc=1 ;;
    shell) lint_shell || rc=1 ;;
    *) echo "lint: unknown check '$w' (go, shell)" >&2; exit 2 ;;
  esac
done
exit "$rc"
