package budget

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/intstr"
	clocktesting "k8s.io/utils/clock/testing"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/client/fake"
	"sigs.k8s.io/controller-runtime/pkg/client/interceptor"

	lullv1alpha1 "lull.dev/lull/api/v1alpha1"
	"lull.dev/lull/internal/lullscheme"
)

func ledgerFixture(t *testing.T) (client.Client, *lullv1alpha1.MaintenanceWindow, map[string]*lullv1alpha1.NodeMaintenance) {
	t.Helper()
	w := &lullv1alpha1.MaintenanceWindow{ObjectMeta: metav1.ObjectMeta{Name: "pool"},
		Spec: lullv1alpha1.MaintenanceWindowSpec{MaxUnavailable: ptr.To(intstr.FromInt32(1))}}
	objs := []client.Object{w}
	nms := map[string]*lullv1alpha1.NodeMaintenance{}
	for _, n := range []string{"a", "b"} {
		objs = append(objs, &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: n}})
		nm := &lullv1alpha1.NodeMaintenance{ObjectMeta: metav1.ObjectMeta{Name: n, UID: types.UID("uid-" + n)},
			Spec: lullv1alpha1.NodeMaintenanceSpec{NodeName: n, Classes: []string{"kernel-update"}}}
		nms[n] = nm
		objs = append(objs, nm)
	}
	c := fake.NewClientBuilder().WithScheme(lullscheme.New()).WithObjects(objs...).
		WithStatusSubresource(&lullv1alpha1.NodeMaintenance{}).Build()
	return c, w, nms
}

// inWindow makes the budget request of a node that window w governs.
func inWindow(w *lullv1alpha1.MaintenanceWindow) func(node string) Request {
	return func(n string) Request {
		return Request{Node: n, Windows: []*lullv1alpha1.MaintenanceWindow{w}, DefaultMaxUnavailable: 1}
	}
}

// reserveA takes node a's slot of window w for l, as the first request.
func reserveA(t *testing.T, l *Ledger, c client.Reader, w *lullv1alpha1.MaintenanceWindow, a *lullv1alpha1.NodeMaintenance) {
	t.Helper()
	res, err := l.Reserve(context.Background(), c, a, inWindow(w)("a"))
	require.NoError(t, err)
	require.True(t, res.Free)
}

// A reservation is a write of the ledger: the second node of a
// maxUnavailable 1 window is refused while the first holds the slot,
// even though neither request's status says it is disrupting yet.
func TestLedgerReserveRelease(t *testing.T) {
	c, w, nms := ledgerFixture(t)
	ctx := context.Background()
	l := &Ledger{Client: c, Live: c, Namespace: "lull-system", Holder: "lull-drainer/x"}
	req := inWindow(w)
	res, err := l.Reserve(ctx, c, nms["a"], req("a"))
	require.NoError(t, err)
	require.True(t, res.Free)
	entries, err := l.Entries(ctx)
	require.NoError(t, err)
	assert.Equal(t, Entry{Request: "a", UID: "uid-a", Holder: "lull-drainer/x", Since: entries["a"].Since, Budgets: []string{"pool"}}, entries["a"])

	// Another replica's ledger, with its own view: it sees the slot taken.
	other := &Ledger{Client: c, Live: c, Namespace: "lull-system", Holder: "lull-drainer/y"}
	res, err = other.Reserve(ctx, c, nms["b"], req("b"))
	require.NoError(t, err)
	assert.False(t, res.Free)
	assert.Equal(t, "window pool allows 1 node(s) disrupted at once; 1 in use", res.Message)
	// Reserving again for the holder keeps its slot.
	res, err = other.Reserve(ctx, c, nms["a"], req("a"))
	require.NoError(t, err)
	assert.True(t, res.Free)

	// A release by a request that does not hold the slot changes nothing.
	released, err := other.Release(ctx, "a", "uid-of-an-older-request")
	require.NoError(t, err)
	require.False(t, released, "another request's slot stays")
	released, err = l.Release(ctx, "a", "uid-a")
	require.NoError(t, err)
	require.True(t, released)
	res, err = other.Reserve(ctx, c, nms["b"], req("b"))
	require.NoError(t, err)
	assert.True(t, res.Free)

	// A finished request's slot is dropped by the next reservation.
	nms["b"].Status.Phase = lullv1alpha1.PhaseCompleted
	require.NoError(t, c.Status().Update(ctx, nms["b"]))
	res, err = l.Reserve(ctx, c, nms["a"], req("a"))
	require.NoError(t, err)
	assert.True(t, res.Free)
	entries, err = l.Entries(ctx)
	require.NoError(t, err)
	assert.Equal(t, []string{"a"}, sortedNodes(entries))
}

