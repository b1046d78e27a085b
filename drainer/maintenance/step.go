package maintenance

import (
	"context"
	"errors"
	"fmt"
	"sort"
	"strings"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/equality"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/klog/v2"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/controller/controllerutil"
	"sigs.k8s.io/controller-runtime/pkg/reconcile"

	lullv1alpha1 "lull.dev/lull/api/v1alpha1"
	"lull.dev/lull/lease"
	"lull.dev/lull/pkg/budget"
	"lull.dev/lull/pkg/forecast"
	"lull.dev/lull/pkg/policy"
)

// step is one reconcile of an active request: the request, its node, the
// forecast for the node, and the status being built.
type step struct {
	r      *Reconciler
	ctx    context.Context
	logger klog.Logger
	nm     *lullv1alpha1.NodeMaintenance
	node   *corev1.Node
	now    time.Time
	fc     *forecast.Node
	status *lullv1alpha1.NodeMaintenanceStatus
	// ws caches the governing windows for this reconcile (read once).
	ws       []*lullv1alpha1.MaintenanceWindow
	wsLoaded bool
}

func (r *Reconciler) newStep(ctx context.Context, nm *lullv1alpha1.NodeMaintenance, node *corev1.Node) *step {
	fc := r.Forecast.Compute(node.Name, node.Labels)
	return &step{r: r, ctx: ctx, logger: klog.FromContext(ctx), nm: nm, node: node, now: r.Clock.Now(), fc: fc,
		status: nm.Status.DeepCopy()}
}

// windows returns the MaintenanceWindows governing the node (nil: none
// selects it, the default applies). A window deleted since the forecast
// saw it no longer governs; any other read error fails the step (closed),
// since skipping a window would skip its budget and minTimeRemaining.
func (s *step) windows() ([]*lullv1alpha1.MaintenanceWindow, error) {
	if s.wsLoaded {
		return s.ws, nil
	}
	if s.fc == nil || s.fc.Windows == nil {
		s.wsLoaded = true
		return nil, nil
	}
	var ws []*lullv1alpha1.MaintenanceWindow
	for _, name := range s.fc.Windows.Names {
		var mw lullv1alpha1.MaintenanceWindow
		err := s.r.Client.Get(s.ctx, types.NamespacedName{Name: name}, &mw)
		if apierrors.IsNotFound(err) {
			continue
		}
		if err != nil {
			return nil, fmt.Errorf("reading MaintenanceWindow %s governing node %s: %w", name, s.node.Name, err)
		}
		ws = append(ws, &mw)
	}
	s.ws, s.wsLoaded = ws, true
	return ws, nil
}

