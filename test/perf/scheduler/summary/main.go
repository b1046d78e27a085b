// Command summary reads the data items scheduler_perf wrote for
// BenchmarkPerfScheduling and prints, per workload, each run's scheduling
// throughput of the default profile, the default profile with the same
// nodes tainted, and the NodeDisruption profile, the ratios of the last to
// the first two (of the means and run by run), and the plugin's execution
// time percentiles.
//
//	go run ./test/perf/scheduler/summary DIR
package main

import (
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"sort"
	"strconv"
	"strings"
)

type dataItems struct {
	DataItems []struct {
		Data   map[string]float64 `json:"data"`
		Unit   string             `json:"unit"`
		Labels map[string]string  `json:"labels"`
	} `json:"dataItems"`
}

func mean(xs []float64) float64 {
	if len(xs) == 0 {
		return 0
	}
	sum := 0.0
	for _, x := range xs {
		sum += x
	}
	return sum / float64(len(xs))
}

func rounded(xs []float64) []string {
	out := make([]string, len(xs))
	for i, x := range xs {
		out[i] = fmt.Sprintf("%.0f", x)
	}
	return out
}

// firstBucket notes when a percentile lies in the histogram's first
// bucket, where the value is an interpolation and only "< 10 µs" is known.
func firstBucket(ms float64) string {
	if ms <= 0.01 {
		return "  (all in the first bucket: < 10 µs)"
	}
	return ""
}

// target is the lowest acceptable throughput ratio of the lull profile
// against the default profile with the same nodes tainted.
const target = 0.97

// profiles in print order, with their labels.
var profiles = []struct{ name, label string }{
	{"Default", "default"},
	{"DefaultTainted", "default, same nodes tainted"},
	{"NodeDisruption", "with NodeDisruption"},
}

// nodesOf is the node count a workload name starts with ("5000Nodes").
func nodesOf(workload string) int {
	n, _ := strconv.Atoi(workload[:len(workload)-len(strings.TrimLeft(workload, "0123456789"))])
	return n
}

// ratios prints lull/base: of the means, and run by run (run i of each
// profile ran in the same round, hack/bench-scheduler.sh), with the range
// of the per-run ratios.
func ratios(label string, lull, base []float64) string {
	per := make([]string, 0, len(lull))
	for i := range min(len(lull), len(base)) {
		per = append(per, fmt.Sprintf("%.2f", lull[i]/base[i]))
	}
	line := fmt.Sprintf("  ratio lull/%-28s %.3f  per run [%s]", label, mean(lull)/mean(base), strings.Join(per, " "))
	if rs := runRatios(lull, base); len(rs) > 1 {
		line += fmt.Sprintf(" range %.2f–%.2f", slices.Min(rs), slices.Max(rs))
	}
	return line
}

// runRatios are lull[i]/base[i], run by run.
func runRatios(lull, base []float64) []float64 {
	var out []float64
	for i := range min(len(lull), len(base)) {
		if base[i] > 0 {
			out = append(out, lull[i]/base[i])
		}
	}
	return out
}

// printWorkload prints one workload's profiles and ratios; false when a
// figure the ratios need is missing.
func printWorkload(w string, byProfile map[string][]float64) bool {
	fmt.Printf("\n%s\n", w)
	for _, p := range profiles {
		if xs := byProfile[p.name]; len(xs) > 0 {
			fmt.Printf("  %-28s %7.1f  [%s]  spread %.0f%%\n", p.label, mean(xs), strings.Join(rounded(xs), " "), spread(xs)*100)
		}
	}
	d, l, dt := byProfile["Default"], byProfile["NodeDisruption"], byProfile["DefaultTainted"]
	if mean(d) == 0 || mean(l) == 0 {
		fmt.Println("  ratio n/a (a throughput figure is missing; run longer)")
		return false
	}
	fmt.Println(ratios("default", l, d))
	if mean(dt) > 0 {
		r := mean(l) / mean(dt)
		verdict := "met"
		if r < target {
			verdict = "MISSED"
		}
		fmt.Printf("%s  (the plugin's own cost; target ≥ %.2f: %s)\n", ratios("tainted default", l, dt), target, verdict)
	}
	return true
}

// spread is (max-min)/mean of the runs.
func spread(xs []float64) float64 {
	if len(xs) < 2 || mean(xs) == 0 {
		return 0
	}
	return (slices.Max(xs) - slices.Min(xs)) / mean(xs)
}

