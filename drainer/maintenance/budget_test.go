package maintenance

import (
	"context"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
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

// A request whose slot is freed wakes the first request in line of its
// window and nobody else: not the other requests of that window, not
// those of other windows, not those waiting for a window. The watch
// passes requests that ended (their slot released by then, by whichever
// replica); the replica that releases a slot wakes the line itself
// (releaseBudget), so a request that only stopped disrupting wakes nobody
// yet: woken then, the next request would find the slot still in the
// ledger. (It used to enqueue every waiting request on any phase change:
// with a thousand waiting, a thousand budget counts per freed slot.)
func TestFreedSlotWakesFirstInLineOfItsWindow(t *testing.T) {
	ctx := context.Background()
	now := t0()
	done := nmIn("done", lullv1alpha1.PhaseDrained, now.Add(-time.Hour), "w1")
	objs := []client.Object{
		done,
		nmIn("w1-old", lullv1alpha1.PhaseWaitingForBudget, now.Add(-3*time.Minute), "w1"),
		nmIn("w1-new", lullv1alpha1.PhaseWaitingForBudget, now.Add(-2*time.Minute), "w1"),
		nmIn("w2-old", lullv1alpha1.PhaseWaitingForBudget, now.Add(-4*time.Minute), "w2"),
		nmIn("closed", lullv1alpha1.PhaseWaitingForWindow, now.Add(-5*time.Minute), "w1"),
	}
	c := fake.NewClientBuilder().WithScheme(lullscheme.New()).WithObjects(objs...).
		WithStatusSubresource(&lullv1alpha1.NodeMaintenance{}).Build()
	r := &Reconciler{Client: c}
	for _, o := range objs[1:4] {
		nm := o.(*lullv1alpha1.NodeMaintenance)
		r.waiters.Wait(nm.Name, budget.Budgets(nm.Status.Windows), nm.CreationTimestamp.Time)
	}
	update := func(old, new *lullv1alpha1.NodeMaintenance) bool {
		return budgetReleased().Update(event.UpdateEvent{ObjectOld: old, ObjectNew: new})
	}
	wake := func(nm *lullv1alpha1.NodeMaintenance) []string {
		var out []string
		for _, req := range r.budgetFreed(ctx, nm) {
			out = append(out, req.Name)
		}
		return out
	}

	completing := done.DeepCopy()
	completing.Status.Phase = lullv1alpha1.PhaseUncordoning
	assert.False(t, update(done, completing), "Drained -> Uncordoning: the slot is still in the ledger")
	completed := done.DeepCopy()
	completed.Status.Phase = lullv1alpha1.PhaseCompleted
	require.True(t, update(completing, completed), "Uncordoning -> Completed: the slot is free")
	assert.Equal(t, []string{"w1-old"}, wake(completed))

	// w1-old took the slot; the next slot of w1 goes to w1-new.
	started := nmIn("w1-old", lullv1alpha1.PhaseCordoning, now.Add(-3*time.Minute), "w1")
	assert.False(t, update(nmIn("w1-old", lullv1alpha1.PhaseWaitingForBudget, now, "w1"), started), "starting frees nothing")
	var cur lullv1alpha1.NodeMaintenance
	require.NoError(t, c.Get(ctx, types.NamespacedName{Name: "w1-old"}, &cur))
	cur.Status.Phase = lullv1alpha1.PhaseCordoning
	require.NoError(t, c.Status().Update(ctx, &cur))
	assert.Equal(t, []string{"w1-new"}, wake(completed))

	assert.False(t, update(nmIn("x", lullv1alpha1.PhasePending, now), nmIn("x", lullv1alpha1.PhaseWaitingForBudget, now, "w1")),
		"a request beginning to wait frees nothing")
	aborted := nmIn("y", lullv1alpha1.PhaseWaitingForLease, now, "w2")
	assert.False(t, update(nmIn("y", lullv1alpha1.PhaseDraining, now, "w2"), aborted), "an aborted drain: its replica wakes the line as it releases")
	assert.Equal(t, []string{"w2-old"}, wake(aborted))
	assert.Empty(t, wake(nmIn("z", lullv1alpha1.PhaseCompleted, now, "w3")), "nobody waits in w3")
}
