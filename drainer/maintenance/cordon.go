package maintenance

import (
	"context"
	"encoding/json"
	"fmt"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/reconcile"

	lullv1alpha1 "lull.dev/lull/api/v1alpha1"
	"lull.dev/lull/internal/disruptors"
	"lull.dev/lull/internal/gate"
)

// The cordon unit: Cordoning → Cordoned / Draining / Acting. It cordons
// the node (unless it already is) and hands the request to the next unit
// by its plan; a started request's node keeps what lull put on it.

// What lull puts on a node it holds, and keeps there while it holds it:
// its cordon (while the plan needs one) and the annotations that tell
// other disruptors to keep off. Someone else taking either away is
// noticed and undone; lull takes away only what it put there.

// Autoscaler annotations lull sets on a node it holds, so that neither
// cluster-autoscaler nor Karpenter deletes the node mid-maintenance.
const (
	AnnotationScaleDownDisabled = "cluster-autoscaler.kubernetes.io/scale-down-disabled"
	AnnotationDoNotDisrupt      = "karpenter.sh/do-not-disrupt"
)

// conflictRetry is how soon a cordon refused because the node changed
// since it was read is tried again (from the node as the cache then
// shows it).
const conflictRetry = 200 * time.Millisecond

// holdAnnotations are set to "true" while lull holds a node.
var holdAnnotations = []string{AnnotationScaleDownDisabled, AnnotationDoNotDisrupt}

const (
	// ConditionUncordonedByOthers is set when someone removed the cordon
	// of a node lull holds for a plan that needs it.
	ConditionUncordonedByOthers = "UncordonedByOthers"
	ReasonCordonRestored        = "CordonRestored"
)

// markNode records, before lull touches the node, which hold annotations
// it is about to set: those the node does not carry yet. keepHold sets
// them once the record is written, so a crash in between cannot leave an
// annotation on the node that lull would never remove.
func (s *step) markNode() {
	if s.status.NodeAnnotations != nil {
		return
	}
	s.status.NodeAnnotations = []string{}
	for _, k := range holdAnnotations {
		if _, ok := s.node.Annotations[k]; !ok {
			s.status.NodeAnnotations = append(s.status.NodeAnnotations, k)
		}
	}
}

// cordonExpected reports whether lull's record says the node is cordoned
// for this request now: it has been cordoned (by lull or before it) and
// the plan still needs the cordon.
func (s *step) cordonExpected() bool {
	st := &s.nm.Status
	if !st.CordonedByLull && !ptr.Deref(st.WasUnschedulable, false) {
		return false
	}
	// While acting, only a plan that cordons keeps the cordon (host
	// steps alone, such as a service restart, need none).
	return st.Phase.Holding() && (st.Phase != lullv1alpha1.PhaseActing || s.needsCordon())
}

// keepHold restores on a node lull holds what someone else took away:
// the cordon the plan needs (an event, the condition
// UncordonedByOthers and the metric say so; the cordon is lull's from
// then on, and lull removes it when the request ends), and the hold
// annotations lull recorded. Only what the stored status records is
// restored, so nothing is put on the node before it is recorded.
// recordoned says the cordon was put back. The node may have taken pods
// meanwhile: a request that drainsAgain is recorded Draining first, so
// that the drain unit runs next (this round, and any round after a
// failure in between: Draining is a holding phase, whose next round puts
// the cordon back).
func (s *step) keepHold(ctx context.Context) (recordoned bool, err error) {
	patch := s.holdPatch()
	if len(patch) == 0 {
		return false, nil
	}
	recordoned = patch["spec"] != nil
	if recordoned && s.drainsAgain() {
		s.logger.Info("The node was schedulable while lull held it; draining it again", "phase", s.nm.Status.Phase)
		if _, err := s.save(ctx, lullv1alpha1.PhaseDraining, reconcile.Result{}); err != nil {
			return false, err
		}
	}
	if err := s.r.patchNode(ctx, s.node, patch); err != nil {
		return false, fmt.Errorf("restoring lull's hold on node %s: %w", s.node.Name, err)
	}
	return recordoned, nil
}

