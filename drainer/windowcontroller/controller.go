// Package window is lull-drainer's MaintenanceWindow status controller: it
// evaluates each window with internal/window, keeps its status current, requeues
// at the next transition, and exports the window metrics.
package windowcontroller

import (
	"context"
	"fmt"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/equality"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/util/workqueue"
	"k8s.io/klog/v2"
	"k8s.io/utils/clock"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/builder"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/event"
	"sigs.k8s.io/controller-runtime/pkg/handler"
	"sigs.k8s.io/controller-runtime/pkg/predicate"
	"sigs.k8s.io/controller-runtime/pkg/reconcile"
	"sigs.k8s.io/controller-runtime/pkg/source"

	lullv1alpha1 "lull.dev/lull/api/v1alpha1"
	"lull.dev/lull/internal/budget"
	"lull.dev/lull/internal/window"
)

const (
	// ConditionReady: the spec is valid and a window can be computed.
	ConditionReady = lullv1alpha1.WindowConditionReady
	// ConditionPermitted: material changes may start now.
	ConditionPermitted = lullv1alpha1.WindowConditionPermitted
	// upcomingCount is how many periods after Next the status lists.
	upcomingCount = 4
)

// Reconciler keeps MaintenanceWindow status current.
type Reconciler struct {
	Client  client.Client
	Clock   clock.PassiveClock
	Options window.Options
	Metrics *Collector
	// Secrets reads the alerts gates' Secrets (the API server, not a
	// cache: the drainer caches no Secrets), in SecretNamespace.
	Secrets         client.Reader
	SecretNamespace string
	// Wake, when set, triggers reconciles of every window (tests step a
	// fake clock and then wake the controller).
	Wake <-chan event.GenericEvent
}

// SetupWithManager registers the controller.
func (r *Reconciler) SetupWithManager(mgr ctrl.Manager) error {
	if r.Clock == nil {
		r.Clock = clock.RealClock{}
	}
	b := ctrl.NewControllerManagedBy(mgr).
		Named("maintenancewindow").
		For(&lullv1alpha1.MaintenanceWindow{}, builder.WithPredicates(predicate.GenerationChangedPredicate{})).
		// Node counts follow node labels: any node appearing, going or
		// changing labels may change which windows select it.
		Watches(&corev1.Node{}, r.recount(),
			builder.WithPredicates(predicate.LabelChangedPredicate{})).
		// Counts of nodes in maintenance and waiting follow the requests'
		// phases (not every progress write of a drain).
		Watches(&lullv1alpha1.NodeMaintenance{}, r.recount(),
			builder.WithPredicates(predicate.Funcs{UpdateFunc: func(e event.UpdateEvent) bool {
				o, ok1 := e.ObjectOld.(*lullv1alpha1.NodeMaintenance)
				n, ok2 := e.ObjectNew.(*lullv1alpha1.NodeMaintenance)
				return !ok1 || !ok2 || o.Status.Phase != n.Status.Phase
			}}))
	if r.Wake != nil {
		b = b.WatchesRawSource(source.Channel(r.Wake, handler.EnqueueRequestsFromMapFunc(r.allWindows)))
	}
	return b.Complete(r)
}

// countDelay is how long a change of node labels or request phases waits
// before the windows count again, so that the changes of that time make
// one count and one status write per window: a wave labels hundreds of
// nodes at once and changes several phases a second, and each used to
// count every node and request for every window. Three seconds: at one,
// a 1,000-node wave still wrote each window's status about once a
// second, almost one write per node drained (docs/performance.md); the
// counts are for people and plan, while the budget is decided by the
// ledger, never by them.
const countDelay = 3 * time.Second

// recount enqueues every window countDelay after the event; events within
// that time join the same reconcile (the queue holds a window once).
func (r *Reconciler) recount() handler.EventHandler {
	add := func(ctx context.Context, q workqueue.TypedRateLimitingInterface[reconcile.Request]) {
		for _, req := range r.allWindows(ctx, nil) {
			q.AddAfter(req, countDelay)
		}
	}
	return handler.Funcs{
		CreateFunc: func(ctx context.Context, _ event.CreateEvent, q workqueue.TypedRateLimitingInterface[reconcile.Request]) {
			add(ctx, q)
		},
		UpdateFunc: func(ctx context.Context, _ event.UpdateEvent, q workqueue.TypedRateLimitingInterface[reconcile.Request]) {
			add(ctx, q)
		},
		DeleteFunc: func(ctx context.Context, _ event.DeleteEvent, q workqueue.TypedRateLimitingInterface[reconcile.Request]) {
			add(ctx, q)
		},
		GenericFunc: func(ctx context.Context, _ event.GenericEvent, q workqueue.TypedRateLimitingInterface[reconcile.Request]) {
			add(ctx, q)
		},
	}
}