func main() {
	if len(os.Args) != 2 {
		fmt.Fprintln(os.Stderr, "usage: summary DIR")
		os.Exit(2)
	}
	files, _ := filepath.Glob(filepath.Join(os.Args[1], "BenchmarkPerfScheduling_benchmark_lull_*.json"))
	if len(files) == 0 {
		fmt.Fprintln(os.Stderr, "no BenchmarkPerfScheduling data items in", os.Args[1])
		os.Exit(1)
	}
	sort.Strings(files)
	items, err := readRuns(files)
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
	throughput, pluginRows := tabulate(items)
	workloads := make([]string, 0, len(throughput))
	for w := range throughput {
		workloads = append(workloads, w)
	}
	sort.Slice(workloads, func(i, j int) bool {
		a, b := workloads[i], workloads[j]
		return nodesOf(a) < nodesOf(b) || nodesOf(a) == nodesOf(b) && a < b
	})
	fmt.Printf("sources: %s\n\n", strings.Join(files, ", "))
	fmt.Println("scheduling throughput, pods/s: mean over runs of each run's average [each run, in run order]")
	missing := false
	for _, w := range workloads {
		if !printWorkload(w, throughput[w]) {
			missing = true
		}
	}
	sort.Strings(pluginRows)
	fmt.Println("\nplugin execution time, NodeDisruption (lull profile) beside TaintToleration (tainted default), sampled cycles; Filter and Score are per node")
	for _, r := range pluginRows {
		fmt.Println(r)
	}
	if missing || len(workloads) == 0 {
		os.Exit(1)
	}
}

// readRuns reads the data items of each run's file (one file per run:
// go test -count).
func readRuns(files []string) (dataItems, error) {
	var items dataItems
	for _, f := range files {
		data, err := os.ReadFile(f)
		if err != nil {
			return items, err
		}
		var run dataItems
		if err := json.Unmarshal(data, &run); err != nil {
			return items, err
		}
		items.DataItems = append(items.DataItems, run.DataItems...)
	}
	return items, nil
}

// tabulate sorts the data items into the throughput of each workload by
// profile (each run's average pods/s) and the plugin rows: NodeDisruption
// where it filters the leased nodes, beside TaintToleration where it
// filters the same nodes tainted.
func tabulate(items dataItems) (throughput map[string]map[string][]float64, pluginRows []string) {
	throughput = map[string]map[string][]float64{} // workload -> profile -> average pods/s per run
	for _, it := range items.DataItems {
		// Name is BenchmarkPerfScheduling/<profile>_<workload>/<workload>/<namespace>.
		parts := strings.SplitN(strings.TrimPrefix(it.Labels["Name"], "BenchmarkPerfScheduling/"), "/", 3)
		if len(parts) < 2 {
			continue
		}
		tc, _, _ := strings.Cut(parts[0], "_")
		workload := parts[1]
		switch {
		case it.Labels["Metric"] == "SchedulingThroughput":
			if throughput[workload] == nil {
				throughput[workload] = map[string][]float64{}
			}
			throughput[workload][tc] = append(throughput[workload][tc], it.Data["Average"])
		case it.Labels["Metric"] == "scheduler_plugin_execution_duration_seconds" &&
			(it.Labels["plugin"] == "NodeDisruption" && tc == "NodeDisruption" || it.Labels["plugin"] == "TaintToleration" && tc == "DefaultTainted"):
			// NodeDisruption where it filters the leased nodes, beside
			// TaintToleration where it filters the same nodes tainted.
			ep := it.Labels["extension_point"]
			if ep != "Filter" && ep != "Score" && ep != "PreFilter" && ep != "PreScore" {
				continue
			}
			// scheduler_perf reports durations in ms, interpolated within
			// histogram buckets whose smallest bound is 10 µs.
			pluginRows = append(pluginRows, fmt.Sprintf("%-15s %-15s %-10s mean %6.2f µs  p50 %5.1f µs  p90 %5.1f µs  p99 %5.1f µs%s",
				workload, it.Labels["plugin"], ep, it.Data["Average"]*1000, it.Data["Perc50"]*1000, it.Data["Perc90"]*1000, it.Data["Perc99"]*1000, firstBucket(it.Data["Perc99"])))
		}
	}
	return throughput, pluginRows
}
