package karpenter

import (
	"context"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/util/intstr"
	clocktesting "k8s.io/utils/clock/testing"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/client/fake"
	"sigs.k8s.io/controller-runtime/pkg/reconcile"

	lullv1alpha1 "lull.dev/lull/api/v1alpha1"
	"lull.dev/lull/internal/disruptors"
	"lull.dev/lull/internal/lullscheme"
)

var now = time.Date(2026, 11, 27, 12, 0, 0, 0, time.UTC)

func pool(name string, budgets ...any) *unstructured.Unstructured {
	p := &unstructured.Unstructured{Object: map[string]any{
		"spec": map[string]any{
			"template":   map[string]any{"metadata": map[string]any{"labels": map[string]any{"team": "a"}}},
			"disruption": map[string]any{"consolidationPolicy": "WhenEmpty", "budgets": budgets},
		},
	}}
	p.SetGroupVersionKind(NodePool)
	p.SetName(name)
	return p
}

func node(name, pool string, mods ...func(*corev1.Node)) *corev1.Node {
	n := &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: name, Labels: map[string]string{disruptors.NodePoolLabel: pool, "team": "a", InitializedLabel: "true"}},
		Status: corev1.NodeStatus{Conditions: []corev1.NodeCondition{{Type: corev1.NodeReady, Status: corev1.ConditionTrue}}}}
	for _, m := range mods {
		m(n)
	}
	return n
}

func disrupted(n *corev1.Node) {
	n.Spec.Taints = append(n.Spec.Taints, corev1.Taint{Key: disruptors.KarpenterDisruptedTaint, Effect: corev1.TaintEffectNoSchedule})
}

func governing(name string, maxUnavailable int32, strategy lullv1alpha1.Strategy) *lullv1alpha1.MaintenanceWindow {
	w := &lullv1alpha1.MaintenanceWindow{ObjectMeta: metav1.ObjectMeta{Name: name}, Spec: lullv1alpha1.MaintenanceWindowSpec{
		NodeSelector:   &metav1.LabelSelector{MatchLabels: map[string]string{"team": "a"}},
		Strategy:       strategy,
		MaxUnavailable: ptr.To(intstr.FromInt32(maxUnavailable)),
		Karpenter:      &lullv1alpha1.KarpenterGovernance{GovernDisruption: true},
	}}
	if strategy == lullv1alpha1.StrategySchedule {
		w.Spec.Schedule = &lullv1alpha1.Schedule{TimeZone: "UTC", StartTime: "22:00", Duration: lullv1alpha1.Duration{Duration: time.Hour},
			Recurrence: &lullv1alpha1.Recurrence{Frequency: lullv1alpha1.Daily}}
	}
	return w
}

func holding(node string) *lullv1alpha1.NodeMaintenance {
	return &lullv1alpha1.NodeMaintenance{ObjectMeta: metav1.ObjectMeta{Name: node}, Spec: lullv1alpha1.NodeMaintenanceSpec{NodeName: node, Classes: []string{"k"}},
		Status: lullv1alpha1.NodeMaintenanceStatus{Phase: lullv1alpha1.PhaseDraining}}
}

func reconciler(t *testing.T, objs ...client.Object) (*Reconciler, client.Client) {
	t.Helper()
	c := fake.NewClientBuilder().WithScheme(lullscheme.New()).WithObjects(objs...).
		WithStatusSubresource(&lullv1alpha1.NodeMaintenance{}).Build()
	return &Reconciler{Client: c, Clock: clocktesting.NewFakeClock(now)}, c
}

func reconcileOnce(t *testing.T, r *Reconciler) reconcile.Result {
	t.Helper()
	res, err := r.Reconcile(context.Background(), key)
	require.NoError(t, err)
	return res
}

func budgetsOf(t *testing.T, c client.Client, name string) ([]any, string) {
	t.Helper()
	p := &unstructured.Unstructured{}
	p.SetGroupVersionKind(NodePool)
	require.NoError(t, c.Get(context.Background(), client.ObjectKey{Name: name}, p))
	b, _, _ := unstructured.NestedSlice(p.Object, "spec", "disruption", "budgets")
	return b, p.GetAnnotations()[AnnotationBudget]
}

