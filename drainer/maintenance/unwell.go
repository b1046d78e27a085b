package maintenance

import (
	"context"
	"fmt"
	"strings"
	"time"

	"sigs.k8s.io/controller-runtime/pkg/reconcile"

	lullv1alpha1 "lull.dev/lull/api/v1alpha1"
	"lull.dev/lull/internal/agentlease"
)

// A node lull took down and has not seen back: a Reboot or PowerOff that
// timed out, or failed on a node that may be down. Such a node keeps
// lull's cordon, lease and budget slot (the request stays Acting, with the
// condition NodeUnwell saying what is missing) until the node is seen
// back — a new boot ID and Ready after a reboot; NotReady with lull-agent's
// heartbeat stopped after a power-off — or an admin completes or deletes
// the request. Giving the slot back at the timeout would let the next node
// of the window go down while this one is still down: a bad kernel would
// walk the whole pool, one dead node per timeout; a power-off that lands
// late would hit a node uncordoned and full of pods again.

// ConditionNodeUnwell is True while a node lull took down has not been
// seen back.
const ConditionNodeUnwell = "NodeUnwell"

// takenDown reports whether a's failure leaves a node that may be down: a
// Reboot or PowerOff that timed out, or that failed while the node is not
// seen up and unchanged since the failure: Ready, the boot ID it had when
// the step started, and its lull-agent's heartbeat renewed after the
// failure was recorded. (Ready and the boot ID lag a shutdown by design —
// the node stays Ready for the node-monitor grace period — and a
// heartbeat renewed before the failure says nothing of after it: a reboot
// command killed by the shutdown it started reports a failure while the
// machine goes down.)
func (s *step) takenDown(ctx context.Context, a *lullv1alpha1.ActionStatus) bool {
	if !a.Type.TakesNodeDown() {
		return false
	}
	if a.State == lullv1alpha1.ActionTimedOut || a.FinishedAt == nil {
		return true
	}
	if !nodeReady(s.node) || (a.BootID != "" && s.node.Status.NodeInfo.BootID != a.BootID) {
		return true
	}
	// FinishedAt is kept to the second, a renewal to the microsecond: a
	// heartbeat counts only from the next whole second on.
	after, err := agentlease.RenewedSince(ctx, s.r.Client, s.r.Options.AgentNamespace, s.node.Name, a.FinishedAt.Truncate(time.Second).Add(time.Second))
	return err != nil || !after
}

// seenBack marks a Reboot or PowerOff that failed or timed out Succeeded
// once its effect is observed after all: the node came back with a new
// boot ID and Ready, or went off (NotReady, lull-agent's heartbeat
// stopped).
func (s *step) seenBack(ctx context.Context) {
	i := lullv1alpha1.UnhandledFailure(s.status.Actions)
	if i < 0 {
		return
	}
	a := &s.status.Actions[i]
	was := " (after it " + ended(a) + ")"
	switch {
	case a.Type == lullv1alpha1.StepReboot && a.BootID != "" && s.node.Status.NodeInfo.BootID != a.BootID && nodeReady(s.node):
		s.endAction(a, lullv1alpha1.ActionSucceeded, fmt.Sprintf("node came back (boot ID %s, was %s) and is Ready%s", s.node.Status.NodeInfo.BootID, a.BootID, was))
		s.record(eventCameBack())
	case a.Type == lullv1alpha1.StepPowerOff && !nodeReady(s.node) && !s.agentRuns(ctx):
		s.endAction(a, lullv1alpha1.ActionSucceeded, "node powered off: NotReady, and its lull-agent's heartbeat has stopped"+was)
	default:
		return
	}
	s.cond(ConditionNodeUnwell, false, "SeenBack", a.Message)
}

// unwell holds a node a has taken down and lull has not seen back: the
// request stays Acting (its budget slot kept, the cordon kept by run's
// keepHold, the lease renewed by act) and says what is missing.
func (s *step) unwell(ctx context.Context, a *lullv1alpha1.ActionStatus) (reconcile.Result, error) {
	msg := fmt.Sprintf("%s %s and the node is not seen back (%s): lull keeps its cordon, lease and budget slot until it is, "+
		"or until the request is completed (remove the label lull.dev/maintenance, or set spec.complete) or deleted",
		a.Label(), ended(a), s.missing(ctx, a))
	if s.status.WaitingFor != msg {
		s.record(eventNodeUnwell(msg))
	}
	s.cond(ConditionNodeUnwell, true, string(a.State), msg)
	s.status.WaitingFor = msg
	// Look again soon: the evidence that the node is up (a heartbeat
	// after the failure) wakes nothing (agent renewals are filtered).
	return s.save(ctx, lullv1alpha1.PhaseActing, reconcile.Result{RequeueAfter: min(s.r.Options.LeaseDuration/3, 5*time.Second)})
}

// ended says how a step that did not succeed ended.
func ended(a *lullv1alpha1.ActionStatus) string {
	if a.State == lullv1alpha1.ActionTimedOut {
		return "timed out"
	}
	return strings.ToLower(string(a.State))
}

// missing says what lull has not seen of the node coming back (or going
// off).
func (s *step) missing(ctx context.Context, a *lullv1alpha1.ActionStatus) string {
	var out []string
	if a.Type == lullv1alpha1.StepPowerOff {
		if nodeReady(s.node) {
			out = append(out, "the node is still Ready")
		}
		if s.agentRuns(ctx) {
			out = append(out, "its lull-agent's heartbeat goes on")
		}
		return strings.Join(out, ", ")
	}
	if a.State == lullv1alpha1.ActionFailed && a.FinishedAt != nil && nodeReady(s.node) && s.node.Status.NodeInfo.BootID == a.BootID {
		// It may be up: what would say so is the agent running after the
		// failure.
		return "no lull-agent heartbeat since the failure at " + a.FinishedAt.UTC().Format(time.RFC3339)
	}
	if a.BootID == "" || s.node.Status.NodeInfo.BootID == a.BootID {
		out = append(out, "boot ID unchanged ("+s.node.Status.NodeInfo.BootID+")")
	}
	if !nodeReady(s.node) {
		out = append(out, "not Ready")
	}
	if !s.agentRuns(ctx) {
		out = append(out, "no lull-agent heartbeat")
	}
	return strings.Join(out, ", ")
}
