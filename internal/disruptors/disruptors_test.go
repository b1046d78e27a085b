package disruptors

import (
	"context"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/client/fake"
)

func TestOf(t *testing.T) {
	added := metav1.NewTime(time.Date(2026, 11, 27, 10, 0, 0, 0, time.UTC))
	for name, tc := range map[string]struct {
		node   corev1.Node
		by     string
		none   bool
		since  time.Time
		reason string
	}{
		"no mark": {node: corev1.Node{}, none: true},
		"lull's own cordon and hold annotations are no other disruptor": {node: corev1.Node{
			ObjectMeta: metav1.ObjectMeta{Annotations: map[string]string{"karpenter.sh/do-not-disrupt": "true"}},
			Spec:       corev1.NodeSpec{Unschedulable: true, Taints: []corev1.Taint{{Key: corev1.TaintNodeUnschedulable, Effect: corev1.TaintEffectNoSchedule}}},
		}, none: true},
		"Karpenter's disruption taint": {node: corev1.Node{Spec: corev1.NodeSpec{Taints: []corev1.Taint{
			{Key: KarpenterDisruptedTaint, Effect: corev1.TaintEffectNoSchedule, TimeAdded: &added}}}},
			by: Karpenter, since: added.Time, reason: "taint karpenter.sh/disrupted"},
		"Karpenter terminating the node": {node: corev1.Node{ObjectMeta: metav1.ObjectMeta{DeletionTimestamp: &added, Finalizers: []string{KarpenterTermination}}},
			by: Karpenter, since: added.Time, reason: "finalizer karpenter.sh/termination"},
		"a node deleted without Karpenter's finalizer is not Karpenter's": {node: corev1.Node{ObjectMeta: metav1.ObjectMeta{DeletionTimestamp: &added, Finalizers: []string{"other"}}}, none: true},
		"cluster-autoscaler scaling it down": {node: corev1.Node{Spec: corev1.NodeSpec{Taints: []corev1.Taint{
			{Key: AutoscalerToBeDeleted, Value: "1700000000", Effect: corev1.TaintEffectNoSchedule}}}},
			by: ClusterAutoscaler, reason: "taint ToBeDeletedByClusterAutoscaler"},
	} {
		t.Run(name, func(t *testing.T) {
			d, ok := Of(&tc.node)
			if tc.none {
				require.False(t, ok, "%+v", d)
				return
			}
			require.True(t, ok)
			require.Equal(t, tc.by, d.By)
			require.Equal(t, tc.since, d.Since)
			require.Contains(t, d.What, tc.reason)
			h := d.Held("n1", time.Minute)
			require.Equal(t, tc.by, h.Holder)
			require.Contains(t, h.Error(), `node n1 is leased by "`+tc.by+`" for disruption`)
		})
	}
	_, ok := Of(nil)
	require.False(t, ok)
}

// Disrupted finds the same nodes with the cache's index (listing only
// them) and without it (listing every node).
func TestDisrupted(t *testing.T) {
	added := metav1.NewTime(time.Date(2026, 11, 27, 10, 0, 0, 0, time.UTC))
	nodes := []client.Object{
		&corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: "quiet"}},
		&corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: "k"}, Spec: corev1.NodeSpec{Taints: []corev1.Taint{{Key: KarpenterDisruptedTaint, Effect: corev1.TaintEffectNoSchedule}}}},
		&corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: "ending", DeletionTimestamp: &added, Finalizers: []string{KarpenterTermination}}},
		&corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: "ca"}, Spec: corev1.NodeSpec{Taints: []corev1.Taint{{Key: AutoscalerToBeDeleted, Effect: corev1.TaintEffectNoSchedule}}}},
		&corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: "cordoned"}, Spec: corev1.NodeSpec{Unschedulable: true}},
	}
	for name, b := range map[string]*fake.ClientBuilder{
		"every node":     fake.NewClientBuilder().WithObjects(nodes...),
		"with the index": fake.NewClientBuilder().WithObjects(nodes...).WithIndex(&corev1.Node{}, IndexField, Index),
	} {
		t.Run(name, func(t *testing.T) {
			got, err := Disrupted(context.Background(), b.Build())
			require.NoError(t, err)
			require.Len(t, got, 3)
			require.Equal(t, Karpenter, got["k"].By)
			require.Equal(t, Karpenter, got["ending"].By)
			require.Equal(t, ClusterAutoscaler, got["ca"].By)
		})
	}
	var listed int
	indexed := fake.NewClientBuilder().WithObjects(nodes...).WithIndex(&corev1.Node{}, IndexField, Index).Build()
	var l corev1.NodeList
	require.NoError(t, indexed.List(context.Background(), &l, client.MatchingFields{IndexField: "true"}))
	listed = len(l.Items)
	require.Equal(t, 3, listed, "the index holds the disrupted nodes alone")
}
