# shellcheck shell=bash
# Sourced by hack/local-up.sh last: real-node-1, a machine booted by
# systemd beside real-node-0 (hack/real-node-1.sh), with lull-agent's
# production commands. On by default with the real node; LULL_REAL_NODE_1=0
# leaves it out (the e2e tests do). A machine that cannot boot it here says
# why and the cluster goes on without it.
if [[ "$REAL_NODE" == 1 && "${LULL_REAL_NODE_1:-1}" != 0 ]]; then
  if LULL_CLUSTER_DIR="$DIR" LULL_BIN_DIR="$BIN" "${ROOT}/hack/real-node-1.sh" up >"$LOGS/real-node-1-up.log" 2>&1; then
    log "real-node-1 up: $(tail -n 4 "$LOGS/real-node-1-up.log" | grep -o 'boot to Ready: [0-9]*s' || true) (log: $LOGS/real-node-1-up.log, machine: $LOGS/real-node-1.log)"
    # No tour without the samples (the e2e clusters): an if, not a bare
    # test, so a sourced hook does not end with a failed status.
    if [[ -f "$DIR/tour.txt" ]]; then
      cat >>"$DIR/tour.txt" <<TOUR
  # 5. real-node-1 is a machine booted by systemd; its agent runs the production commands:
  hack/real-node-1.sh shell systemctl show -p InvocationID --value lull-tour.service
  hack/real-node-1.sh shell cat /var/lib/lull-tour/starts   # one line per start of lull-tour.service
  kubectl get node real-node-1 -o jsonpath='{.status.nodeInfo.bootID}{"\\n"}'
TOUR
    fi
  else
    log "real-node-1 left out: $(grep -E 'error:|failed|timed out' "$LOGS/real-node-1-up.log" | head -n 1) (log: $LOGS/real-node-1-up.log; LULL_REAL_NODE_1=0 skips it)"
  fi
elif [[ "$REAL_NODE" == 1 ]]; then
  log "real-node-1 left out (LULL_REAL_NODE_1=0)"
fi
