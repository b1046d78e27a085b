package maintenance

import (
	"context"
	"fmt"
	"testing"

	"github.com/stretchr/testify/assert"
	corev1 "k8s.io/api/core/v1"
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

// Removing a node's maintenance label completes its request, which frees
// a slot: that event goes first too; other node changes do not.
func TestLabelRemovalGoesFirst(t *testing.T) {
	q := priorityqueue.New[reconcile.Request]("test")
	defer q.ShutDown()
	h := nodeHandler("lull.dev/maintenance")
	labelled := &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: "done", ResourceVersion: "1", Labels: map[string]string{"lull.dev/maintenance": "kernel"}}}
	cordoned := labelled.DeepCopy()
	cordoned.Name, cordoned.ResourceVersion, cordoned.Spec.Unschedulable = "cordoned", "2", true
	h.Update(context.Background(), event.UpdateEvent{ObjectOld: labelled, ObjectNew: cordoned}, q)
	unlabelled := labelled.DeepCopy()
	unlabelled.Labels, unlabelled.ResourceVersion = nil, "2"
	h.Update(context.Background(), event.UpdateEvent{ObjectOld: labelled, ObjectNew: unlabelled}, q)
	req, prio, _ := q.GetWithPriority()
	assert.Equal(t, "done/10", fmt.Sprintf("%s/%d", req.Name, prio))
	req, prio, _ = q.GetWithPriority()
	assert.Equal(t, "cordoned/0", fmt.Sprintf("%s/%d", req.Name, prio))
}
