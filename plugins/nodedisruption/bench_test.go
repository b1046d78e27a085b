package nodedisruption

import (
	"context"
	"fmt"
	"math/rand"
	"slices"
	"sort"
	"testing"
	"time"

	v1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	fwk "k8s.io/kube-scheduler/framework"
	"k8s.io/kubernetes/pkg/scheduler/framework"
	"k8s.io/kubernetes/pkg/scheduler/framework/plugins/feature"
	"k8s.io/kubernetes/pkg/scheduler/framework/plugins/tainttoleration"

	lullv1alpha1 "lull.dev/lull/api/v1alpha1"
)

// benchFixture builds n nodes: 20% leased, 20% requested for maintenance
// behind a window, the rest plain, as in the scheduler_perf workload. With
// done, another 20% still carry the maintenance label of a request that is
// complete (nothing forecast: the state of a cluster after a rollout until
// the labels are removed).
func benchFixture(b *testing.B, n int, done bool) (*fixture, []fwk.NodeInfo) {
	var nodes []*v1.Node
	for i := 0; i < n; i++ {
		lbls := map[string]string{"pool": "a"}
		if i%5 == 1 || (done && i%5 == 2) {
			lbls[lullv1alpha1.MaintenanceLabel] = "kernel-update"
		}
		nodes = append(nodes, mkNode(fmt.Sprintf("node-%d", i), lbls))
	}
	fx := newFixture(b, defaultArgs(), nodes...)
	for i := 2; done && i < n; i += 5 {
		name := fmt.Sprintf("node-%d", i)
		fx.f.SetMaintenance(&lullv1alpha1.NodeMaintenance{ObjectMeta: metav1.ObjectMeta{Name: name},
			Spec: lullv1alpha1.NodeMaintenanceSpec{NodeName: name, Classes: []string{"kernel-update"}, Complete: true}})
	}
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
	fx, infos := benchFixture(b, 1000, false)
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

// BenchmarkPerPodScaling measures what one pod costs the plugin at 1,000
// and 5,000 nodes, both fixtures in one loop so both sizes see the same
// machine (20% leased, 20% requested behind a window, as in the
// scheduler_perf workload, and 20% labelled with their maintenance
// complete):
//   - prepod: PreFilter+PreScore for one pod (timed over a batch of pods);
//   - pernode: Filter+Score for one node, over every node of the fixture.
//
// Each is reported per size (median over iterations), with the ratio
// 5,000/1,000: 1.0 means the cost does not grow with the cluster (target:
// prepod ratio ≤ 1.2, where a per-pod walk over the nodes would show as
// ≈ 5).
func BenchmarkPerPodScaling(b *testing.B) {
	type side struct {
		n               int
		fx              *fixture
		infos           []fwk.NodeInfo
		prePod, perNode []float64 // ns, one sample per iteration
	}
	sides := []*side{{n: 1000}, {n: 5000}}
	for _, s := range sides {
		s.fx, s.infos = benchFixture(b, s.n, true)
	}
	ctx := context.Background()
	const batch = 64
	pods := make([]*v1.Pod, batch)
	for i := range pods {
		pods[i] = mkPod(fmt.Sprintf("p-%d", i))
	}
	states := make([]fwk.CycleState, batch)
	b.ReportAllocs()
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		for _, s := range sides {
			for j := range states {
				states[j] = framework.NewCycleState()
			}
			start := time.Now()
			for j, pod := range pods {
				if _, st := s.fx.pl.PreFilter(ctx, states[j], pod, s.infos); !st.IsSuccess() {
					b.Fatal(st)
				}
				if st := s.fx.pl.PreScore(ctx, states[j], pod, s.infos); !st.IsSuccess() {
					b.Fatal(st)
				}
			}
			s.prePod = append(s.prePod, float64(time.Since(start).Nanoseconds())/batch)
			start = time.Now()
			for _, ni := range s.infos {
				_ = s.fx.pl.Filter(ctx, states[0], pods[0], ni)
				_, _ = s.fx.pl.Score(ctx, states[0], pods[0], ni)
			}
			s.perNode = append(s.perNode, float64(time.Since(start).Nanoseconds())/float64(s.n))
		}
	}
	b.StopTimer()
	// Medians: on a loaded machine a preempted iteration would dominate a
	// mean.
	perPod := func(s *side) float64 { return median(s.prePod) }
	perNode := func(s *side) float64 { return median(s.perNode) }
	small, large := sides[0], sides[1]
	b.ReportMetric(perPod(small), "prepod-1000-ns")
	b.ReportMetric(perPod(large), "prepod-5000-ns")
	b.ReportMetric(perPod(large)/perPod(small), "prepod-ratio")
	b.ReportMetric(perNode(small), "pernode-1000-ns")
	b.ReportMetric(perNode(large), "pernode-5000-ns")
	b.ReportMetric(perNode(large)/perNode(small), "pernode-ratio")
}

