#!/usr/bin/env bash
# Walks the guided tour against the cluster `make run` started, printing
# what happens at each step, and exits non-zero if a step does not happen.
#
#   make demo        (after make run)
#
# The demo brings its own state and leaves yours alone: three simulated
# nodes, two MaintenanceWindows, a DisruptionPolicy, a namespace with a
# workload, all named lull-demo-* and labelled
# app.kubernetes.io/managed-by=lull-demo. It never changes or deletes an
# object without that label, refuses to start when one of its names is
# taken by an object it did not create, and deletes what it created when
# it ends, also when a step fails. It never waits for input.
#
# Environment: KUBECONFIG (default: the cluster of `make run`),
# LULL_LEASE_NAMESPACE (default lull-leases), LULL_DEMO_KEEP=1 (leave the
# demo's objects in place at the end, to look at them; the next run removes
# them first).
set -euo pipefail
ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
export KUBECONFIG=${KUBECONFIG:-${LULL_CLUSTER_DIR:-${ROOT}/.cluster}/kubeconfig}
export PATH="${ROOT}/_output/bin:${PATH}"
[[ -f "$KUBECONFIG" ]] || { echo "demo: no cluster at $KUBECONFIG; run 'make run' first" >&2; exit 1; }

LEASE_NS=${LULL_LEASE_NAMESPACE:-lull-leases}
OWNER=app.kubernetes.io/managed-by=lull-demo
NS=lull-demo
canary=lull-demo-canary closed=lull-demo-closed spare=lull-demo-spare
NODES=("$canary" "$closed" "$spare")
WINDOWS=(lull-demo-canary lull-demo-closed)
POLICY=lull-demo
DRAIN_CLASS=lull-demo-kernel-update KEYS_CLASS=lull-demo-ssh-keys

say()  { printf '\n== %s\n' "$*"; }
info() { printf '   %s\n' "$*"; }
fail() { printf 'demo: FAILED: %s\n' "$*" >&2; exit 1; }
nm()   { kubectl get nodemaintenance "$1" -o jsonpath="$2" 2>/dev/null || true; }

# owned KIND NAME: the object exists and the demo created it.
owned() {
  [[ "$(kubectl get "$1" "$2" --ignore-not-found -o jsonpath='{.metadata.labels.app\.kubernetes\.io/managed-by}')" == lull-demo ]]
}

# exists KIND NAME
exists() { [[ -n "$(kubectl get "$1" "$2" --ignore-not-found -o name)" ]]; }

# cleanup deletes what the demo created, and nothing else: each object by
# name, only when it carries the demo's label.
cleanup() {
  local n w
  for n in "${NODES[@]}"; do
    owned node "$n" && kubectl label node "$n" lull.dev/maintenance- >/dev/null 2>&1
  done
  for n in "${NODES[@]}"; do
    # A NodeMaintenance is named after its node: the demo's nodes' are the demo's.
    owned node "$n" && kubectl delete nodemaintenance "$n" --ignore-not-found --timeout=60s >/dev/null
  done
  if owned namespace "$NS"; then kubectl delete namespace "$NS" --timeout=120s >/dev/null; fi
  for n in "${NODES[@]}"; do
    owned node "$n" && kubectl delete node "$n" --timeout=60s >/dev/null
  done
  for w in "${WINDOWS[@]}"; do
    owned maintenancewindow "$w" && kubectl delete maintenancewindow "$w" --timeout=30s >/dev/null
  done
  if owned disruptionpolicy "$POLICY"; then kubectl delete disruptionpolicy "$POLICY" --timeout=30s >/dev/null; fi
  return 0
}

on_exit() {
  local rc=$?
  if [[ "${LULL_DEMO_KEEP:-0}" == 1 ]]; then
    info "LULL_DEMO_KEEP=1: the demo's objects stay (kubectl get nodes,mw,dp,ns -l $OWNER)"
  else
    cleanup || echo "demo: could not remove everything it created: kubectl get nodes,mw,dp,ns -l $OWNER" >&2
  fi
  exit "$rc"
}

