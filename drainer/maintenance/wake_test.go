package maintenance

import (
	"context"
	"fmt"
	"testing"

	"github.com/stretchr/testify/assert"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"sigs.k8s.io/controller-runtime/pkg/controller/priorityqueue"
	"sigs.k8s.io/controller-runtime/pkg/event"
	"sigs.k8s.io/controller-runtime/pkg/reconcile"

	lullv1alpha1 "lull.dev/lull/api/v1alpha1"
)

// A woken request goes ahead of what is already queued, and a request
// already queued is raised when woken.
func TestWakeGoesFirst(t *testing.T) {
	q := priorityqueue.New[reconcile.Request]("test")
	defer q.ShutDown()
	for _, n := range []string{"draining-1", "draining-2", "woken-queued"} {
		q.Add(reconcile.Request{NamespacedName: types.NamespacedName{Name: n}})
	}
	h := wakeHandler()
	for _, n := range []string{"woken", "woken-queued"} {
		h.Generic(context.Background(), event.GenericEvent{Object: &lullv1alpha1.NodeMaintenance{ObjectMeta: metav1.ObjectMeta{Name: n}}}, q)
	}
	var got []string
	for range 4 {
		req, prio, _ := q.GetWithPriority()
		got = append(got, fmt.Sprintf("%s/%d", req.Name, prio))
		q.Done(req)
	}
	assert.ElementsMatch(t, []string{"woken/10", "woken-queued/10"}, got[:2])
	assert.ElementsMatch(t, []string{"draining-1/0", "draining-2/0"}, got[2:])
}