// A ledger entry that cannot be read still counts (fail closed).
func TestLedgerUnreadableEntryCounts(t *testing.T) {
	c, w, nms := ledgerFixture(t)
	ctx := context.Background()
	require.NoError(t, c.Create(ctx, &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Namespace: "lull-system", Name: DefaultLedgerName},
		Data: map[string]string{"a": "not json"}}))
	l := &Ledger{Client: c, Live: c, Namespace: "lull-system"}
	res, err := l.Reserve(ctx, c, nms["b"], Request{Node: "b", Windows: []*lullv1alpha1.MaintenanceWindow{w}})
	require.NoError(t, err)
	assert.False(t, res.Free)
}

// A frozen window (maxUnavailable 0) refuses every start and says why.
func TestLedgerFrozenWindow(t *testing.T) {
	c, w, nms := ledgerFixture(t)
	w.Spec.MaxUnavailable = ptr.To(intstr.FromString("0%"))
	l := &Ledger{Client: c, Live: c, Namespace: "lull-system"}
	res, err := l.Reserve(context.Background(), c, nms["a"], Request{Node: "a", Windows: []*lullv1alpha1.MaintenanceWindow{w}})
	require.NoError(t, err)
	assert.False(t, res.Free)
	assert.Equal(t, "window pool is frozen: maxUnavailable 0% allows no node to be disrupted", res.Message)
}

// A node in use that cannot be read fails the check (it might count
// against the budget); a node that is gone keeps the slot recorded for it
// until its request ends.
func TestUnreadableNodeInUse(t *testing.T) {
	c, w, nms := ledgerFixture(t)
	ctx := context.Background()
	l := &Ledger{Client: c, Live: c, Namespace: "lull-system", Holder: "lull-drainer/x"}
	req := inWindow(w)
	reserveA(t, l, c, w, nms["a"])

	failing := interceptor.NewClient(c.(client.WithWatch), interceptor.Funcs{
		Get: func(ctx context.Context, cl client.WithWatch, key client.ObjectKey, obj client.Object, opts ...client.GetOption) error {
			if _, ok := obj.(*corev1.Node); ok && key.Name == "a" {
				return apierrors.NewServiceUnavailable("informer not synced")
			}
			return cl.Get(ctx, key, obj, opts...)
		},
	})
	_, err := l.Reserve(ctx, failing, nms["b"], req("b"))
	require.ErrorContains(t, err, "reading node a, in use by a request")

	require.NoError(t, c.Delete(ctx, &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: "a"}}))
	res, err := l.Reserve(ctx, c, nms["b"], req("b"))
	require.NoError(t, err)
	assert.False(t, res.Free, "the ledger records a's slot in window pool")

	nms["a"].Status.Phase = lullv1alpha1.PhaseCompleted // the drainer ends a request whose node is gone
	require.NoError(t, c.Status().Update(ctx, nms["a"]))
	res, err = l.Reserve(ctx, c, nms["b"], req("b"))
	require.NoError(t, err)
	assert.True(t, res.Free, res.Message)
}

