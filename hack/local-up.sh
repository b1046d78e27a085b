#!/usr/bin/env bash
# Starts a local cluster on this machine: etcd, a secure kube-apiserver
# (RBAC, service-account keys, certificates made with openssl), kube-
# controller-manager, the stock kube-scheduler as default scheduler, kwok
# managing simulated nodes, and one real kubelet node (containerd, runc,
# CNI bridge, kube-proxy; hack/lib/node.sh) on which lull is installed as
# pods from manifests/install, the way users install it. Every process's
# PID is recorded so hack/local-down.sh stops exactly what this started.
#
#   hack/local-up.sh [--nodes N] [--dir DIR]
#
# Environment: LULL_CLUSTER_DIR (default .cluster), LULL_NODES (default 10),
# LULL_PORT_BASE (default 17000: etcd +0/+1/+3, apiserver +443, kwok +2, lull-drainer +80/+81,
# controller-manager +257, scheduler +259, kubelet +248/+250, kube-proxy +249/+256),
# LULL_REAL_NODE (default 1; 0: simulated nodes only, everything on loopback),
# LULL_REAL_NODE_1 (default 1 with the real node; 0 leaves out real-node-1,
# the systemd-nspawn machine of hack/real-node-1.sh),
# LULL_INSTALL (pods: lull from its manifests on the real node, the default
# with a real node; host: lull-scheduler and lull-drainer as host processes
# from _output/bin, for development), LULL_VERSION (the image tag; default
# git describe).
set -euo pipefail
ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
# shellcheck source=versions.env
source "${ROOT}/hack/versions.env"
# shellcheck source=lib/cluster.sh
source "${ROOT}/hack/lib/cluster.sh"
# shellcheck source=lib/node.sh
source "${ROOT}/hack/lib/node.sh"

NODES="${LULL_NODES:-10}"
while [[ $# -gt 0 ]]; do
  case "$1" in
    --nodes) NODES="$2"; shift 2 ;;
    --nodes=*) NODES="${1#*=}"; shift ;;
    --dir) LULL_CLUSTER_DIR="$2"; shift 2 ;;
    -h|--help) sed -n '2,24p' "$0"; exit 0 ;;
    *) die "unknown argument '$1' (see --help)" ;;
  esac
done
[[ "$NODES" =~ ^[0-9]+$ ]] || die "--nodes must be a number, got '$NODES'"
REAL_NODE="${LULL_REAL_NODE:-1}"
LULL_INSTALL="${LULL_INSTALL:-}"
[[ -z "$LULL_INSTALL" ]] && { [[ "$REAL_NODE" == 1 ]] && LULL_INSTALL=pods || LULL_INSTALL=host; }
[[ "$LULL_INSTALL" == pods && "$REAL_NODE" != 1 ]] && die "LULL_INSTALL=pods needs the real node (LULL_REAL_NODE=1): lull's pods need a kubelet to run on"
[[ "$LULL_INSTALL" == pods || "$LULL_INSTALL" == host ]] || die "LULL_INSTALL must be pods or host, got '$LULL_INSTALL'"
LULL_VERSION="${LULL_VERSION:-$(git -C "$ROOT" describe --tags --always --dirty 2>/dev/null || echo dev)}"
export REAL_NODE LULL_INSTALL LULL_VERSION
# With a real node the API server listens on the node's bridge address, so
# pods reach it through the kubernetes Service; otherwise on loopback.
[[ "$REAL_NODE" == 1 ]] && API_ADDR=$NODE_IP
cluster_paths
node_paths

"${ROOT}/hack/install-deps.sh" cluster
if [[ -f "$PIDS/etcd.pid" ]] && kill -0 "$(cat "$PIDS/etcd.pid")" 2>/dev/null; then
  die "a cluster is already running from ${DIR}; run 'make cluster-down' first"
fi

for p in $(cluster_ports); do
  port_free "$p" || die "port 127.0.0.1:$p is already in use; stop whatever listens there or set LULL_PORT_BASE to another base"
done

[[ "$REAL_NODE" == 1 ]] && node_prereqs

