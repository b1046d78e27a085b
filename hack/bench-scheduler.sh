#!/usr/bin/env bash
# Runs the scheduler_perf benchmark for NodeDisruption against the default
# profile (plain, and with the same nodes tainted) and prints each run's
# throughput, the ratios with their spread and the plugin's execution time
# percentiles.
#
#   hack/bench-scheduler.sh            1,000 and 5,000 nodes, 5 rounds
#   hack/bench-scheduler.sh --short    50 nodes, one round, to check the harness works
#
# Each run is one profile at one size in its own process (the test binary
# is built once), so no run inherits another's heap, goroutines or caches.
# A round runs every profile once per size, in an order shuffled per
# round (LULL_BENCH_SEED, printed, replays it), so no profile always runs
# first or last. The machine's other load is measured during every run:
# CPU time the whole machine spent (/proc/stat) minus the run's own (its
# rusage); a run during which other processes used more than
# LULL_BENCH_MAX_OTHER cores is rejected, recorded and run again (at most
# LULL_BENCH_RETRIES times). runs.tsv in the output folder lists every run,
# accepted or not, with its load.
#
# Knobs (environment):
#   LULL_BENCH_COUNT=N        rounds (default 5)
#   LULL_BENCH_SIZES="1000 5000"  cluster sizes (workloads named <size>Nodes
#                             in test/perf/scheduler/performance-config.yaml)
#   LULL_BENCH_MAX_OTHER=0.25 cores other processes may use during a run
#   LULL_BENCH_RETRIES=3      attempts per run before its figure is kept anyway (marked)
#   LULL_BENCH_SEED=N         the shuffle's seed (default: the time)
#   LULL_BENCH_BUSY=1         run with one busy core beside the benchmark (a
#                             nice'd busy loop, as a noisy neighbour): no run is
#                             rejected for it; runs.tsv records the load it made
#   LULL_BENCH_IDLE=1         add the *_Idle workloads (heartbeats only)
#   LULL_BENCH_PROFILE=1      write a cpu and mem profile per run
set -euo pipefail
ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
cd "$ROOT"
hack/build-binaries.sh etcd >/dev/null
export PATH="${ROOT}/_output/bin:${PATH}"   # scheduler_perf starts etcd from PATH
export CGO_ENABLED="${CGO_ENABLED:-0}"      # as make does: static builds share the build cache
out="${ROOT}/_output/bench-scheduler"
rm -rf "$out" && mkdir -p "$out"

count=${LULL_BENCH_COUNT:-5}
max_other=${LULL_BENCH_MAX_OTHER:-0.25}
retries=${LULL_BENCH_RETRIES:-3}
seed=${LULL_BENCH_SEED:-$(date +%s)}
filter="performance,-short"
[[ "${LULL_BENCH_IDLE:-}" == 1 ]] || filter+=",-idle"
sizes=${LULL_BENCH_SIZES:-1000 5000}
if [[ "${1:-}" == "--short" ]]; then
  filter="performance,short" count=1 sizes=50
fi
[[ "$sizes" =~ ^[0-9\ ]+$ ]] || { echo "LULL_BENCH_SIZES must be node counts, got '$sizes'" >&2; exit 2; }
workloads=()
for size in $sizes; do
  workloads+=("${size}Nodes")
  [[ "${LULL_BENCH_IDLE:-}" == 1 ]] && workloads+=("${size}Nodes_Idle")
done
profiles=(Default DefaultTainted NodeDisruption)

if [[ "${LULL_BENCH_BUSY:-}" == 1 ]]; then
  # One busy core for the whole run, at the lowest priority, as a noisy
  # neighbour would be; killed when the script ends.
  nice -n 19 bash -c 'while :; do :; done' &
  busy_pid=$!
  trap 'kill "$busy_pid" 2>/dev/null' EXIT
  max_other=2
  echo "== with one busy core beside the benchmark (pid ${busy_pid}, nice 19)"
