package maintenance

import (
	"context"
	"errors"
	"fmt"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/klog/v2"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/controller/controllerutil"
	"sigs.k8s.io/controller-runtime/pkg/reconcile"

	lullv1alpha1 "lull.dev/lull/api/v1alpha1"
	"lull.dev/lull/lease"
)

// cordon marks the node unschedulable (unless it already is) and moves on
// to draining.
func (s *step) cordon(ctx context.Context) (reconcile.Result, error) {
	if res, lost, err := s.renew(ctx); lost || err != nil {
		return res, err
	}
	// The hold annotations (recorded at the start) and the cordon, in
	// one patch.
	patch := s.holdPatch()
	patched := false
	if !s.node.Spec.Unschedulable {
		patch["spec"] = map[string]any{"unschedulable": true}
		patched = true
	}
	if len(patch) > 0 {
		if err := s.r.patchNode(ctx, s.node, patch); err != nil {
			return reconcile.Result{}, fmt.Errorf("cordoning node %s: %w", s.node.Name, err)
		}
	}
	s.status.CordonedByLull = !ptr.Deref(s.status.WasUnschedulable, false)
	msg := "node cordoned by lull"
	if !s.status.CordonedByLull {
		msg = "node was already cordoned by someone else; lull will leave that cordon in place"
	}
	// One event per request says it started and how the node was found:
	// Started when the start and the cordon are this reconcile's, Cordoned
	// when the cordon is put back on a started request (after a restart).
	switch {
	case s.starting:
		s.event(corev1.EventTypeNormal, ReasonStarted, "lease acquired; "+msg)
	case patched:
		s.event(corev1.EventTypeNormal, ReasonCordoned, msg)
	}
	s.cond(ConditionCordoned, true, "Cordoned", msg)
	return s.afterCordon(ctx)
}

// hold keeps a drained (or, for action Cordon, cordoned) node's lease
// until the operator completes the request.
func (s *step) hold(ctx context.Context, phase lullv1alpha1.MaintenancePhase) (reconcile.Result, error) {
	if res, lost, err := s.renew(ctx); lost || err != nil {
		return res, err
	}
	what := "drained"
	if phase == lullv1alpha1.PhaseCordoned {
		what = "cordoned (policy action Cordon)"
	}
	s.status.WaitingFor = what + ": do the maintenance, then remove the label lull.dev/maintenance (or set spec.complete)"
	return s.save(ctx, phase, reconcile.Result{RequeueAfter: s.r.Options.LeaseDuration / 3})
}

// abort undoes what lull did (its own cordon, its lease) and returns the
// request to phase next. A request that fails ends: its maintenance label
// goes too, as when a request completes, so that a label left on the node
// does not make a new request that fails the same way again and again (a
// reboot that never comes back, a drain that escalates to Abort); the
// record says why, and labelling the node again asks again.
func (s *step) abort(ctx context.Context, next lullv1alpha1.MaintenancePhase, why string) (reconcile.Result, error) {
	if err := s.r.giveBack(ctx, s.node, s.status); err != nil {
		return reconcile.Result{}, err
	}
	if next == lullv1alpha1.PhaseFailed && s.node != nil {
		if err := s.r.removeLabel(ctx, s.node); err != nil {
			return reconcile.Result{}, err
		}
	}
	s.releaseIfHeld(ctx)
	s.status.WasUnschedulable, s.status.CordonedByLull, s.status.StartedAt = nil, false, nil
	s.status.Blockers = nil
	s.cond(ConditionCordoned, false, "Aborted", why)
	s.cond(ConditionLeaseHeld, false, "Released", why)
	s.event(corev1.EventTypeWarning, ReasonAborted, why)
	s.status.WaitingFor = why
	return s.save(ctx, next, reconcile.Result{RequeueAfter: time.Second})
}

