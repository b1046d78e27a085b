package windowcontroller

import (
	"context"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/util/workqueue"
	clocktesting "k8s.io/utils/clock/testing"
	"sigs.k8s.io/controller-runtime/pkg/client/fake"
	"sigs.k8s.io/controller-runtime/pkg/event"
	"sigs.k8s.io/controller-runtime/pkg/reconcile"

	lullv1alpha1 "lull.dev/lull/api/v1alpha1"
	"lull.dev/lull/internal/lullscheme"
)

// Many label and phase changes within countDelay make one count per
// window: each window is queued once, countDelay after the first change.
func TestRecountCoalesces(t *testing.T) {
	c := fake.NewClientBuilder().WithScheme(lullscheme.New()).WithObjects(
		&lullv1alpha1.MaintenanceWindow{ObjectMeta: metav1.ObjectMeta{Name: "a"}},
		&lullv1alpha1.MaintenanceWindow{ObjectMeta: metav1.ObjectMeta{Name: "b"}}).Build()
	r := &Reconciler{Client: c}
	clk := clocktesting.NewFakeClock(time.Date(2026, 11, 24, 1, 0, 0, 0, time.UTC))
	q := workqueue.NewTypedRateLimitingQueueWithConfig(workqueue.DefaultTypedControllerRateLimiter[reconcile.Request](),
		workqueue.TypedRateLimitingQueueConfig[reconcile.Request]{Clock: clk})
	defer q.ShutDown()
	h := r.recount()
	ctx := context.Background()
	nm := &lullv1alpha1.NodeMaintenance{ObjectMeta: metav1.ObjectMeta{Name: "n"}}
	for range 50 {
		h.Update(ctx, event.UpdateEvent{ObjectOld: nm, ObjectNew: nm}, q)
		h.Create(ctx, event.CreateEvent{Object: nm}, q)
	}
	require.Zero(t, q.Len(), "counted before countDelay")
	clk.Step(countDelay)
	require.Eventually(t, func() bool { return q.Len() == 2 }, 10*time.Second, 10*time.Millisecond)
	got := map[string]bool{}
	for range 2 {
		req, _ := q.Get()
		got[req.Name] = true
		q.Done(req)
	}
	require.Equal(t, map[string]bool{"a": true, "b": true}, got)
	require.Zero(t, q.Len(), "each window once")
}
