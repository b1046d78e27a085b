package maintenance

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/klog/v2"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/client/fake"
	"sigs.k8s.io/controller-runtime/pkg/event"

	lullv1alpha1 "lull.dev/lull/api/v1alpha1"
	"lull.dev/lull/pkg/budget"
	lullscheme "lull.dev/lull/pkg/scheme"
)

func nmIn(name string, phase lullv1alpha1.MaintenancePhase, created time.Time, windows ...string) *lullv1alpha1.NodeMaintenance {
	return &lullv1alpha1.NodeMaintenance{
		ObjectMeta: metav1.ObjectMeta{Name: name, CreationTimestamp: metav1.Time{Time: created}},
		Spec:       lullv1alpha1.NodeMaintenanceSpec{NodeName: name, Class: "kernel-update"},
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
		s := &step{r: r, ctx: ctx, logger: klog.Background(), nm: nm, status: nm.Status.DeepCopy()}
		s.releaseBudget()
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

	s := &step{r: r, ctx: ctx, logger: klog.Background(), nm: nm, status: nm.Status.DeepCopy()}
	s.releaseBudget()
	entries, err := r.Budget.Entries(ctx)
	require.NoError(t, err)
	assert.Contains(t, entries, "lost", "a cordoned node's slot was given back")

	s.status.CordonedByLull = false // uncordonIfOurs ran
	s.releaseBudget()
	entries, err = r.Budget.Entries(ctx)
	require.NoError(t, err)
	assert.NotContains(t, entries, "lost")
}
