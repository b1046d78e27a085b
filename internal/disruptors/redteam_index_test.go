package disruptors

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/client/fake"
	"sigs.k8s.io/controller-runtime/pkg/client/interceptor"
)

// Red team of the uncommitted disruptors index: Disrupted through
// IndexField equals Disrupted from every node, whatever happens to the
// nodes and whatever the reader does with MatchingFields.

// rtNoFields reads the same store but drops field selectors (the
// full-list answer; also a reader that ignores MatchingFields).
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

// Held: taints added, changed to another tool's, removed; Karpenter's
// finalizer on a node then its deletion; a node deleted and registered
// again: after each change the index gives the full list's answer.
func TestRedteamDisruptedIndexEqualsFullListThroughChanges(t *testing.T) {
	ctx := context.Background()
	c := fake.NewClientBuilder().WithObjects(
		&corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: "a"}},
		&corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: "b", Finalizers: []string{KarpenterTermination}}},
	).WithIndex(&corev1.Node{}, IndexField, Index).Build()
	check := func(step string, want ...string) {
		t.Helper()
		gi, err := Disrupted(ctx, c)
		require.NoError(t, err, step)
		gp, err := Disrupted(ctx, rtNoFields{c})
		require.NoError(t, err, step)
		require.Equal(t, gp, gi, "%s: the index differs from the full list", step)
		var names []string
		for n := range gi {
			names = append(names, n)
		}
		require.ElementsMatch(t, want, names, step)
	}
	node := func(n string) *corev1.Node {
		var o corev1.Node
		require.NoError(t, c.Get(ctx, client.ObjectKey{Name: n}, &o))
		return &o
	}
	check("quiet")
	a := node("a")
	added := metav1.NewTime(time.Date(2026, 11, 28, 1, 0, 0, 0, time.UTC))
	a.Spec.Taints = []corev1.Taint{{Key: KarpenterDisruptedTaint, Effect: corev1.TaintEffectNoSchedule, TimeAdded: &added}}
	require.NoError(t, c.Update(ctx, a))
	check("a tainted by Karpenter", "a")
	a = node("a")
	a.Spec.Taints = []corev1.Taint{{Key: AutoscalerToBeDeleted, Effect: corev1.TaintEffectNoSchedule}}
	require.NoError(t, c.Update(ctx, a))
	check("a now cluster-autoscaler's", "a")
	a = node("a")
	a.Spec.Taints = []corev1.Taint{{Key: "other", Effect: corev1.TaintEffectNoSchedule}}
	require.NoError(t, c.Update(ctx, a))
	check("a untainted")
	require.NoError(t, c.Delete(ctx, node("b")))
	check("b terminating by Karpenter", "b")
	b := node("b")
	b.Finalizers = nil
	require.NoError(t, c.Update(ctx, b))
	check("b gone")
	require.NoError(t, c.Create(ctx, &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: "b"},
		Spec: corev1.NodeSpec{Taints: []corev1.Taint{{Key: AutoscalerToBeDeleted, Effect: corev1.TaintEffectNoSchedule}}}}))
	check("b back, scaled down", "b")
}

// Held (fail closed): a failing node list (not "no index") fails
// Disrupted rather than answering "no other tool disrupts anything".
func TestRedteamDisruptedListErrorNotHidden(t *testing.T) {
	base := fake.NewClientBuilder().WithObjects(
		&corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: "k"}, Spec: corev1.NodeSpec{Taints: []corev1.Taint{{Key: KarpenterDisruptedTaint, Effect: corev1.TaintEffectNoSchedule}}}},
	).WithIndex(&corev1.Node{}, IndexField, Index).Build()
	c := interceptor.NewClient(base, interceptor.Funcs{
		List: func(context.Context, client.WithWatch, client.ObjectList, ...client.ListOption) error {
			return apierrors.NewServiceUnavailable(errors.New("cache timed out").Error())
		},
	})
	got, err := Disrupted(context.Background(), c)
	require.Error(t, err, "a failing list answered %v", got)
}