# preflight refuses to run when a name the demo uses is taken by an object
# it did not create (a leftover of an interrupted run is removed first).
preflight() {
  local n w
  cleanup
  for n in "${NODES[@]}"; do
    exists node "$n" && fail "node $n exists and is not the demo's; the demo leaves it alone (rename or remove it)"
    exists nodemaintenance "$n" && fail "NodeMaintenance $n exists and is not the demo's; the demo leaves it alone"
  done
  for w in "${WINDOWS[@]}"; do
    exists maintenancewindow "$w" && fail "MaintenanceWindow $w exists and is not the demo's; the demo leaves it alone"
  done
  exists disruptionpolicy "$POLICY" && fail "DisruptionPolicy $POLICY exists and is not the demo's; the demo leaves it alone"
  exists namespace "$NS" && fail "namespace $NS exists and is not the demo's; the demo leaves it alone"
  return 0
}

# demo_node NAME POOL: a simulated node kwok manages, in one of the demo's pools.
demo_node() {
  cat <<NODE
apiVersion: v1
kind: Node
metadata:
  name: $1
  annotations: {kwok.x-k8s.io/node: fake, node.alpha.kubernetes.io/ttl: "0"}
  labels:
    app.kubernetes.io/managed-by: lull-demo
    demo.lull.dev/pool: $2
    kubernetes.io/hostname: $1
    kubernetes.io/os: linux
    kubernetes.io/arch: amd64
status:
  allocatable: {cpu: "32", memory: 256Gi, pods: "110"}
  capacity: {cpu: "32", memory: 256Gi, pods: "110"}
---
NODE
}

# demo_objects prints the demo's windows, policy and workload. The closed
# window opens daily three hours from now (UTC), so it is closed now.
demo_objects() {
  local opens
  opens=$(date -u -d '+3 hour' +%H:%M)
  cat <<OBJECTS
apiVersion: lull.dev/v1alpha1
kind: MaintenanceWindow
metadata: {name: lull-demo-canary, labels: {app.kubernetes.io/managed-by: lull-demo}}
spec:
  nodeSelector: {matchLabels: {demo.lull.dev/pool: canary}}
  strategy: Permissive
  maxUnavailable: 1
---
apiVersion: lull.dev/v1alpha1
kind: MaintenanceWindow
metadata: {name: lull-demo-closed, labels: {app.kubernetes.io/managed-by: lull-demo}}
spec:
  nodeSelector: {matchLabels: {demo.lull.dev/pool: closed}}
  strategy: Schedule
  schedule: {timeZone: UTC, recurrence: {frequency: Daily}, startTime: "$opens", duration: 1h}
  maxUnavailable: 1
---
apiVersion: lull.dev/v1alpha1
kind: DisruptionPolicy
metadata: {name: $POLICY, labels: {app.kubernetes.io/managed-by: lull-demo}}
spec:
  priority: 1000
  rules:
  - {name: kernel-update, class: $DRAIN_CLASS, action: Drain}
  - {name: ssh-keys, class: $KEYS_CLASS, action: None}
---
apiVersion: v1
kind: Namespace
metadata: {name: $NS, labels: {app.kubernetes.io/managed-by: lull-demo}}
OBJECTS
}

# demo_workload prints a Deployment scheduled by lull-scheduler, one pod
# on each demo node (a hard spread that ignores cordoned nodes), and its PDB.
demo_workload() {
  cat <<WORKLOAD
apiVersion: apps/v1
kind: Deployment
metadata: {name: web, namespace: $NS, labels: {app.kubernetes.io/managed-by: lull-demo}}
spec:
  replicas: 3
  selector: {matchLabels: {app: lull-demo-web}}
  template:
    metadata: {labels: {app: lull-demo-web}}
    spec:
      schedulerName: lull-scheduler
      nodeSelector: {app.kubernetes.io/managed-by: lull-demo}
      topologySpreadConstraints:
      - {maxSkew: 1, topologyKey: kubernetes.io/hostname, whenUnsatisfiable: DoNotSchedule,
         nodeTaintsPolicy: Honor, labelSelector: {matchLabels: {app: lull-demo-web}}}
      containers:
      - {name: web, image: registry.k8s.io/pause:3.10, resources: {requests: {cpu: 100m, memory: 64Mi}}}
---
apiVersion: policy/v1
kind: PodDisruptionBudget
metadata: {name: web, namespace: $NS, labels: {app.kubernetes.io/managed-by: lull-demo}}
spec:
  maxUnavailable: 1
  selector: {matchLabels: {app: lull-demo-web}}
WORKLOAD
}