"${ROOT}/hack/build-binaries.sh" etcd kube-apiserver kube-controller-manager kube-scheduler kubectl kwok
images=()
if [[ "$REAL_NODE" == 1 ]]; then
  "${ROOT}/hack/build-binaries.sh" kubelet kube-proxy containerd runc cni-plugins
  # Every image the node runs is built here: nothing can be pulled.
  VERSION="$LULL_VERSION" "${ROOT}/hack/images.sh" pause lull-scheduler lull-drainer lull-agent e2e-graceful
  images=("${ROOT}/_output/images/pause-${PAUSE_VERSION}.tar")
  for i in lull-scheduler lull-drainer lull-agent e2e-graceful; do images+=("${ROOT}/_output/images/${i}-${LULL_VERSION}.tar"); done
fi

# A previous cluster in this directory that was not stopped cleanly may have
# left mounts below it: take them down before removing anything.
[[ -d "$DIR/real-node-1" ]] && LULL_CLUSTER_DIR="$DIR" "${ROOT}/hack/real-node-1.sh" down
[[ -d "$DIR/node" ]] && node_cleanup
rm -rf "$DIR"
mkdir -p "$CERTS" "$LOGS" "$PIDS" "$DIR/etcd-data"
log "cluster directory: $DIR"

# Whatever fails from here on leaves nothing half-started.
# shellcheck disable=SC2154 # rc is assigned in the trap string itself (shellcheck 0.9 sees only the use)
trap 'rc=$?; if [[ $rc -ne 0 ]]; then echo "local-up: failed; stopping what was started" >&2; "${ROOT}/hack/local-down.sh" --dir "$DIR" >&2 || true; fi' EXIT

# --- certificates -----------------------------------------------------------
[[ "$REAL_NODE" == 1 ]] && node_network_up
make_certs
[[ "$REAL_NODE" == 1 ]] && node_certs

# --- etcd -------------------------------------------------------------------
start_proc etcd "$BIN/etcd" \
  --name=lull-local --data-dir="$DIR/etcd-data" \
  --listen-client-urls="http://127.0.0.1:${ETCD_PORT}" --advertise-client-urls="http://127.0.0.1:${ETCD_PORT}" \
  --listen-peer-urls="http://127.0.0.1:${ETCD_PEER_PORT}" --initial-advertise-peer-urls="http://127.0.0.1:${ETCD_PEER_PORT}" \
  --initial-cluster="lull-local=http://127.0.0.1:${ETCD_PEER_PORT}" \
  --listen-metrics-urls="http://127.0.0.1:${ETCD_METRICS_PORT}" \
  --unsafe-no-fsync --log-level=warn
wait_for "etcd" 30 curl -sf "http://127.0.0.1:${ETCD_PORT}/health"

# --- kube-apiserver ---------------------------------------------------------
if [[ "$REAL_NODE" == 1 ]]; then
  # The kubernetes Service's endpoint is the node bridge address; the API
  # server reaches the kubelet (logs, exec) with its own client certificate.
  apiserver_address_flags=(--advertise-address="$API_ADDR"
    --kubelet-client-certificate="$CERTS/apiserver-kubelet-client.crt" --kubelet-client-key="$CERTS/apiserver-kubelet-client.key"
    --kubelet-preferred-address-types=InternalIP)
else
  apiserver_address_flags=(--advertise-address=127.0.0.1 --endpoint-reconciler-type=none)
fi
write_audit_policy "$DIR/audit-policy.yaml"
start_proc kube-apiserver "$BIN/kube-apiserver" \
  --audit-policy-file="$DIR/audit-policy.yaml" --audit-log-path="$LOGS/kube-apiserver-audit.log" \
  --etcd-servers="http://127.0.0.1:${ETCD_PORT}" \
  --bind-address="$API_ADDR" --secure-port="$API_PORT" \
  "${apiserver_address_flags[@]}" \
  --tls-cert-file="$CERTS/apiserver.crt" --tls-private-key-file="$CERTS/apiserver.key" \
  --client-ca-file="$CERTS/ca.crt" \
  --service-account-issuer=https://kubernetes.default.svc.cluster.local \
  --service-account-key-file="$CERTS/sa.pub" --service-account-signing-key-file="$CERTS/sa.key" \
  --service-cluster-ip-range=10.0.0.0/24 \
  --authorization-mode=Node,RBAC \
  --allow-privileged=true \
  --feature-gates=NodeLifecycleConditions=true \
  --requestheader-client-ca-file="$CERTS/front-proxy-ca.crt" --requestheader-allowed-names=front-proxy-client \
  --requestheader-username-headers=X-Remote-User --requestheader-group-headers=X-Remote-Group \
  --requestheader-extra-headers-prefix=X-Remote-Extra- \
  --proxy-client-cert-file="$CERTS/front-proxy-client.crt" --proxy-client-key-file="$CERTS/front-proxy-client.key"
