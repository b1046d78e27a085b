package maintenance

import (
	"context"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/klog/v2"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/client/fake"
	"sigs.k8s.io/controller-runtime/pkg/reconcile"

	lullv1alpha1 "lull.dev/lull/api/v1alpha1"
	"lull.dev/lull/internal/lullscheme"
)

// A drain's progress alone (pod counts, waitingFor, condition messages)
// is written at most every progressEvery, and the reconcile comes back
// when it is due; a new blocker or a phase change is written at once.
func TestProgressWritesAreSpaced(t *testing.T) {
	ctx := context.Background()
	now := t0()
	nm := nmIn("n1", lullv1alpha1.PhaseDraining, now.Add(-time.Hour))
	nm.UID = "uid-n1"
	nm.Status.Pods = &lullv1alpha1.PodCounts{Total: 10, Pending: 9}
	c := fake.NewClientBuilder().WithScheme(lullscheme.New()).WithObjects(nm).
		WithStatusSubresource(&lullv1alpha1.NodeMaintenance{}).Build()
	r := &Reconciler{Client: c}
	r.writes.statusWritten("n1", nm.UID, now)

	// at runs one save at time at with change applied to the stored
	// status, and reports whether it wrote and the result.
	at := func(when time.Time, phase lullv1alpha1.MaintenancePhase, change func(*lullv1alpha1.NodeMaintenanceStatus)) (bool, time.Duration) {
		t.Helper()
		var cur lullv1alpha1.NodeMaintenance
		require.NoError(t, c.Get(ctx, client.ObjectKey{Name: "n1"}, &cur))
		rv := cur.ResourceVersion
		s := &step{r: r, logger: klog.Background(), nm: &cur, now: when,
			node: &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: "n1"}}, status: cur.Status.DeepCopy()}
		change(s.status)
		res, err := s.save(ctx, phase, reconcileAfter(30*time.Second))
		require.NoError(t, err)
		var after lullv1alpha1.NodeMaintenance
		require.NoError(t, c.Get(ctx, client.ObjectKey{Name: "n1"}, &after))
		return after.ResourceVersion != rv, res.RequeueAfter
	}
	progress := func(pending int32) func(*lullv1alpha1.NodeMaintenanceStatus) {
		return func(st *lullv1alpha1.NodeMaintenanceStatus) {
			st.Pods.Pending = pending
			st.WaitingFor = "draining"
		}
	}

	wrote, after := at(now.Add(time.Second), lullv1alpha1.PhaseDraining, progress(8))
	assert.False(t, wrote, "progress one second after the last write")
	assert.Equal(t, progressEvery-time.Second, after, "back when the write is due")

	wrote, _ = at(now.Add(2*time.Second), lullv1alpha1.PhaseDraining, func(st *lullv1alpha1.NodeMaintenanceStatus) {
		progress(7)(st)
		st.Blockers = []lullv1alpha1.Blocker{{PodDisruptionBudget: "shop/db", Pods: []string{"shop/db-1"}}}
	})
	assert.True(t, wrote, "a new blocker is written at once")

	wrote, _ = at(now.Add(3*time.Second), lullv1alpha1.PhaseDraining, progress(6))
	assert.False(t, wrote)
	wrote, _ = at(now.Add(2*time.Second+progressEvery), lullv1alpha1.PhaseDraining, progress(6))
	assert.True(t, wrote, "due")

	wrote, _ = at(now.Add(3*time.Second+progressEvery), lullv1alpha1.PhaseDrained, progress(0))
	assert.True(t, wrote, "a phase change is written at once")
}

func reconcileAfter(d time.Duration) reconcile.Result { return reconcile.Result{RequeueAfter: d} }