// gate decides whether the request may start: window, then budget, then
// lease. Each wait says what it waits for.
func (s *step) gate() (reconcile.Result, error) {
	// Until the request starts, the policies decide again on every
	// reconcile: a policy change affects requests not yet started.
	if s.status.StartedAt == nil {
		d, err := s.r.Decide(s.ctx, s.nm.Spec.Class)
		if err != nil {
			return reconcile.Result{}, err
		}
		s.status.Decision = &d // announced by save once written
		if d.Action == lullv1alpha1.ActionNone {
			return s.noDisruption()
		}
	}
	ws, err := s.windows()
	if err != nil {
		return reconcile.Result{}, err
	}
	s.noteWindows()
	if res, waiting := s.waitForWindow(ws); waiting {
		// A lease we still hold from before a restart is not needed yet.
		s.releaseIfHeld()
		return s.save(lullv1alpha1.PhaseWaitingForWindow, res)
	}
	// The budget slot is taken (not only checked) here, in one write the
	// API server serialises with every other replica's: see budget.Ledger.
	if b, err := s.r.Budget.Reserve(s.ctx, s.r.Client, s.nm, budget.Request{Node: s.node.Name, Windows: ws,
		DefaultMaxUnavailable: s.r.Options.DefaultMaxUnavailable}); err != nil {
		return reconcile.Result{}, err
	} else if !b.Free {
		msg := b.Message
		s.releaseIfHeld()
		s.cond(ConditionBudget, false, "BudgetInUse", msg)
		s.status.WaitingFor = msg
		return s.save(lullv1alpha1.PhaseWaitingForBudget, reconcile.Result{RequeueAfter: 30 * time.Second})
	}
	s.cond(ConditionBudget, true, "BudgetAvailable", "the window's disruption budget has room")

	info, err := s.acquire()
	if held, ok := lease.IsHeld(err); ok {
		if lease.SameFamily(held.Holder, s.r.Options.Identity) {
			// Another replica of the drainer holds it and is carrying this
			// request out (replicas without leader election, or a deposed
			// leader not yet stopped): leave the request, its slot and its
			// status to that replica; look again once its lease could expire.
			s.logger.V(2).Info("Another drainer replica holds the lease", "holder", held.Holder)
			return reconcile.Result{RequeueAfter: s.r.Options.LeaseDuration / 3}, nil
		}
		// Waiting for another actor must not keep a budget slot others
		// could use; the gate takes it again when the lease is free.
		s.releaseBudget()
		msg := held.Error()
		if s.status.Phase != lullv1alpha1.PhaseWaitingForLease {
			s.event(corev1.EventTypeNormal, "WaitingForLease", msg)
		}
		s.status.LeaseHolder = held.Holder
		s.status.WaitingFor = msg
		s.cond(ConditionLeaseHeld, false, "HeldByOther", msg)
		// The holder's renewals wake us through the lease watch; its
		// expiry is judged by observation, so look again after one duration.
		retry := held.Duration
		if retry <= 0 || retry > time.Minute {
			retry = time.Minute
		}
		return s.save(lullv1alpha1.PhaseWaitingForLease, reconcile.Result{RequeueAfter: retry})
	}
	if err != nil {
		return reconcile.Result{}, fmt.Errorf("acquiring the lease of node %s: %w", s.node.Name, err)
	}
	s.r.memo.renewed(s.node.Name, s.now)
	s.status.LeaseHolder = info.Holder
	s.cond(ConditionLeaseHeld, true, "Acquired", fmt.Sprintf("lease held by %s", info.Holder))
	// Record whether the node was cordoned before we touch it; this is
	// written before the cordon, so a crash in between cannot lose it.
	if s.status.WasUnschedulable == nil {
		s.status.WasUnschedulable = ptr.To(s.node.Spec.Unschedulable)
	}
	if s.status.StartedAt == nil {
		s.status.StartedAt = &metav1.Time{Time: s.now}
	}
	s.status.WaitingFor = ""
	s.event(corev1.EventTypeNormal, "Started", "lease acquired; cordoning")
	if _, err := s.save(lullv1alpha1.PhaseCordoning, reconcile.Result{}); err != nil {
		return reconcile.Result{}, err
	}
	return s.cordon()
}

// noteWindows records the governing windows and their next start.
func (s *step) noteWindows() {
	s.status.Windows, s.status.NextWindowStart = nil, nil
	if s.fc == nil || s.fc.Windows == nil {
		return
	}
	s.status.Windows = s.fc.Windows.Names
	if s.fc.Windows.HasNext {
		s.status.NextWindowStart = &metav1.Time{Time: s.fc.Windows.Next.Start.UTC().Truncate(time.Second)}
	}
}

// waitForWindow reports whether the windows (or minTimeRemaining) keep
// the request from starting now, and when to look again.
func (s *step) waitForWindow(ws []*lullv1alpha1.MaintenanceWindow) (reconcile.Result, bool) {
	v := CheckWindow(s.fc, ws, s.now)
	if s.fc == nil {
		return reconcile.Result{RequeueAfter: time.Second}, true
	}
	s.cond(ConditionWindowPermits, !v.Wait, v.Reason, v.Message)
	if !v.Wait {
		return reconcile.Result{}, false
	}
	s.status.WaitingFor = v.Message
	return reconcile.Result{RequeueAfter: v.RetryAfter}, true
}

