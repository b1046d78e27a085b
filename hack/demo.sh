#!/usr/bin/env bash
# Walks the guided tour against the cluster `make run` started, printing
# what happens at each step, and exits non-zero if a step does not happen.
#
#   make demo        (after make run)
set -euo pipefail
ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
export KUBECONFIG=${KUBECONFIG:-${LULL_CLUSTER_DIR:-${ROOT}/.cluster}/kubeconfig}
export PATH="${ROOT}/_output/bin:${PATH}"
[[ -f "$KUBECONFIG" ]] || { echo "demo: no cluster at $KUBECONFIG; run 'make run' first" >&2; exit 1; }

say()  { printf '\n== %s\n' "$*"; }
info() { printf '   %s\n' "$*"; }
fail() { printf 'demo: FAILED: %s\n' "$*" >&2; exit 1; }
nm()   { kubectl get nodemaintenance "$1" -o jsonpath="$2" 2>/dev/null || true; }

pods_per_node() {
  kubectl get pods -l app=web --field-selector=status.phase=Running -o jsonpath='{range .items[*]}{.spec.nodeName}{"\n"}{end}' |
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

say "the cluster"
kubectl get nodes -L pool --no-headers | awk '{printf "   %-12s %-6s pool=%s\n", $1, $2, $6}'
kubectl get maintenancewindows
kubectl rollout status deployment/web --timeout=60s >/dev/null || fail "the sample workload is not running"
info "web pods (lull-scheduler) per node: $(pods_per_node)"

canary=kwok-node-0 general=kwok-node-3 keys=kwok-node-4
say "0. preview: what would a kernel update of $canary and $general do?"
kubectl get disruptionpolicies
kubectl lull plan "$canary" "$general" --class kernel-update || fail "kubectl lull plan failed"
[[ "$(kubectl lull plan "$canary" --class kernel-update -o json | sed -n 's/.*"start": *"\([^"]*\)".*/\1/p')" == Now ]] ||
  fail "the preview does not start the canary node now"

say "1. maintenance of canary node $canary (window always open)"
kubectl label node "$canary" lull.dev/maintenance=kernel-update --overwrite >/dev/null
info "requested: kubectl label node $canary lull.dev/maintenance=kernel-update"
wait_phase "$canary" Drained 120
holder=$(kubectl lull lease show "$canary" -o json | sed -n 's/.*"holder": *"\([^"]*\)".*/\1/p' | head -1)
info "lease holder: ${holder:-none}"
[[ "$holder" == lull-drainer ]] || fail "lease of $canary not held by lull-drainer"
[[ "$(kubectl get node "$canary" -o jsonpath='{.spec.unschedulable}')" == true ]] || fail "$canary not cordoned"
kubectl rollout status deployment/web --timeout=120s >/dev/null || fail "web pods were not recreated"
after=$(pods_per_node)
info "web pods per node now: $after"
[[ "$after" != *"$canary:"* ]] || fail "web pods still on $canary"

say "2. maintenance of general node $general (weekend window, one node at a time)"
kubectl label node "$general" lull.dev/maintenance=kernel-update --overwrite >/dev/null
deadline=$((SECONDS + 30))
until [[ -n "$(nm "$general" '{.status.phase}')" && "$(nm "$general" '{.status.phase}')" != Pending ]]; do
  ((SECONDS < deadline)) || fail "$general never left Pending"
  sleep 0.3
done
if [[ "$(nm "$general" '{.status.phase}')" == WaitingForWindow ]]; then
  info "waiting: $(nm "$general" '{.status.waitingFor}')"
  until=$(date -u -d '+1 hour' +%Y-%m-%dT%H:%M:%SZ)
  kubectl patch maintenancewindow weekend --type merge \
    -p "{\"spec\":{\"override\":{\"strategy\":\"Permissive\",\"until\":\"$until\",\"reason\":\"demo: emergency fix\"}}}" >/dev/null
  info "emergency override: weekend window Permissive until $until"
else
  info "the weekend window is open right now; no override needed"
fi
wait_phase "$general" Drained 120

say "3. complete both: remove the labels"
kubectl label node "$canary" "$general" lull.dev/maintenance- >/dev/null
for n in "$canary" "$general"; do
  wait_phase "$n" Completed 60
  [[ "$(kubectl get node "$n" -o jsonpath='{.spec.unschedulable}')" != true ]] || fail "$n still cordoned"
  kubectl lull lease show "$n" | grep -q "has no disruption lease" || fail "lease of $n not released"
  info "$n uncordoned, lease released"
done
kubectl patch maintenancewindow weekend --type json -p '[{"op":"remove","path":"/spec/override"}]' >/dev/null 2>&1 || true
info "web pods per node: $(pods_per_node)"

say "4. a class the policy says disrupts nothing: $keys, ssh-keys"
kubectl lull request "$keys" --class ssh-keys --reason "demo: rotate keys" || fail "kubectl lull request failed"
wait_phase "$keys" Completed 30
[[ "$(nm "$keys" '{.status.decision.action}')" == None ]] || fail "the request of $keys was not decided None"
[[ -z "$(nm "$keys" '{.status.startedAt}')" ]] || fail "$keys was disrupted"
[[ "$(kubectl get node "$keys" -o jsonpath='{.spec.unschedulable}')" != true ]] || fail "$keys cordoned"
info "$keys: completed at once by rule $(nm "$keys" '{.status.decision.policy}/{.status.decision.rule}'); never cordoned, no lease"
say "demo finished: every step happened"
