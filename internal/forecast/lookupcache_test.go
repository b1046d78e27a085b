package forecast

import (
	"fmt"
	"math/rand"
	"sync"
	"testing"

	"github.com/stretchr/testify/require"
	v1 "k8s.io/api/core/v1"

	lullv1alpha1 "lull.dev/lull/api/v1alpha1"
)

// The cache answers what Lookup answers, for every node object and
// snapshot: leased, requested, labelled and plain nodes, across new
// snapshots (a lease taken, a label added), with more node objects than
// it has slots, and from many goroutines at once (run with -race).
func TestLookupCacheAgreesWithLookup(t *testing.T) {
	f, _, _ := newForecast(t, true)
	f.SetWindow(dailyWindow("daily"))
	const n = 40000 // more than the table's 2^15 slots: collisions and evictions
	nodes := make([]*v1.Node, n)
	for i := range nodes {
		lbls := map[string]string{"pool": "a"}
		if i%5 == 1 {
			lbls[lullv1alpha1.MaintenanceLabel] = "kernel-update"
		}
		nodes[i] = node(fmt.Sprintf("n-%d", i), lbls)
		if i%50 == 0 {
			f.SetNode(nodes[i]) // the others the forecast has not seen
		}
		if i%5 == 0 && i%50 == 0 {
			f.SetLease(leaseFor(nodes[i].Name, "bench", "1"))
		}
	}
	c := NewLookupCache()
	check := func(snap *Snapshot, seed int64) {
		var wg sync.WaitGroup
		for g := 0; g < 4; g++ {
			wg.Add(1)
			go func(g int) {
				defer wg.Done()
				r := rand.New(rand.NewSource(seed + int64(g)))
				for k := 0; k < n; k++ {
					nd := nodes[r.Intn(n)]
					want, got := snap.Lookup(nd), c.Lookup(snap, nd)
					if !sameForecast(want, got) {
						t.Errorf("node %s: Lookup %+v, cache %+v", nd.Name, want, got)
						return
					}
				}
			}(g)
		}
		wg.Wait()
	}
	check(f.Snapshot(), 1)
	before := f.Snapshot()
	f.SetLease(leaseFor("n-100", "other", "1"))
	f.SetNode(node("n-150", map[string]string{"pool": "a", lullv1alpha1.MaintenanceLabel: "kernel-update"}))
	require.NotSame(t, before, f.Snapshot())
	check(f.Snapshot(), 2)
	check(before, 3) // an older snapshot a cycle still holds
}

// sameForecast: both nil, or the same forecast (a computed one is a new
// object each time).
func sameForecast(a, b *Node) bool {
	if a == nil || b == nil {
		return a == b
	}
	return a.Name == b.Name && a.Certain == b.Certain && a.WindowOpen == b.WindowOpen && a.Disruption.Equal(b.Disruption) && a.Reason == b.Reason
}

// A node object whose maintenance label the snapshot has not seen (the
// scheduler's informer ahead of the forecast's) is never answered from
// the cache: it is computed, every time, as Lookup does — a node that
// registers already labelled is never taken for unlabelled.
func TestLookupCacheNeverRemembersALabelTheSnapshotHasNotSeen(t *testing.T) {
	f, _, _ := newForecast(t, true)
	plain := node("fresh", nil)
	f.SetNode(plain)
	c := NewLookupCache()
	snap := f.Snapshot()
	require.Nil(t, c.Lookup(snap, plain))
	labelled := node("fresh", map[string]string{lullv1alpha1.MaintenanceLabel: "hardware"})
	for i := 0; i < 3; i++ {
		got := c.Lookup(snap, labelled)
		require.NotNil(t, got, "a labelled node unseen by the forecast is computed")
		require.True(t, got.WindowOpen)
	}
	require.Nil(t, c.Lookup(snap, plain), "the unlabelled object still answers from its entry")
}

// An answer found costs no allocation and no lock.
func TestLookupCacheHitAllocatesNothing(t *testing.T) {
	f, _, _ := newForecast(t, true)
	n := node("n1", map[string]string{"pool": "a"})
	f.SetNode(n)
	c := NewLookupCache()
	snap := f.Snapshot()
	c.Lookup(snap, n)
	require.Zero(t, testing.AllocsPerRun(100, func() { c.Lookup(snap, n) }))
}

// The node objects an informer replaced do not pile up in the table: it
// starts afresh once it has taken twice as many answers as there are nodes
// (at least minRenewal), so it never holds more than that.
func TestLookupCacheHoldsBoundedOldObjects(t *testing.T) {
	f, _, _ := newForecast(t, true)
	c := NewLookupCache()
	const nodes = 100
	c.SetNodes(nodes)
	bound := max(minRenewal, 2*nodes)
	snap := f.Snapshot()
	for version := 0; version < 3*bound/nodes; version++ {
		for i := 0; i < nodes; i++ {
			// A new object for each node, as an informer's update makes.
			c.Lookup(snap, node(fmt.Sprintf("n-%d", i), map[string]string{"v": fmt.Sprint(version)}))
		}
		require.LessOrEqual(t, c.held(), bound, "version %d", version)
	}
	// A stable cluster keeps its answers: no renewal while nothing changes.
	objs := make([]*v1.Node, nodes)
	for i := range objs {
		objs[i] = node(fmt.Sprintf("n-%d", i), nil)
	}
	for round := 0; round < 3; round++ {
		for _, o := range objs {
			c.Lookup(snap, o)
		}
	}
	require.Zero(t, testing.AllocsPerRun(10, func() {
		for _, o := range objs {
			c.Lookup(snap, o)
		}
	}), "a stable cluster is answered from the table")
}