// WindowVerdict is the window gate's answer for a request now.
type WindowVerdict struct {
	// Wait is true while the windows keep the request from starting.
	Wait bool
	// Reason and Message as the WindowPermits condition shows them.
	Reason, Message string
	// RetryAfter is when the answer changes by itself (0: not known).
	RetryAfter time.Duration
	// Opens is when the request may start, if known (next window start
	// or the deadline, whichever comes first).
	Opens time.Time
}

// CheckWindow is the window gate: the node's forecast (windows, deadline)
// and the governing windows' minTimeRemaining. The drainer gates with it
// and the preview predicts with it.
func CheckWindow(fc *forecast.Node, ws []*lullv1alpha1.MaintenanceWindow, now time.Time) WindowVerdict {
	if fc == nil {
		return WindowVerdict{Wait: true, Reason: "Unknown", Message: "the node's forecast is not known yet", RetryAfter: time.Second}
	}
	if !fc.WindowOpen {
		v := WindowVerdict{Wait: true, Reason: "WindowClosed", Message: "no window opens within the search horizon"}
		if fc.Windows != nil {
			v.Message = fc.Windows.Message
			if fc.Windows.HasNext {
				v.Message = fmt.Sprintf("window(s) %s closed; next opens at %s", strings.Join(fc.Windows.Names, ","), fc.Windows.Next.Start.UTC().Format(time.RFC3339))
				v.RetryAfter = fc.Windows.Next.Start.Sub(now)
				v.Opens = fc.Windows.Next.Start
			}
		}
		if fc.Maintenance != nil && !fc.Maintenance.Deadline.IsZero() {
			v.Message += fmt.Sprintf(" (deadline %s)", fc.Maintenance.Deadline.UTC().Format(time.RFC3339))
			if v.Opens.IsZero() || fc.Maintenance.Deadline.Before(v.Opens) {
				v.Opens = fc.Maintenance.Deadline
			}
		}
		return v
	}
	if !fc.PastDeadline && fc.Windows != nil && fc.Windows.Permitted {
		left := fc.Windows.Until.Sub(now)
		for _, mw := range ws {
			if min := mw.Spec.MinTimeRemaining; min != nil && left < min.Duration {
				return WindowVerdict{Wait: true, Reason: "TooLittleTimeLeft", RetryAfter: left + time.Second,
					Message: fmt.Sprintf("only %s left in window %s; minTimeRemaining is %s", left.Round(time.Second), mw.Name, min.Duration)}
			}
		}
	}
	if fc.PastDeadline {
		return WindowVerdict{Reason: "DeadlinePassed", Message: "the request's deadline has passed; windows no longer gate it", Opens: now}
	}
	return WindowVerdict{Reason: "WindowOpen", Message: "the node's windows permit changes to start", Opens: now}
}

// cordon marks the node unschedulable (unless it already is) and moves on
// to draining.
func (s *step) cordon() (reconcile.Result, error) {
	if res, lost, err := s.renew(); lost || err != nil {
		return res, err
	}
	if !s.node.Spec.Unschedulable {
		patch := []byte(`{"spec":{"unschedulable":true}}`)
		if err := s.r.Client.Patch(s.ctx, s.node, client.RawPatch(types.MergePatchType, patch)); err != nil {
			return reconcile.Result{}, fmt.Errorf("cordoning node %s: %w", s.node.Name, err)
		}
		s.event(corev1.EventTypeNormal, "Cordoned", "node cordoned by lull")
	}
	s.status.CordonedByLull = !ptr.Deref(s.status.WasUnschedulable, false)
	msg := "node cordoned by lull"
	if !s.status.CordonedByLull {
		msg = "node was already cordoned by someone else; lull will leave that cordon in place"
	}
	s.cond(ConditionCordoned, true, "Cordoned", msg)
	if s.action() == lullv1alpha1.ActionCordon {
		s.cond(ConditionDrained, false, "NotNeeded", "the policy action is Cordon: nothing is evicted")
		return s.hold(lullv1alpha1.PhaseCordoned)
	}
	if _, err := s.save(lullv1alpha1.PhaseDraining, reconcile.Result{}); err != nil {
		return reconcile.Result{}, err
	}
	return s.drain()
}