pods_per_node() {
  kubectl -n "$NS" get pods --field-selector=status.phase=Running -o jsonpath='{range .items[*]}{.spec.nodeName}{"\n"}{end}' |
    sort | uniq -c | awk '{printf "%s:%s ", $2, $1}'
}

# wait_phase NODE PHASE TIMEOUT: prints each phase change until PHASE.
wait_phase() {
  local node=$1 want=$2 timeout=$3 last="" phase status deadline=$((SECONDS + $3))
  while ((SECONDS < deadline)); do
    status=$(nm "$node" '{.status.phase}|{.status.waitingFor}')
    phase=${status%%|*}
    if [[ -n "$phase" && "$phase" != "$last" ]]; then
      info "$node: ${phase}  ${status#*|}"
      last=$phase
    fi
    [[ "$phase" == "$want" ]] && return 0
    sleep 0.3
  done
  fail "$node did not reach $want within ${timeout}s (last phase: ${last:-none})"
}

# wait_left_pending NODE: waits until the drainer has decided about NODE.
wait_left_pending() {
  local deadline=$((SECONDS + 30)) phase
  while phase=$(nm "$1" '{.status.phase}'); [[ -z "$phase" || "$phase" == Pending ]]; do
    ((SECONDS < deadline)) || fail "$1 never left Pending"
    sleep 0.3
  done
}

# governed_by NODE WINDOW: the request of NODE is governed by WINDOW alone
# (a window of yours selecting the demo's nodes would change what they do).
governed_by() {
  local got
  got=$(nm "$1" '{.status.windows[*]}')
  [[ "$got" == "$2" ]] || fail "$1 is governed by window(s) '${got}', not $2 alone: a window selecting every node? the demo cannot run beside it"
}

# decided_by_demo NODE: the demo's policy decided NODE's request.
decided_by_demo() {
  local by
  by=$(nm "$1" '{.status.decision.policy}/{.status.decision.rule}')
  [[ "$by" == "$POLICY/"* ]] || fail "$1 was decided by rule $by, not the demo's policy: a policy of priority 1000 matching $DRAIN_CLASS?"
}

# evicted NODE: the request of NODE evicted at least one pod.
evicted() {
  local n
  n=$(nm "$1" '{.status.pods.evicted}')
  ((${n:-0} >= 1)) || fail "the drain of $1 evicted nothing"
  info "$1: evicted ${n} pod(s) through the eviction API"
}

# lease_holder NODE: the holder of NODE's disruption lease, empty if none.
lease_holder() {
  kubectl -n "$LEASE_NS" get lease "node-$1" --ignore-not-found -o jsonpath='{.spec.holderIdentity}'
}

step_setup() {
  say "the demo's own nodes, windows, policy and workload (named lull-demo-*)"
  preflight
  trap on_exit EXIT
  { demo_node "$canary" canary; demo_node "$closed" closed; demo_node "$spare" spare; } | kubectl apply -f - >/dev/null
  kubectl wait --for=condition=Ready node -l "$OWNER" --timeout=60s >/dev/null || fail "the demo's nodes did not become Ready"
  demo_objects | kubectl apply -f - >/dev/null
  demo_workload | kubectl apply -f - >/dev/null
  kubectl get nodes -l "$OWNER" -L demo.lull.dev/pool
  kubectl get maintenancewindows "${WINDOWS[@]}"
  kubectl get disruptionpolicy "$POLICY"
  kubectl -n "$NS" rollout status deployment/web --timeout=120s >/dev/null || fail "the demo's workload is not running"
  info "pods (placed by lull-scheduler) per node: $(pods_per_node)"
}

