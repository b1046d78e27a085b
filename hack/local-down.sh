#!/usr/bin/env bash
# Stops the processes hack/local-up.sh started (by their recorded PIDs),
# the real node's containers, mounts, bridge and iptables rules, and
# removes the cluster directory: nothing is left running or on disk.
set -euo pipefail
ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
# shellcheck source=versions.env
source "${ROOT}/hack/versions.env"
# shellcheck source=lib/cluster.sh
source "${ROOT}/hack/lib/cluster.sh"
# shellcheck source=lib/node.sh
source "${ROOT}/hack/lib/node.sh"
[[ "${1:-}" == "--dir" ]] && LULL_CLUSTER_DIR="$2"
cluster_paths
node_paths
if [[ ! -d "$DIR" ]]; then
  echo "local-down: no cluster at $DIR"
  # A bridge or lock a crashed run left behind for this directory.
  [[ -f "$NODE_LOCK" && "$(cat "$NODE_LOCK")" == "$DIR" ]] && node_cleanup
  exit 0
fi
# real-node-1 first: it shuts down in order while the API server and its
# bridge are still there.
if [[ -d "$DIR/real-node-1" || -f "$PIDS/real-node-1.pid" ]]; then
  LULL_CLUSTER_DIR="$DIR" "${ROOT}/hack/real-node-1.sh" down || true
fi
if [[ -d "$NODE_DIR" ]]; then
  # The kubelet first, so it restarts nothing; then the containers while
  # containerd can still stop them.
  stop_all kube-proxy kubelet
  node_stop_containers
fi
stop_all
# Only this cluster's node: the lock may name another cluster's, whose
# bridge and iptables rules node_cleanup would remove.
if [[ -d "$NODE_DIR" ]] || [[ -f "$NODE_LOCK" && "$(cat "$NODE_LOCK")" == "$DIR" ]]; then
  node_cleanup
fi
rm -rf "$DIR"
echo "local-down: stopped and removed $DIR"