// hold keeps a drained (or, for action Cordon, cordoned) node's lease
// until the operator completes the request.
func (s *step) hold(phase lullv1alpha1.MaintenancePhase) (reconcile.Result, error) {
	if res, lost, err := s.renew(); lost || err != nil {
		return res, err
	}
	what := "drained"
	if phase == lullv1alpha1.PhaseCordoned {
		what = "cordoned (policy action Cordon)"
	}
	s.status.WaitingFor = what + ": do the maintenance, then remove the label lull.dev/maintenance (or set spec.complete)"
	return s.save(phase, reconcile.Result{RequeueAfter: s.r.Options.LeaseDuration / 3})
}

// action is the decided action; requests from before policies existed
// (no decision recorded) drain.
func (s *step) action() lullv1alpha1.DisruptionAction {
	if d := s.status.Decision; d != nil {
		return d.Action
	}
	return lullv1alpha1.ActionDrain
}

// noDisruption ends a request whose class needs nothing disruptive: no
// lease, window or budget; the label goes and the request is recorded as
// completed.
func (s *step) noDisruption() (reconcile.Result, error) {
	if hasLabel(s.node, s.r.Options.MaintenanceLabel) {
		patch := fmt.Sprintf(`{"metadata":{"labels":{%q:null}}}`, s.r.Options.MaintenanceLabel)
		if err := s.r.Client.Patch(s.ctx, s.node, client.RawPatch(types.MergePatchType, []byte(patch))); err != nil && !apierrors.IsNotFound(err) {
			return reconcile.Result{}, fmt.Errorf("removing the maintenance label from node %s: %w", s.node.Name, err)
		}
	}
	return s.finish("NoDisruptionNeeded", policy.Describe(s.nm.Spec.Class, *s.status.Decision)+": completed at once, without lease, window or budget")
}

// Decide asks the DisruptionPolicies (from the cache) what class needs.
func (r *Reconciler) Decide(ctx context.Context, class string) (lullv1alpha1.Decision, error) {
	var list lullv1alpha1.DisruptionPolicyList
	if err := r.Client.List(ctx, &list); err != nil {
		return lullv1alpha1.Decision{}, fmt.Errorf("listing DisruptionPolicies: %w", err)
	}
	return policy.Merge(list.Items).Decide(class), nil
}

// renew keeps the lease while the node is disrupted. A lost lease stops
// everything at once: the request waits for the lease again (the cordon
// stays, and is still ours to undo).
func (s *step) renew() (reconcile.Result, bool, error) {
	if !s.r.memo.renewDue(s.node.Name, s.now, s.r.Options.LeaseDuration/3) {
		return reconcile.Result{}, false, nil
	}
	_, err := s.r.Leases.Renew(s.ctx, s.node.Name, s.r.Options.Identity)
	if err == nil {
		s.r.memo.renewed(s.node.Name, s.now)
		return reconcile.Result{}, false, nil
	}
	s.r.Metrics.LeaseRenewFailures.Inc()
	if errors.Is(err, lease.ErrNotHolder) || apierrors.IsNotFound(err) {
		holder := ""
		if info, gerr := s.r.Leases.Get(s.ctx, s.node.Name); gerr == nil && info != nil {
			holder = info.Holder
		}
		if lease.SameFamily(holder, s.r.Options.Identity) {
			return s.replicaHolds(holder)
		}
		msg := fmt.Sprintf("lost the node's lease (now held by %q); evictions stopped", holder)
		s.logger.Info("Lost the lease", "holder", holder)
		s.event(corev1.EventTypeWarning, "LeaseLost", msg)
		s.status.LastError = msg
		s.status.LeaseHolder = holder
		s.status.WaitingFor = msg
		s.cond(ConditionLeaseHeld, false, "Lost", msg)
		res, err := s.save(lullv1alpha1.PhaseWaitingForLease, reconcile.Result{RequeueAfter: 10 * time.Second})
		return res, true, err
	}
	return reconcile.Result{}, false, fmt.Errorf("renewing the lease of node %s: %w", s.node.Name, err)
}

