package budget

import (
	"context"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/intstr"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/client/fake"

	lullv1alpha1 "lull.dev/lull/api/v1alpha1"
	"lull.dev/lull/internal/disruptors"
	"lull.dev/lull/internal/lullscheme"
)

// Tried and held (promise 1): Left, the room the Karpenter controller
// shares out, counts each disrupted node once whoever disrupts it (a node
// lull holds that Karpenter's expiry also taints, cluster-autoscaler's
// taint, Karpenter terminating a node), not a node deleted without
// Karpenter's finalizer nor a node merely NotReady, and resolves a
// percentage against the window's nodes; Check agrees with it.
func TestRedteamKarpenterLeftCountsEachDisruptionOnce(t *testing.T) {
	w := &lullv1alpha1.MaintenanceWindow{ObjectMeta: metav1.ObjectMeta{Name: "w"}, Spec: lullv1alpha1.MaintenanceWindowSpec{
		NodeSelector:   &metav1.LabelSelector{MatchLabels: map[string]string{"team": "a"}},
		MaxUnavailable: ptr.To(intstr.FromString("50%"))}}
	del := metav1.NewTime(time.Date(2026, 11, 27, 10, 0, 0, 0, time.UTC))
	n := func(name string, mod func(*corev1.Node)) *corev1.Node {
		node := &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: name, Labels: map[string]string{"team": "a"}}}
		if mod != nil {
			mod(node)
		}
		return node
	}
	taint := func(key string) func(*corev1.Node) {
		return func(node *corev1.Node) {
			node.Spec.Taints = []corev1.Taint{{Key: key, Effect: corev1.TaintEffectNoSchedule}}
		}
	}
	objs := []client.Object{w,
		n("held-and-expiring", taint(disruptors.KarpenterDisruptedTaint)),
		n("ca", taint(disruptors.AutoscalerToBeDeleted)),
		n("terminating", func(node *corev1.Node) {
			node.DeletionTimestamp, node.Finalizers = &del, []string{disruptors.KarpenterTermination}
		}),
		n("deleted-other", func(node *corev1.Node) { node.DeletionTimestamp, node.Finalizers = &del, []string{"example.com/keep"} }),
		n("notready", func(node *corev1.Node) {
			node.Status.Conditions = []corev1.NodeCondition{{Type: corev1.NodeReady, Status: corev1.ConditionFalse}}
		}),
	}
	for i := 0; i < 5; i++ {
		objs = append(objs, n("q"+string(rune('0'+i)), nil))
	}
	nm := &lullv1alpha1.NodeMaintenance{ObjectMeta: metav1.ObjectMeta{Name: "held-and-expiring", UID: types.UID("u1")},
		Spec:   lullv1alpha1.NodeMaintenanceSpec{NodeName: "held-and-expiring", Classes: []string{"k"}},
		Status: lullv1alpha1.NodeMaintenanceStatus{Phase: lullv1alpha1.PhaseDrained, Windows: []string{"w"}}}
	objs = append(objs, nm)
	c := fake.NewClientBuilder().WithScheme(lullscheme.New()).WithObjects(objs...).WithStatusSubresource(nm).Build()

	// 10 nodes, 50%: 5; in use: held-and-expiring (once), ca, terminating.
	left, inUse, err := Left(context.Background(), c, w)
	require.NoError(t, err)
	require.ElementsMatch(t, []string{"held-and-expiring", "ca", "terminating"}, inUse)
	require.Equal(t, 2, left)
	res, err := Check(context.Background(), c, c, Request{Node: "q0", Windows: []*lullv1alpha1.MaintenanceWindow{w}})
	require.NoError(t, err)
	require.True(t, res.Free)
	require.Equal(t, left-1, res.Room)
}