fi
echo "== scheduler_perf: ${workloads[*]}, ${count} round(s), seed ${seed}, runs rejected above ${max_other} other cores; output in ${out}"
(cd test/perf/scheduler && go test -c -o "$out/perf.test" .)
hz=$(getconf CLK_TCK)
# busy: the machine's CPU time so far in clock ticks (user, nice, system,
# irq, softirq, steal; not idle or iowait).
busy() { awk '/^cpu /{print $2+$3+$4+$7+$8+$9}' /proc/stat; }
# cpu_of FILE: the children's CPU seconds in FILE, written by bash's times
# (run in this shell, not in a $(...) subshell, whose children are others).
cpu_of() { tail -n 1 "$1" | awk '{ split($1,u,"m"); split($2,s,"m"); print u[1]*60+u[2]+s[1]*60+s[2] }'; }
RANDOM=$seed
printf 'round\tworkload\tprofile\tattempt\twall_s\town_cpu_s\tother_cores\tloadavg\tverdict\n' >"$out/runs.tsv"
start=$SECONDS
for round in $(seq 1 "$count"); do
  for w in "${workloads[@]}"; do
    # Fisher-Yates on the profiles, from the seeded RANDOM.
    order=("${profiles[@]}")
    for ((i = ${#order[@]} - 1; i > 0; i--)); do
      j=$((RANDOM % (i + 1))); t=${order[i]}; order[i]=${order[j]}; order[j]=$t
    done
    for p in "${order[@]}"; do
      [[ "$w" == *_Idle && "$p" == DefaultTainted ]] && continue   # no such workload
      for attempt in $(seq 1 "$retries"); do
        dir="$out/runs/r${round}-${w}-${p}-a${attempt}"
        mkdir -p "$dir"
        prof=()
        [[ "${LULL_BENCH_PROFILE:-}" == 1 ]] && prof=(-test.cpuprofile "$dir/cpu.pprof" -test.memprofile "$dir/mem.pprof")
        times >"$out/.times0"; b0=$(busy) t0=$(date +%s.%N)
        (cd test/perf/scheduler && "$out/perf.test" -test.run '^$' -test.bench "^BenchmarkPerfScheduling\$/^${p}_${w}\$" \
          -test.benchtime 1x -test.timeout 120m "${prof[@]}" -perf-scheduling-label-filter="$filter" \
          -data-items-dir="$dir" >"$dir/bench.log" 2>&1) || { tail -n 30 "$dir/bench.log" >&2; echo "== ${p}_${w} failed (log: $dir/bench.log)" >&2; exit 1; }
        b1=$(busy) t1=$(date +%s.%N); times >"$out/.times1"
        c0=$(cpu_of "$out/.times0") c1=$(cpu_of "$out/.times1")
        read -r wall own other < <(awk -v b0="$b0" -v b1="$b1" -v c0="$c0" -v c1="$c1" -v t0="$t0" -v t1="$t1" -v hz="$hz" \
          'BEGIN { wall=t1-t0; own=c1-c0; other=((b1-b0)/hz-own)/wall; if (other<0) other=0; printf "%.1f %.1f %.2f\n", wall, own, other }')
        load=$(cut -d' ' -f1-3 /proc/loadavg)
        verdict=accepted
        if awk -v o="$other" -v m="$max_other" 'BEGIN{exit !(o>m)}'; then
          verdict=rejected
          [[ "$attempt" == "$retries" ]] && verdict="kept (rejected ${retries} times)"
        fi
        printf '%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\n' "$round" "$w" "$p" "$attempt" "$wall" "$own" "$other" "$load" "$verdict" >>"$out/runs.tsv"
        echo "   round ${round} ${p}_${w}: ${wall} s, other processes ${other} cores: ${verdict}"
        if [[ "$verdict" != rejected ]]; then
          # Named by round, so the summary pairs each profile's run i.
          items=("$dir"/BenchmarkPerfScheduling_benchmark_*.json)
          [[ -f "${items[0]}" ]] || { echo "== ${p}_${w} wrote no data items (log: $dir/bench.log)" >&2; exit 1; }
          cp "${items[0]}" "$out/BenchmarkPerfScheduling_benchmark_lull_r$(printf %03d "$round")_${w}_${p}.json"
          break
        fi
      done
    done
  done
done
echo "== took $(( (SECONDS - start) / 60 )) min $(( (SECONDS - start) % 60 )) s; rejected runs: $(grep -c $'\trejected$' "$out/runs.tsv" || true); load now: $(uptime)"
echo
go run ./test/perf/scheduler/summary "$out"
