# shellcheck shell=bash
# Sourced by hack/local-up.sh after 10-lull.sh: with LULL_INSTALL=host
# (development) starts lull-scheduler (built
# by `make build`) with the shipped configuration and RBAC. It authenticates
# as its ServiceAccount's user name with a client certificate, so the
# least-privilege rules in manifests/scheduler/rbac.yaml are what it runs
# with here too.
if [[ "$LULL_INSTALL" == host && -x "$BIN/lull-scheduler" ]]; then
  "$BIN/kubectl" --kubeconfig="$KUBECONFIG_ADMIN" apply -f "${ROOT}/manifests/scheduler/rbac.yaml" >/dev/null
  client_cert lull-scheduler "system:serviceaccount:lull-system:lull-scheduler" "system:serviceaccounts"
  write_kubeconfig "$DIR/lull-scheduler.kubeconfig" "$CERTS/lull-scheduler.crt" "$CERTS/lull-scheduler.key" lull-scheduler
  # The shipped configuration, pointed at the local kubeconfig.
  sed "s|^kind: KubeSchedulerConfiguration$|kind: KubeSchedulerConfiguration\nclientConnection:\n  kubeconfig: $DIR/lull-scheduler.kubeconfig|" \
    "${ROOT}/manifests/scheduler/config.yaml" >"$DIR/lull-scheduler-config.yaml"
  start_proc lull-scheduler "$BIN/lull-scheduler" \
    --config="$DIR/lull-scheduler-config.yaml" \
    --authentication-kubeconfig="$DIR/lull-scheduler.kubeconfig" \
    --authorization-kubeconfig="$DIR/lull-scheduler.kubeconfig" \
    --bind-address=127.0.0.1 --secure-port="$LULL_SCHED_PORT" --cert-dir="$CERTS/lull-scheduler-serving" --v=2
  wait_for "lull-scheduler healthy" 60 curl -skf "https://127.0.0.1:${LULL_SCHED_PORT}/healthz"
  log "lull-scheduler: pods with schedulerName: lull-scheduler are placed by it (log: $LOGS/lull-scheduler.log)"
elif [[ "$LULL_INSTALL" == host ]]; then
  log "lull-scheduler not built (run 'make build'); skipping it"
fi
