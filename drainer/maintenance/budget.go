package maintenance

import (
	"context"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/event"
	"sigs.k8s.io/controller-runtime/pkg/predicate"
	"sigs.k8s.io/controller-runtime/pkg/reconcile"

	lullv1alpha1 "lull.dev/lull/api/v1alpha1"
	"lull.dev/lull/pkg/budget"
)

// The budget wake-up path. A request that finds its budget full waits in
// line (budget.Waiters) and looks again on a timer (pkg/gate). A request
// whose slot the ledger releases wakes the first in line of each of its
// windows (releaseBudget), not every waiting request. A slot changing
// hands leaves the rest of the line alone: their waitingFor counts the
// budget's holders without naming them (kubectl lull status names them,
// live).

// budgetReleased passes a NodeMaintenance that ended or was deleted: its
// slot is released by then, also when another replica carried it out (the
// replica that releases a slot wakes the next request itself).
func budgetReleased() predicate.Funcs {
	return predicate.Funcs{
		CreateFunc: func(event.CreateEvent) bool { return false },
		UpdateFunc: func(e event.UpdateEvent) bool {
			o, ok1 := e.ObjectOld.(*lullv1alpha1.NodeMaintenance)
			n, ok2 := e.ObjectNew.(*lullv1alpha1.NodeMaintenance)
			return !ok1 || !ok2 || (!o.Status.Phase.Finished() && n.Status.Phase.Finished())
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
