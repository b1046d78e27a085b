// Command summary reads the data items scheduler_perf wrote for
// BenchmarkPerfScheduling and prints, per workload, the scheduling
// throughput of the NodeDisruption profile against the default profile
// measured in the same run, and the plugin's Filter and Score execution
// time percentiles.
//
//	go run ./test/perf/scheduler/summary DIR
package main

import (
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"sort"
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
	var items dataItems
	for _, f := range files { // one file per run (go test -count)
		data, err := os.ReadFile(f)
		if err != nil {
			fmt.Fprintln(os.Stderr, err)
			os.Exit(1)
		}
		var run dataItems
		if err := json.Unmarshal(data, &run); err != nil {
			fmt.Fprintln(os.Stderr, err)
			os.Exit(1)
		}
		items.DataItems = append(items.DataItems, run.DataItems...)
	}
	throughput := map[string]map[string][]float64{} // workload -> profile -> average pods/s per run
	var pluginRows []string
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
		case it.Labels["Metric"] == "scheduler_plugin_execution_duration_seconds" && it.Labels["plugin"] == "NodeDisruption":
			ep := it.Labels["extension_point"]
			if ep != "Filter" && ep != "Score" && ep != "PreFilter" && ep != "PreScore" {
				continue
			}
			// scheduler_perf reports durations in ms, interpolated within
			// histogram buckets whose smallest bound is 10 µs.
			pluginRows = append(pluginRows, fmt.Sprintf("%-15s %-10s mean %6.2f µs  p50 %5.1f µs  p90 %5.1f µs  p99 %5.1f µs%s",
				workload, ep, it.Data["Average"]*1000, it.Data["Perc50"]*1000, it.Data["Perc90"]*1000, it.Data["Perc99"]*1000, firstBucket(it.Data["Perc99"])))
		}
	}
	workloads := make([]string, 0, len(throughput))
	for w := range throughput {
		workloads = append(workloads, w)
	}
	sort.Strings(workloads)
	fmt.Printf("sources: %s\n\n", strings.Join(files, ", "))
	fmt.Println("scheduling throughput (pods/s: mean over runs of each run's average; per run in brackets)")
	missing := false
	for _, w := range workloads {
		d, l := throughput[w]["Default"], throughput[w]["NodeDisruption"]
		if mean(d) == 0 || mean(l) == 0 {
			fmt.Printf("%-15s default %7.1f  lull %7.1f  ratio n/a (a throughput figure is missing; run longer)\n", w, mean(d), mean(l))
			missing = true
			continue
		}
		fmt.Printf("%-15s default %7.1f %v  lull %7.1f %v  ratio lull/default %.3f\n", w, mean(d), rounded(d), mean(l), rounded(l), mean(l)/mean(d))
		if dt := throughput[w]["DefaultTainted"]; mean(dt) > 0 {
			fmt.Printf("%-15s default with the same nodes tainted %7.1f %v  ratio lull/that %.3f (the plugin's own cost)\n", w, mean(dt), rounded(dt), mean(l)/mean(dt))
		}
	}
	sort.Strings(pluginRows)
	fmt.Println("\nNodeDisruption plugin execution time (sampled cycles; Filter and Score are per node)")
	for _, r := range pluginRows {
		fmt.Println(r)
	}
	if missing || len(workloads) == 0 {
		os.Exit(1)
	}
}