step_preview() {
  say "0. preview: what would $DRAIN_CLASS on $canary and $closed do?"
  kubectl lull plan "$canary" "$closed" --class "$DRAIN_CLASS" || fail "kubectl lull plan failed"
  [[ "$(kubectl lull plan "$canary" --class "$DRAIN_CLASS" -o json | sed -n 's/.*"start": *"\([^"]*\)".*/\1/p')" == Now ]] ||
    fail "the preview does not start $canary now"
}

step_canary() {
  local holder after
  say "1. maintenance of $canary (window lull-demo-canary: always open)"
  kubectl label node "$canary" "lull.dev/maintenance=$DRAIN_CLASS" >/dev/null
  info "requested: kubectl label node $canary lull.dev/maintenance=$DRAIN_CLASS"
  wait_phase "$canary" Drained 120
  governed_by "$canary" lull-demo-canary
  decided_by_demo "$canary"
  evicted "$canary"
  holder=$(lease_holder "$canary")
  info "lease holder: ${holder:-none}"
  kubectl lull lease show "$canary"
  [[ "$holder" == lull-drainer || "$holder" == lull-drainer/* ]] || fail "lease of $canary not held by lull-drainer"
  [[ "$(kubectl get node "$canary" -o jsonpath='{.spec.unschedulable}')" == true ]] || fail "$canary not cordoned"
  kubectl -n "$NS" rollout status deployment/web --timeout=120s >/dev/null || fail "the evicted pod was not recreated"
  after=$(pods_per_node)
  info "pods per node now: $after"
  [[ "$after" != *"$canary:"* ]] || fail "pods still on $canary"
}

step_closed() {
  local until
  say "2. maintenance of $closed (window lull-demo-closed: opens daily in three hours)"
  kubectl label node "$closed" "lull.dev/maintenance=$DRAIN_CLASS" >/dev/null
  info "requested: kubectl label node $closed lull.dev/maintenance=$DRAIN_CLASS"
  wait_left_pending "$closed"
  [[ "$(nm "$closed" '{.status.phase}')" == WaitingForWindow ]] ||
    fail "$closed did not wait for its window (phase $(nm "$closed" '{.status.phase}'))"
  governed_by "$closed" lull-demo-closed
  info "$closed: WaitingForWindow  $(nm "$closed" '{.status.waitingFor}')"
  [[ "$(kubectl get node "$closed" -o jsonpath='{.spec.unschedulable}')" != true ]] || fail "$closed cordoned while it waits"
  until=$(date -u -d '+1 hour' +%Y-%m-%dT%H:%M:%SZ)
  kubectl patch maintenancewindow lull-demo-closed --type merge \
    -p "{\"spec\":{\"override\":{\"strategy\":\"Permissive\",\"until\":\"$until\",\"reason\":\"demo: emergency fix\"}}}" >/dev/null
  info "emergency override: lull-demo-closed Permissive until $until"
  wait_phase "$closed" Drained 120
  evicted "$closed"
}

step_complete() {
  local n
  say "3. complete both: remove the labels"
  kubectl label node "$canary" "$closed" lull.dev/maintenance- >/dev/null
  for n in "$canary" "$closed"; do
    wait_phase "$n" Completed 60
    [[ "$(kubectl get node "$n" -o jsonpath='{.spec.unschedulable}')" != true ]] || fail "$n still cordoned"
    [[ -z "$(lease_holder "$n")" ]] || fail "lease of $n not released"
    info "$n uncordoned, lease released"
  done
  kubectl lull status || fail "kubectl lull status failed"
}

step_keys() {
  say "4. a class the policy says disrupts nothing: $spare, $KEYS_CLASS"
  kubectl lull request "$spare" --class "$KEYS_CLASS" --reason "demo: rotate keys" || fail "kubectl lull request failed"
  wait_phase "$spare" Completed 30
  [[ "$(nm "$spare" '{.status.decision.action}')" == None ]] || fail "the request of $spare was not decided None"
  decided_by_demo "$spare"
  [[ -z "$(nm "$spare" '{.status.startedAt}')" ]] || fail "$spare was disrupted"
  [[ "$(kubectl get node "$spare" -o jsonpath='{.spec.unschedulable}')" != true ]] || fail "$spare cordoned"
  info "$spare: completed at once by rule $(nm "$spare" '{.status.decision.policy}/{.status.decision.rule}'); never cordoned, no lease"
}

step_setup
step_preview
step_canary
step_closed
step_complete
step_keys
say "demo finished: every step happened; removing the demo's objects"
