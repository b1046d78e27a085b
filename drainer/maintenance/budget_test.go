package maintenance

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/klog/v2"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/client/fake"
	"sigs.k8s.io/controller-runtime/pkg/controller/priorityqueue"
	"sigs.k8s.io/controller-runtime/pkg/event"
	"sigs.k8s.io/controller-runtime/pkg/handler"
	"sigs.k8s.io/controller-runtime/pkg/reconcile"

	lullv1alpha1 "lull.dev/lull/api/v1alpha1"
	"lull.dev/lull/internal/budget"
	"lull.dev/lull/internal/forecast"
	"lull.dev/lull/internal/lullscheme"
)

func nmIn(name string, phase lullv1alpha1.MaintenancePhase, created time.Time, windows ...string) *lullv1alpha1.NodeMaintenance {
	return &lullv1alpha1.NodeMaintenance{
		ObjectMeta: metav1.ObjectMeta{Name: name, CreationTimestamp: metav1.Time{Time: created}},
		Spec:       lullv1alpha1.NodeMaintenanceSpec{NodeName: name, Classes: []string{"kernel-update"}},
		Status:     lullv1alpha1.NodeMaintenanceStatus{Phase: phase, Windows: windows},
	}
}

// The step that releases a slot in the ledger wakes the next request in
// line of its window and nobody else: not the other requests of that
// window, not those of other windows, not those waiting for a window. Two
// slots freed one after the other wake two different requests (the first
// woken leaves the line); a release that frees nothing wakes nobody. (It
// used to enqueue every waiting request on any phase change: with a
// thousand waiting, a thousand budget counts per freed slot.)
func TestReleasedSlotWakesNextInLineOfItsWindow(t *testing.T) {
	ctx := context.Background()
	now := t0()
	holders := []*lullv1alpha1.NodeMaintenance{
		nmIn("done-1", lullv1alpha1.PhaseUncordoning, now.Add(-time.Hour), "w1"),
		nmIn("done-2", lullv1alpha1.PhaseUncordoning, now.Add(-time.Hour), "w1"),
	}
	waiting := []*lullv1alpha1.NodeMaintenance{
		nmIn("w1-old", lullv1alpha1.PhaseWaitingForBudget, now.Add(-3*time.Minute), "w1"),
		nmIn("w1-new", lullv1alpha1.PhaseWaitingForBudget, now.Add(-2*time.Minute), "w1"),
		nmIn("w1-last", lullv1alpha1.PhaseWaitingForBudget, now.Add(-time.Minute), "w1"),
		nmIn("w2-old", lullv1alpha1.PhaseWaitingForBudget, now.Add(-4*time.Minute), "w2"),
	}
	objs := []client.Object{nmIn("closed", lullv1alpha1.PhaseWaitingForWindow, now.Add(-5*time.Minute), "w1")}
	for i, nm := range append(holders, waiting...) {
		nm.UID = types.UID(fmt.Sprintf("uid-%d", i))
		objs = append(objs, nm)
	}
	c := fake.NewClientBuilder().WithScheme(lullscheme.New()).WithObjects(objs...).Build()
	r := &Reconciler{Client: c, Wake: make(chan event.GenericEvent, 10),
		Budget: &budget.Ledger{Client: c, Live: c, Namespace: "lull-system", Holder: "lull-drainer/x"}}
	for _, nm := range holders {
		res, err := r.Budget.Reserve(ctx, c, nm, budget.Request{Node: nm.Name, DefaultMaxUnavailable: 5})
		require.NoError(t, err)
		require.True(t, res.Free)
	}
	for _, nm := range waiting {
		r.waiters.Wait(nm.Name, budget.Recorded(&nm.Status), nm.CreationTimestamp.Time)
	}
	woken := func() []string {
		var out []string
		for {
			select {
			case e := <-r.Wake:
				out = append(out, e.Object.GetName())
			default:
				return out
			}
		}
	}
	release := func(nm *lullv1alpha1.NodeMaintenance) {
		s := &step{r: r, logger: klog.Background(), nm: nm, status: nm.Status.DeepCopy()}
		s.releaseBudget(ctx)
	}

	release(holders[0])
	assert.Equal(t, []string{"w1-old"}, woken())
	release(holders[1])
	assert.Equal(t, []string{"w1-new"}, woken(), "the second slot wakes the next request, not w1-old again")
	release(holders[1])
	assert.Empty(t, woken(), "nothing released, nobody woken")
	assert.Equal(t, 2, r.waiters.Len(), "w1-last and w2-old still wait")
}

