#!/usr/bin/env bash
# Starts a local cluster on loopback: etcd, a secure kube-apiserver (RBAC,
# service-account keys, certificates made with openssl), kube-controller-
# manager, the stock kube-scheduler as default scheduler, and kwok managing
# simulated nodes. Every process's PID is recorded so hack/local-down.sh
# stops exactly what this started.
#
#   hack/local-up.sh [--nodes N] [--dir DIR]
#
# Environment: LULL_CLUSTER_DIR (default .cluster), LULL_NODES (default 10),
# LULL_PORT_BASE (default 17000: etcd +0/+1/+3, apiserver +443, kwok +2, lull-drainer +80/+81,
# controller-manager +257, scheduler +259).
set -euo pipefail
ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
# shellcheck source=versions.env
source "${ROOT}/hack/versions.env"
# shellcheck source=lib/cluster.sh
source "${ROOT}/hack/lib/cluster.sh"

NODES="${LULL_NODES:-10}"
while [[ $# -gt 0 ]]; do
  case "$1" in
    --nodes) NODES="$2"; shift 2 ;;
    --nodes=*) NODES="${1#*=}"; shift ;;
    --dir) LULL_CLUSTER_DIR="$2"; shift 2 ;;
    -h|--help) sed -n '2,13p' "$0"; exit 0 ;;
    *) die "unknown argument '$1' (see --help)" ;;
  esac
done
[[ "$NODES" =~ ^[0-9]+$ ]] || die "--nodes must be a number, got '$NODES'"
cluster_paths

command -v openssl >/dev/null || die "openssl is not installed; install it (apt-get install openssl) and retry"
if [[ -f "$PIDS/etcd.pid" ]] && kill -0 "$(cat "$PIDS/etcd.pid")" 2>/dev/null; then
  die "a cluster is already running from ${DIR}; run 'make cluster-down' first"
fi

for p in $(cluster_ports); do
  port_free "$p" || die "port 127.0.0.1:$p is already in use; stop whatever listens there or set LULL_PORT_BASE to another base"
done

"${ROOT}/hack/build-binaries.sh" etcd kube-apiserver kube-controller-manager kube-scheduler kubectl kwok

rm -rf "$DIR"
mkdir -p "$CERTS" "$LOGS" "$PIDS" "$DIR/etcd-data"
log "cluster directory: $DIR"

# --- certificates -----------------------------------------------------------
make_certs

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
start_proc kube-apiserver "$BIN/kube-apiserver" \
  --etcd-servers="http://127.0.0.1:${ETCD_PORT}" \
  --bind-address=127.0.0.1 --secure-port="$API_PORT" \
  --advertise-address=127.0.0.1 --endpoint-reconciler-type=none \
  --tls-cert-file="$CERTS/apiserver.crt" --tls-private-key-file="$CERTS/apiserver.key" \
  --client-ca-file="$CERTS/ca.crt" \
  --service-account-issuer=https://kubernetes.default.svc.cluster.local \
  --service-account-key-file="$CERTS/sa.pub" --service-account-signing-key-file="$CERTS/sa.key" \
  --service-cluster-ip-range=10.0.0.0/24 \
  --authorization-mode=Node,RBAC \
  --allow-privileged=true \
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
  --node-lease-duration-seconds=40 --server-address="127.0.0.1:${KWOK_PORT}"

wait_for "default service account" 60 "$BIN/kubectl" --kubeconfig="$KUBECONFIG_ADMIN" get serviceaccount default -n default
create_nodes "$NODES"
if [[ "$NODES" -gt 0 ]]; then
  wait_for "$NODES nodes Ready" 120 nodes_ready "$NODES"
fi

# Hooks for components added by later steps (lull-scheduler, lull-drainer).
for hook in "${ROOT}"/hack/local-up.d/*.sh; do
  [[ -e "$hook" ]] || continue
  log "running $(basename "$hook")"
  # shellcheck disable=SC1090
  source "$hook"
done

cat <<MSG

lull local cluster is up: ${NODES} simulated nodes (kwok), API server https://127.0.0.1:${API_PORT}

  export KUBECONFIG=${KUBECONFIG_ADMIN}
  export PATH=${BIN}:\$PATH      # kubectl ${KUBE_VERSION}
  kubectl get nodes

Logs:      ${LOGS}/<component>.log
Stop it:   make cluster-down      (stops exactly the processes started here, removes ${DIR})
MSG
if [[ -f "$DIR/tour.txt" ]]; then cat "$DIR/tour.txt"; fi
