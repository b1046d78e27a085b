# shellcheck shell=bash
# Shared helpers for hack/local-up.sh and hack/local-down.sh. Sourced, not run.

log() { echo "local-up: $*"; }
die() { echo "local-up: error: $*" >&2; exit 1; }

cluster_paths() {
  DIR="${LULL_CLUSTER_DIR:-${ROOT}/.cluster}"
  case "$DIR" in /*) ;; *) DIR="$(pwd)/$DIR" ;; esac
  BIN="${LULL_BIN_DIR:-${ROOT}/_output/bin}"
  CERTS="$DIR/certs"
  LOGS="$DIR/logs"
  PIDS="$DIR/pids"
  KUBECONFIG_ADMIN="$DIR/kubeconfig"
  API_ADDR="${API_ADDR:-127.0.0.1}"
  local base="${LULL_PORT_BASE:-17000}"
  ETCD_PORT=$((base + 0))
  ETCD_PEER_PORT=$((base + 1))
  KWOK_PORT=$((base + 2))
  KCM_PORT=$((base + 257))
  SCHED_PORT=$((base + 259))
  LULL_SCHED_PORT=$((base + 260))
  ETCD_METRICS_PORT=$((base + 3))
  DRAINER_METRICS_PORT=$((base + 80))
  DRAINER_PROBE_PORT=$((base + 81))
  DRAINER2_METRICS_PORT=$((base + 82))
  DRAINER2_PROBE_PORT=$((base + 83))
  DRAINER_PPROF_PORT=$((base + 84)) # only with LULL_DRAINER_PPROF=1
  DRAINER2_PPROF_PORT=$((base + 86))
  API_PORT=$((base + 443))
  export API_ADDR DIR BIN CERTS LOGS PIDS KUBECONFIG_ADMIN ETCD_PORT ETCD_PEER_PORT KWOK_PORT KCM_PORT SCHED_PORT LULL_SCHED_PORT API_PORT \
    ETCD_METRICS_PORT DRAINER_METRICS_PORT DRAINER_PROBE_PORT DRAINER2_METRICS_PORT DRAINER2_PROBE_PORT DRAINER_PPROF_PORT DRAINER2_PPROF_PORT
}

# cluster_ports lists every loopback port the local cluster listens on.
cluster_ports() {
  echo "$ETCD_PORT" "$ETCD_PEER_PORT" "$KWOK_PORT" "$KCM_PORT" "$SCHED_PORT" "$LULL_SCHED_PORT" "$API_PORT" \
    "$ETCD_METRICS_PORT" "$DRAINER_METRICS_PORT" "$DRAINER_PROBE_PORT" "$DRAINER2_METRICS_PORT" "$DRAINER2_PROBE_PORT"
}

# port_free PORT: true when nothing listens on 127.0.0.1:PORT.
port_free() {
  ! (exec 3<>"/dev/tcp/127.0.0.1/$1") 2>/dev/null
}

# start_proc NAME CMD...: starts CMD in the background with its output in
# $LOGS/NAME.log and its PID in $PIDS/NAME.pid; fails if it dies at once.
start_proc() {
  local name=$1; shift
  log "starting $name (log: $LOGS/$name.log)"
  setsid "$@" >"$LOGS/$name.log" 2>&1 </dev/null &
  local pid=$!
  echo "$pid" >"$PIDS/$name.pid"
  echo "$name" >>"$PIDS/order"
  sleep 0.2
  if ! kill -0 "$pid" 2>/dev/null; then
    tail -n 20 "$LOGS/$name.log" >&2
    die "$name exited at start; see $LOGS/$name.log"
  fi
}

# wait_for WHAT SECONDS CMD...: polls CMD until it succeeds.
wait_for() {
  local what=$1 timeout=$2; shift 2
  local deadline=$((SECONDS + timeout))
  until "$@" >/dev/null 2>&1; do
    if ((SECONDS >= deadline)); then
      echo "local-up: timed out after ${timeout}s waiting for $what; last attempt said:" >&2
      "$@" 2>&1 | tail -n 5 >&2 || true
      for f in "$PIDS"/*.pid; do
        [[ -e "$f" ]] || continue
        local n; n=$(basename "$f" .pid)
        if ! kill -0 "$(cat "$f")" 2>/dev/null; then
          echo "local-up: $n is not running; the end of its log ($LOGS/$n.log):" >&2
          tail -n 15 "$LOGS/$n.log" | sed 's/^/    /' >&2
        fi
      done
      exit 1
    fi
    sleep 0.5
  done
  log "$what: ok"
}

# kubeconfig NAME CERT KEY: writes $DIR/NAME.kubeconfig for a client cert.
write_kubeconfig() {
  local file=$1 cert=$2 key=$3 user=$4
  cat >"$file" <<KC
apiVersion: v1
kind: Config
clusters:
- name: lull-local
  cluster:
    server: https://${API_ADDR}:${API_PORT}
    certificate-authority: ${CERTS}/ca.crt
users:
- name: ${user}
  user:
    client-certificate: ${cert}
    client-key: ${key}
contexts:
- name: lull-local
  context:
    cluster: lull-local
    user: ${user}
current-context: lull-local
KC
}

# client_cert NAME CN [O...]: a client certificate signed by the cluster CA;
# each O is one of the user's groups.
client_cert() {
  local name=$1 cn=$2 org subj=""
  shift 2
  for org in "$@"; do
    subj+="/O=${org}"
  done
  subj+="/CN=${cn}"
  openssl req -new -newkey rsa:2048 -nodes -keyout "$CERTS/$name.key" -subj "$subj" -out "$CERTS/$name.csr" 2>/dev/null
  printf 'extendedKeyUsage=clientAuth\n' >"$CERTS/$name.ext"
  openssl x509 -req -in "$CERTS/$name.csr" -CA "$CERTS/ca.crt" -CAkey "$CERTS/ca.key" -CAcreateserial \
    -days 30 -extfile "$CERTS/$name.ext" -out "$CERTS/$name.crt" 2>/dev/null
}

make_certs() {
  log "generating certificates with openssl"
  openssl req -x509 -new -newkey rsa:2048 -nodes -keyout "$CERTS/ca.key" -subj "/CN=lull-local-ca" \
    -days 30 -out "$CERTS/ca.crt" 2>/dev/null
  openssl req -x509 -new -newkey rsa:2048 -nodes -keyout "$CERTS/front-proxy-ca.key" -subj "/CN=lull-local-front-proxy-ca" \
    -days 30 -out "$CERTS/front-proxy-ca.crt" 2>/dev/null
  # API server serving certificate for loopback and the in-cluster names.
  openssl req -new -newkey rsa:2048 -nodes -keyout "$CERTS/apiserver.key" -subj "/CN=kube-apiserver" \
    -out "$CERTS/apiserver.csr" 2>/dev/null
  cat >"$CERTS/apiserver.ext" <<EXT
subjectAltName=IP:127.0.0.1,IP:10.0.0.1,IP:10.244.0.1,DNS:localhost,DNS:kubernetes,DNS:kubernetes.default,DNS:kubernetes.default.svc,DNS:kubernetes.default.svc.cluster.local
extendedKeyUsage=serverAuth
EXT
  openssl x509 -req -in "$CERTS/apiserver.csr" -CA "$CERTS/ca.crt" -CAkey "$CERTS/ca.key" -CAcreateserial \
    -days 30 -extfile "$CERTS/apiserver.ext" -out "$CERTS/apiserver.crt" 2>/dev/null
  openssl req -new -newkey rsa:2048 -nodes -keyout "$CERTS/front-proxy-client.key" -subj "/CN=front-proxy-client" \
    -out "$CERTS/front-proxy-client.csr" 2>/dev/null
  printf 'extendedKeyUsage=clientAuth\n' >"$CERTS/front-proxy-client.ext"
  openssl x509 -req -in "$CERTS/front-proxy-client.csr" -CA "$CERTS/front-proxy-ca.crt" -CAkey "$CERTS/front-proxy-ca.key" \
    -CAcreateserial -days 30 -extfile "$CERTS/front-proxy-client.ext" -out "$CERTS/front-proxy-client.crt" 2>/dev/null
  openssl genrsa -out "$CERTS/sa.key" 2048 2>/dev/null
  openssl rsa -in "$CERTS/sa.key" -pubout -out "$CERTS/sa.pub" 2>/dev/null

  # The admin is also a lull maintainer and may make emergency changes
  # (manifests/admission): the tests and the walkthrough act as the admin.
  client_cert admin admin system:masters lull:maintainers lull:emergency
  client_cert kube-controller-manager system:kube-controller-manager
  client_cert kube-scheduler system:kube-scheduler
  # kwok plays every kubelet: it updates node and pod status cluster-wide.
  client_cert kwok kwok system:masters
  write_kubeconfig "$KUBECONFIG_ADMIN" "$CERTS/admin.crt" "$CERTS/admin.key" admin
  write_kubeconfig "$DIR/kube-controller-manager.kubeconfig" "$CERTS/kube-controller-manager.crt" "$CERTS/kube-controller-manager.key" kube-controller-manager
  write_kubeconfig "$DIR/kube-scheduler.kubeconfig" "$CERTS/kube-scheduler.crt" "$CERTS/kube-scheduler.key" kube-scheduler
  write_kubeconfig "$DIR/kwok.kubeconfig" "$CERTS/kwok.crt" "$CERTS/kwok.key" kwok
}

# write_audit_policy FILE: the API server's audit policy. It records, at
# Metadata level (who, what, when, user agent; no bodies), the writes of
# lull's own users and the drainer's reads, and nothing else, so it stays
# cheap: the fault tests read it to prove which replica wrote what
# (test/e2e/faults_test.go), the drain benchmark to count every request of
# every drainer replica by verb and resource (test/e2e/drain_bench_test.go).
write_audit_policy() {
  cat >"$1" <<'POLICY'
apiVersion: audit.k8s.io/v1
kind: Policy
omitStages: ["RequestReceived"]
rules:
- level: Metadata
  users: ["system:serviceaccount:lull-system:lull-drainer", "system:serviceaccount:lull-system:lull-scheduler"]
  verbs: ["create", "update", "patch", "delete", "deletecollection"]
- level: Metadata
  users: ["system:serviceaccount:lull-system:lull-drainer"]
  verbs: ["get", "list", "watch"]
- level: None
POLICY
}

# kwok_stages prints kwok's shipped stages for fast node and pod life cycles.
kwok_stages() {
  local dir
  dir=$(go mod download -json "sigs.k8s.io/kwok@${KWOK_VERSION}" | sed -n 's/.*"Dir": "\(.*\)",*/\1/p')
  [[ -d "$dir/kustomize/stage" ]] || die "kwok ${KWOK_VERSION} stages not found in the module cache (go mod download sigs.k8s.io/kwok@${KWOK_VERSION} failed?)"
  local f first=1
  for f in node/fast/node-initialize.yaml node/heartbeat-with-lease/node-heartbeat-with-lease.yaml \
           pod/fast/pod-ready.yaml pod/fast/pod-complete.yaml pod/fast/pod-delete.yaml; do
    [[ $first -eq 1 ]] || echo "---"
    first=0
    if [[ "$f" == node/fast/node-initialize.yaml ]]; then
      # A node a simulated lull-agent powered off (condition
      # LullSimulatedPowerOff, agent.ConditionSimulatedPowerOff) stays
      # NotReady, as a machine switched off would: kwok would make any
      # NotReady node Ready again at once.
      awk '{print} /^    matchExpressions:$/ && !done {
        print "    - key: '"'"'.status.conditions.[] | select( .type == \"LullSimulatedPowerOff\" ) | .status'"'"'"
        print "      operator: '"'"'NotIn'"'"'"
        print "      values:"
        print "      - '"'"'True'"'"'"
        done=1}' "$dir/kustomize/stage/$f"
    else
      cat "$dir/kustomize/stage/$f"
    fi
  done
}

