# Sourced by hack/local-up.sh: installs lull's CRDs and namespace and starts
# lull-drainer (built by `make build` into _output/bin) against the cluster.
# lull-drainer authenticates as its ServiceAccount's user name with a client
# certificate, so it runs with exactly the RBAC of manifests/drainer.
"$BIN/kubectl" --kubeconfig="$KUBECONFIG_ADMIN" apply -f "${ROOT}/manifests/crds" >/dev/null
"$BIN/kubectl" --kubeconfig="$KUBECONFIG_ADMIN" create namespace lull-system --dry-run=client -o yaml |
  "$BIN/kubectl" --kubeconfig="$KUBECONFIG_ADMIN" apply -f - >/dev/null
wait_for "lull CRDs established" 30 "$BIN/kubectl" --kubeconfig="$KUBECONFIG_ADMIN" wait --for=condition=Established --timeout=5s crd/maintenancewindows.lull.dev crd/nodemaintenances.lull.dev crd/disruptionpolicies.lull.dev
# The shipped default DisruptionPolicy (ssh-keys -> None, kernel-update -> Drain, ...).
"$BIN/kubectl" --kubeconfig="$KUBECONFIG_ADMIN" apply -f "${ROOT}/manifests/policy" >/dev/null
if [[ -x "$BIN/lull-drainer" ]]; then
  "$BIN/kubectl" --kubeconfig="$KUBECONFIG_ADMIN" apply -f "${ROOT}/manifests/drainer/rbac.yaml" >/dev/null
  client_cert lull-drainer "system:serviceaccount:lull-system:lull-drainer" "system:serviceaccounts"
  write_kubeconfig "$DIR/lull-drainer.kubeconfig" "$CERTS/lull-drainer.crt" "$CERTS/lull-drainer.key" lull-drainer
  # Two replicas, as the Deployment runs it: one leads, the other takes
  # over (short leader-election timings so a takeover is quick to watch).
  replicas=${LULL_DRAINER_REPLICAS:-2}
  for i in $(seq 1 "$replicas"); do
    name=lull-drainer metrics=$DRAINER_METRICS_PORT probe=$DRAINER_PROBE_PORT
    if [[ "$i" -gt 1 ]]; then
      name=lull-drainer-$i metrics=$DRAINER2_METRICS_PORT probe=$DRAINER2_PROBE_PORT
    fi
    KUBECONFIG="$DIR/lull-drainer.kubeconfig" start_proc "$name" "$BIN/lull-drainer" \
      --metrics-bind-address="127.0.0.1:${metrics}" --health-probe-bind-address="127.0.0.1:${probe}" \
      --leader-elect-lease-duration=6s --leader-elect-renew-deadline=4s --leader-elect-retry-period=1s
    wait_for "$name healthy" 30 curl -sf "http://127.0.0.1:${probe}/healthz"
    log "$name metrics: http://127.0.0.1:${metrics}/metrics"
  done
else
  log "lull-drainer not built (run 'make build'); skipping it"
fi
