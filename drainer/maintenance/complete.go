package maintenance

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"strings"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/klog/v2"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/controller/controllerutil"
	"sigs.k8s.io/controller-runtime/pkg/reconcile"

	lullv1alpha1 "lull.dev/lull/api/v1alpha1"
	"lull.dev/lull/lease"
)

// The complete unit: Uncordoning → Completed, and the other ways a
// request ends (aborted, its node gone, deleted). lull gives back only
// what it took: its own cordon and hold annotations, its lease and its
// budget slot.

// abort undoes what lull did (its own cordon, its lease) and returns the
// request to phase next. A request that fails ends: its maintenance label
// goes too, as when a request completes, so that a label left on the node
// does not make a new request that fails the same way again and again (a
// reboot that never comes back, a drain that escalates to Abort); the
// record says why, and labelling the node again asks again.
func (s *step) abort(ctx context.Context, next lullv1alpha1.MaintenancePhase, why string) (reconcile.Result, error) {
	if err := s.giveBack(ctx); err != nil {
		return reconcile.Result{}, err
	}
	if next == lullv1alpha1.PhaseFailed && s.node != nil {
		if err := s.r.removeLabel(ctx, s.node); err != nil {
			return reconcile.Result{}, err
		}
	}
	s.releaseIfHeld(ctx)
	s.status.WasUnschedulable, s.status.CordonedByLull = nil, false
	if next.Finished() {
		// A request that ends keeps when it started and says when it
		// ended: the recovery gate judges the node it disrupted
		// (TestRedteamRecoveryFailedAfterStartIsNotJudged). One that
		// starts over is not started.
		s.status.CompletedAt = &metav1.Time{Time: s.now}
	} else {
		s.status.StartedAt = nil
	}
	s.status.Blockers = nil
	s.cond(ConditionCordoned, false, "Aborted", why)
	s.cond(ConditionLeaseHeld, false, "Released", why)
	s.record(eventAborted(why))
	s.status.WaitingFor = why
	return s.save(ctx, next, reconcile.Result{RequeueAfter: time.Second})
}

// complete ends a request: uncordon (if ours), release the lease, remove
// the label, record completion and give the budget slot back.
//
// committed says the completion's trigger outlives a crash midway: the
// label removed, spec.complete, the request deleted, or Uncordoning
// already written. A restart then completes again from the stored status,
// every step being safe twice (giveBack tests lull's cordon mark, the
// lease and the label are gone or not). A completion without such a
// trigger (the host steps' end, actionsDone: a moment, not a record)
// writes Uncordoning first, its commit point: a restart that found the
// request held again, with its cordon and lease already given back, would
// start it over and disrupt the node again
// (TestRedteamCompletionCrashAfterActionsDone*). A label removed and put
// back across a crash is a new request for maintenance: the request is
// held again, loses its lease, and starts over under the gates, taking
// for lull's only a cordon carrying its mark
// (TestRedteamCompletionCrashThenRelabelUncordonsAnAdminsCordon).
func (r *Reconciler) complete(ctx context.Context, nm *lullv1alpha1.NodeMaintenance, node *corev1.Node, committed bool) (reconcile.Result, error) {
	s := &step{r: r, logger: klog.FromContext(ctx), nm: nm, node: node, now: r.Clock.Now(), status: nm.Status.DeepCopy()}
	if !committed && nm.Status.Phase != lullv1alpha1.PhaseUncordoning {
		if _, err := s.save(ctx, lullv1alpha1.PhaseUncordoning, reconcile.Result{}); err != nil {
			return reconcile.Result{}, err
		}
	}
	if err := s.giveBack(ctx); err != nil {
		return reconcile.Result{}, err
	}
	if err := r.Leases.ReleaseForTool(ctx, node.Name, r.Options.Identity); err != nil && !errors.Is(err, lease.ErrNotHolder) && !apierrors.IsNotFound(err) {
		return reconcile.Result{}, fmt.Errorf("releasing the lease of node %s: %w", node.Name, err)
	}
	r.forget(node.Name)
	if err := r.removeLabel(ctx, node); err != nil {
		return reconcile.Result{}, err
	}
	return s.finish(ctx, eventCompleted(s.status))
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
	if neverSeen {
		return s.finishAs(ctx, lullv1alpha1.PhaseNodeNotFound, eventNodeNotFound(nm.Spec.NodeName))
	}
	return s.finish(ctx, eventNodeDeleted())
}

