# shellcheck shell=bash
# Sourced by hack/local-up.sh last: sample pools, windows and an opted-in
# workload for the guided tour (LULL_SAMPLES=0 skips them, as the e2e tests
# do: they create what they need).
if [[ "${LULL_SAMPLES:-1}" != "0" && "$NODES" -gt 0 ]]; then
  k() { "$BIN/kubectl" --kubeconfig="$KUBECONFIG_ADMIN" "$@"; }
  # Two canary nodes (always open, two at a time); the rest follow the
  # weekend window (Sat/Sun 02:00-06:00 Europe/Berlin, one at a time).
  for ((i = 0; i < NODES; i++)); do
    pool=general
    [[ $i -lt 2 ]] && pool=canary
    k label node "kwok-node-$i" "pool=$pool" --overwrite >/dev/null
  done
  k apply -f "${ROOT}/manifests/samples/windows.yaml" >/dev/null
  k apply -f "${ROOT}/manifests/samples/opt-in-deployment.yaml" >/dev/null
  wait_for "sample workload running" 120 k rollout status deployment/web --timeout=5s
  cat >"$DIR/tour.txt" <<TOUR

Guided tour (make demo runs the same steps on lull-demo-* nodes and objects of its own, and leaves these alone)
  export KUBECONFIG=${KUBECONFIG_ADMIN} PATH=${BIN}:\$PATH
  kubectl get nodes -L type,pool                      # kwok nodes, and the real kubelet node real-node-0
  kubectl get pods -n lull-system -o wide              # lull-scheduler, lull-drainer: pods on the real node
  kubectl get maintenancewindows                       # weekend (pool=general), canary (always open)
  kubectl get pods -l app=web -o wide                  # opted into lull-scheduler, PDB maxUnavailable 1
  kubectl get disruptionpolicies                       # which class needs what: ssh-keys None, kernel-update Drain, ...
  # 0. preview: what would a kernel update of these nodes do, and when?
  kubectl lull plan kwok-node-0 kwok-node-3 --class kernel-update
  kubectl lull windows                                 # next periods, local time and UTC
  # 1. request maintenance of a canary node; watch lull lease, cordon, drain it:
  kubectl label node kwok-node-0 lull.dev/maintenance=kernel-update
  kubectl get nodemaintenances -w                      # Cordoning -> Draining -> Drained
  kubectl get pods -l app=web -o wide                  # none on kwok-node-0; recreated elsewhere by lull-scheduler
  kubectl lull lease show kwok-node-0                  # held by lull-drainer
  # 2. a general node waits for the weekend window (unless it is open now):
  kubectl label node kwok-node-3 lull.dev/maintenance=kernel-update
  kubectl get nm kwok-node-3 -o jsonpath='{.status.waitingFor}{"\\n"}'
  #    emergency override: open the weekend window for one hour
  kubectl patch mw weekend --type merge -p '{"spec":{"override":{"strategy":"Permissive","until":"'\$(date -u -d '+1 hour' +%Y-%m-%dT%H:%M:%SZ)'","reason":"CVE fix"}}}'
  kubectl lull status
  # 3. complete: remove the labels; lull uncordons (only what it cordoned) and releases the leases
  kubectl label node kwok-node-0 kwok-node-3 lull.dev/maintenance-
  # 4. a change the policy says disrupts nothing completes at once (no cordon, no lease):
  kubectl lull request kwok-node-4 --class ssh-keys --reason "rotate keys"
TOUR
fi
