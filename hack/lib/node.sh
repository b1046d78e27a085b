# shellcheck shell=bash
# The local cluster's real kubelet node: containerd, runc and the CNI
# plugins built from pinned versions, a kubelet and kube-proxy from the
# pinned Kubernetes, and a bridge the cluster creates. Sourced by
# hack/local-up.sh and hack/local-down.sh after cluster.sh.
#
# Networking stays on this machine: the node's bridge holds the node
# address and the pods' range, pods get routes only to that range and to
# the service range (no default route, no masquerading), and the machine's
# IP forwarding is left as it is. The API server listens on the bridge
# address so pods reach it through the `kubernetes` Service (kube-proxy).
#
# One real node per machine: kube-proxy's iptables chains and the bridge
# are machine-wide. A second cluster with a real node is refused while
# another runs.

REAL_NODE_NAME=${LULL_REAL_NODE_NAME:-real-node-0}
# LULL_NODE_BRIDGE: another name where a stray lull0 must be left alone
# (older checkouts' local-down.sh removed lull0 whoever owned it).
NODE_BRIDGE=${LULL_NODE_BRIDGE:-lull0}
NODE_IP=10.244.0.1
POD_CIDR=10.244.0.0/24
SERVICE_CIDR=10.0.0.0/24
REAL_NODE_TAINT=lull.dev/local-real-node
NODE_LOCK=/run/lull-real-node

node_paths() {
  NODE_DIR="$DIR/node"
  CTRD_SOCK="$NODE_DIR/containerd/containerd.sock"
  KUBELET_PORT=$((${LULL_PORT_BASE:-17000} + 250))
  KUBELET_HEALTHZ_PORT=$((${LULL_PORT_BASE:-17000} + 248))
  PROXY_METRICS_PORT=$((${LULL_PORT_BASE:-17000} + 249))
  PROXY_HEALTHZ_PORT=$((${LULL_PORT_BASE:-17000} + 256))
  export NODE_DIR CTRD_SOCK KUBELET_PORT KUBELET_HEALTHZ_PORT PROXY_METRICS_PORT PROXY_HEALTHZ_PORT
}

ctr_() { "$BIN/ctr" --address "$CTRD_SOCK" -n k8s.io "$@"; }

# node_prereqs stops early, naming the piece and the fix, when this machine
# cannot run a real node; nothing has been started yet when it fails.
node_prereqs() {
  [[ $(id -u) -eq 0 ]] || die "the real node needs root (kubelet, containerd, network namespaces); run as root or set LULL_REAL_NODE=0 for simulated nodes only"
  "${ROOT}/hack/install-deps.sh" node
  grep -qw overlay /proc/filesystems || modprobe overlay 2>/dev/null || true
  grep -qw overlay /proc/filesystems ||
    die "overlayfs is not available (no 'overlay' in /proc/filesystems): load it with 'modprobe overlay' or set LULL_REAL_NODE=0"
  local c
  for c in cpu memory pids; do
    [[ -d "/sys/fs/cgroup/$c" && -w "/sys/fs/cgroup/$c" ]] && continue
    grep -qw "$c" /sys/fs/cgroup/cgroup.controllers 2>/dev/null && continue
    die "cgroup controller '$c' is not usable (neither /sys/fs/cgroup/$c writable nor listed in /sys/fs/cgroup/cgroup.controllers): the kubelet cannot run pods; mount cgroups or set LULL_REAL_NODE=0"
  done
  if [[ -f "$NODE_LOCK" ]]; then
    local other; other=$(cat "$NODE_LOCK")
    if [[ -f "$other/pids/kubelet.pid" ]] && alive "$(cat "$other/pids/kubelet.pid")"; then
      die "another local cluster runs the real node ($other); stop it first (LULL_CLUSTER_DIR=$other hack/local-down.sh) or set LULL_REAL_NODE=0"
    fi
  fi
  if ip link show "$NODE_BRIDGE" >/dev/null 2>&1; then
    die "network interface $NODE_BRIDGE exists but no cluster owns it (left by a crash?); remove it with 'ip link del $NODE_BRIDGE'"
  fi
  if ip -4 route show to match "$NODE_IP" | grep -v '^default' | grep -q .; then
    die "$POD_CIDR is already routed on this machine ($(ip -4 route show to match "$NODE_IP" | grep -v '^default' | head -1)); the real node needs that range"
  fi
  local p
  for p in "$KUBELET_PORT" "$KUBELET_HEALTHZ_PORT" "$PROXY_METRICS_PORT" "$PROXY_HEALTHZ_PORT"; do
    port_free "$p" || die "port 127.0.0.1:$p is already in use (real node); stop whatever listens there or set LULL_PORT_BASE"
  done
}