// finalize handles a deleted NodeMaintenance: complete it, then let it go.
func (r *Reconciler) finalize(ctx context.Context, nm *lullv1alpha1.NodeMaintenance, node *corev1.Node) (reconcile.Result, error) {
	if !controllerutil.ContainsFinalizer(nm, Finalizer) {
		return reconcile.Result{}, nil
	}
	if nm.Status.Phase.Finished() && nm.Status.Silence != nil {
		// An ended request deleted before its silence was seen expired:
		// it goes once it is (or the silence has passed its end).
		if err := r.expireFinished(ctx, nm, node); err != nil {
			return reconcile.Result{}, err
		}
		if nm.Status.Silence != nil {
			return reconcile.Result{RequeueAfter: silenceRetry}, nil
		}
	}
	if !nm.Status.Phase.Finished() {
		var err error
		if node == nil {
			_, err = r.nodeGone(ctx, nm)
		} else {
			_, err = r.complete(ctx, nm, node, true)
		}
		if err != nil {
			return reconcile.Result{}, err
		}
		if nm.Status.Silence != nil {
			// Its silence was not seen expired: the next round tries again
			// before the request goes.
			return reconcile.Result{RequeueAfter: silenceRetry}, nil
		}
	}
	controllerutil.RemoveFinalizer(nm, Finalizer)
	return reconcile.Result{}, client.IgnoreNotFound(r.update(ctx, nm))
}

// finish records a completed request (finishAs); ev says
// why (its reason is the Cordoned condition's).
func (s *step) finish(ctx context.Context, ev evt) (reconcile.Result, error) {
	return s.finishAs(ctx, lullv1alpha1.PhaseCompleted, ev)
}

// finishAs records a request ended in phase, gives its budget slot back
// and drops the finalizer.
func (s *step) finishAs(ctx context.Context, phase lullv1alpha1.MaintenancePhase, ev evt) (reconcile.Result, error) {
	reason, msg := ev.Reason, ev.Message
	s.status.CompletedAt = &metav1.Time{Time: s.now}
	s.status.WaitingFor = ""
	s.status.LeaseHolder = ""
	s.status.Blockers = nil
	s.cond(ConditionLeaseHeld, false, "Released", msg)
	s.cond(ConditionCordoned, false, reason, msg)
	s.record(ev)
	if _, err := s.save(ctx, phase, reconcile.Result{}); err != nil {
		return reconcile.Result{}, err
	}
	// The slot goes once the stored status says the request holds none:
	// the next in line may start at once (releaseBudget), and a crash
	// before the release leaves the ledger counting an ended request,
	// which its pruning drops (fail closed).
	s.releaseBudget(ctx)
	// A silence not yet seen expired keeps the finalizer: the ended
	// request's next rounds expire it (reconcile).
	if s.nm.DeletionTimestamp == nil && s.status.Silence == nil && controllerutil.ContainsFinalizer(s.nm, Finalizer) {
		controllerutil.RemoveFinalizer(s.nm, Finalizer)
		if err := s.r.update(ctx, s.nm); err != nil {
			return reconcile.Result{}, client.IgnoreNotFound(err)
		}
	}
	return reconcile.Result{}, nil
}