// A request that lost its lease mid-drain waits for it with lull's cordon
// still on the node: the node is still disrupted, so its slot stays in the
// ledger (which is the whole count) until the cordon is undone.
func TestCordonedRequestKeepsItsSlot(t *testing.T) {
	ctx := context.Background()
	nm := nmIn("lost", lullv1alpha1.PhaseWaitingForLease, t0(), "w1")
	nm.UID, nm.Status.CordonedByLull = "uid-lost", true
	c := fake.NewClientBuilder().WithScheme(lullscheme.New()).WithObjects(nm).Build()
	r := &Reconciler{Client: c, Wake: make(chan event.GenericEvent, 10),
		Budget: &budget.Ledger{Client: c, Live: c, Namespace: "lull-system", Holder: "lull-drainer/x"}}
	res, err := r.Budget.Reserve(ctx, c, nm, budget.Request{Node: nm.Name, DefaultMaxUnavailable: 1})
	require.NoError(t, err)
	require.True(t, res.Free)

	s := &step{r: r, logger: klog.Background(), nm: nm, status: nm.Status.DeepCopy()}
	s.releaseBudget(ctx)
	entries, err := r.Budget.Entries(ctx)
	require.NoError(t, err)
	assert.Contains(t, entries, "lost", "a cordoned node's slot was given back")

	s.status.CordonedByLull = false // uncordonIfOurs ran
	s.releaseBudget(ctx)
	entries, err = r.Budget.Entries(ctx)
	require.NoError(t, err)
	assert.NotContains(t, entries, "lost")
}

// A request woken for a freed slot, and a node whose maintenance label was
// removed (its request gives its slot back), go ahead of everything else
// queued; other node changes keep their place.
func TestSlotWorkGoesFirst(t *testing.T) {
	ctx := context.Background()
	q := priorityqueue.New[reconcile.Request]("test")
	defer q.ShutDown()
	nodes := nodeHandler(lullv1alpha1.MaintenanceLabel, handler.EnqueueRequestsFromMapFunc(func(_ context.Context, o client.Object) []reconcile.Request {
		return []reconcile.Request{{NamespacedName: types.NamespacedName{Name: o.GetName()}}}
	}))
	node := func(name string, lbls map[string]string) *corev1.Node {
		return &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: name, Labels: lbls}}
	}
	labelled := map[string]string{lullv1alpha1.MaintenanceLabel: "kernel-update"}
	for i := range 5 {
		name := fmt.Sprintf("busy-%d", i)
		nodes.Update(ctx, event.UpdateEvent{ObjectOld: node(name, nil), ObjectNew: node(name, labelled)}, q)
	}
	nodes.Update(ctx, event.UpdateEvent{ObjectOld: node("completed", labelled), ObjectNew: node("completed", nil)}, q)
	slotHandler().Generic(ctx, event.GenericEvent{Object: &lullv1alpha1.NodeMaintenance{ObjectMeta: metav1.ObjectMeta{Name: "woken"}}}, q)
	var order []string
	for range 7 {
		req, _ := q.Get()
		order = append(order, req.Name)
		q.Done(req)
	}
	assert.ElementsMatch(t, []string{"completed", "woken"}, order[:2], "queued: %v", order)
	assert.Equal(t, []string{"busy-0", "busy-1", "busy-2", "busy-3", "busy-4"}, order[2:])
}