// A slot belongs to the start, not to the labels: a node relabelled out
// of the window it started in keeps its slot there, counted from the
// ledger entry and, were that lost, from its request's recorded windows.
// A node relabelled into a window counts there too.
func TestRelabelledNodeKeepsItsSlot(t *testing.T) {
	c, w, nms := ledgerFixture(t)
	ctx := context.Background()
	w.Spec.NodeSelector = &metav1.LabelSelector{MatchLabels: map[string]string{"pool": "p"}}
	require.NoError(t, c.Update(ctx, w))
	other := &lullv1alpha1.MaintenanceWindow{ObjectMeta: metav1.ObjectMeta{Name: "other"},
		Spec: lullv1alpha1.MaintenanceWindowSpec{MaxUnavailable: ptr.To(intstr.FromInt32(1)),
			NodeSelector: &metav1.LabelSelector{MatchLabels: map[string]string{"pool": "q"}}}}
	require.NoError(t, c.Create(ctx, other))
	relabel := func(node, pool string) {
		t.Helper()
		var n corev1.Node
		require.NoError(t, c.Get(ctx, client.ObjectKey{Name: node}, &n))
		n.Labels = map[string]string{"pool": pool}
		require.NoError(t, c.Update(ctx, &n))
	}
	relabel("a", "p")
	relabel("b", "p")
	l := &Ledger{Client: c, Live: c, Namespace: "lull-system", Holder: "lull-drainer/x"}
	reserveA(t, l, c, w, nms["a"])
	nms["a"].Status.Phase, nms["a"].Status.Windows = lullv1alpha1.PhaseDraining, []string{"pool"}
	require.NoError(t, c.Status().Update(ctx, nms["a"]))

	relabel("a", "q") // out of pool, into other
	res, err := l.Reserve(ctx, c, nms["b"], inWindow(w)("b"))
	require.NoError(t, err)
	assert.False(t, res.Free, "a's slot in pool is held whatever its labels say")
	assert.Equal(t, "window pool allows 1 node(s) disrupted at once; 1 in use", res.Message)

	require.NoError(t, c.Delete(ctx, &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Namespace: "lull-system", Name: DefaultLedgerName}}))
	fresh := &Ledger{Client: c, Live: c, Namespace: "lull-system", Holder: "lull-drainer/y"}
	res, err = fresh.Reserve(ctx, c, nms["b"], inWindow(w)("b"))
	require.NoError(t, err)
	assert.False(t, res.Free, "without the ledger, a's request records pool")

	relabel("b", "q")
	res, err = fresh.Reserve(ctx, c, nms["b"], inWindow(other)("b"))
	require.NoError(t, err)
	assert.False(t, res.Free, "a counts in other too, where its labels put it now")
}

// A request once under the default budget keeps that slot when a window
// selects its node later.
func TestDefaultBudgetRecorded(t *testing.T) {
	c, w, nms := ledgerFixture(t)
	ctx := context.Background()
	w.Spec.NodeSelector = &metav1.LabelSelector{MatchLabels: map[string]string{"pool": "p"}}
	require.NoError(t, c.Update(ctx, w))
	l := &Ledger{Client: c, Live: c, Namespace: "lull-system", Holder: "lull-drainer/x"}
	res, err := l.Reserve(ctx, c, nms["a"], Request{Node: "a", DefaultMaxUnavailable: 1})
	require.NoError(t, err)
	require.True(t, res.Free)
	var a corev1.Node
	require.NoError(t, c.Get(ctx, client.ObjectKey{Name: "a"}, &a))
	a.Labels = map[string]string{"pool": "p"}
	require.NoError(t, c.Update(ctx, &a))

	res, err = l.Reserve(ctx, c, nms["b"], Request{Node: "b", DefaultMaxUnavailable: 1})
	require.NoError(t, err)
	assert.False(t, res.Free, "a started under the default budget")
	res, err = l.Reserve(ctx, c, nms["b"], Request{Node: "b", Windows: []*lullv1alpha1.MaintenanceWindow{w}, Default: true, DefaultMaxUnavailable: 1})
	require.NoError(t, err)
	assert.False(t, res.Free, "b counts against the default budget too")
	assert.Contains(t, res.Message, "default budget")
}