# node_network_up creates the bridge that carries the node address, so the
# API server can listen on it before the node exists.
node_network_up() {
  echo "$DIR" >"$NODE_LOCK"
  ip link add "$NODE_BRIDGE" type bridge
  ip addr add "$NODE_IP/24" dev "$NODE_BRIDGE"
  ip link set "$NODE_BRIDGE" up
  log "bridge $NODE_BRIDGE: node address $NODE_IP, pods $POD_CIDR (no route or masquerade beyond this machine)"
}

node_certs() {
  client_cert "kubelet" "system:node:${REAL_NODE_NAME}" "system:nodes"
  client_cert "kube-proxy" "system:kube-proxy"
  client_cert "apiserver-kubelet-client" "kube-apiserver-kubelet-client" "system:masters"
  write_kubeconfig "$DIR/kubelet.kubeconfig" "$CERTS/kubelet.crt" "$CERTS/kubelet.key" kubelet
  write_kubeconfig "$DIR/kube-proxy.kubeconfig" "$CERTS/kube-proxy.crt" "$CERTS/kube-proxy.key" kube-proxy
}

node_configs() {
  mkdir -p "$NODE_DIR"/{containerd/root,containerd/state,cni/net.d,cni/ipam,kubelet,opt}
  cat >"$NODE_DIR/containerd.toml" <<EOF
version = 3
root = '$NODE_DIR/containerd/root'
state = '$NODE_DIR/containerd/state'
# No plugin that reaches for the machine's global paths or sockets.
disabled_plugins = ['io.containerd.nri.v1.nri']

[grpc]
  address = '$CTRD_SOCK'
[ttrpc]
  address = '$CTRD_SOCK.ttrpc'
[debug]
  address = ''
[metrics]
  address = ''

[plugins]
  [plugins.'io.containerd.internal.v1.opt']
    path = '$NODE_DIR/opt'
  [plugins.'io.containerd.cri.v1.images']
    snapshotter = 'overlayfs'
    [plugins.'io.containerd.cri.v1.images'.pinned_images]
      sandbox = 'lull.dev/pause:${PAUSE_VERSION}'
  [plugins.'io.containerd.cri.v1.runtime']
    # These machines forbid a negative oom_score_adj: without this every
    # sandbox fails in runc ("can't get final child's PID from pipe").
    restrict_oom_score_adj = true
    netns_mounts_under_state_dir = true
    [plugins.'io.containerd.cri.v1.runtime'.containerd.runtimes.runc.options]
      BinaryName = '$BIN/runc'
    [plugins.'io.containerd.cri.v1.runtime'.cni]
      bin_dirs = ['$BIN/cni']
      conf_dir = '$NODE_DIR/cni/net.d'
  [plugins.'io.containerd.grpc.v1.cri']
    stream_server_address = '127.0.0.1'
    stream_server_port = '0'
EOF
  # Pods get the node's range and a route to the service range; nothing
  # else is routed, nothing is masqueraded. The range stops at .239: the
  # addresses above are machines on the bridge (real-node-1 is .241).
  cat >"$NODE_DIR/cni/net.d/10-lull.conflist" <<EOF
{
  "cniVersion": "1.0.0",
  "name": "lull",
  "plugins": [
    {
      "type": "bridge",
      "bridge": "$NODE_BRIDGE",
      "isGateway": true,
      "isDefaultGateway": false,
      "ipMasq": false,
      "hairpinMode": true,
      "ipam": {
        "type": "host-local",
        "dataDir": "$NODE_DIR/cni/ipam",
        "ranges": [[{"subnet": "$POD_CIDR", "gateway": "$NODE_IP", "rangeEnd": "10.244.0.239"}]],
        "routes": [{"dst": "$SERVICE_CIDR"}]
      }
    },
    {"type": "loopback"}
  ]
}
EOF
  {
    kubelet_config "$NODE_IP" "$CERTS/ca.crt" "unix://$CTRD_SOCK" /lull /etc/resolv.conf
    printf 'port: %s\nhealthzPort: %s\n' "$KUBELET_PORT" "$KUBELET_HEALTHZ_PORT"
  } >"$NODE_DIR/kubelet.yaml"
  kube_proxy_config "$DIR/kube-proxy.kubeconfig" "$REAL_NODE_NAME" "$POD_CIDR" "$NODE_IP" \
    "$PROXY_METRICS_PORT" "$PROXY_HEALTHZ_PORT" >"$NODE_DIR/kube-proxy.yaml"
}

