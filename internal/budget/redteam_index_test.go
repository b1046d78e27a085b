package budget

import (
	"context"
	"errors"
	"fmt"
	"testing"

	"github.com/stretchr/testify/require"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/intstr"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/client/fake"
	"sigs.k8s.io/controller-runtime/pkg/client/interceptor"

	lullv1alpha1 "lull.dev/lull/api/v1alpha1"
	"lull.dev/lull/internal/disruptors"
	"lull.dev/lull/internal/lullscheme"
)

// Red team of a0a57c7 (and the uncommitted disruptors index): the budget
// counted through the HoldsSlotField and disruptors.IndexField indexes is
// the budget counted from every object, whatever happens to the objects,
// and whatever the reader does with MatchingFields.

// rtNoFields reads the same store as c but drops field selectors: the
// full-list answer of the same state (also a reader that silently ignores
// MatchingFields, as internal/plan's snapshotReader does for Nodes and
// NodeMaintenances).
type rtNoFields struct{ client.Reader }

func (r rtNoFields) List(ctx context.Context, list client.ObjectList, opts ...client.ListOption) error {
	var kept []client.ListOption
	for _, o := range opts {
		if _, ok := o.(client.MatchingFields); !ok {
			kept = append(kept, o)
		}
	}
	return r.Reader.List(ctx, list, kept...)
}

func rtIndexedClient(objs ...client.Object) client.Client {
	return fake.NewClientBuilder().WithScheme(lullscheme.New()).WithObjects(objs...).
		WithStatusSubresource(&lullv1alpha1.NodeMaintenance{}).
		WithIndex(&lullv1alpha1.NodeMaintenance{}, HoldsSlotField, HoldsSlotIndex).
		WithIndex(&corev1.Node{}, disruptors.IndexField, disruptors.Index).Build()
}

// Held: through a request's whole life (every phase in turn, a lease lost
// with lull's cordon on, deletion with a finalizer, deletion, re-creation
// under its name) and other tools' marks coming and going on nodes, Left
// through the indexes equals Left from every object, after each change.
func TestRedteamIndexLeftEqualsFullListThroughChanges(t *testing.T) {
	ctx := context.Background()
	w := &lullv1alpha1.MaintenanceWindow{ObjectMeta: metav1.ObjectMeta{Name: "pool"},
		Spec: lullv1alpha1.MaintenanceWindowSpec{MaxUnavailable: ptr.To(intstr.FromInt32(6))}}
	objs := []client.Object{w}
	for i := range 4 {
		n := fmt.Sprintf("n%d", i)
		objs = append(objs, &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: n}},
			&lullv1alpha1.NodeMaintenance{ObjectMeta: metav1.ObjectMeta{Name: n, UID: types.UID("uid-" + n), Finalizers: []string{"lull.dev/x"}},
				Spec: lullv1alpha1.NodeMaintenanceSpec{NodeName: n, Classes: []string{"k"}}})
	}
	objs = append(objs, &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: "k1", Finalizers: []string{disruptors.KarpenterTermination}}})
	c := rtIndexedClient(objs...)
	check := func(step string) {
		t.Helper()
		li, ui, err := Left(ctx, c, w)
		require.NoError(t, err, step)
		lp, up, err := Left(ctx, rtNoFields{c}, w)
		require.NoError(t, err, step)
		require.Equal(t, lp, li, "%s: left through the index differs from the full list", step)
		require.ElementsMatch(t, up, ui, "%s: nodes in use through the index differ from the full list", step)
	}
	setStatus := func(n string, st lullv1alpha1.NodeMaintenanceStatus) {
		t.Helper()
		var nm lullv1alpha1.NodeMaintenance
		require.NoError(t, c.Get(ctx, client.ObjectKey{Name: n}, &nm))
		nm.Status = st
		require.NoError(t, c.Status().Update(ctx, &nm))
	}
	check("start")
	for _, p := range lullv1alpha1.Phases {
		setStatus("n0", lullv1alpha1.NodeMaintenanceStatus{Phase: p})
		check("n0 " + string(p))
		setStatus("n1", lullv1alpha1.NodeMaintenanceStatus{Phase: p, CordonedByLull: true})
		check("n1 cordoned " + string(p))
	}
	setStatus("n2", lullv1alpha1.NodeMaintenanceStatus{Phase: lullv1alpha1.PhaseDraining})
	check("n2 draining")
	var nm lullv1alpha1.NodeMaintenance
	require.NoError(t, c.Get(ctx, client.ObjectKey{Name: "n2"}, &nm))
	require.NoError(t, c.Delete(ctx, &nm))
	check("n2 deleting, finalizer on")
	require.NoError(t, c.Get(ctx, client.ObjectKey{Name: "n2"}, &nm))
	nm.Finalizers = nil
	require.NoError(t, c.Update(ctx, &nm))
	check("n2 gone")
	require.NoError(t, c.Create(ctx, &lullv1alpha1.NodeMaintenance{ObjectMeta: metav1.ObjectMeta{Name: "n2", UID: "uid-n2-again"},
		Spec: lullv1alpha1.NodeMaintenanceSpec{NodeName: "n2", Classes: []string{"k"}}}))
	setStatus("n2", lullv1alpha1.NodeMaintenanceStatus{Phase: lullv1alpha1.PhaseCordoned})
	check("n2 again, cordoned")
	// Other tools: a taint on, off; Karpenter terminating a node.
	var node corev1.Node
	require.NoError(t, c.Get(ctx, client.ObjectKey{Name: "n3"}, &node))
	node.Spec.Taints = []corev1.Taint{{Key: disruptors.AutoscalerToBeDeleted, Effect: corev1.TaintEffectNoSchedule}}
	require.NoError(t, c.Update(ctx, &node))
	check("n3 scaled down by cluster-autoscaler")
	node.Spec.Taints = nil
	require.NoError(t, c.Update(ctx, &node))
	check("n3 untainted")
	require.NoError(t, c.Get(ctx, client.ObjectKey{Name: "k1"}, &node))
	require.NoError(t, c.Delete(ctx, &node))
	check("k1 terminating by Karpenter")
	_, inUse, err := Left(ctx, c, w)
	require.NoError(t, err)
	require.Contains(t, inUse, "k1")
}