// drainsAgain reports whether a held request whose cordon was just put
// back must drain its node again before it goes on: the node was
// schedulable for a while, so pods may have landed on it, and the
// request said Drained (or was about to hand lull-agent a step that takes
// the node down). Someone uncordoned it, or lull's own completion gave it
// back and then stopped before releasing the lease (a crash, a failed
// write) and the label was put back (TestRedteamCompletion2*). A step
// lull-agent is already carrying out cannot be taken back.
func (s *step) drainsAgain() bool {
	if !s.needsDrain() {
		return false
	}
	switch s.nm.Status.Phase {
	case lullv1alpha1.PhaseDrained:
		return true
	case lullv1alpha1.PhaseActing:
		next := nextAction(s.status.Actions)
		return next != nil && next.State == lullv1alpha1.ActionPending
	}
	return false
}

// holdPatch is the node patch keepHold applies (empty: nothing to
// restore), so cordon can send it with the cordon in one request.
func (s *step) holdPatch() map[string]any {
	patch := map[string]any{}
	if s.cordonExpected() && !s.node.Spec.Unschedulable {
		ev := eventUncordonedByOthers(s.node.Name, s.nm.Status.Phase)
		msg := ev.Message
		s.logger.Info("Node uncordoned by someone else; cordoning it again", "phase", s.nm.Status.Phase)
		s.record(ev)
		s.r.Metrics.ForeignUncordons.Inc()
		s.cond(ConditionUncordonedByOthers, true, ReasonCordonRestored, msg)
		patch["spec"] = map[string]any{"unschedulable": true}
		// The cordon is lull's now (whoever cordoned before lull gave
		// theirs up): lull removes it when the request ends.
		s.status.CordonedByLull, s.status.WasUnschedulable = true, ptr.To(false)
		s.markCordon(patch)
	} else if s.cordonExpected() && s.status.CordonedByLull {
		// lull's cordon is on the node: its mark goes back if someone took
		// it away (or a lull from before the mark cordoned the node), so
		// that the cordon is undone when the request ends.
		s.markCordon(patch)
	}
	for _, k := range s.nm.Status.NodeAnnotations {
		if _, ok := s.node.Annotations[k]; !ok {
			annotate(patch, k, "true")
		}
	}
	return patch
}

// markCordon adds lull's cordon mark (the request's UID) to patch, unless
// the node carries it already, and, when the patch marks or cordons, the
// node's resourceVersion as read: the patch lands only on the node lull
// looked at, so a cordon someone made since (not yet in the cache) is
// never marked lull's, nor taken for lull's under a mark left from
// before. The record says from then on that lull's cordon is marked.
func (s *step) markCordon(patch map[string]any) {
	s.status.CordonMarked = true
	marking := s.node.Annotations[lullv1alpha1.CordonedByAnnotation] != string(s.nm.UID)
	if marking {
		annotate(patch, lullv1alpha1.CordonedByAnnotation, string(s.nm.UID))
	}
	if marking || patch["spec"] != nil {
		md, _ := patch["metadata"].(map[string]any)
		if md == nil {
			md = map[string]any{}
			patch["metadata"] = md
		}
		md["resourceVersion"] = s.node.ResourceVersion
	}
}

// adoptMark takes a cordon carrying this request's mark as lull's when
// the record does not say so yet: start records cordonMarked (Cordoning)
// before the cordon, and cordon records whose the cordon is only with the
// drain's first write, so a crash or a lost lease in between left a
// request whose node carries lull's cordon while its status does not say
// so (a lost lease then gave the slot back with lull's cordon still on:
// TestRedteamCordoningOtherLeaseHolderThenDeleted). cordon decides the
// same from the same mark.
func (s *step) adoptMark() {
	st := s.status
	if st.CordonMarked && !st.CordonedByLull && !st.Phase.Finished() && s.marked() {
		s.logger.Info("The node carries this request's cordon mark: the cordon is lull's")
		st.CordonedByLull, st.WasUnschedulable = true, ptr.To(false)
	}
}

