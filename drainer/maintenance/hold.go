package maintenance

import (
	"context"
	"encoding/json"
	"fmt"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"

	lullv1alpha1 "lull.dev/lull/api/v1alpha1"
)

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

// holdAnnotations are set to "true" while lull holds a node.
var holdAnnotations = []string{AnnotationScaleDownDisabled, AnnotationDoNotDisrupt}

const (
	// ConditionUncordonedByOthers is set when someone removed the cordon
	// of a node lull holds for a plan that needs it.
	ConditionUncordonedByOthers = "UncordonedByOthers"
	ReasonUncordonedByOthers    = "UncordonedByOthers"
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
func (s *step) keepHold(ctx context.Context) error {
	patch := s.holdPatch()
	if len(patch) == 0 {
		return nil
	}
	if err := s.r.patchNode(ctx, s.node, patch); err != nil {
		return fmt.Errorf("restoring lull's hold on node %s: %w", s.node.Name, err)
	}
	return nil
}

// holdPatch is the node patch keepHold applies (empty: nothing to
// restore), so cordon can send it with the cordon in one request.
func (s *step) holdPatch() map[string]any {
	patch := map[string]any{}
	if s.cordonExpected() && !s.node.Spec.Unschedulable {
		msg := fmt.Sprintf("node %s was uncordoned by someone else while lull holds it for maintenance (phase %s); lull cordoned it again, since its plan needs the cordon, and will remove it when the request ends",
			s.node.Name, s.nm.Status.Phase)
		s.logger.Info("Node uncordoned by someone else; cordoning it again", "phase", s.nm.Status.Phase)
		s.event(corev1.EventTypeWarning, ReasonUncordonedByOthers, msg)
		s.r.Metrics.ForeignUncordons.Inc()
		s.cond(ConditionUncordonedByOthers, true, ReasonCordonRestored, msg)
		patch["spec"] = map[string]any{"unschedulable": true}
		// The cordon is lull's now (whoever cordoned before lull gave
		// theirs up): lull removes it when the request ends.
		s.status.CordonedByLull, s.status.WasUnschedulable = true, ptr.To(false)
	}
	missing := map[string]any{}
	for _, k := range s.nm.Status.NodeAnnotations {
		if _, ok := s.node.Annotations[k]; !ok {
			missing[k] = "true"
		}
	}
	if len(missing) > 0 {
		patch["metadata"] = map[string]any{"annotations": missing}
	}
	return patch
}

// giveBack returns a node when its request ends or aborts, in one patch:
// lull's cordon goes only if lull cordoned it, and the hold annotations
// only those st records lull set.
func (r *Reconciler) giveBack(ctx context.Context, node *corev1.Node, st *lullv1alpha1.NodeMaintenanceStatus) error {
	if node == nil {
		st.CordonedByLull, st.NodeAnnotations = false, nil
		return nil
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
	// lull's cordon is undone whatever the cached node shows: a cordon
	// made a moment ago may not be in the cache yet (a window closing
	// right after the start left the node cordoned with the request
	// WaitingForWindow; found by TestDrainerWindowEnd). Undoing it twice
	// changes nothing.
	ours := st.CordonedByLull && !ptr.Deref(st.WasUnschedulable, false)
	if ours {
		patch["spec"] = map[string]any{"unschedulable": false}
	}
	if len(patch) > 0 {
		if err := r.patchNode(ctx, node, patch); err != nil && !apierrors.IsNotFound(err) {
			return fmt.Errorf("giving node %s back (lull's cordon, its annotations): %w", node.Name, err)
		}
	}
	if ours {
		st.CordonedByLull = false
	}
	st.NodeAnnotations = nil
	return nil
}

// patchNode applies a JSON merge patch to the node.
func (r *Reconciler) patchNode(ctx context.Context, node *corev1.Node, patch map[string]any) error {
	b, err := json.Marshal(patch)
	if err != nil {
		return err
	}
	return r.Client.Patch(ctx, node, client.RawPatch(types.MergePatchType, b))
}
