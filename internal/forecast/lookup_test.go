package forecast

import (
	"fmt"
	"math/rand"
	"testing"
	"time"

	v1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	testingclock "k8s.io/utils/clock/testing"

	lullv1alpha1 "lull.dev/lull/api/v1alpha1"
	"lull.dev/lull/internal/settings"
)

// BenchmarkLookup measures Snapshot.Lookup as the scheduler calls it: for
// node objects spread over the heap (each decoded on its own, with the
// labels a real node carries), in an order that defeats the CPU caches.
// 20% of the nodes are leased and 20% requested, as in scheduler_perf.
func BenchmarkLookup(b *testing.B) {
	for _, n := range []int{1000, 5000} {
		b.Run(fmt.Sprintf("nodes=%d", n), func(b *testing.B) {
			f := New(Options{Settings: settings.Settings{NodesWithoutWindow: settings.NoWindowPermissive}, Clock: testingclock.NewFakeClock(t0)})
			f.SetSynced()
			defer f.Stop()
			nodes := make([]*v1.Node, n)
			var ballast [][]byte
			for i := range nodes {
				lbls := map[string]string{
					"kubernetes.io/hostname": fmt.Sprintf("ip-10-0-%d-%d.ec2.internal", i/250, i%250),
					"kubernetes.io/os":       "linux", "kubernetes.io/arch": "amd64",
					"node.kubernetes.io/instance-type": "m5.large", "topology.kubernetes.io/zone": "eu-west-1a",
					"topology.kubernetes.io/region": "eu-west-1", "pool": "a", "team": "payments", "rack": fmt.Sprint(i % 40),
				}
				if i%5 == 1 {
					lbls[lullv1alpha1.MaintenanceLabel] = "kernel-update"
				}
				nodes[i] = &v1.Node{ObjectMeta: metav1.ObjectMeta{Name: fmt.Sprintf("ip-10-0-%d-%d.ec2.internal", i/250, i%250), Labels: lbls,
					Annotations: map[string]string{"a": "b"}}}
				ballast = append(ballast, make([]byte, 2048)) // the rest of a decoded node
				f.SetNode(nodes[i])
				if i%5 == 0 {
					f.SetLease(leaseFor(nodes[i].Name, "bench", "1"))
				}
			}
			_ = ballast
			order := rand.New(rand.NewSource(1)).Perm(n)
			snap := f.Snapshot()
			cache := NewLookupCache()
			// Lookup and the scheduler's cache, interleaved in blocks of n
			// calls so that both see the same machine: the ratio
			// cached/direct is the figure (the cache is warm after its
			// first block, as it is after the scheduler's first pod).
			var direct, cached time.Duration
			b.ResetTimer()
			blocked := 0
			for done := 0; done < b.N; done += n {
				start := time.Now()
				for i := 0; i < n; i++ {
					if nd := snap.Lookup(nodes[order[i]]); nd != nil && nd.Certain {
						blocked++
					}
				}
				direct += time.Since(start)
				start = time.Now()
				for i := 0; i < n; i++ {
					if nd := cache.Lookup(snap, nodes[order[i]]); nd != nil && nd.Certain {
						blocked++
					}
				}
				cached += time.Since(start)
			}
			calls := float64((b.N + n - 1) / n * n)
			b.ReportMetric(float64(direct.Nanoseconds())/calls, "lookup-ns")
			b.ReportMetric(float64(cached.Nanoseconds())/calls, "cached-ns")
			b.ReportMetric(float64(cached)/float64(direct), "cached/lookup")
			if blocked == 0 {
				b.Fatal("nothing blocked")
			}
		})
	}
}