// complete ends a request the operator marked done: uncordon (if ours),
// release the lease, remove the label, and record completion.
func (r *Reconciler) complete(ctx context.Context, nm *lullv1alpha1.NodeMaintenance, node *corev1.Node) (reconcile.Result, error) {
	s := &step{r: r, logger: klog.FromContext(ctx), nm: nm, node: node, now: r.Clock.Now(), status: nm.Status.DeepCopy()}
	if nm.Status.Phase != lullv1alpha1.PhaseUncordoning {
		if _, err := s.save(ctx, lullv1alpha1.PhaseUncordoning, reconcile.Result{}); err != nil {
			return reconcile.Result{}, err
		}
	}
	if err := r.giveBack(ctx, node, s.status); err != nil {
		return reconcile.Result{}, err
	}
	if err := r.Leases.ReleaseForTool(ctx, node.Name, r.Options.Identity); err != nil && !errors.Is(err, lease.ErrNotHolder) && !apierrors.IsNotFound(err) {
		return reconcile.Result{}, fmt.Errorf("releasing the lease of node %s: %w", node.Name, err)
	}
	r.forget(node.Name)
	s.releaseBudget(ctx)
	if err := r.removeLabel(ctx, node); err != nil {
		return reconcile.Result{}, err
	}
	return s.finish(ctx, ReasonCompleted, "maintenance completed; node returned to service")
}

// nodeGone ends a request whose node is not there: nothing to uncordon,
// and the lease goes (also garbage-collected with the node). A request the
// drainer never saw its node for (no phase yet) named a node that does not
// exist, which is asked of the API server itself so that a node the cache
// has not caught up with is not taken for missing: it ends NodeNotFound,
// not Completed, since no maintenance happened.
func (r *Reconciler) nodeGone(ctx context.Context, nm *lullv1alpha1.NodeMaintenance) (reconcile.Result, error) {
	s := &step{r: r, logger: klog.FromContext(ctx), nm: nm, now: r.Clock.Now(), status: nm.Status.DeepCopy()}
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
	r.forget(nm.Spec.NodeName)
	s.status.CordonedByLull, s.status.NodeAnnotations = false, nil // the node is gone, and its cordon with it
	s.releaseBudget(ctx)
	if neverSeen {
		return s.finishAs(ctx, lullv1alpha1.PhaseNodeNotFound, corev1.EventTypeWarning, ReasonNodeNotFound,
			fmt.Sprintf("node %q does not exist; nothing was done. Check spec.nodeName (kubectl get nodes) and create the request again", nm.Spec.NodeName))
	}
	return s.finish(ctx, ReasonNodeDeleted, "the node was deleted; request ended")
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
	return reconcile.Result{}, client.IgnoreNotFound(r.update(ctx, nm))
}

// finish records a completed request and drops the finalizer.
func (s *step) finish(ctx context.Context, reason, msg string) (reconcile.Result, error) {
	return s.finishAs(ctx, lullv1alpha1.PhaseCompleted, corev1.EventTypeNormal, reason, msg)
}

// finishAs records a request ended in phase and drops the finalizer.
func (s *step) finishAs(ctx context.Context, phase lullv1alpha1.MaintenancePhase, eventType, reason, msg string) (reconcile.Result, error) {
	s.status.CompletedAt = &metav1.Time{Time: s.now}
	s.status.WaitingFor = ""
	s.status.LeaseHolder = ""
	s.status.Blockers = nil
	s.cond(ConditionLeaseHeld, false, "Released", msg)
	s.cond(ConditionCordoned, false, reason, msg)
	s.event(eventType, reason, msg)
	if _, err := s.save(ctx, phase, reconcile.Result{}); err != nil {
		return reconcile.Result{}, err
	}
	if s.nm.DeletionTimestamp == nil && controllerutil.ContainsFinalizer(s.nm, Finalizer) {
		controllerutil.RemoveFinalizer(s.nm, Finalizer)
		if err := s.r.update(ctx, s.nm); err != nil {
			return reconcile.Result{}, client.IgnoreNotFound(err)
		}
	}
	return reconcile.Result{}, nil
}