# kubelet_config ADDRESS CA_FILE RUNTIME_ENDPOINT CGROUP_ROOT RESOLV_CONF
# prints the kubelet settings both real nodes share (real-node-0 here,
# real-node-1 in hack/real-node-1.sh); callers add what differs (ports).
kubelet_config() {
  cat <<EOF
apiVersion: kubelet.config.k8s.io/v1beta1
kind: KubeletConfiguration
address: $1
readOnlyPort: 0
healthzBindAddress: 127.0.0.1
authentication:
  anonymous: {enabled: false}
  webhook: {enabled: true}
  x509: {clientCAFile: $2}
authorization:
  mode: Webhook
containerRuntimeEndpoint: $3
# cgroups v1 here: the kubelet must be told to accept them.
failCgroupV1: false
cgroupDriver: cgroupfs
cgroupRoot: $4
failSwapOn: false
resolvConf: "$5"
# The machine's disk and memory are shared with the rest of the cluster:
# evict only when truly short, and never garbage-collect the images this
# cluster imported (nothing can be pulled back).
evictionHard: {memory.available: 100Mi, nodefs.available: 1%, imagefs.available: 1%, nodefs.inodesFree: 1%}
imageGCHighThresholdPercent: 100
imageGCLowThresholdPercent: 99
imageMinimumGCAge: 24h
serializeImagePulls: false
shutdownGracePeriod: 0s
# Kubernetes' node lifecycle conditions (KEP-5683), which lull-drainer
# writes; the kubelet reports its status every 30 s (not 5 min), so the
# tests see it keep conditions others wrote within a minute.
featureGates: {NodeLifecycleConditions: true}
nodeStatusReportFrequency: 30s
# Only pods meant for this node land here (lull itself through the local
# overlay, and tests that bring their own image): everything else keeps
# to the simulated nodes, whose pods need no image.
registerWithTaints:
- {key: $REAL_NODE_TAINT, value: "true", effect: NoSchedule}
EOF
}

# kube_proxy_config KUBECONFIG NODE_NAME CLUSTER_CIDR NODE_IP METRICS_PORT
# HEALTHZ_PORT prints the kube-proxy settings both real nodes share.
kube_proxy_config() {
  cat <<EOF
apiVersion: kubeproxy.config.k8s.io/v1alpha1
kind: KubeProxyConfiguration
clientConnection:
  kubeconfig: $1
hostnameOverride: $2
mode: iptables
clusterCIDR: $3
bindAddress: 127.0.0.1
metricsBindAddress: 127.0.0.1:$5
healthzBindAddress: 127.0.0.1:$6
# NodePorts only on the node's bridge address, never on the machine's
# other interfaces or on loopback.
nodePortAddresses: ["$4/32"]
iptables:
  localhostNodePorts: false
# conntrack's table size is the host's, not the machine's: leave it.
conntrack:
  maxPerCore: 0
EOF
}

# node_start starts containerd, imports the images built here (nothing can
# be pulled), and starts kubelet and kube-proxy.
node_start() {
  node_configs
  PATH="$BIN:$PATH" start_proc containerd "$BIN/containerd" --config "$NODE_DIR/containerd.toml" --log-level warn
  wait_for "containerd" 30 "$BIN/ctr" --address "$CTRD_SOCK" version
  local archive
  for archive in "$@"; do
    ctr_ images import --no-unpack=false "$archive" >/dev/null ||
      die "importing $archive into the node's containerd failed"
    log "imported $(basename "$archive")"
  done
  node_cgroups
  start_proc kubelet "$BIN/kubelet" \
    --config="$NODE_DIR/kubelet.yaml" --kubeconfig="$DIR/kubelet.kubeconfig" \
    --root-dir="$NODE_DIR/kubelet" --cert-dir="$NODE_DIR/kubelet/pki" \
    --hostname-override="$REAL_NODE_NAME" --node-ip="$NODE_IP" \
    --node-labels="type=real" --v=1
  start_proc kube-proxy "$BIN/kube-proxy" --config="$NODE_DIR/kube-proxy.yaml" --v=1
  wait_for "real node $REAL_NODE_NAME Ready" 120 node_ready "$REAL_NODE_NAME"
}