// Reserve never lists the requests live (at 1,000 requests each start
// listed them all): it counts the ledger and the cache. An entry the cache
// shows finished is pruned without asking the API server; an entry whose
// request the cache does not show yet is confirmed with one live read,
// kept (and counted) while the request exists, pruned once it is gone.
func TestReserveCountsLedgerAndCache(t *testing.T) {
	c, w, nms := ledgerFixture(t)
	ctx := context.Background()
	var lists, gets int
	live := interceptor.NewClient(c.(client.WithWatch), interceptor.Funcs{
		List: func(ctx context.Context, cl client.WithWatch, list client.ObjectList, opts ...client.ListOption) error {
			if _, ok := list.(*lullv1alpha1.NodeMaintenanceList); ok {
				lists++
			}
			return cl.List(ctx, list, opts...)
		},
		Get: func(ctx context.Context, cl client.WithWatch, key client.ObjectKey, obj client.Object, opts ...client.GetOption) error {
			if _, ok := obj.(*lullv1alpha1.NodeMaintenance); ok {
				gets++
			}
			return cl.Get(ctx, key, obj, opts...)
		},
	})
	l := &Ledger{Client: c, Live: live, Namespace: "lull-system", Holder: "lull-drainer/x"}
	req := inWindow(w)
	reserveA(t, l, c, w, nms["a"])

	res, err := l.Reserve(ctx, c, nms["b"], req("b"))
	require.NoError(t, err)
	assert.False(t, res.Free)
	assert.Equal(t, "window pool allows 1 node(s) disrupted at once; 1 in use", res.Message)

	// A cache that has not seen a yet (another replica reserved for a
	// request created a moment ago): the live read finds it, and its slot
	// counts.
	cache := interceptor.NewClient(c.(client.WithWatch), interceptor.Funcs{
		Get: func(ctx context.Context, cl client.WithWatch, key client.ObjectKey, obj client.Object, opts ...client.GetOption) error {
			if _, ok := obj.(*lullv1alpha1.NodeMaintenance); ok && key.Name == "a" {
				return apierrors.NewNotFound(lullv1alpha1.GroupVersion.WithResource("nodemaintenances").GroupResource(), "a")
			}
			return cl.Get(ctx, key, obj, opts...)
		},
	})
	res, err = l.Reserve(ctx, cache, nms["b"], req("b"))
	require.NoError(t, err)
	assert.False(t, res.Free, "a slot whose request the cache does not show yet was dropped")
	assert.Equal(t, 1, gets, "one live read confirms the entry")

	// a has finished, its entry not yet released: pruned from the cache's
	// word alone.
	nms["a"].Status.Phase = lullv1alpha1.PhaseCompleted
	require.NoError(t, c.Status().Update(ctx, nms["a"]))
	res, err = l.Reserve(ctx, c, nms["b"], req("b"))
	require.NoError(t, err)
	assert.True(t, res.Free, res.Message)
	assert.Equal(t, 1, gets)
	entries, err := l.Entries(ctx)
	require.NoError(t, err)
	assert.Equal(t, []string{"b"}, sortedNodes(entries))

	// b is deleted, and the cache no longer shows it: confirmed gone live,
	// pruned, and a takes the slot.
	require.NoError(t, c.Delete(ctx, nms["b"]))
	a2 := nms["a"].DeepCopy()
	a2.UID, a2.ResourceVersion, a2.Status = "uid-a2", "", lullv1alpha1.NodeMaintenanceStatus{}
	require.NoError(t, c.Delete(ctx, nms["a"]))
	require.NoError(t, c.Create(ctx, a2))
	res, err = l.Reserve(ctx, c, a2, req("a"))
	require.NoError(t, err)
	assert.True(t, res.Free, res.Message)
	assert.Equal(t, 2, gets)
	entries, err = l.Entries(ctx)
	require.NoError(t, err)
	assert.Equal(t, []string{"a"}, sortedNodes(entries))
	assert.Equal(t, types.UID("uid-a2"), entries["a"].UID)
	assert.Zero(t, lists, "requests listed live")
}

