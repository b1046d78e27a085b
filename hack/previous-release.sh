#!/usr/bin/env bash
# Builds the previous release (LULL_PREVIOUS_COMMIT in hack/versions.env)
# for the upgrade test (test/e2e/upgrade): a git worktree of that commit
# and its lull images, tagged LULL_PREVIOUS_VERSION, under
#
#   _output/previous/<commit>/src       the worktree (its manifests, chart, local overlay)
#   _output/previous/<commit>/images    lull-scheduler, lull-drainer, lull-agent archives
#
# and prints the worktree's path. Built once per commit (the images by that
# commit's own hack/images.sh and assembler, reusing the Go build cache, so a warm cache
# makes it seconds); nothing is downloaded but Go modules.
set -euo pipefail
ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
# shellcheck source=versions.env
source "${ROOT}/hack/versions.env"
die() { echo "previous-release: $*" >&2; exit 1; }

commit=$(git -C "$ROOT" rev-parse --verify "${LULL_PREVIOUS_COMMIT}^{commit}" 2>/dev/null) ||
  die "commit ${LULL_PREVIOUS_COMMIT} (LULL_PREVIOUS_COMMIT) is not in this clone's history: fetch it, or clone with full history"
DIR="${ROOT}/_output/previous/${commit:0:12}"
SRC="$DIR/src"
IMAGES="$DIR/images"
mkdir -p "$DIR"
exec 9>"$DIR/.lock"
flock 9

if [[ ! -e "$SRC/.git" ]]; then
  git -C "$ROOT" worktree prune
  git -C "$ROOT" worktree add --detach --force "$SRC" "$commit" >/dev/null 2>&1 ||
    die "git worktree add $SRC $commit failed"
fi
[[ "$(git -C "$SRC" rev-parse HEAD)" == "$commit" ]] || die "$SRC is not at $commit; remove it"

stamp="$IMAGES/.done-${LULL_PREVIOUS_VERSION}"
if [[ ! -f "$stamp" ]]; then
  start=$SECONDS
  (cd "$SRC" && VERSION="$LULL_PREVIOUS_VERSION" LULL_BIN_DIR="$DIR/bin" LULL_IMAGES_DIR="$IMAGES" \
    IMAGES_CHECK_REPRODUCIBLE=0 hack/images.sh lull-scheduler lull-drainer lull-agent) >"$DIR/images.log" 2>&1 ||
    { tail -n 20 "$DIR/images.log" >&2; die "building the images of ${commit:0:12} failed (log: $DIR/images.log)"; }
  touch "$stamp"
  echo "previous-release: built ${LULL_PREVIOUS_VERSION} (${commit:0:12}) in $((SECONDS - start))s" >&2
fi
echo "$SRC"