func TestOpenWindowLeavesKarpenterTheRoomLeft(t *testing.T) {
	admins := map[string]any{"nodes": "10%"}
	r, c := reconciler(t, pool("a", admins), governing("w", 3, lullv1alpha1.StrategyPermissive),
		node("n1", "a"), node("n2", "a", disrupted), node("n3", "a"), holding("n3"))
	reconcileOnce(t, r)
	b, ann := budgetsOf(t, c, "a")
	// maxUnavailable 3, n3 held by lull and n2 by Karpenter: 1 left;
	// Karpenter subtracts n2 itself, so the entry says 1 + 1.
	require.Equal(t, []any{admins, map[string]any{"nodes": "2"}}, b)
	require.JSONEq(t, `{"nodes":"2","copies":1}`, ann)
}

func TestClosedWindowHoldsKarpenterOff(t *testing.T) {
	admins := map[string]any{"nodes": "1", "schedule": "@daily", "duration": "1h"}
	r, c := reconciler(t, pool("a", admins), governing("w", 3, lullv1alpha1.StrategySchedule), node("n1", "a"))
	res := reconcileOnce(t, r)
	b, _ := budgetsOf(t, c, "a")
	require.Equal(t, []any{admins, map[string]any{"nodes": "0"}}, b)
	require.LessOrEqual(t, res.RequeueAfter, resync)

	// The window opens at 22:00: the entry follows.
	r.Clock.(*clocktesting.FakeClock).SetTime(time.Date(2026, 11, 27, 22, 1, 0, 0, time.UTC))
	reconcileOnce(t, r)
	b, ann := budgetsOf(t, c, "a")
	require.Equal(t, []any{admins, map[string]any{"nodes": "3"}}, b)
	require.JSONEq(t, `{"nodes":"3","copies":1}`, ann)
}

func TestNoGoverningWindowRemovesOnlyLullsEntry(t *testing.T) {
	// An admin's entry equal to lull's stays: one goes, lull's.
	p := pool("a", map[string]any{"nodes": "0"}, map[string]any{"nodes": "0"})
	p.SetAnnotations(map[string]string{AnnotationBudget: `{"nodes":"0"}`})
	w := governing("w", 1, lullv1alpha1.StrategyPermissive)
	w.Spec.Karpenter = nil
	r, c := reconciler(t, p, w, node("n1", "a"))
	reconcileOnce(t, r)
	b, ann := budgetsOf(t, c, "a")
	require.Equal(t, []any{map[string]any{"nodes": "0"}}, b)
	require.Empty(t, ann)
}

func TestPoolsOfOneWindowShareItsRoom(t *testing.T) {
	r, c := reconciler(t, pool("a"), pool("b"), governing("w", 3, lullv1alpha1.StrategyPermissive), node("a1", "a"), node("b1", "b"))
	reconcileOnce(t, r)
	a, _ := budgetsOf(t, c, "a")
	b, _ := budgetsOf(t, c, "b")
	require.Equal(t, []any{map[string]any{"nodes": "2"}}, a)
	require.Equal(t, []any{map[string]any{"nodes": "1"}}, b)
}

func TestUnreadableRecordLeavesThePoolAlone(t *testing.T) {
	p := pool("a", map[string]any{"nodes": "5"})
	p.SetAnnotations(map[string]string{AnnotationBudget: `not json`})
	r, c := reconciler(t, p, governing("w", 1, lullv1alpha1.StrategyPermissive), node("n1", "a"))
	res, err := r.Reconcile(context.Background(), key)
	require.NoError(t, err, "one pool's trouble is logged; the round goes on")
	require.Equal(t, errorRetry, res.RequeueAfter)
	b, _ := budgetsOf(t, c, "a")
	require.Equal(t, []any{map[string]any{"nodes": "5"}}, b)
}