// A request that looks again while the ledger this process last saw fills
// its budget with requests the cache shows disrupting is answered without
// reading the ledger. A slot released since, by this process or another,
// sends the look to the API server, which finds the room.
func TestReserveFullWithoutReadingTheLedger(t *testing.T) {
	c, w, nms := ledgerFixture(t)
	ctx := context.Background()
	live, reads := countingLedgerReads(c)
	l := &Ledger{Client: c, Live: live, Namespace: "lull-system", Holder: "lull-drainer/x"}
	other := &Ledger{Client: c, Live: live, Namespace: "lull-system", Holder: "lull-drainer/y"}
	req := inWindow(w)
	reserveA(t, l, c, w, nms["a"])
	nms["a"].Status.Phase = lullv1alpha1.PhaseDraining
	require.NoError(t, c.Status().Update(ctx, nms["a"]))
	res, err := other.Reserve(ctx, c, nms["b"], req("b")) // other's first look reads
	require.NoError(t, err)
	require.False(t, res.Free)

	*reads = 0
	for range 3 {
		res, err = other.Reserve(ctx, c, nms["b"], req("b"))
		require.NoError(t, err)
		assert.False(t, res.Free)
		assert.Equal(t, "window pool allows 1 node(s) disrupted at once; 1 in use", res.Message)
	}
	assert.Zero(t, *reads, "a full budget read the ledger again")

	// a ends and l releases its slot: other's view still has the entry,
	// but the cache shows a no longer disrupting, so other reads the
	// ledger and starts b.
	released, err := l.Release(ctx, "a", "uid-a")
	require.NoError(t, err)
	require.True(t, released)
	nms["a"].Status.Phase = lullv1alpha1.PhaseUncordoning
	require.NoError(t, c.Status().Update(ctx, nms["a"]))
	*reads = 0
	res, err = other.Reserve(ctx, c, nms["b"], req("b"))
	require.NoError(t, err)
	assert.True(t, res.Free, res.Message)
	assert.Equal(t, 1, *reads)
}

// A request disrupting without a ledger entry (the ledger deleted or
// edited by hand) still counts: the cache shows it, and the next start
// waits for it (fail closed).
func TestRequestWithoutEntryCounts(t *testing.T) {
	c, w, nms := ledgerFixture(t)
	ctx := context.Background()
	nms["a"].Status.Phase = lullv1alpha1.PhaseDraining
	require.NoError(t, c.Status().Update(ctx, nms["a"]))
	l := &Ledger{Client: c, Live: c, Namespace: "lull-system", Holder: "lull-drainer/x"}
	res, err := l.Reserve(ctx, c, nms["b"], inWindow(w)("b"))
	require.NoError(t, err)
	assert.False(t, res.Free, "a disrupts and there is no ledger")
	assert.Equal(t, "window pool allows 1 node(s) disrupted at once; 1 in use", res.Message)

	// A ledger that exists but lost a's entry.
	require.NoError(t, c.Create(ctx, &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Namespace: "lull-system", Name: DefaultLedgerName}}))
	res, err = l.Reserve(ctx, c, nms["b"], inWindow(w)("b"))
	require.NoError(t, err)
	assert.False(t, res.Free, "a disrupts without an entry")
}

// Concurrent workers of one replica: a read answered before this worker's
// write and remembered after it shows the ledger without the slot just
// taken. The release must still read the ledger and free the slot (it used
// to trust that stale view, keep the slot and wake nobody: a 1,000-node
// wave ran with 1 of its 67 slots in use).
func TestReleaseAfterStaleRead(t *testing.T) {
	c, w, nms := ledgerFixture(t)
	ctx := context.Background()
	l := &Ledger{Client: c, Live: c, Namespace: "lull-system", Holder: "lull-drainer/x"}
	res, err := l.Reserve(ctx, c, nms["a"], inWindow(w)("a"))
	require.NoError(t, err)
	require.True(t, res.Free)
	l.remember(nil, map[string]Entry{}) // the other worker's older read (before the ledger existed) lands now
	failing := &failingReader{Reader: c, err: errors.New("connection refused")}
	l.Live = failing
	_, err = l.Release(ctx, "a", "uid-a")
	require.ErrorContains(t, err, "connection refused")
	l.Live = c // a failed release leaves the slot ours to release later
	released, err := l.Release(ctx, "a", "uid-a")
	require.NoError(t, err)
	require.True(t, released)
	entries, err := l.Entries(ctx)
	require.NoError(t, err)
	require.NotContains(t, entries, "a")

	// Nothing taken, nothing listed: no read.
	released, err = l.Release(ctx, "a", "uid-a")
	require.NoError(t, err)
	require.False(t, released)
}

// failingReader fails every Get with err.
type failingReader struct {
	client.Reader
	err error
}

func (f *failingReader) Get(context.Context, client.ObjectKey, client.Object, ...client.GetOption) error {
	return f.err
}

