package maintenance

import (
	"context"
	"encoding/json"
	"fmt"
	"strings"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/types"
	"sigs.k8s.io/controller-runtime/pkg/client"

	lullv1alpha1 "lull.dev/lull/api/v1alpha1"
)

// The node-conditions unit: lull tells tools that do not read its CRDs
// what it does to a node, in the shared vocabulary of Kubernetes' node
// lifecycle conditions (KEP-5683, v1.37's MaintenancePlanned,
// MaintenanceInProgress, DrainInProgress and Drained): planned while the
// request waits (with the next start the forecast gives), in progress
// once it starts, draining and drained as the drain goes, none once it
// ends. Every condition lull writes has a reason starting with "Lull": a
// condition of the same type with another reason is someone else's, which
// lull neither overwrites nor removes.

// ReasonPrefix starts the reason of every node condition lull writes.
const ReasonPrefix = "Lull"

// lifecycleConditions are the node condition types lull writes.
var lifecycleConditions = []corev1.NodeConditionType{
	corev1.NodeMaintenancePlanned, corev1.NodeMaintenanceInProgress, corev1.NodeDrainInProgress, corev1.NodeDrained,
}

// NodeConditions are the lifecycle conditions a request in status st
// puts on its node (none once it ended); drains says whether its plan
// drains the node (step.needsDrain).
func NodeConditions(nm *lullv1alpha1.NodeMaintenance, st *lullv1alpha1.NodeMaintenanceStatus, drains bool) map[corev1.NodeConditionType]corev1.NodeCondition {
	out := map[corev1.NodeConditionType]corev1.NodeCondition{}
	phase := st.Phase
	if phase == "" || phase.Finished() {
		return out
	}
	set := func(t corev1.NodeConditionType, msg string) {
		out[t] = corev1.NodeCondition{Type: t, Status: corev1.ConditionTrue, Reason: ReasonPrefix + string(phase), Message: msg}
	}
	what := fmt.Sprintf("lull: NodeMaintenance %s (%s)", nm.Name, nm.Spec.ClassNames())
	if st.StartedAt == nil && !phase.Disrupting() {
		// The reason says what it waits for; the message changes only
		// with the next start (not with the budget's count in use, which
		// would rewrite every waiting node at each start in a wave).
		msg := what
		if st.NextWindowStart != nil {
			msg += "; next start " + st.NextWindowStart.UTC().Format(time.RFC3339)
		}
		set(corev1.NodeMaintenancePlanned, msg)
		return out
	}
	set(corev1.NodeMaintenanceInProgress, what+": "+string(phase))
	switch phase {
	case lullv1alpha1.PhaseDraining:
		set(corev1.NodeDrainInProgress, what+": evicting the node's pods")
	case lullv1alpha1.PhaseDrained, lullv1alpha1.PhaseActing, lullv1alpha1.PhasePoweredOff:
		if drains {
			set(corev1.NodeDrained, what+": the node's pods are evicted")
		}
	}
	return out
}

// syncNodeConditions makes node carry the conditions want (lull's) in one
// patch of its status, touching only lull's own; it writes nothing when
// the node carries them already.
func (r *Reconciler) syncNodeConditions(ctx context.Context, node *corev1.Node, want map[corev1.NodeConditionType]corev1.NodeCondition, now time.Time) error {
	if node == nil || !r.Options.NodeConditions {
		return nil
	}
	var patch []any
	for _, t := range lifecycleConditions {
		cur := nodeCondition(node, t)
		w, wanted := want[t]
		switch {
		case cur != nil && !strings.HasPrefix(cur.Reason, ReasonPrefix):
			// Someone else's: left as it is.
		case wanted && (cur == nil || cur.Status != w.Status || cur.Reason != w.Reason || cur.Message != w.Message):
			c := map[string]any{"type": string(t), "status": string(w.Status), "reason": w.Reason, "message": w.Message,
				"lastHeartbeatTime": now.UTC().Format(time.RFC3339)}
			if cur == nil || cur.Status != w.Status {
				c["lastTransitionTime"] = now.UTC().Format(time.RFC3339)
			}
			patch = append(patch, c)
		case !wanted && cur != nil:
			patch = append(patch, map[string]any{"type": string(t), "$patch": "delete"})
		}
	}
	if len(patch) == 0 {
		return nil
	}
	b, err := json.Marshal(map[string]any{"status": map[string]any{"conditions": patch}})
	if err != nil {
		return err
	}
	if err := r.Client.Status().Patch(ctx, node, client.RawPatch(types.StrategicMergePatchType, b)); err != nil && !apierrors.IsNotFound(err) {
		return fmt.Errorf("writing lull's conditions on node %s: %w", node.Name, err)
	}
	return nil
}

func nodeCondition(n *corev1.Node, t corev1.NodeConditionType) *corev1.NodeCondition {
	for i := range n.Status.Conditions {
		if n.Status.Conditions[i].Type == t {
			return &n.Status.Conditions[i]
		}
	}
	return nil
}