// replicaHolds handles a renewal that found another replica of the
// drainer holding the node's lease: it took the request over (we were
// deposed as leader, or replicas run without leader election). Take it
// back only where Acquire allows (we lead, or its lease expired by
// observation); otherwise stand down without writing anything.
func (s *step) replicaHolds(holder string) (reconcile.Result, bool, error) {
	_, err := s.acquire()
	if err == nil {
		s.logger.Info("Took the lease back from another drainer replica", "holder", holder)
		s.r.memo.renewed(s.node.Name, s.now)
		return reconcile.Result{}, false, nil
	}
	s.r.memo.forget(s.node.Name)
	if _, held := lease.IsHeld(err); !held {
		return reconcile.Result{}, true, fmt.Errorf("taking back the lease of node %s from %s: %w", s.node.Name, holder, err)
	}
	s.logger.Info("Another drainer replica holds the lease; standing down", "holder", holder)
	return reconcile.Result{RequeueAfter: s.r.Options.LeaseDuration / 3}, true, nil
}

// acquire takes (or renews) the node's lease for this request.
func (s *step) acquire() (*lease.Info, error) {
	reason := fmt.Sprintf("NodeMaintenance %s (class %s)", s.nm.Name, s.nm.Spec.Class)
	return s.r.Leases.Acquire(s.ctx, s.node.Name, s.r.Options.Identity, "drain", reason, s.r.Options.LeaseDuration)
}

// releaseIfHeld gives up a lease and a budget slot lull holds for a
// request that is not (or no longer) disrupting the node. As the elected
// leader that includes a lease another replica took for the
// request and left behind (lease.Options.TakeOverReplicas).
func (s *step) releaseIfHeld() {
	if err := s.r.Leases.Release(s.ctx, s.node.Name, s.r.Options.Identity); err == nil {
		s.logger.V(2).Info("Released a lease not needed while waiting")
		s.status.LeaseHolder = ""
	}
	s.r.memo.forget(s.node.Name)
	s.releaseBudget()
}

// releaseBudget gives up the request's budget slot. A failure keeps the
// slot counted (fail closed) until a later round or the ledger's pruning
// of finished requests drops it.
func (s *step) releaseBudget() {
	if err := s.r.Budget.Release(s.ctx, s.nm.Spec.NodeName, s.nm.UID); err != nil {
		s.logger.Error(err, "Releasing the budget slot; it stays counted until a later round")
	}
}

// abort undoes what lull did (its own cordon, its lease) and returns the
// request to phase next.
func (s *step) abort(next lullv1alpha1.MaintenancePhase, why string) (reconcile.Result, error) {
	if err := s.r.uncordonIfOurs(s.ctx, s.node, s.status); err != nil {
		return reconcile.Result{}, err
	}
	s.releaseIfHeld()
	s.status.WasUnschedulable, s.status.CordonedByLull, s.status.StartedAt = nil, false, nil
	s.status.Blockers = nil
	s.cond(ConditionCordoned, false, "Aborted", why)
	s.cond(ConditionLeaseHeld, false, "Released", why)
	s.event(corev1.EventTypeWarning, "Aborted", why)
	s.status.WaitingFor = why
	return s.save(next, reconcile.Result{RequeueAfter: time.Second})
}

// uncordonIfOurs removes the cordon only when lull put it there.
func (r *Reconciler) uncordonIfOurs(ctx context.Context, node *corev1.Node, st *lullv1alpha1.NodeMaintenanceStatus) error {
	if node == nil || !st.CordonedByLull || ptr.Deref(st.WasUnschedulable, false) {
		return nil
	}
	if node.Spec.Unschedulable {
		patch := []byte(`{"spec":{"unschedulable":false}}`)
		if err := r.Client.Patch(ctx, node, client.RawPatch(types.MergePatchType, patch)); err != nil && !apierrors.IsNotFound(err) {
			return fmt.Errorf("uncordoning node %s: %w", node.Name, err)
		}
	}
	st.CordonedByLull = false
	return nil
}

