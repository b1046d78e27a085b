# Sourced by hack/local-up.sh: installs lull's CRDs and namespace and starts
# lull-drainer (built by `make build` into _output/bin) against the cluster.
# lull-drainer authenticates as its ServiceAccount's user name with a client
# certificate, so it runs with exactly the RBAC of manifests/drainer.
"$BIN/kubectl" --kubeconfig="$KUBECONFIG_ADMIN" apply -f "${ROOT}/manifests/crds" >/dev/null
"$BIN/kubectl" --kubeconfig="$KUBECONFIG_ADMIN" create namespace lull-system --dry-run=client -o yaml |
  "$BIN/kubectl" --kubeconfig="$KUBECONFIG_ADMIN" apply -f - >/dev/null
wait_for "lull CRDs established" 30 "$BIN/kubectl" --kubeconfig="$KUBECONFIG_ADMIN" wait --for=condition=Established --timeout=5s crd/maintenancewindows.lull.dev crd/nodemaintenances.lull.dev
if [[ -x "$BIN/lull-drainer" ]]; then
  "$BIN/kubectl" --kubeconfig="$KUBECONFIG_ADMIN" apply -f "${ROOT}/manifests/drainer/rbac.yaml" >/dev/null
  client_cert lull-drainer "system:serviceaccount:lull-system:lull-drainer" "system:serviceaccounts"
  write_kubeconfig "$DIR/lull-drainer.kubeconfig" "$CERTS/lull-drainer.crt" "$CERTS/lull-drainer.key" lull-drainer
  KUBECONFIG="$DIR/lull-drainer.kubeconfig" start_proc lull-drainer "$BIN/lull-drainer" \
    --metrics-bind-address="127.0.0.1:${DRAINER_METRICS_PORT}" \
    --health-probe-bind-address="127.0.0.1:${DRAINER_PROBE_PORT}"
  wait_for "lull-drainer healthy" 30 curl -sf "http://127.0.0.1:${DRAINER_PROBE_PORT}/healthz"
  log "lull-drainer metrics: http://127.0.0.1:${DRAINER_METRICS_PORT}/metrics"
else
  log "lull-drainer not built (run 'make build'); skipping it"
fi
