#!/usr/bin/env bash
# Runs the scheduler_perf benchmark for NodeDisruption against the default
# profile in one invocation and prints the throughput ratio and the
# plugin's execution time percentiles.
#
#   hack/bench-scheduler.sh            500 and 1000 nodes, each twice (~10 minutes;
#                                      LULL_BENCH_COUNT=N for N runs)
#   hack/bench-scheduler.sh --short    50 nodes, to check the harness works
set -euo pipefail
ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
cd "$ROOT"
hack/build-binaries.sh etcd >/dev/null
export PATH="${ROOT}/_output/bin:${PATH}"   # scheduler_perf starts etcd from PATH
filter="performance,-short"
[[ "${1:-}" == "--short" ]] && filter="performance,short"
out="${ROOT}/_output/bench-scheduler"
rm -rf "$out" && mkdir -p "$out"
echo "== scheduler_perf (label filter ${filter}); data items in ${out}"
count=${LULL_BENCH_COUNT:-2}
[[ "${1:-}" == "--short" ]] && count=1
(cd test/perf/scheduler && go test -run '^$' -bench 'BenchmarkPerfScheduling' -benchtime 1x -count "$count" -timeout 90m \
  -perf-scheduling-label-filter="$filter" -data-items-dir="$out" . 2>&1 | tee "$out/bench.log" |
  grep -E '^(ok|FAIL|--- FAIL)|Error running' || true)
echo
go run ./test/perf/scheduler/summary "$out"
