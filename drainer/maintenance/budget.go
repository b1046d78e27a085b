package maintenance

import (
	"context"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/util/workqueue"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/controller/priorityqueue"
	"sigs.k8s.io/controller-runtime/pkg/event"
	"sigs.k8s.io/controller-runtime/pkg/handler"
	"sigs.k8s.io/controller-runtime/pkg/reconcile"

	lullv1alpha1 "lull.dev/lull/api/v1alpha1"
	"lull.dev/lull/internal/budget"
	"lull.dev/lull/internal/forecast"
)

// The budget wake-up path. A request that finds its budget full waits in
// line (budget.Waiters) and looks again on a timer (internal/gate), at low
// priority. The step that releases a slot in the ledger wakes the next in
// line of each of the request's windows (releaseBudget), not every
// waiting request, and only once the ledger no longer counts the slot. A
// slot another replica releases (a deposed leader finishing a step) is
// found by the periodic look. A slot changing hands leaves the rest of the
// line alone: their waitingFor counts the budget's holders without naming
// them (kubectl lull status names them, live).

// nextWaiting takes out of line the next request of each of budgets that
// the cache still shows waiting to start: waiting for budget, or not
// looked at yet (lineUp put it in line when it appeared).
func (r *Reconciler) nextWaiting(ctx context.Context, budgets []string) []string {
	return r.waiters.Next(budgets, func(node string) bool {
		var nm lullv1alpha1.NodeMaintenance
		err := r.Client.Get(ctx, types.NamespacedName{Name: node}, &nm)
		return err == nil && nm.DeletionTimestamp == nil && nm.Status.Phase.InLine()
	})
}

// lineUp puts new requests in the budget's line as soon as the forecast
// shows them, by their creation time and with the budgets of the windows
// the forecast says govern them, without waiting for their first
// reconcile: in a wave of a thousand requests that reconcile queued
// behind everything else, and a freed slot found nobody in line to wake.
// (Their first reconcile corrects the line: inLine.)
func (r *Reconciler) lineUp(changes []forecast.Change) {
	for _, c := range changes {
		if c.New == nil || c.New.Maintenance == nil || c.New.Windows == nil {
			continue
		}
		if m := c.New.Maintenance; m.Name == "" || m.Started || !m.Phase.InLine() {
			continue // a label without its request yet, or a request past the line
		}
		var nm lullv1alpha1.NodeMaintenance
		err := r.Client.Get(context.Background(), types.NamespacedName{Name: c.New.Maintenance.Name}, &nm)
		if err != nil || nm.DeletionTimestamp != nil || nm.Status.StartedAt != nil || !nm.Status.Phase.InLine() {
			continue // the cache has not caught up, or it has moved on
		}
		r.waiters.Wait(c.Node, budget.Budgets(c.New.Windows.Names, c.New.Windows.Default), nm.CreationTimestamp.Time)
	}
}

// wakeNextWaiting wakes the next in line of budgets: the slot this
// replica just released is free for it. It is queued ahead of everything
// else (SlotPriority): with hundreds of requests reconciled at the same
// priority, a woken request waited seconds in the queue while its slot
// stayed empty (a freed slot took 8.9 s p99 to be cordoned again in a
// 1,000-node wave). One request per freed slot, so it starves nothing.
func (r *Reconciler) wakeNextWaiting(ctx context.Context, budgets []string) {
	wake := r.slotFreed
	if wake == nil {
		wake = r.Wake
	}
	for _, node := range r.nextWaiting(ctx, budgets) {
		select {
		case wake <- event.GenericEvent{Object: &lullv1alpha1.NodeMaintenance{ObjectMeta: metav1.ObjectMeta{Name: node}}}:
		default: // a full queue: the periodic look catches up
		}
	}
}

// SlotPriority is the work queue priority of what frees or takes a budget
// slot: a request woken for a freed slot, and a node whose maintenance
// label was removed (its request completes and gives its slot back).
// Everything else is queued at the default priority 0, a waiting
// request's periodic look at handler.LowPriority.
const SlotPriority = 10

// enqueueAt adds name to q at priority when q is a priority queue.
func enqueueAt(q workqueue.TypedRateLimitingInterface[reconcile.Request], name string, priority int) {
	req := reconcile.Request{NamespacedName: types.NamespacedName{Name: name}}
	if pq, ok := q.(priorityqueue.PriorityQueue[reconcile.Request]); ok {
		pq.AddWithOpts(priorityqueue.AddOpts{Priority: ptr.To(priority)}, req)
		return
	}
	q.Add(req)
}

// slotHandler queues the requests of a channel at SlotPriority.
func slotHandler() handler.EventHandler {
	return handler.Funcs{
		GenericFunc: func(_ context.Context, e event.GenericEvent, q workqueue.TypedRateLimitingInterface[reconcile.Request]) {
			enqueueAt(q, e.Object.GetName(), SlotPriority)
		},
	}
}

// nodeHandler is byName for node events, but queues at SlotPriority a
// node whose maintenance label went (nodeChanged filters what matters).
func nodeHandler(label string, byName handler.EventHandler) handler.EventHandler {
	return handler.Funcs{
		CreateFunc: byName.Create,
		UpdateFunc: func(ctx context.Context, e event.UpdateEvent, q workqueue.TypedRateLimitingInterface[reconcile.Request]) {
			_, had := e.ObjectOld.GetLabels()[label]
			if _, has := e.ObjectNew.GetLabels()[label]; had && !has {
				enqueueAt(q, e.ObjectNew.GetName(), SlotPriority)
				return
			}
			byName.Update(ctx, e, q)
		},
		DeleteFunc:  byName.Delete,
		GenericFunc: byName.Generic,
	}
}

// inLine records the outcome of the budget gate for the request: waiting
// for budget puts it in line (by its creation time, so the oldest request
// starts first), anything else takes it out.
func (s *step) inLine(ctx context.Context, waiting bool) {
	if !waiting {
		s.r.waiters.Done(s.node.Name)
		return
	}
	ws, _ := s.windows(ctx) // unreadable: the default budget's line, until the next look
	s.r.waiters.Wait(s.node.Name, s.budgets(ws), s.nm.CreationTimestamp.Time)
}

// budgets names the budgets the request counts against with windows ws.
func (s *step) budgets(ws []*lullv1alpha1.MaintenanceWindow) []string {
	names := make([]string, 0, len(ws))
	for _, w := range ws {
		names = append(names, w.Name)
	}
	return budget.Budgets(names, s.status.DefaultBudget)
}