// marked reports whether the node carries this request's cordon mark.
func (s *step) marked() bool {
	return s.node != nil && s.node.Annotations[lullv1alpha1.CordonedByAnnotation] == string(s.nm.UID)
}

// cordonGone drops the mark of lull's cordon once a request that does not
// hold its node (waiting for its lease, its window) finds the cordon gone
// (someone uncordoned it): a cordon made on the node later, by the lease's
// holder or an admin, is not lull's to undo. The cache showing the node
// schedulable is asked again of the API server (a cordon just made may
// not be cached yet, and the request keeps its budget slot while lull's
// cordon is on), and the patch tests the resourceVersion read.
func (s *step) cordonGone(ctx context.Context) error {
	if !s.status.CordonMarked || s.node.Spec.Unschedulable {
		return nil
	}
	var live corev1.Node
	if err := s.r.live().Get(ctx, client.ObjectKey{Name: s.node.Name}, &live); err != nil {
		return client.IgnoreNotFound(err)
	}
	if live.Spec.Unschedulable {
		return nil // the cache lags: lull's cordon is on
	}
	if live.Annotations[lullv1alpha1.CordonedByAnnotation] == string(s.nm.UID) {
		ops := []map[string]any{
			{"op": "test", "path": "/metadata/resourceVersion", "value": live.ResourceVersion},
			{"op": "remove", "path": "/metadata/annotations/" + jsonPointerEscape(lullv1alpha1.CordonedByAnnotation)},
		}
		b, err := json.Marshal(ops)
		if err != nil {
			return err
		}
		if err := s.r.Client.Patch(ctx, &live, client.RawPatch(types.JSONPatchType, b)); err != nil {
			// The node changed since it was read: the next round looks again.
			s.logger.V(2).Info("Dropping lull's cordon mark; looking again later", "err", err)
			return nil
		}
	}
	s.logger.Info("lull's cordon was removed while the request waits; its mark goes with it")
	s.node = &live
	s.status.CordonedByLull = false
	return nil
}

// annotate sets the annotation k to v in a node merge patch.
func annotate(patch map[string]any, k string, v any) {
	md, _ := patch["metadata"].(map[string]any)
	if md == nil {
		md = map[string]any{}
		patch["metadata"] = md
	}
	ann, _ := md["annotations"].(map[string]any)
	if ann == nil {
		ann = map[string]any{}
		md["annotations"] = ann
	}
	ann[k] = v
}