// Held (fail closed): an error of the indexed list that is not "no
// index" (the cache timing out, a 500) is not hidden when the full list
// fails too; and when only the indexed list fails, the fallback answers
// from every request (the full-list answer, never fewer).
func TestRedteamIndexErrorsNotHidden(t *testing.T) {
	ctx := context.Background()
	w := &lullv1alpha1.MaintenanceWindow{ObjectMeta: metav1.ObjectMeta{Name: "pool"},
		Spec: lullv1alpha1.MaintenanceWindowSpec{MaxUnavailable: ptr.To(intstr.FromInt32(2))}}
	holding := &lullv1alpha1.NodeMaintenance{ObjectMeta: metav1.ObjectMeta{Name: "a", UID: "uid-a"},
		Spec:   lullv1alpha1.NodeMaintenanceSpec{NodeName: "a", Classes: []string{"k"}},
		Status: lullv1alpha1.NodeMaintenanceStatus{Phase: lullv1alpha1.PhaseDraining}}
	base := rtIndexedClient(w, holding, &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: "a"}},
		&corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: "k", Finalizers: []string{disruptors.KarpenterTermination},
			DeletionTimestamp: &metav1.Time{Time: metav1.Now().Time}}})
	boom := apierrors.NewInternalError(errors.New("etcd timeout"))
	failing := func(indexedOnly bool) client.Reader {
		return interceptor.NewClient(base.(client.WithWatch), interceptor.Funcs{
			List: func(ctx context.Context, c client.WithWatch, list client.ObjectList, opts ...client.ListOption) error {
				fields := false
				for _, o := range opts {
					_, ok := o.(client.MatchingFields)
					fields = fields || ok
				}
				if _, ok := list.(*lullv1alpha1.MaintenanceWindowList); !ok && (fields || !indexedOnly) {
					return boom
				}
				return c.List(ctx, list, opts...)
			},
		})
	}
	_, _, err := Left(ctx, failing(false), w)
	require.Error(t, err, "every list failing: Left must fail, not count nothing")
	left, inUse, err := Left(ctx, failing(true), w)
	require.NoError(t, err)
	require.ElementsMatch(t, []string{"a", "k"}, inUse)
	require.Equal(t, 0, left)
}

// Held (promise: never more than maxUnavailable, other tools' nodes
// included): with both indexes, a request already disrupting (known only
// from the cache: no ledger entry) and a node cluster-autoscaler scales
// down fill a window of 2; a third node's Reserve is refused.
func TestRedteamIndexReserveCountsCacheAndOthers(t *testing.T) {
	ctx := context.Background()
	w := &lullv1alpha1.MaintenanceWindow{ObjectMeta: metav1.ObjectMeta{Name: "pool"},
		Spec: lullv1alpha1.MaintenanceWindowSpec{MaxUnavailable: ptr.To(intstr.FromInt32(2))}}
	mk := func(n string, p lullv1alpha1.MaintenancePhase) *lullv1alpha1.NodeMaintenance {
		return &lullv1alpha1.NodeMaintenance{ObjectMeta: metav1.ObjectMeta{Name: n, UID: types.UID("uid-" + n)},
			Spec: lullv1alpha1.NodeMaintenanceSpec{NodeName: n, Classes: []string{"k"}}, Status: lullv1alpha1.NodeMaintenanceStatus{Phase: p}}
	}
	c := rtIndexedClient(w, mk("a", lullv1alpha1.PhaseWaitingForLease), mk("c", lullv1alpha1.PhaseWaitingForBudget),
		&corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: "a"}}, &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: "c"}},
		&corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: "ca"}, Spec: corev1.NodeSpec{Taints: []corev1.Taint{{Key: disruptors.AutoscalerToBeDeleted, Effect: corev1.TaintEffectNoSchedule}}}})
	// a lost its lease with lull's cordon on: it holds its slot.
	var a lullv1alpha1.NodeMaintenance
	require.NoError(t, c.Get(ctx, client.ObjectKey{Name: "a"}, &a))
	a.Status.CordonedByLull = true
	require.NoError(t, c.Status().Update(ctx, &a))
	l := &Ledger{Client: c, Live: c, Namespace: "lull-system", Holder: "x"}
	var cm lullv1alpha1.NodeMaintenance
	require.NoError(t, c.Get(ctx, client.ObjectKey{Name: "c"}, &cm))
	res, err := l.Reserve(ctx, c, &cm, inWindow(w)("c"))
	require.NoError(t, err)
	require.False(t, res.Free, "window of 2 with a (lease lost, cordoned) and ca (cluster-autoscaler): c started: %+v", res)
}
