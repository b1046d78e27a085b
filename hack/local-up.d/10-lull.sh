# shellcheck shell=bash
# Sourced by hack/local-up.sh: installs lull.
#
# LULL_INSTALL=pods (the default with the real node): the way users install
# it, `kubectl apply -k` of manifests/install through the documented local
# overlay (hack/local-overlay: pull policy Never, pinned to the real node),
# with the images just built and imported into the node's containerd.
#
# LULL_INSTALL=host (development): the CRDs, RBAC and admission guard
# from the same manifests, and lull-drainer / lull-scheduler (20-lull-scheduler.sh)
# as host processes from _output/bin, authenticating as their
# ServiceAccounts' user names with client certificates, so they run with
# exactly the RBAC of the manifests.
if [[ "$LULL_INSTALL" == pods ]]; then
  # shellcheck source=../lib/install.sh
  source "${ROOT}/hack/lib/install.sh"
  write_tag_overlay "$DIR/install" "${ROOT}/hack/local-overlay" "$LULL_VERSION"
  install_start=$SECONDS
  # One apply, as docs/install.md says: the install holds no object of
  # lull's own kinds (lull-drainer creates the default policy), so it
  # needs no second run and no CRDs first. A failure here is a failure.
  "$BIN/kubectl" --kubeconfig="$KUBECONFIG_ADMIN" kustomize "$DIR/install" >"$DIR/install/rendered.yaml"
  "$BIN/kubectl" --kubeconfig="$KUBECONFIG_ADMIN" apply --server-side -f "$DIR/install/rendered.yaml" >/dev/null
  wait_for "lull-scheduler and lull-drainer Available" 180 "$BIN/kubectl" --kubeconfig="$KUBECONFIG_ADMIN" -n lull-system \
    wait --for=condition=Available --timeout=5s deployment/lull-scheduler deployment/lull-drainer
  wait_for "the shipped DisruptionPolicy created by lull-drainer" 60 "$BIN/kubectl" --kubeconfig="$KUBECONFIG_ADMIN" get disruptionpolicy default
  wait_for "lull-agent running on ${REAL_NODE_NAME}" 120 "$BIN/kubectl" --kubeconfig="$KUBECONFIG_ADMIN" -n lull-system \
    rollout status daemonset/lull-agent --timeout=5s
  log "lull installed as pods on ${REAL_NODE_NAME} in $((SECONDS - install_start))s (images ${LULL_VERSION})"
  echo "$((SECONDS - install_start))" >"$DIR/install/seconds"
  # shellcheck disable=SC2317 # `|| true` is reached only when this file is run rather than sourced
  return 0 2>/dev/null || true
fi