// patchNode applies a JSON merge patch to the node.
func (r *Reconciler) patchNode(ctx context.Context, node *corev1.Node, patch map[string]any) error {
	b, err := json.Marshal(patch)
	if err != nil {
		return err
	}
	return r.Client.Patch(ctx, node, client.RawPatch(types.MergePatchType, b))
}

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
		// lull's cordon, marked in the same write (markCordon).
		patch["spec"] = map[string]any{"unschedulable": true}
		s.markCordon(patch)
		patched = true
	}
	if len(patch) > 0 {
		if err := s.r.patchNode(ctx, s.node, patch); err != nil {
			if apierrors.IsConflict(err) {
				// The node changed since the cache showed it (someone
				// cordoned it, say): the next round looks at it anew.
				s.logger.V(2).Info("Node changed before lull's cordon; looking again", "err", err)
				return reconcile.Result{RequeueAfter: conflictRetry}, nil
			}
			return reconcile.Result{}, fmt.Errorf("cordoning node %s: %w", s.node.Name, err)
		}
	} else {
		// Nothing to write, so nothing came back: the check below reads
		// the node as it is now, not as the cache last saw it.
		var live corev1.Node
		if err := s.r.live().Get(ctx, client.ObjectKey{Name: s.node.Name}, &live); err != nil {
			return reconcile.Result{}, fmt.Errorf("reading node %s: %w", s.node.Name, err)
		}
		s.node = &live
	}
	// Whose cordon it is, from the node: lull's if it carries this
	// request's mark (this write's, or an earlier attempt's), someone
	// else's otherwise, whatever was recorded before the node was
	// touched (a cordon made since, while lull was down or had yielded,
	// is not lull's). A request started by a lull from before the mark
	// keeps that lull's record.
	switch {
	case s.marked():
		s.status.CordonedByLull, s.status.WasUnschedulable = true, ptr.To(false)
	case !s.status.CordonMarked:
		s.status.CordonedByLull = !ptr.Deref(s.status.WasUnschedulable, false)
	default:
		s.status.CordonedByLull, s.status.WasUnschedulable = false, ptr.To(true)
	}
	if d, ok := disruptors.Of(s.node); ok {
		// Another tool marked the node between the lease gate's look and
		// this write (the patch returns the node as it is now): two
		// disruptors on one node is what the lease is for, so lull
		// yields before it evicts anything.
		return s.yield(ctx, d)
	}
	msg := "node cordoned by lull"
	if !s.status.CordonedByLull {
		msg = "node was already cordoned by someone else; lull will leave that cordon in place"
	}
	// One event per request says it started and how the node was found:
	// Started when the start and the cordon are this reconcile's, Cordoned
	// when the cordon is put back on a started request (after a restart).
	switch {
	case s.starting:
		s.record(eventStarted(msg, s.decided()))
	case patched:
		s.record(eventCordoned(msg))
	}
	s.cond(ConditionCordoned, true, "Cordoned", msg)
	return s.afterCordon(ctx)
}

// yield gives the node to another tool that began disrupting it as lull
// started, before lull evicts anything: lull's cordon and annotations,
// lease and budget slot go, and the request waits for the tool as for any
// other holder.
func (s *step) yield(ctx context.Context, d disruptors.Disruption) (reconcile.Result, error) {
	held := d.Held(s.node.Name, otherDisruptorRetry)
	s.logger.Info("Another tool began disrupting the node as lull started; yielding", "holder", d.By, "what", d.What)
	// Everything lull put on the node goes back at once (its cordon,
	// its annotations): the request starts afresh, recording the node as
	// it finds it then, if the other tool leaves the node to it. Keeping
	// the cordon through the wait would leave lull's record of whose
	// cordon it is to go stale while others act on the node.
	if err := s.giveBack(ctx); err != nil {
		return reconcile.Result{}, err
	}
	s.status.WasUnschedulable, s.status.CordonedByLull, s.status.StartedAt = nil, false, nil
	s.cond(ConditionCordoned, false, "Yielded", held.Error())
	s.releaseIfHeld(ctx)
	s.record(eventWaitingForLease(held.Error()))
	s.status.LeaseHolder = held.Holder
	s.status.WaitingFor = held.Error()
	s.cond(ConditionLeaseHeld, false, gate.ReasonHeldByOther, held.Error())
	return s.save(ctx, lullv1alpha1.PhaseWaitingForLease, reconcile.Result{RequeueAfter: otherDisruptorRetry})
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

// afterCordon goes on from a cordoned node: drain it, hand it to
// lull-agent, or hold it (plan Cordon).
func (s *step) afterCordon(ctx context.Context) (reconcile.Result, error) {
	switch {
	case s.needsDrain():
		// The first round's status write records the phase Draining with
		// the round's counts: one write, not two. A round that fails
		// before writing leaves the phase Cordoning, and the next
		// reconcile cordons (a no-op now) and drains again.
		return s.drain(ctx)
	case s.status.HasHostSteps():
		s.cond(ConditionDrained, false, "NotNeeded", "the plan drains nothing")
		return s.act(ctx)
	}
	s.cond(ConditionDrained, false, "NotNeeded", "the policy action is Cordon: nothing is evicted")
	return s.hold(ctx, lullv1alpha1.PhaseCordoned)
}