# node_cgroups makes the kubelet's cgroup root, /lull, in every hierarchy
# (the kubelet requires it to exist): pods live under it, and cleanup
# removes it.
node_cgroups() {
  if [[ -f /sys/fs/cgroup/cgroup.controllers ]]; then
    mkdir -p /sys/fs/cgroup/lull
    local c
    # shellcheck disable=SC2013 # the file is one line of controller names: its words are wanted
    for c in $(cat /sys/fs/cgroup/cgroup.subtree_control); do
      echo "+$c" >/sys/fs/cgroup/lull/cgroup.subtree_control 2>/dev/null || true
    done
    return 0
  fi
  local d
  for d in /sys/fs/cgroup/*/; do
    [[ "$d" == */unified/ ]] && continue
    mkdir -p "${d}lull"
    # A new cpuset cgroup starts with no CPUs and no memory nodes.
    if [[ -f "${d}cpuset.cpus" ]]; then
      cat "${d}cpuset.cpus" >"${d}lull/cpuset.cpus"
      cat "${d}cpuset.mems" >"${d}lull/cpuset.mems"
    fi
  done
}

node_ready() {
  [[ $("$BIN/kubectl" --kubeconfig="$KUBECONFIG_ADMIN" get node "$1" \
    -o jsonpath='{.status.conditions[?(@.type=="Ready")].status}') == True ]]
}

# node_stop_containers stops every pod container on the node before
# containerd goes (their shims outlive it otherwise).
node_stop_containers() {
  [[ -S "$CTRD_SOCK" ]] || return 0
  local t
  for t in $(ctr_ tasks ls -q 2>/dev/null); do
    ctr_ tasks kill -s SIGKILL "$t" >/dev/null 2>&1 || true
  done
  for t in $(ctr_ tasks ls -q 2>/dev/null); do
    ctr_ tasks delete -f "$t" >/dev/null 2>&1 || true
  done
  for t in $(ctr_ containers ls -q 2>/dev/null); do
    ctr_ containers delete "$t" >/dev/null 2>&1 || true
  done
}

# node_cleanup removes what the node left on the machine: shims, mounts,
# network namespaces, the bridge, kube-proxy's iptables rules, cgroups.
node_cleanup() {
  node_paths
  local pid
  for pid in $(pgrep -f "containerd-shim-runc-v2 .*-address $CTRD_SOCK" 2>/dev/null); do
    kill -KILL "$pid" 2>/dev/null || true
  done
  if [[ -d "$NODE_DIR" ]]; then
    local m mounts
    # Deepest first: container rootfs, pod volumes, network namespaces,
    # the kubelet's own bind mount of its root dir.
    mapfile -t mounts < <(awk -v d="$NODE_DIR" 'index($2, d) == 1 {print $2}' /proc/self/mounts | sort -r)
    for m in "${mounts[@]}"; do
      umount -l "$m" 2>/dev/null || true
    done
  fi
  if [[ -x "$BIN/kube-proxy" ]] && iptables -t nat -S KUBE-SERVICES >/dev/null 2>&1; then
    "$BIN/kube-proxy" --cleanup >/dev/null 2>&1 || true
  fi
  local chain table
  for table in filter nat mangle; do
    for chain in $(iptables -t "$table" -S 2>/dev/null | awk '/^-N KUBE-/ {print $2}'); do
      iptables -t "$table" -F "$chain" 2>/dev/null || true
      iptables -t "$table" -X "$chain" 2>/dev/null || true
    done
  done
  ip link del "$NODE_BRIDGE" 2>/dev/null || true
  local c
  for c in /sys/fs/cgroup/*/lull /sys/fs/cgroup/lull; do
    if [[ -d "$c" ]]; then find "$c" -depth -type d -exec rmdir {} + 2>/dev/null || true; fi
  done
  [[ -f "$NODE_LOCK" && "$(cat "$NODE_LOCK")" == "$DIR" ]] && rm -f "$NODE_LOCK"
  return 0
}
