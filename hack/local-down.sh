#!/usr/bin/env bash
# Stops the processes hack/local-up.sh started (by their recorded PIDs) and
# removes the cluster directory: nothing is left running or on disk.
set -euo pipefail
ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
# shellcheck source=lib/cluster.sh
source "${ROOT}/hack/lib/cluster.sh"
[[ "${1:-}" == "--dir" ]] && LULL_CLUSTER_DIR="$2"
cluster_paths
if [[ ! -d "$DIR" ]]; then
  echo "local-down: no cluster at $DIR"
  exit 0
fi
stop_all
rm -rf "$DIR"
echo "local-down: stopped and removed $DIR"
