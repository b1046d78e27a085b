package maintenance

import (
	"context"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/util/workqueue"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/controller/priorityqueue"
	"sigs.k8s.io/controller-runtime/pkg/event"
	"sigs.k8s.io/controller-runtime/pkg/handler"
	"sigs.k8s.io/controller-runtime/pkg/predicate"
	"sigs.k8s.io/controller-runtime/pkg/reconcile"

	lullv1alpha1 "lull.dev/lull/api/v1alpha1"
	"lull.dev/lull/pkg/budget"
)

// The budget wake-up path. A request that finds its budget full waits in
// line (budget.Waiters) and looks again on a timer (pkg/gate); a request
// that stops holding budget wakes the first in line of each of its
// windows, not every waiting request.

// budgetReleased passes a NodeMaintenance that stopped holding budget (a
// completed, aborted or deleted request).
func budgetReleased() predicate.Funcs {
	return predicate.Funcs{
		CreateFunc: func(event.CreateEvent) bool { return false },
		UpdateFunc: func(e event.UpdateEvent) bool {
			o, ok1 := e.ObjectOld.(*lullv1alpha1.NodeMaintenance)
			n, ok2 := e.ObjectNew.(*lullv1alpha1.NodeMaintenance)
			return !ok1 || !ok2 || (budget.UsesBudget(o) && !budget.UsesBudget(n))
		},
		DeleteFunc:  func(event.DeleteEvent) bool { return true },
		GenericFunc: func(event.GenericEvent) bool { return false },
	}
}

// budgetFreed maps a request that freed its slot to the requests to wake:
// the first in line of each window it counted against.
func (r *Reconciler) budgetFreed(ctx context.Context, o client.Object) []reconcile.Request {
	nm, ok := o.(*lullv1alpha1.NodeMaintenance)
	if !ok {
		return nil
	}
	var out []reconcile.Request
	for _, node := range r.firstWaiting(ctx, nm.Status.Windows) {
		out = append(out, reconcile.Request{NamespacedName: types.NamespacedName{Name: node}})
	}
	return out
}

// firstWaiting returns the first request in line of each of windows (the
// default budget when none) that the cache still shows waiting for budget.
func (r *Reconciler) firstWaiting(ctx context.Context, windows []string) []string {
	return r.waiters.First(budget.Budgets(windows), func(node string) bool {
		var nm lullv1alpha1.NodeMaintenance
		err := r.Client.Get(ctx, types.NamespacedName{Name: node}, &nm)
		return err == nil && nm.Status.Phase == lullv1alpha1.PhaseWaitingForBudget
	})
}

// wakeFirstWaiting wakes the first in line of windows through the Wake
// channel: a slot this replica took and gave back (the lease was held by
// another actor) is free again for the next request.
func (r *Reconciler) wakeFirstWaiting(ctx context.Context, windows []string) {
	for _, node := range r.firstWaiting(ctx, windows) {
		select {
		case r.Wake <- event.GenericEvent{Object: &lullv1alpha1.NodeMaintenance{ObjectMeta: metav1.ObjectMeta{Name: node}}}:
		default: // a full queue: the periodic look catches up
		}
	}
}

// inLine records the outcome of the budget gate for the request: waiting
// for budget puts it in line (by its creation time, so the oldest request
// starts first), anything else takes it out.
func (s *step) inLine(waiting bool) {
	if !waiting {
		s.r.waiters.Done(s.node.Name)
		return
	}
	var names []string
	if ws, err := s.windows(); err == nil {
		for _, w := range ws {
			names = append(names, w.Name)
		}
	}
	s.r.waiters.Wait(s.node.Name, budget.Budgets(names), s.nm.CreationTimestamp.Time)
}

// slotTaken refreshes the rest of the line when a request takes a slot of
// their windows, so that their waitingFor names who holds the budget now;
// at low priority, so the work queue runs them only when nothing more
// urgent (a woken request, a drain, a completion) is queued.
func (r *Reconciler) slotTaken() handler.Funcs {
	return handler.Funcs{
		UpdateFunc: func(_ context.Context, e event.UpdateEvent, q workqueue.TypedRateLimitingInterface[reconcile.Request]) {
			o, ok1 := e.ObjectOld.(*lullv1alpha1.NodeMaintenance)
			n, ok2 := e.ObjectNew.(*lullv1alpha1.NodeMaintenance)
			if !ok1 || !ok2 || budget.UsesBudget(o) || !budget.UsesBudget(n) {
				return
			}
			var reqs []reconcile.Request
			for _, node := range r.waiters.Line(budget.Budgets(n.Status.Windows)) {
				if node != n.Name {
					reqs = append(reqs, reconcile.Request{NamespacedName: types.NamespacedName{Name: node}})
				}
			}
			if pq, ok := q.(priorityqueue.PriorityQueue[reconcile.Request]); ok {
				pq.AddWithOpts(priorityqueue.AddOpts{Priority: ptr.To(handler.LowPriority)}, reqs...)
				return
			}
			for _, req := range reqs {
				q.Add(req)
			}
		},
	}
}