# node_manifest NAME [LABELS...]: a simulated node kwok manages.
node_manifest() {
  local name=$1; shift
  cat <<NODE
apiVersion: v1
kind: Node
metadata:
  name: ${name}
  annotations:
    kwok.x-k8s.io/node: fake
    node.alpha.kubernetes.io/ttl: "0"
  labels:
    kubernetes.io/hostname: ${name}
    kubernetes.io/os: linux
    kubernetes.io/arch: amd64
    type: kwok
NODE
  local l
  for l in "$@"; do echo "    ${l%%=*}: \"${l#*=}\""; done
  cat <<NODE
status:
  allocatable: {cpu: "32", memory: 256Gi, pods: "110"}
  capacity: {cpu: "32", memory: 256Gi, pods: "110"}
NODE
}

create_nodes() {
  local n=$1 i
  [[ "$n" -gt 0 ]] || return 0
  log "creating $n simulated nodes"
  for ((i = 0; i < n; i++)); do
    node_manifest "$(printf 'kwok-node-%d' "$i")"
    echo "---"
  done | "$BIN/kubectl" --kubeconfig="$KUBECONFIG_ADMIN" apply -f - >/dev/null
}

nodes_ready() {
  local want=$1 ready
  ready=$("$BIN/kubectl" --kubeconfig="$KUBECONFIG_ADMIN" get nodes \
    -o jsonpath='{range .items[*]}{.status.conditions[?(@.type=="Ready")].status}{"\n"}{end}' | grep -c '^True$' || true)
  [[ "$ready" -ge "$want" ]]
}