"$BIN/kubectl" --kubeconfig="$KUBECONFIG_ADMIN" apply -f "${ROOT}/manifests/crds" >/dev/null
# lull-system and lull-leases, as the install creates them.
"$BIN/kubectl" --kubeconfig="$KUBECONFIG_ADMIN" apply -f "${ROOT}/manifests/install/namespace.yaml" >/dev/null
wait_for "lull CRDs established" 30 "$BIN/kubectl" --kubeconfig="$KUBECONFIG_ADMIN" wait --for=condition=Established --timeout=5s crd/maintenancewindows.lull.dev crd/nodemaintenances.lull.dev crd/disruptionpolicies.lull.dev crd/nodeconfigs.lull.dev
# The admission guard, as installed (docs/security.md): every scenario runs
# under it. The admin's certificate carries the maintainers and emergency
# groups (hack/lib/cluster.sh); lull-drainer authenticates as its
# ServiceAccount's user name, the drainer the guard's parameters name.
"$BIN/kubectl" --kubeconfig="$KUBECONFIG_ADMIN" apply --server-side -k "${ROOT}/manifests/admission" >/dev/null
if [[ -x "$BIN/lull-drainer" ]]; then
  "$BIN/kubectl" --kubeconfig="$KUBECONFIG_ADMIN" apply -f "${ROOT}/manifests/drainer/rbac.yaml" -f "${ROOT}/manifests/drainer/budget.yaml" >/dev/null
  client_cert lull-drainer "system:serviceaccount:lull-system:lull-drainer" "system:serviceaccounts"
  write_kubeconfig "$DIR/lull-drainer.kubeconfig" "$CERTS/lull-drainer.crt" "$CERTS/lull-drainer.key" lull-drainer
  # Two replicas, as the Deployment runs it: one leads, the other takes
  # over (short leader-election timings so a takeover is quick to watch).
  # Metrics over plain HTTP on loopback (--metrics-secure=false): the e2e
  # harness and `make bench-drain` read them with no token; only this
  # machine can reach them. In pods they are HTTPS behind authn/authz.
  replicas=${LULL_DRAINER_REPLICAS:-2}
  for i in $(seq 1 "$replicas"); do
    name=lull-drainer metrics=$DRAINER_METRICS_PORT probe=$DRAINER_PROBE_PORT pprof=$DRAINER_PPROF_PORT
    if [[ "$i" -gt 1 ]]; then
      name=lull-drainer-$i metrics=$DRAINER2_METRICS_PORT probe=$DRAINER2_PROBE_PORT pprof=$DRAINER2_PPROF_PORT
    fi
    # LULL_DRAINER_PPROF=1 serves Go's profiles on loopback, to profile a
    # benchmark (make bench-wave) while it runs.
    extra=()
    if [[ "${LULL_DRAINER_PPROF:-}" == 1 ]]; then
      extra+=(--pprof-bind-address="127.0.0.1:${pprof}")
    fi
    # LULL_DRAINER_V=N sets the log verbosity (-v=4 logs each drain
    # round's decision to skip, ask or evict).
    if [[ -n "${LULL_DRAINER_V:-}" ]]; then
      extra+=(--v="${LULL_DRAINER_V}")
    fi
    # LULL_DRAINER_WORKERS=N sets --workers (a benchmark's knob).
    if [[ -n "${LULL_DRAINER_WORKERS:-}" ]]; then
      extra+=(--workers="${LULL_DRAINER_WORKERS}")
    fi
    # LULL_DRAINER_QPS=N sets --kube-api-qps (and twice that the burst).
    if [[ -n "${LULL_DRAINER_QPS:-}" ]]; then
      extra+=(--kube-api-qps="${LULL_DRAINER_QPS}" --kube-api-burst="$((LULL_DRAINER_QPS * 2))")
    fi
    # LULL_DRAINER_GOMEMLIMIT=Q sets the Go soft memory limit, as a
    # container's memory limit does in a pod (internal/memlimit).
    # Each replica its own lease holder identity, as POD_NAME gives pods.
    KUBECONFIG="$DIR/lull-drainer.kubeconfig" GOMEMLIMIT="${LULL_DRAINER_GOMEMLIMIT:-}" start_proc "$name" "$BIN/lull-drainer" \
      --identity="lull-drainer/${name}" --lease-namespace=lull-leases --budget-namespace=lull-system \
      --metrics-bind-address="127.0.0.1:${metrics}" --metrics-secure=false --health-probe-bind-address="127.0.0.1:${probe}" \
      --leader-elect-lease-duration=6s --leader-elect-renew-deadline=4s --leader-elect-retry-period=1s "${extra[@]}"
    wait_for "$name healthy" 30 curl -sf "http://127.0.0.1:${probe}/healthz"
    log "$name metrics: http://127.0.0.1:${metrics}/metrics"
    if [[ "${LULL_DRAINER_PPROF:-}" == 1 ]]; then log "$name profiles: http://127.0.0.1:${pprof}/debug/pprof/"; fi
  done
  # The leader creates the policy lull ships (--default-policy).
  wait_for "the shipped DisruptionPolicy created by lull-drainer" 60 "$BIN/kubectl" --kubeconfig="$KUBECONFIG_ADMIN" get disruptionpolicy default
else
  log "lull-drainer not built (run 'make build'); skipping it"
fi