// complete ends a request the operator marked done: uncordon (if ours),
// release the lease, remove the label, and record completion.
func (r *Reconciler) complete(ctx context.Context, nm *lullv1alpha1.NodeMaintenance, node *corev1.Node) (reconcile.Result, error) {
	s := &step{r: r, ctx: ctx, logger: klog.FromContext(ctx), nm: nm, node: node, now: r.Clock.Now(), status: nm.Status.DeepCopy()}
	if nm.Status.Phase != lullv1alpha1.PhaseUncordoning {
		if _, err := s.save(lullv1alpha1.PhaseUncordoning, reconcile.Result{}); err != nil {
			return reconcile.Result{}, err
		}
	}
	if err := r.uncordonIfOurs(ctx, node, s.status); err != nil {
		return reconcile.Result{}, err
	}
	if err := r.Leases.ReleaseForTool(ctx, node.Name, r.Options.Identity); err != nil && !errors.Is(err, lease.ErrNotHolder) && !apierrors.IsNotFound(err) {
		return reconcile.Result{}, fmt.Errorf("releasing the lease of node %s: %w", node.Name, err)
	}
	r.memo.forget(node.Name)
	s.releaseBudget()
	if hasLabel(node, r.Options.MaintenanceLabel) {
		patch := fmt.Sprintf(`{"metadata":{"labels":{%q:null}}}`, r.Options.MaintenanceLabel)
		if err := r.Client.Patch(ctx, node, client.RawPatch(types.MergePatchType, []byte(patch))); err != nil && !apierrors.IsNotFound(err) {
			return reconcile.Result{}, fmt.Errorf("removing the maintenance label from node %s: %w", node.Name, err)
		}
	}
	return s.finish("Completed", "maintenance completed; node returned to service")
}

// nodeGone ends a request whose node is not there: nothing to uncordon,
// and the lease goes (also garbage-collected with the node). A request the
// drainer never saw its node for (no phase yet) named a node that does not
// exist, which is asked of the API server itself so that a node the cache
// has not caught up with is not taken for missing: it ends NodeNotFound,
// not Completed, since no maintenance happened.
func (r *Reconciler) nodeGone(ctx context.Context, nm *lullv1alpha1.NodeMaintenance) (reconcile.Result, error) {
	s := &step{r: r, ctx: ctx, logger: klog.FromContext(ctx), nm: nm, now: r.Clock.Now(), status: nm.Status.DeepCopy()}
	neverSeen := nm.Status.Phase == ""
	if neverSeen && r.APIReader != nil {
		var node corev1.Node
		err := r.APIReader.Get(ctx, client.ObjectKey{Name: nm.Spec.NodeName}, &node)
		if err == nil {
			return reconcile.Result{RequeueAfter: time.Second}, nil // the cache lags; look again
		}
		if !apierrors.IsNotFound(err) {
			return reconcile.Result{}, fmt.Errorf("getting node %s: %w", nm.Spec.NodeName, err)
		}
	}
	if err := r.Leases.ReleaseForTool(ctx, nm.Spec.NodeName, r.Options.Identity); err != nil && !errors.Is(err, lease.ErrNotHolder) && !apierrors.IsNotFound(err) {
		return reconcile.Result{}, fmt.Errorf("releasing the lease of deleted node %s: %w", nm.Spec.NodeName, err)
	}
	r.memo.forget(nm.Spec.NodeName)
	s.releaseBudget()
	s.status.CordonedByLull = false
	if neverSeen {
		return s.finishAs(lullv1alpha1.PhaseNodeNotFound, corev1.EventTypeWarning, "NodeNotFound",
			fmt.Sprintf("node %q does not exist; nothing was done. Check spec.nodeName (kubectl get nodes) and create the request again", nm.Spec.NodeName))
	}
	return s.finish("NodeDeleted", "the node was deleted; request ended")
}

