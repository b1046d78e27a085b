#!/usr/bin/env bash
# Runs the scheduler_perf benchmark for NodeDisruption against the default
# profile (plain, and with the same nodes tainted) in one invocation and
# prints each run's throughput, the ratios and the plugin's execution time
# percentiles.
#
#   hack/bench-scheduler.sh            1,000 and 5,000 nodes, 3 runs of each
#                                      profile, interleaved (about 60 minutes
#                                      on 2 loaded cores; see docs/performance.md)
#   hack/bench-scheduler.sh --short    50 nodes, once, to check the harness works
#
# Knobs (environment):
#   LULL_BENCH_COUNT=N        runs of the whole set (default 3)
#   LULL_BENCH_SIZES="1000 5000"  cluster sizes (workloads named <size>Nodes
#                             in test/perf/scheduler/performance-config.yaml)
#   LULL_BENCH_IDLE=1         add the *_Idle workloads (heartbeats only)
#   LULL_BENCH_PROFILE=1      write cpu.pprof and mem.pprof of the whole run
#                             (pick one workload with LULL_BENCH_SIZES)
set -euo pipefail
ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
cd "$ROOT"
hack/build-binaries.sh etcd >/dev/null
export PATH="${ROOT}/_output/bin:${PATH}"   # scheduler_perf starts etcd from PATH
export CGO_ENABLED="${CGO_ENABLED:-0}"      # as make does: static builds share the build cache
out="${ROOT}/_output/bench-scheduler"
rm -rf "$out" && mkdir -p "$out"

count=${LULL_BENCH_COUNT:-3}
filter="performance,-short"
[[ "${LULL_BENCH_IDLE:-}" == 1 ]] || filter+=",-idle"
sizes=${LULL_BENCH_SIZES:-1000 5000}
if [[ "${1:-}" == "--short" ]]; then
  filter="performance,short" count=1 sizes=50
fi
[[ "$sizes" =~ ^[0-9\ ]+$ ]] || { echo "LULL_BENCH_SIZES must be node counts, got '$sizes'" >&2; exit 2; }
sizes_re=$(echo $sizes | tr ' ' '|')
bench="^BenchmarkPerfScheduling\$/_(${sizes_re})Nodes(_Idle)?\$"
profile=()
if [[ "${LULL_BENCH_PROFILE:-}" == 1 ]]; then
  profile=(-o "$out/perf.test" -cpuprofile "$out/cpu.pprof" -memprofile "$out/mem.pprof")
fi

echo "== scheduler_perf: sizes ${sizes}, ${count} run(s), label filter ${filter}; data items in ${out}"
start=$SECONDS
(cd test/perf/scheduler && go test -run '^$' -bench "$bench" -benchtime 1x -count "$count" -timeout 240m \
  "${profile[@]}" -perf-scheduling-label-filter="$filter" -data-items-dir="$out" . 2>&1 | tee "$out/bench.log" |
  grep -E '^(ok|FAIL|--- FAIL)|Error running' || true)
echo "== took $(( (SECONDS - start) / 60 )) min $(( (SECONDS - start) % 60 )) s; load: $(uptime)"
echo
go run ./test/perf/scheduler/summary "$out"