// One replica taking and giving back slots writes the ledger without
// reading it first: each write carries the resourceVersion of its last
// write. When another replica wrote meanwhile, the write conflicts and the
// decision is made again on the ledger read live (here: no room).
func TestWritesWithoutReadingFirst(t *testing.T) {
	c, w, nms := ledgerFixture(t)
	ctx := context.Background()
	live, reads := countingLedgerReads(c)
	l := &Ledger{Client: c, Live: live, Namespace: "lull-system", Holder: "lull-drainer/x"}
	reserveA(t, l, c, w, nms["a"]) // the first look reads (the ledger does not exist yet)
	require.Equal(t, 1, *reads)
	for range 3 {
		released, err := l.Release(ctx, "a", "uid-a")
		require.NoError(t, err)
		require.True(t, released)
		reserveA(t, l, c, w, nms["a"])
	}
	assert.Equal(t, 1, *reads, "taking and giving back a slot read the ledger")

	// Another replica releases a's slot and takes it for b: our view is
	// stale. Our write for a conflicts, and the live ledger has no room.
	other := &Ledger{Client: c, Live: c, Namespace: "lull-system", Holder: "lull-drainer/y"}
	released, err := other.Release(ctx, "a", "uid-a")
	require.NoError(t, err)
	require.True(t, released)
	res, err := other.Reserve(ctx, c, nms["b"], inWindow(w)("b"))
	require.NoError(t, err)
	require.True(t, res.Free)
	l.took("a", "") // as if a's request had ended here too
	a2 := nms["a"].DeepCopy()
	a2.UID, a2.ResourceVersion = "uid-a2", ""
	require.NoError(t, c.Delete(ctx, nms["a"]))
	require.NoError(t, c.Create(ctx, a2))
	*reads = 0
	res, err = l.Reserve(ctx, c, a2, inWindow(w)("a"))
	require.NoError(t, err)
	assert.False(t, res.Free, "b holds the window's one slot")
	assert.Equal(t, 1, *reads, "the conflict read the ledger")
	entries, err := l.Entries(ctx)
	require.NoError(t, err)
	assert.Equal(t, []string{"b"}, sortedNodes(entries))
}

// The slot a request gives back is free for the next request at once,
// although the cache still shows the first one disrupting (its status
// write has not reached the cache), once the releasing process says its
// stored status no longer disrupts (Settled). Released alone, it still
// counts from the cache (fail closed: the status write may yet fail), and
// another replica's view, which did not settle it, counts it too.
func TestReleasedSlotFreeBeforeTheCacheCatchesUp(t *testing.T) {
	c, w, nms := ledgerFixture(t)
	ctx := context.Background()
	nms["a"].Status.Phase = lullv1alpha1.PhaseDrained
	require.NoError(t, c.Status().Update(ctx, nms["a"]))
	l := &Ledger{Client: c, Live: c, Namespace: "lull-system", Holder: "lull-drainer/x"}
	reserveA(t, l, c, w, nms["a"])
	released, err := l.Release(ctx, "a", "uid-a")
	require.NoError(t, err)
	require.True(t, released)
	other := &Ledger{Client: c, Live: c, Namespace: "lull-system", Holder: "lull-drainer/y"}
	res, err := other.Reserve(ctx, c, nms["b"], inWindow(w)("b"))
	require.NoError(t, err)
	assert.False(t, res.Free, "another replica counts a from the cache")
	res, err = l.Reserve(ctx, c, nms["b"], inWindow(w)("b"))
	require.NoError(t, err)
	assert.False(t, res.Free, "released but not settled: the cache still counts a")
	l.Settled("uid-a")
	res, err = l.Reserve(ctx, c, nms["b"], inWindow(w)("b"))
	require.NoError(t, err)
	assert.True(t, res.Free, res.Message)
}

// A start says how much room its budgets have left after it.
func TestReserveSaysRoomLeft(t *testing.T) {
	c, w, nms := ledgerFixture(t)
	ctx := context.Background()
	w.Spec.MaxUnavailable = ptr.To(intstr.FromInt32(2))
	l := &Ledger{Client: c, Live: c, Namespace: "lull-system", Holder: "lull-drainer/x"}
	res, err := l.Reserve(ctx, c, nms["a"], inWindow(w)("a"))
	require.NoError(t, err)
	require.True(t, res.Free)
	assert.Equal(t, 1, res.Room, "one more node fits")
	res, err = l.Reserve(ctx, c, nms["b"], inWindow(w)("b"))
	require.NoError(t, err)
	require.True(t, res.Free)
	assert.Zero(t, res.Room, "full after b")
}