// finalize handles a deleted NodeMaintenance: complete it, then let it go.
func (r *Reconciler) finalize(ctx context.Context, nm *lullv1alpha1.NodeMaintenance, node *corev1.Node) (reconcile.Result, error) {
	if !controllerutil.ContainsFinalizer(nm, Finalizer) {
		return reconcile.Result{}, nil
	}
	if !nm.Status.Phase.Finished() {
		var err error
		if node == nil {
			_, err = r.nodeGone(ctx, nm)
		} else {
			_, err = r.complete(ctx, nm, node)
		}
		if err != nil {
			return reconcile.Result{}, err
		}
	}
	controllerutil.RemoveFinalizer(nm, Finalizer)
	return reconcile.Result{}, client.IgnoreNotFound(r.Client.Update(ctx, nm))
}

// finish records a completed request and drops the finalizer.
func (s *step) finish(reason, msg string) (reconcile.Result, error) {
	return s.finishAs(lullv1alpha1.PhaseCompleted, corev1.EventTypeNormal, reason, msg)
}

// finishAs records a request ended in phase and drops the finalizer.
func (s *step) finishAs(phase lullv1alpha1.MaintenancePhase, eventType, reason, msg string) (reconcile.Result, error) {
	s.status.CompletedAt = &metav1.Time{Time: s.now}
	s.status.WaitingFor = ""
	s.status.LeaseHolder = ""
	s.status.Blockers = nil
	s.cond(ConditionLeaseHeld, false, "Released", msg)
	s.cond(ConditionCordoned, false, reason, msg)
	s.event(eventType, reason, msg)
	if _, err := s.save(phase, reconcile.Result{}); err != nil {
		return reconcile.Result{}, err
	}
	if s.nm.DeletionTimestamp == nil && controllerutil.ContainsFinalizer(s.nm, Finalizer) {
		controllerutil.RemoveFinalizer(s.nm, Finalizer)
		if err := s.r.Client.Update(s.ctx, s.nm); err != nil {
			return reconcile.Result{}, client.IgnoreNotFound(err)
		}
	}
	return reconcile.Result{}, nil
}

// cond sets a condition on the status being built.
func (s *step) cond(t string, ok bool, reason, msg string) {
	st := metav1.ConditionFalse
	if ok {
		st = metav1.ConditionTrue
	}
	meta.SetStatusCondition(&s.status.Conditions, metav1.Condition{Type: t, Status: st, Reason: reason, Message: msg, ObservedGeneration: s.nm.Generation})
}

func (s *step) event(eventType, reason, msg string) {
	if s.r.Recorder != nil {
		s.r.Recorder.Eventf(s.nm, nil, eventType, reason, "Maintenance", "%s", msg)
	}
}

// save writes the status with the given phase when it changed; the phase
// change is the commit point of each step.
func (s *step) save(phase lullv1alpha1.MaintenancePhase, res reconcile.Result) (reconcile.Result, error) {
	s.status.Phase = phase
	s.status.ObservedGeneration = s.nm.Generation
	if equality.Semantic.DeepEqual(&s.nm.Status, s.status) {
		return res, nil
	}
	old, oldDecision := s.nm.Status.Phase, s.nm.Status.Decision
	s.nm.Status = *s.status
	if err := s.r.Client.Status().Update(s.ctx, s.nm); err != nil {
		// A conflict too stops the chain of steps; Reconcile requeues.
		return reconcile.Result{}, fmt.Errorf("updating the status of NodeMaintenance %s: %w", s.nm.Name, err)
	}
	s.status = s.nm.Status.DeepCopy()
	if d := s.status.Decision; d != nil && (oldDecision == nil || !equality.Semantic.DeepEqual(*oldDecision, *d)) {
		// A decision counts once it is recorded: a write lost to a
		// conflict is decided (and announced) again by the next round.
		s.event(corev1.EventTypeNormal, "PolicyDecided", policy.Describe(s.nm.Spec.Class, *d))
		s.r.Metrics.Decisions.WithLabelValues(string(d.Action), d.RuleRef()).Inc()
	}
	if old != phase {
		s.logger.Info("Phase changed", "from", old, "to", phase, "waitingFor", s.status.WaitingFor)
	}
	return res, nil
}

// sortedKeys returns a map's keys in order.
func sortedKeys[V any](m map[string]V) []string {
	out := make([]string, 0, len(m))
	for k := range m {
		out = append(out, k)
	}
	sort.Strings(out)
	return out
}
