package nodedisruption

import (
	"context"
	"fmt"
	"sort"
	"testing"
	"time"

	v1 "k8s.io/api/core/v1"
	fwk "k8s.io/kube-scheduler/framework"
	"k8s.io/kubernetes/pkg/scheduler/framework"

	lullv1alpha1 "lull.dev/lull/api/v1alpha1"
)

// benchNodes builds n nodes: 20% leased, 20% requested for maintenance
// behind a window, the rest plain, as in the scheduler_perf workload.
func benchFixture(b *testing.B, n int) (*fixture, []fwk.NodeInfo) {
	var nodes []*v1.Node
	for i := 0; i < n; i++ {
		lbls := map[string]string{"pool": "a"}
		if i%5 == 1 {
			lbls[lullv1alpha1.MaintenanceLabel] = "kernel-update"
		}
		nodes = append(nodes, mkNode(fmt.Sprintf("node-%d", i), lbls))
	}
	fx := newFixture(b, defaultArgs(), nodes...)
	fx.f.SetWindow(mkWindow("daily", "a", "12:00"))
	for i := 0; i < n; i += 5 {
		fx.f.SetLease(mkLease(fmt.Sprintf("node-%d", i), "bench"))
	}
	infos := make([]fwk.NodeInfo, n)
	for i, nd := range nodes {
		infos[i] = nodeInfo(nd)
	}
	return fx, infos
}

// BenchmarkFilterScorePerNode measures Filter and Score per node call over
// 1000 nodes and reports p50/p99 per call (target: p99 ≤ 20 µs) against a
// baseline of an empty plugin call measured in the same run.
func BenchmarkFilterScorePerNode(b *testing.B) {
	fx, infos := benchFixture(b, 1000)
	ctx := context.Background()
	pod := mkPod("p")
	cs := framework.NewCycleState()
	if _, st := fx.pl.PreFilter(ctx, cs, pod, infos); !st.IsSuccess() {
		b.Fatal(st)
	}
	if st := fx.pl.PreScore(ctx, cs, pod, infos); !st.IsSuccess() {
		b.Fatal(st)
	}
	measure := func(b *testing.B, call func(fwk.NodeInfo)) {
		samples := make([]time.Duration, 0, b.N)
		b.ResetTimer()
		for i := 0; i < b.N; i++ {
			ni := infos[i%len(infos)]
			start := time.Now()
			call(ni)
			samples = append(samples, time.Since(start))
		}
		b.StopTimer()
		sort.Slice(samples, func(i, j int) bool { return samples[i] < samples[j] })
		b.ReportMetric(float64(samples[len(samples)/2].Nanoseconds()), "p50-ns")
		b.ReportMetric(float64(samples[len(samples)*99/100].Nanoseconds()), "p99-ns")
	}
	b.Run("Filter", func(b *testing.B) {
		measure(b, func(ni fwk.NodeInfo) { _ = fx.pl.Filter(ctx, cs, pod, ni) })
	})
	b.Run("Score", func(b *testing.B) {
		measure(b, func(ni fwk.NodeInfo) { _, _ = fx.pl.Score(ctx, cs, pod, ni) })
	})
	b.Run("Baseline", func(b *testing.B) {
		// The cost of the measurement itself and a node lookup.
		measure(b, func(ni fwk.NodeInfo) { _ = ni.Node().Name })
	})
}