func (r *Reconciler) allWindows(ctx context.Context, _ client.Object) []reconcile.Request {
	var list lullv1alpha1.MaintenanceWindowList
	if err := r.Client.List(ctx, &list); err != nil {
		klog.FromContext(ctx).Error(err, "Listing MaintenanceWindows")
		return nil
	}
	reqs := make([]reconcile.Request, 0, len(list.Items))
	for _, w := range list.Items {
		reqs = append(reqs, reconcile.Request{NamespacedName: types.NamespacedName{Name: w.Name}})
	}
	return reqs
}

// Reconcile evaluates one window and writes its status.
func (r *Reconciler) Reconcile(ctx context.Context, req reconcile.Request) (reconcile.Result, error) {
	logger := klog.FromContext(ctx).WithValues("maintenanceWindow", req.Name)
	ctx = klog.NewContext(ctx, logger)
	var mw lullv1alpha1.MaintenanceWindow
	if err := r.Client.Get(ctx, req.NamespacedName, &mw); err != nil {
		if apierrors.IsNotFound(err) {
			r.Metrics.Forget(req.Name)
			return reconcile.Result{}, nil
		}
		return reconcile.Result{}, fmt.Errorf("getting MaintenanceWindow %s: %w", req.Name, err)
	}
	now := r.Clock.Now()
	w := window.CompileOrInvalid(&mw.Spec, r.Options)
	r.Metrics.Set(mw.Name, w)
	res := w.Evaluate(now)

	status := mw.Status.DeepCopy()
	status.ObservedGeneration = mw.Generation
	// The requests are read once, for the counts and the recovery gate:
	// the cache's objects, not copies (a wave's 1,000 requests copied for
	// every window on every count was half of the drainer's CPU).
	var nms lullv1alpha1.NodeMaintenanceList
	if err := r.Client.List(ctx, &nms, client.UnsafeDisableDeepCopy); err != nil {
		return reconcile.Result{}, fmt.Errorf("listing NodeMaintenances: %w", err)
	}
	counts, selErr := r.countSelected(ctx, &mw, nms.Items)
	status.SelectedNodes, status.NodesInMaintenance, status.NodesWaiting = counts.selected, counts.inMaintenance, counts.waiting
	r.Metrics.SetWaiting(mw.Name, counts.waiting)
	if maxUnavailable, err := budget.MaxUnavailable(&mw, int(counts.selected)); err == nil {
		r.Metrics.SetBudget(mw.Name, int(counts.inMaintenance), maxUnavailable)
	}
	setStatus(status, mw.Generation, w, res, now, selErr)
	if msg, frozen := budget.Frozen([]*lullv1alpha1.MaintenanceWindow{&mw}); frozen {
		// The schedule may permit, but the budget lets no node start:
		// say so where people look first.
		if c := meta.FindStatusCondition(status.Conditions, ConditionPermitted); c != nil {
			c.Message += "; " + msg
		}
	}

	gatesAgain := r.gates(ctx, &mw, nms.Items, status, now)
	r.Metrics.SetGates(mw.Name, gateStates(&mw, status, now))

	if !equality.Semantic.DeepEqual(&mw.Status, status) {
		mw.Status = *status
		if err := r.Client.Status().Update(ctx, &mw); err != nil {
			if apierrors.IsConflict(err) {
				return reconcile.Result{Requeue: true}, nil //nolint:staticcheck // SA1019: a conflict is retried with the queue's rate-limited backoff, which RequeueAfter (a fixed delay) does not give
			}
			return reconcile.Result{}, fmt.Errorf("updating status of MaintenanceWindow %s: %w", mw.Name, err)
		}
		logger.V(2).Info("Updated window status", "permitted", res.Permitted, "reason", res.Reason, "until", res.Until)
	}
	// Wake up exactly at the next transition (not by polling), or when a
	// gate wants another look.
	var again time.Duration
	if res.Until.Before(window.Forever) {
		again = res.Until.Sub(now) + time.Millisecond
	}
	if gatesAgain > 0 && (again == 0 || gatesAgain < again) {
		again = gatesAgain
	}
	return reconcile.Result{RequeueAfter: again}, nil
}

type nodeCounts struct{ selected, inMaintenance, waiting int32 }