// giveBack returns a node when its request ends or aborts: lull's cordon
// goes only while the node carries lull's mark, and the hold annotations
// only those the status records lull set.
//
// The mark is tested by the write that undoes the cordon (a JSON patch),
// not read from the status: a completion retried after its Completed
// write was lost, or after a crash, finds the status saying "lull's
// cordon" while the node carries a cordon someone made after lull had
// given it back. A node the cache shows marked is undone whatever the
// status says (the record of lull's cordon may have been lost with a
// crash or a conflict). A request started by a lull from before the mark
// (cordonMarked false) is given back as that lull did: its recorded
// cordon is undone.
func (s *step) giveBack(ctx context.Context) error {
	node, st := s.node, s.status
	if node == nil {
		st.CordonedByLull, st.NodeAnnotations = false, nil
		return nil
	}
	ours := st.CordonedByLull && !ptr.Deref(st.WasUnschedulable, false)
	if st.CordonMarked && (ours || s.marked()) {
		undone, err := s.r.uncordon(ctx, node, s.nm.UID, st.NodeAnnotations)
		if err != nil {
			return err
		}
		st.CordonedByLull = false
		if undone || ours {
			if !undone {
				// The mark is gone from the cordon lull recorded as its
				// own: an earlier giveBack undid it, with lull's
				// annotations (this is a retry), or someone took the mark
				// off. Nothing on the node is known to be lull's now.
				s.logger.Info("The node no longer carries lull's cordon mark: its cordon and annotations, if any, are not lull's and stay", "node", node.Name)
			}
			st.NodeAnnotations = nil
			return nil
		}
	}
	patch := map[string]any{}
	remove := map[string]any{}
	for _, k := range st.NodeAnnotations {
		if _, ok := node.Annotations[k]; ok {
			remove[k] = nil
		}
	}
	if len(remove) > 0 {
		patch["metadata"] = map[string]any{"annotations": remove}
	}
	legacy := ours && !st.CordonMarked
	if legacy {
		// Undone whatever the cached node shows: a cordon made a moment
		// ago may not be in the cache yet.
		patch["spec"] = map[string]any{"unschedulable": false}
	}
	if len(patch) > 0 {
		if err := s.r.patchNode(ctx, node, patch); err != nil && !apierrors.IsNotFound(err) {
			return fmt.Errorf("giving node %s back (lull's cordon, its annotations): %w", node.Name, err)
		}
	}
	if legacy {
		st.CordonedByLull = false
	}
	st.NodeAnnotations = nil
	return nil
}

// uncordon undoes lull's cordon on node, with its mark and the hold
// annotations lull set, in one JSON patch that first tests the mark is
// the request's (uid). It reports false, having written nothing, when
// the node as it is now does not carry the mark. The patch is sent
// whatever the cached node shows: a cordon made a moment ago may not be in
// the cache yet (a window closing right after the start left the node
// cordoned with the request WaitingForWindow; found by
// TestDrainerWindowEnd).
func (r *Reconciler) uncordon(ctx context.Context, node *corev1.Node, uid types.UID, annotations []string) (bool, error) {
	mark := "/metadata/annotations/" + jsonPointerEscape(lullv1alpha1.CordonedByAnnotation)
	ops := []map[string]any{
		{"op": "test", "path": mark, "value": string(uid)},
		{"op": "add", "path": "/spec/unschedulable", "value": false},
		{"op": "remove", "path": mark},
	}
	for _, k := range annotations {
		// Added then removed: gone whether or not it is there now.
		p := "/metadata/annotations/" + jsonPointerEscape(k)
		ops = append(ops, map[string]any{"op": "add", "path": p, "value": ""}, map[string]any{"op": "remove", "path": p})
	}
	b, err := json.Marshal(ops)
	if err != nil {
		return false, err
	}
	for attempt := 0; ; attempt++ {
		err = r.Client.Patch(ctx, node, client.RawPatch(types.JSONPatchType, b))
		if err == nil || apierrors.IsNotFound(err) {
			return true, nil
		}
		// The test failed (the API server says 422, a fake client
		// otherwise), or the write did: look at the node as it is.
		var live corev1.Node
		if gerr := r.live().Get(ctx, client.ObjectKey{Name: node.Name}, &live); gerr != nil {
			if apierrors.IsNotFound(gerr) {
				return true, nil
			}
			return false, fmt.Errorf("undoing lull's cordon of node %s: %w (reading it again: %v)", node.Name, err, gerr) //nolint:errorlint // the undo's error is the one wrapped; the re-read's is context only
		}
		*node = live
		if live.Annotations[lullv1alpha1.CordonedByAnnotation] != string(uid) {
			return false, nil
		}
		if attempt == 1 {
			return false, fmt.Errorf("undoing lull's cordon of node %s: %w", node.Name, err)
		}
	}
}

// jsonPointerEscape escapes a key for a JSON pointer (RFC 6901).
func jsonPointerEscape(k string) string {
	return strings.ReplaceAll(strings.ReplaceAll(k, "~", "~0"), "/", "~1")
}