func TestEntryUnchangedIsNotWritten(t *testing.T) {
	r, c := reconciler(t, pool("a"), governing("w", 1, lullv1alpha1.StrategyPermissive), node("n1", "a"))
	reconcileOnce(t, r)
	p := &unstructured.Unstructured{}
	p.SetGroupVersionKind(NodePool)
	require.NoError(t, c.Get(context.Background(), client.ObjectKey{Name: "a"}, p))
	rv := p.GetResourceVersion()
	reconcileOnce(t, r)
	require.NoError(t, c.Get(context.Background(), client.ObjectKey{Name: "a"}, p))
	require.Equal(t, rv, p.GetResourceVersion(), "a second round writes nothing")
}

func TestReplace(t *testing.T) {
	admin := map[string]any{"nodes": "0", "reasons": []any{"Drifted"}}
	got := Replace([]any{admin, map[string]any{"nodes": "1"}}, &Entry{Nodes: "1"}, &Entry{Nodes: "0"})
	require.Equal(t, []any{admin, map[string]any{"nodes": "0"}}, got, "an admin's entry with reasons is never taken for lull's")
	require.Equal(t, []any{admin}, Replace([]any{admin}, &Entry{Nodes: "0"}, nil))
}

// Someone takes lull's entry away and leaves the record: lull adds it
// again; an admin's entry equal to lull's, there when lull wrote
// (copies 2), is never taken for lull's.
func TestEntryTakenAwayIsAddedAgainAndAdminsStays(t *testing.T) {
	admins := map[string]any{"nodes": "0"}
	p := pool("a", admins)
	p.SetAnnotations(map[string]string{AnnotationBudget: `{"nodes":"0","copies":2}`})
	r, c := reconciler(t, p, governing("w", 1, lullv1alpha1.StrategySchedule), node("n1", "a"))
	reconcileOnce(t, r)
	b, ann := budgetsOf(t, c, "a")
	require.Equal(t, []any{admins, map[string]any{"nodes": "0"}}, b, "lull's entry is there again")
	require.JSONEq(t, `{"nodes":"0","copies":2}`, ann)

	// The window stops governing: lull's goes, the admin's stays.
	var w lullv1alpha1.MaintenanceWindow
	require.NoError(t, c.Get(context.Background(), client.ObjectKey{Name: "w"}, &w))
	w.Spec.Karpenter = nil
	require.NoError(t, c.Update(context.Background(), &w))
	reconcileOnce(t, r)
	b, ann = budgetsOf(t, c, "a")
	require.Equal(t, []any{admins}, b)
	require.Empty(t, ann)

	// lull's gone by hand, the record left: lull removes nothing.
	p2 := pool("b", admins)
	p2.SetAnnotations(map[string]string{AnnotationBudget: `{"nodes":"0","copies":2}`})
	require.NoError(t, c.Create(context.Background(), p2))
	reconcileOnce(t, r)
	b, ann = budgetsOf(t, c, "b")
	require.Equal(t, []any{admins}, b, "the admin's entry is not taken for lull's")
	require.Empty(t, ann)
}

// lull uninstalled: every entry of lull's goes (a "0" left behind would
// hold Karpenter off for ever), the admins' stay; RemoveAll does the same
// without the controller.
func TestUninstallRemovesEveryEntry(t *testing.T) {
	admins := map[string]any{"nodes": "10%"}
	r, c := reconciler(t, pool("a", admins), pool("b"), governing("w", 1, lullv1alpha1.StrategySchedule), node("n1", "a"), node("n2", "b"))
	reconcileOnce(t, r)
	b, _ := budgetsOf(t, c, "a")
	require.Equal(t, []any{admins, map[string]any{"nodes": "0"}}, b)
	r.Uninstalling = func(context.Context) (bool, error) { return true, nil }
	reconcileOnce(t, r)
	b, ann := budgetsOf(t, c, "a")
	require.Equal(t, []any{admins}, b)
	require.Empty(t, ann)
	b, _ = budgetsOf(t, c, "b")
	require.Empty(t, b, "a pool that had no budgets before lull has none again")

	r.Uninstalling = nil
	reconcileOnce(t, r)
	failed, err := RemoveAll(context.Background(), c)
	require.NoError(t, err)
	require.Empty(t, failed)
	b, ann = budgetsOf(t, c, "a")
	require.Equal(t, []any{admins}, b)
	require.Empty(t, ann)
}