wait_for "kube-apiserver /readyz" 60 "$BIN/kubectl" --kubeconfig="$KUBECONFIG_ADMIN" get --raw=/readyz

# --- kube-controller-manager and kube-scheduler -------------------------------
start_proc kube-controller-manager "$BIN/kube-controller-manager" \
  --kubeconfig="$DIR/kube-controller-manager.kubeconfig" \
  --authentication-kubeconfig="$DIR/kube-controller-manager.kubeconfig" \
  --authorization-kubeconfig="$DIR/kube-controller-manager.kubeconfig" \
  --service-account-private-key-file="$CERTS/sa.key" --root-ca-file="$CERTS/ca.crt" \
  --use-service-account-credentials=true \
  --bind-address=127.0.0.1 --secure-port="$KCM_PORT" \
  --leader-elect=false --cert-dir="$CERTS/kcm-serving"
start_proc kube-scheduler "$BIN/kube-scheduler" \
  --kubeconfig="$DIR/kube-scheduler.kubeconfig" \
  --authentication-kubeconfig="$DIR/kube-scheduler.kubeconfig" \
  --authorization-kubeconfig="$DIR/kube-scheduler.kubeconfig" \
  --bind-address=127.0.0.1 --secure-port="$SCHED_PORT" \
  --leader-elect=false --cert-dir="$CERTS/scheduler-serving"

# --- kwok ---------------------------------------------------------------------
kwok_stages >"$DIR/kwok-stages.yaml"
start_proc kwok "$BIN/kwok" \
  --kubeconfig="$DIR/kwok.kubeconfig" --config="$DIR/kwok-stages.yaml" \
  --manage-all-nodes=false --manage-nodes-with-annotation-selector=kwok.x-k8s.io/node=fake \
  --node-lease-duration-seconds=40 --server-address="127.0.0.1:${KWOK_PORT}" \
  --cidr=10.246.0.0/16   # simulated pods' addresses: never routed, kept apart from the service range

wait_for "default service account" 60 "$BIN/kubectl" --kubeconfig="$KUBECONFIG_ADMIN" get serviceaccount default -n default
create_nodes "$NODES"
if [[ "$NODES" -gt 0 ]]; then
  wait_for "$NODES nodes Ready" 120 nodes_ready "$NODES"
fi

if [[ "$REAL_NODE" == 1 ]]; then
  node_start "${images[@]}"
fi

# Hooks for components added by later steps (lull-scheduler, lull-drainer).
for hook in "${ROOT}"/hack/local-up.d/*.sh; do
  [[ -e "$hook" ]] || continue
  log "running $(basename "$hook")"
  # shellcheck disable=SC1090 # the hooks are whatever hack/local-up.d holds; each is checked itself
  source "$hook"
done

cat <<MSG

lull local cluster is up: ${NODES} simulated nodes (kwok)$([[ "$REAL_NODE" == 1 ]] && echo " and the real node ${REAL_NODE_NAME}"), API server https://${API_ADDR}:${API_PORT}
lull: $([[ "$LULL_INSTALL" == pods ]] && echo "installed as pods from manifests/install (images ${LULL_VERSION}): kubectl get pods -n lull-system -o wide" || echo "host processes from _output/bin (development mode)")

  export KUBECONFIG=${KUBECONFIG_ADMIN}
  export PATH=${BIN}:\$PATH      # kubectl ${KUBE_VERSION}
  kubectl get nodes

Logs:      ${LOGS}/<component>.log
Stop it:   make cluster-down      (stops exactly the processes started here, removes ${DIR})
MSG
if [[ -f "$DIR/tour.txt" ]]; then cat "$DIR/tour.txt"; fi
trap - EXIT