func median(xs []float64) float64 {
	s := slices.Clone(xs)
	slices.Sort(s)
	return s[len(s)/2]
}

// BenchmarkVsTaintToleration is the plugin's hot path beside its anchor,
// measured in the same loop: NodeDisruption's Filter and Score per node
// call against TaintToleration's on the same nodes with the same 20%
// tainted NoSchedule (the DefaultTainted profile of make bench-scheduler,
// where the taint excludes what the lease does), at 1,000 and 5,000 nodes.
// Blocks of one call per node alternate between the two plugins; each
// reports ns per call and the ratio NodeDisruption / TaintToleration
// (lower is better; 1.0 costs what the taint costs).
func BenchmarkVsTaintToleration(b *testing.B) {
	for _, n := range []int{1000, 5000} {
		b.Run(fmt.Sprintf("nodes=%d", n), func(b *testing.B) {
			fx, infos := benchFixture(b, n, false)
			tainted := make([]fwk.NodeInfo, n)
			for i, ni := range infos {
				nd := ni.Node().DeepCopy()
				if i%5 == 0 {
					nd.Spec.Taints = []v1.Taint{{Key: "lull.dev/disruption", Effect: v1.TaintEffectNoSchedule}}
				}
				tainted[i] = nodeInfo(nd)
			}
			ttp, err := tainttoleration.New(context.Background(), nil, nil, feature.Features{})
			if err != nil {
				b.Fatal(err)
			}
			tt := ttp.(*tainttoleration.TaintToleration)
			ctx := context.Background()
			pod := mkPod("p")
			cs, ttcs := framework.NewCycleState(), framework.NewCycleState()
			if _, st := fx.pl.PreFilter(ctx, cs, pod, infos); !st.IsSuccess() {
				b.Fatal(st)
			}
			if st := fx.pl.PreScore(ctx, cs, pod, infos); !st.IsSuccess() {
				b.Fatal(st)
			}
			if st := tt.PreScore(ctx, ttcs, pod, tainted); !st.IsSuccess() {
				b.Fatal(st)
			}
			order := rand.New(rand.NewSource(1)).Perm(n)
			var ndF, ttF, ndS, ttS time.Duration
			b.ResetTimer()
			blocks := 0
			for done := 0; done < b.N; done += n {
				blocks++
				start := time.Now()
				for _, i := range order {
					_ = fx.pl.Filter(ctx, cs, pod, infos[i])
				}
				ndF += time.Since(start)
				start = time.Now()
				for _, i := range order {
					_ = tt.Filter(ctx, ttcs, pod, tainted[i])
				}
				ttF += time.Since(start)
				start = time.Now()
				for _, i := range order {
					_, _ = fx.pl.Score(ctx, cs, pod, infos[i])
				}
				ndS += time.Since(start)
				start = time.Now()
				for _, i := range order {
					_, _ = tt.Score(ctx, ttcs, pod, tainted[i])
				}
				ttS += time.Since(start)
			}
			calls := float64(blocks * n)
			per := func(d time.Duration) float64 { return float64(d.Nanoseconds()) / calls }
			b.ReportMetric(per(ndF), "filter-ns")
			b.ReportMetric(per(ttF), "taint-filter-ns")
			b.ReportMetric(float64(ndF)/float64(ttF), "filter/taint")
			b.ReportMetric(per(ndS), "score-ns")
			b.ReportMetric(per(ttS), "taint-score-ns")
			b.ReportMetric(float64(ndS)/float64(ttS), "score/taint")
		})
	}
}