// A request enters its budgets' line when the forecast first shows it,
// before any reconcile of it: a slot freed meanwhile wakes the oldest. A
// started request, one past the line (waiting for its window) and a label
// without its request yet do not enter.
func TestNewRequestsLineUpWithoutAReconcile(t *testing.T) {
	ctx := context.Background()
	now := t0()
	fresh := nmIn("fresh", "", now.Add(-time.Minute))
	older := nmIn("older", "", now.Add(-2*time.Minute))
	started := nmIn("started", lullv1alpha1.PhaseDraining, now.Add(-3*time.Minute))
	started.Status.StartedAt = &metav1.Time{Time: now}
	closed := nmIn("closed", lullv1alpha1.PhaseWaitingForWindow, now.Add(-4*time.Minute))
	c := fake.NewClientBuilder().WithScheme(lullscheme.New()).WithObjects(fresh, older, started, closed).Build()
	r := &Reconciler{Client: c, Wake: make(chan event.GenericEvent, 10)}
	change := func(nm *lullv1alpha1.NodeMaintenance) forecast.Change {
		return forecast.Change{Node: nm.Name, New: &forecast.Node{Name: nm.Name,
			Maintenance: &forecast.Maintenance{Name: nm.Name, Phase: nm.Status.Phase, Started: nm.Status.StartedAt != nil},
			Windows:     &forecast.Windows{Names: []string{"w1"}}}}
	}
	labelOnly := forecast.Change{Node: "label-only", New: &forecast.Node{Name: "label-only",
		Maintenance: &forecast.Maintenance{Phase: lullv1alpha1.PhasePending}, Windows: &forecast.Windows{Names: []string{"w1"}}}}
	r.lineUp([]forecast.Change{change(fresh), change(older), change(started), change(closed), labelOnly})
	assert.Equal(t, 2, r.waiters.Len())
	assert.Equal(t, []string{"older"}, r.nextWaiting(ctx, []string{"w1"}), "the oldest request first")
	assert.Equal(t, []string{"fresh"}, r.nextWaiting(ctx, []string{"w1"}))
}

// A slot given back is free at once for the next request only when the
// request's stored status already says it no longer disrupts (a
// completion writes Uncordoning first); given back before that (an abort,
// whose status write may yet fail), the cache keeps counting it until it
// shows otherwise.
func TestReleasedSlotFreeOnlyOnceTheStatusSaysSo(t *testing.T) {
	ctx := context.Background()
	for _, tc := range []struct {
		stored lullv1alpha1.MaintenancePhase
		free   bool
	}{{lullv1alpha1.PhaseCompleted, true}, {lullv1alpha1.PhaseUncordoning, true}, {lullv1alpha1.PhaseDraining, false}} {
		t.Run(string(tc.stored), func(t *testing.T) {
			a := nmIn("a", lullv1alpha1.PhaseDraining, t0()) // as the cache shows it
			b := nmIn("b", lullv1alpha1.PhaseWaitingForBudget, t0())
			a.UID, b.UID = "uid-a", "uid-b"
			c := fake.NewClientBuilder().WithScheme(lullscheme.New()).WithObjects(a, b).Build()
			r := &Reconciler{Client: c, Wake: make(chan event.GenericEvent, 10),
				Budget: &budget.Ledger{Client: c, Live: c, Namespace: "lull-system", Holder: "lull-drainer/x"}}
			req := func(n string) budget.Request { return budget.Request{Node: n, DefaultMaxUnavailable: 1} }
			res, err := r.Budget.Reserve(ctx, c, a, req("a"))
			require.NoError(t, err)
			require.True(t, res.Free)
			stored := a.DeepCopy()
			stored.Status.Phase = tc.stored
			s := &step{r: r, logger: klog.Background(), nm: stored, status: stored.Status.DeepCopy()}
			s.releaseBudget(ctx)
			res, err = r.Budget.Reserve(ctx, c, b, req("b"))
			require.NoError(t, err)
			assert.Equal(t, tc.free, res.Free, res.Message)
		})
	}
}