// countingLedgerReads wraps c to count the ledger ConfigMap reads through it.
func countingLedgerReads(c client.Client) (client.Client, *int) {
	reads := new(int)
	return interceptor.NewClient(c.(client.WithWatch), interceptor.Funcs{
		Get: func(ctx context.Context, cl client.WithWatch, key client.ObjectKey, obj client.Object, opts ...client.GetOption) error {
			if _, ok := obj.(*corev1.ConfigMap); ok {
				*reads++
			}
			return cl.Get(ctx, key, obj, opts...)
		},
	}), reads
}

// A node another tool disrupts (Karpenter's taint) uses a slot of every
// window that selects it: lull does not start a node beside it, by the
// live count (Check), the ledger (Reserve) or the cached look (Left).
func TestOtherDisruptorUsesTheSlot(t *testing.T) {
	c, w, nms := ledgerFixture(t)
	ctx := context.Background()
	var b corev1.Node
	require.NoError(t, c.Get(ctx, client.ObjectKey{Name: "b"}, &b))
	b.Spec.Taints = []corev1.Taint{{Key: "karpenter.sh/disrupted", Effect: corev1.TaintEffectNoSchedule}}
	require.NoError(t, c.Update(ctx, &b))

	res, err := Check(ctx, c, c, inWindow(w)("a"))
	require.NoError(t, err)
	assert.False(t, res.Free)
	assert.Equal(t, []string{"b"}, res.InUse)
	l := &Ledger{Client: c, Live: c, Namespace: "lull-system"}
	res, err = l.Reserve(ctx, c, nms["a"], inWindow(w)("a"))
	require.NoError(t, err)
	assert.False(t, res.Free, "the ledger refuses the slot Karpenter uses")
	assert.Contains(t, res.Message, "window pool allows 1 node(s) disrupted at once; 1 in use")
	left, inUse, err := Left(ctx, c, w)
	require.NoError(t, err)
	assert.Equal(t, 0, left)
	assert.Equal(t, []string{"b"}, inUse)

	// Its own request is not kept from the budget by its own mark (the
	// lease gate, not the budget, makes it wait for Karpenter).
	res, err = Check(ctx, c, c, inWindow(w)("b"))
	require.NoError(t, err)
	assert.True(t, res.Free)

	b.Spec.Taints = nil
	require.NoError(t, c.Update(ctx, &b))
	res, err = l.Reserve(ctx, c, nms["a"], inWindow(w)("a"))
	require.NoError(t, err)
	assert.True(t, res.Free, "the slot is free once Karpenter is done")
}

// SettledAt says when this process settled a request, for endedFor:
// what the recovery gate counts as ended before the cache shows it. The
// budget's count leaves it out for releasedFor only (fail closed each
// way: counted again for the budget, remembered longer for the gate).
func TestSettledAt(t *testing.T) {
	clk := clocktesting.NewFakeClock(time.Date(2026, 11, 28, 10, 0, 0, 0, time.UTC))
	l := &Ledger{Clock: clk}
	_, ok := l.SettledAt("a")
	require.False(t, ok)
	l.Settled("a")
	at, ok := l.SettledAt("a")
	require.True(t, ok)
	require.Equal(t, clk.Now(), at)
	require.True(t, l.settledUIDs()["a"])
	clk.Step(releasedFor)
	require.False(t, l.settledUIDs()["a"], "after releasedFor the budget counts it from the cache again")
	at, ok = l.SettledAt("a")
	require.True(t, ok, "the gate still knows it ended (a cache lagging past releasedFor)")
	require.Equal(t, clk.Now().Add(-releasedFor), at)
	clk.Step(endedFor - releasedFor)
	_, ok = l.SettledAt("a")
	require.False(t, ok, "after endedFor it is forgotten")
	l.settledUIDs()
	require.NotContains(t, l.settled, types.UID("a"), "and pruned")
	l.Settled("b")
	l.took("n", "b")
	_, ok = l.SettledAt("b")
	require.False(t, ok, "a request that takes a slot again is not settled")
}