// countSelected counts the window's nodes, and among them those lull is
// disrupting and those whose maintenance request waits.
func (r *Reconciler) countSelected(ctx context.Context, mw *lullv1alpha1.MaintenanceWindow, nms []lullv1alpha1.NodeMaintenance) (nodeCounts, error) {
	var c nodeCounts
	sel := labels.Everything()
	if mw.Spec.NodeSelector != nil {
		s, err := metav1.LabelSelectorAsSelector(mw.Spec.NodeSelector)
		if err != nil {
			return c, fmt.Errorf("spec.nodeSelector: %w", err)
		}
		sel = s
	}
	// Only read: the cache's objects, not copies.
	var nodes corev1.NodeList
	if err := r.Client.List(ctx, &nodes, client.MatchingLabelsSelector{Selector: sel}, client.UnsafeDisableDeepCopy); err != nil {
		return c, fmt.Errorf("listing nodes: %w", err)
	}
	c.selected = int32(len(nodes.Items)) //nolint:gosec // G115: a count of nodes, far below 2^31
	selected := make(map[string]bool, len(nodes.Items))
	for _, n := range nodes.Items {
		selected[n.Name] = true
	}
	for _, nm := range nms {
		if !selected[nm.Spec.NodeName] {
			continue
		}
		switch p := nm.Status.Phase; {
		case p.Disrupting():
			c.inMaintenance++
		case p.Waiting():
			c.waiting++
		}
	}
	return c, nil
}

// setStatus fills status from an evaluation at now.
func setStatus(status *lullv1alpha1.MaintenanceWindowStatus, gen int64, w *window.Window, res window.Result, now time.Time, selErr error) {
	setConditions(status, gen, res, now, selErr)
	cur := &lullv1alpha1.CurrentWindow{State: lullv1alpha1.StateRestricted, Reason: res.Message()}
	if meta.IsStatusConditionTrue(status.Conditions, ConditionPermitted) {
		cur.State = lullv1alpha1.StatePermitted
	}
	cur.Since = timePtr(res.Since)
	cur.Until = timePtr(res.Until)
	status.Current = cur
	status.Next, status.Upcoming = nil, nil
	if !res.HasNext {
		return
	}
	status.Next = period(res.Next)
	status.Next.Start = metav1.Time{Time: res.ShownStart(status, gen).UTC().Truncate(time.Second)}
	for _, iv := range w.Upcoming(now, upcomingCount+1) {
		if iv.Start.Equal(res.Next.Start) {
			continue
		}
		status.Upcoming = append(status.Upcoming, *period(iv))
	}
}

// setConditions sets Ready and Permitted. A condition's lastTransitionTime
// comes from the controller's clock and is kept while its status holds.
func setConditions(status *lullv1alpha1.MaintenanceWindowStatus, gen int64, res window.Result, now time.Time, selErr error) {
	at := metav1.Time{Time: now.UTC().Truncate(time.Second)}
	ready := metav1.Condition{Type: ConditionReady, Status: metav1.ConditionTrue, Reason: "Valid", Message: "window is valid", ObservedGeneration: gen, LastTransitionTime: at}
	switch {
	case res.Reason == window.ReasonInvalid:
		ready.Status, ready.Reason, ready.Message = metav1.ConditionFalse, "InvalidSpec", res.Detail
	case selErr != nil:
		ready.Status, ready.Reason, ready.Message = metav1.ConditionFalse, "InvalidSelector", selErr.Error()
	case res.Reason == window.ReasonNoWindow && res.Ended:
		ready.Status, ready.Reason, ready.Message = metav1.ConditionFalse, "RecurrenceEnded", res.Message()
	case res.Reason == window.ReasonNoWindow:
		ready.Status, ready.Reason, ready.Message = metav1.ConditionFalse, "NoWindowInHorizon", res.Message()
	}
	meta.SetStatusCondition(&status.Conditions, ready)
	permitted := metav1.Condition{Type: ConditionPermitted, Status: metav1.ConditionFalse, Reason: string(res.Reason), Message: res.Message(), ObservedGeneration: gen, LastTransitionTime: at}
	if res.Permitted && selErr == nil {
		permitted.Status = metav1.ConditionTrue
	}
	meta.SetStatusCondition(&status.Conditions, permitted)
}

func timePtr(t time.Time) *metav1.Time {
	if t.IsZero() || !t.Before(window.Forever) {
		return nil
	}
	return &metav1.Time{Time: t.UTC().Truncate(time.Second)}
}

func period(iv window.Interval) *lullv1alpha1.Period {
	return &lullv1alpha1.Period{Start: metav1.Time{Time: iv.Start.UTC().Truncate(time.Second)}, End: timePtr(iv.End)}
}
