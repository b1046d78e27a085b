package maintenance

import (
	"context"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"sigs.k8s.io/controller-runtime/pkg/event"

	lullv1alpha1 "lull.dev/lull/api/v1alpha1"
	"lull.dev/lull/pkg/budget"
)

// The budget wake-up path. A request that finds its budget full waits in
// line (budget.Waiters) and looks again on a timer (pkg/gate), at low
// priority. The step that releases a slot in the ledger wakes the next in
// line of each of the request's windows (releaseBudget), not every
// waiting request, and only once the ledger no longer counts the slot. A
// slot another replica releases (a deposed leader finishing a step) is
// found by the periodic look. A slot changing hands leaves the rest of the
// line alone: their waitingFor counts the budget's holders without naming
// them (kubectl lull status names them, live).

// nextWaiting takes out of line the next request of each of budgets that
// the cache still shows waiting for budget.
func (r *Reconciler) nextWaiting(ctx context.Context, budgets []string) []string {
	return r.waiters.Next(budgets, func(node string) bool {
		var nm lullv1alpha1.NodeMaintenance
		err := r.Client.Get(ctx, types.NamespacedName{Name: node}, &nm)
		return err == nil && nm.Status.Phase == lullv1alpha1.PhaseWaitingForBudget
	})
}

// wakeNextWaiting wakes the next in line of budgets through the Wake
// channel: the slot this replica just released is free for it.
func (r *Reconciler) wakeNextWaiting(ctx context.Context, budgets []string) {
	for _, node := range r.nextWaiting(ctx, budgets) {
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
	s.r.waiters.Wait(s.node.Name, budget.Budgets(names, s.status.DefaultBudget), s.nm.CreationTimestamp.Time)
}