# alive PID: the process exists and is not a zombie.
alive() {
  [[ -r "/proc/$1/stat" ]] || return 1
  local state
  state=$(sed -E 's/^[0-9]+ \(.*\) ([A-Za-z]).*/\1/' "/proc/$1/stat" 2>/dev/null) || return 1
  [[ "$state" != "Z" && "$state" != "X" ]] && return 0
  # A zombie main thread whose other threads are still exiting still holds
  # the process's files (its listening sockets too).
  local tasks=("/proc/$1/task"/*)
  [[ "${#tasks[@]}" -gt 1 ]]
}

# stop_all [NAME...]: stops the named recorded processes, or every one in
# reverse start order (clients before the API server, the API server before
# etcd): SIGTERM, then SIGKILL after a grace period, and waits until each is
# gone.
stop_all() {
  local pid name
  [[ -d "$PIDS" ]] || return 0
  local names=("$@")
  if [[ ${#names[@]} -eq 0 && -f "$PIDS/order" ]]; then
    mapfile -t names < <(tac "$PIDS/order")
  fi
  if [[ $# -eq 0 ]]; then
    for f in "$PIDS"/*.pid; do
      [[ -e "$f" ]] || continue
      name=$(basename "$f" .pid)
      [[ " ${names[*]} " == *" $name "* ]] || names=("$name" "${names[@]}")
    done
  fi
  for name in "${names[@]}"; do
    [[ -f "$PIDS/$name.pid" ]] || continue
    pid=$(cat "$PIDS/$name.pid")
    if alive "$pid"; then
      kill -TERM -- "-$pid" 2>/dev/null || kill -TERM "$pid" 2>/dev/null || true
      local deadline=$((SECONDS + 10))
      while alive "$pid" && ((SECONDS < deadline)); do sleep 0.1; done
      if alive "$pid"; then
        echo "local-down: $name (pid $pid) did not stop in 10s; killing it"
        kill -KILL -- "-$pid" 2>/dev/null || kill -KILL "$pid" 2>/dev/null || true
        while alive "$pid"; do sleep 0.1; done
      fi
    fi
    rm -f "$PIDS/$name.pid"
  done
  [[ $# -gt 0 ]] && return 0
  rm -f "$PIDS/order"
  # A killed process can linger as a zombie while its threads exit; wait
  # until our ports are released so the next start does not collide.
  local p deadline=$((SECONDS + 30))
  for p in $(cluster_ports); do
    while ! port_free "$p" && ((SECONDS < deadline)); do sleep 0.2; done
    port_free "$p" || echo "local-down: port $p is still in use" >&2
  done
}
