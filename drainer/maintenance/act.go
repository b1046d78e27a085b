package maintenance

import (
	"context"
	"fmt"
	"time"

	coordinationv1 "k8s.io/api/coordination/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/reconcile"

	lullv1alpha1 "lull.dev/lull/api/v1alpha1"
	"lull.dev/lull/internal/agentlease"
	"lull.dev/lull/internal/gate"
	"lull.dev/lull/lease"
)

// The act unit: WaitingForAgent → Acting → (PoweredOff) → complete. The
// plan's host steps are handed to lull-agent under the lease (fencing)
// and followed until each has an observed effect, with a fallback reboot
// for a step that fails.

// Condition types and event reasons of host steps (docs/actions.md).
const (
	ConditionAgentReady = lullv1alpha1.ConditionAgentReady
	ConditionFellBack   = "FellBack"
)

// agentAlive is the agent gate: does lull-agent run on the node (its
// lease is fresh)? internal/agentlease judges, from the cache; kubectl lull
// plan asks the same of its snapshot.
func (s *step) agentAlive(ctx context.Context) (bool, string, error) {
	return agentlease.Lookup(ctx, s.r.Client, s.r.Options.AgentNamespace, s.node.Name, s.now)
}

// agentRuns reports whether lull-agent's heartbeat shows it running on
// the node; a failed read counts as running (nothing is concluded).
func (s *step) agentRuns(ctx context.Context) bool {
	alive, _, err := s.agentAlive(ctx)
	return alive || err != nil
}

// waitForAgent keeps a request whose plan needs lull-agent waiting until
// one runs on the node, holding nothing.
func (s *step) waitForAgent(ctx context.Context, msg string, retry time.Duration) (reconcile.Result, error) {
	s.releaseIfHeld(ctx)
	s.releaseBudget(ctx)
	if s.status.Phase != lullv1alpha1.PhaseWaitingForAgent {
		s.record(eventNoAgent(msg))
	}
	s.cond(ConditionAgentReady, false, "NoAgent", msg)
	s.status.WaitingFor = msg
	return s.save(ctx, lullv1alpha1.PhaseWaitingForAgent, lookAgain(retry))
}

// act hands the host steps to lull-agent (phase Acting) and follows them:
// it keeps the lease and the fencing token current, times out a step the
// agent does not finish, sees a rebooted node come back, falls back to a
// reboot when a service restart fails, and ends the request when every
// step is done.
func (s *step) act(ctx context.Context) (reconcile.Result, error) {
	if res, lost, err := s.renew(ctx); lost || err != nil {
		return res, err
	}
	fence, err := s.fencing(ctx)
	if err != nil || fence == nil {
		// The cache has not seen our lease yet (or it is another's: the
		// renewal just now would have said so): look again shortly.
		return reconcile.Result{RequeueAfter: time.Second}, err
	}
	entering := s.status.Phase != lullv1alpha1.PhaseActing
	if s.status.Actions == nil {
		s.status.Actions = hostActions(s.plan())
	}
	s.status.Fencing = fence
	if entering {
		// A node taken down on purpose is silenced first (silence.go):
		// until Alertmanager shows the silence, lull-agent gets no step.
		if err := s.syncSilence(ctx, lullv1alpha1.PhaseActing); err != nil {
			msg := s.silenceNotKept(err)
			s.status.WaitingFor = msg
			return s.save(ctx, s.status.Phase, reconcile.Result{RequeueAfter: silenceRetry})
		}
		s.record(eventActing(s.status.Actions))
	}
	s.follow(ctx)
	s.seenBack(ctx)
	if i := lullv1alpha1.UnhandledFailure(s.status.Actions); i >= 0 {
		if s.takenDown(ctx, &s.status.Actions[i]) {
			return s.unwell(ctx, &s.status.Actions[i])
		}
		return s.failed(ctx, i)
	}
	next := nextAction(s.status.Actions)
	if next == nil {
		return s.actionsDone(ctx)
	}
	return s.awaitAgent(ctx, next)
}

// fencing is the token the agent acts under: our lease's UID and
// transitions, as the cache shows the lease; nil until it shows ours.
func (s *step) fencing(ctx context.Context) (*lullv1alpha1.Fencing, error) {
	var l coordinationv1.Lease
	key := types.NamespacedName{Namespace: s.r.Leases.Namespace(), Name: lease.Name(s.node.Name)}
	if err := s.r.Client.Get(ctx, key, &l); err != nil {
		if apierrors.IsNotFound(err) {
			return nil, nil
		}
		return nil, fmt.Errorf("reading the lease %s: %w", key, err)
	}
	if !lease.SameFamily(ptr.Deref(l.Spec.HolderIdentity, ""), s.r.Options.Identity) {
		return nil, nil
	}
	return &lullv1alpha1.Fencing{LeaseUID: l.UID, LeaseTransitions: ptr.Deref(l.Spec.LeaseTransitions, 0)}, nil
}

// hostActions are the plan's host steps, none started.
func hostActions(plan []lullv1alpha1.PlannedStep) []lullv1alpha1.ActionStatus {
	out := []lullv1alpha1.ActionStatus{}
	for _, st := range plan {
		if !st.Type.HostStep() {
			continue
		}
		timeout := st.Type.DefaultTimeout()
		if st.Timeout != nil && st.Timeout.Err() == nil {
			timeout = st.Timeout.Duration
		}
		out = append(out, lullv1alpha1.ActionStatus{Type: st.Type, Unit: st.Unit, Timeout: lullv1alpha1.Duration{Duration: timeout},
			State: lullv1alpha1.ActionPending})
	}
	return out
}

func actionsLine(as []lullv1alpha1.ActionStatus) string {
	out := ""
	for i := range as {
		if i > 0 {
			out += ", "
		}
		out += as[i].Label()
	}
	return out
}

// follow judges the running step by what the drainer sees: a step past
// its timeout has timed out; a rebooted node that reports another boot ID
// and is Ready has come back; a node powered off is NotReady and its
// lull-agent's heartbeat has stopped (a machine still running keeps its
// agent's heartbeat: a power-off command that did nothing times out).
func (s *step) follow(ctx context.Context) {
	a := nextAction(s.status.Actions)
	if a == nil || a.State != lullv1alpha1.ActionRunning || a.StartedAt == nil {
		return
	}
	switch {
	case a.Type == lullv1alpha1.StepReboot && a.BootID != "" && s.node.Status.NodeInfo.BootID != a.BootID && nodeReady(s.node):
		s.endAction(a, lullv1alpha1.ActionSucceeded, fmt.Sprintf("node came back (boot ID %s, was %s) and is Ready", s.node.Status.NodeInfo.BootID, a.BootID))
		s.record(eventCameBack())
	case a.Type == lullv1alpha1.StepPowerOff && !nodeReady(s.node) && !s.agentRuns(ctx):
		s.endAction(a, lullv1alpha1.ActionSucceeded, "node powered off: NotReady, and its lull-agent's heartbeat has stopped")
	case writeHeld(a, s.now) && !s.agentRuns(ctx):
		// Not timed out while its agent is away: part of the set may be
		// on disk, and only the agent, when it starts again, rolls it
		// back or forward and runs the step anew (awaitAgent says so).
	case !s.now.Before(s.deadline(a)):
		what := "did not finish"
		if a.Type == lullv1alpha1.StepReboot {
			what = "did not come back"
		}
		s.endAction(a, lullv1alpha1.ActionTimedOut, fmt.Sprintf("%s %s within its timeout %s", a.Label(), what, a.Timeout.Duration))
	}
}

// deadline is when the running step a times out: its start plus its
// timeout. A WriteFiles whose agent was away meanwhile counts from the
// agent's return instead, if later (AgentReady turned True since the
// start): the agent that comes back renews its heartbeat before it
// recovers the set and claims the step again, and that step must not
// time out in between. While the condition still says AgentAway, the
// agent is back this instant.
func (s *step) deadline(a *lullv1alpha1.ActionStatus) time.Time {
	from := a.StartedAt.Time
	if a.Type == lullv1alpha1.StepWriteFiles {
		if c := meta.FindStatusCondition(s.status.Conditions, ConditionAgentReady); c != nil {
			switch {
			case c.Reason == ReasonAgentAway:
				from = s.now
			case c.Status == metav1.ConditionTrue && c.LastTransitionTime.After(from):
				from = c.LastTransitionTime.Time
			}
		}
	}
	return from.Add(a.Timeout.Duration)
}

// writeHeld reports whether a is a WriteFiles step past its timeout,
// which the drainer does not time out while the node's lull-agent is
// away (follow).
func writeHeld(a *lullv1alpha1.ActionStatus, now time.Time) bool {
	return a.Type == lullv1alpha1.StepWriteFiles && a.State == lullv1alpha1.ActionRunning && a.StartedAt != nil &&
		!now.Before(a.StartedAt.Add(a.Timeout.Duration))
}

func (s *step) endAction(a *lullv1alpha1.ActionStatus, state lullv1alpha1.ActionState, msg string) {
	a.State, a.Message, a.FinishedAt = state, msg, &metav1.Time{Time: s.now}
}

func nodeReady(n *corev1.Node) bool {
	c := gate.ReadyCondition(n)
	return c != nil && c.Status == corev1.ConditionTrue
}

// nextAction is the first step not done; nil when all are.
func nextAction(as []lullv1alpha1.ActionStatus) *lullv1alpha1.ActionStatus {
	if i := lullv1alpha1.NextAction(as); i >= 0 {
		return &as[i]
	}
	return nil
}

// failed handles a step that failed or timed out. A daemon-reload, service
// reload or restart falls back to a reboot: the steps still pending are
// skipped, a Reboot is added, and the node is cordoned and drained first
// if the plan did not. A WriteFiles that fails, or a Reboot or PowerOff
// that failed on a node seen up and unchanged, ends the request Failed
// (lull's cordon undone, its lease released): the files are as they were,
// and nothing better is known to be safe. A node that may be down is
// held instead (unwell.go).
func (s *step) failed(ctx context.Context, i int) (reconcile.Result, error) {
	a := s.status.Actions[i]
	if !a.Type.FallsBack() || hasFallback(s.status.Actions) {
		why := fmt.Sprintf("%s %s: %s", a.Label(), a.State, a.Message)
		s.record(eventStepFailed(why))
		return s.abort(ctx, lullv1alpha1.PhaseFailed, why)
	}
	for j := range s.status.Actions {
		if !s.status.Actions[j].State.Done() {
			s.endAction(&s.status.Actions[j], lullv1alpha1.ActionSkipped, "a reboot replaces it: "+a.Label()+" "+string(a.State))
		}
	}
	s.status.Actions = append(s.status.Actions, lullv1alpha1.ActionStatus{Type: lullv1alpha1.StepReboot, Fallback: true,
		Timeout: lullv1alpha1.Duration{Duration: lullv1alpha1.StepReboot.DefaultTimeout()}, State: lullv1alpha1.ActionPending})
	msg := fmt.Sprintf("%s %s (%s); falling back to a reboot (the node is drained first)", a.Label(), a.State, a.Message)
	s.cond(ConditionFellBack, true, string(a.State), msg)
	s.record(eventFellBack(msg))
	s.status.WaitingFor = msg
	// The reboot needs the node cordoned and drained: go back through them.
	if _, err := s.save(ctx, lullv1alpha1.PhaseCordoning, reconcile.Result{}); err != nil {
		return reconcile.Result{}, err
	}
	return s.cordon(ctx)
}

func hasFallback(as []lullv1alpha1.ActionStatus) bool {
	for _, a := range as {
		if a.Fallback {
			return true
		}
	}
	return false
}

// actionsDone ends the host steps: a node powered off stays so (phase
// PoweredOff) until an admin completes the request; otherwise the request
// completes as any other (uncordon what lull cordoned, release the lease).
func (s *step) actionsDone(ctx context.Context) (reconcile.Result, error) {
	for _, a := range s.status.Actions {
		if a.Type == lullv1alpha1.StepPowerOff && a.State == lullv1alpha1.ActionSucceeded {
			if s.status.Phase != lullv1alpha1.PhasePoweredOff {
				s.record(eventPoweredOff())
			}
			return s.poweredOff(ctx)
		}
	}
	if _, err := s.save(ctx, lullv1alpha1.PhaseActing, reconcile.Result{}); err != nil {
		return reconcile.Result{}, err
	}
	return s.r.complete(ctx, s.nm, s.node, false) // the steps' end is a moment: Uncordoning records it
}

// poweredOff holds a powered-off node's lease and cordon until the request
// is completed.
func (s *step) poweredOff(ctx context.Context) (reconcile.Result, error) {
	if res, lost, err := s.renew(ctx); lost || err != nil {
		return res, err
	}
	s.status.WaitingFor = "powered off: lull keeps the node cordoned and leased, and nothing powers it on. Do the hardware work, " +
		"then remove the label lull.dev/maintenance (or set spec.complete)"
	return s.save(ctx, lullv1alpha1.PhasePoweredOff, reconcile.Result{RequeueAfter: s.r.Options.LeaseDuration / 3})
}

// awaitAgent waits for lull-agent to carry out the next step, saying so,
// and looks again when the lease needs renewing or the step times out.
func (s *step) awaitAgent(ctx context.Context, next *lullv1alpha1.ActionStatus) (reconcile.Result, error) {
	retry := s.r.Options.LeaseDuration / 3
	if next.State == lullv1alpha1.ActionRunning && next.StartedAt != nil {
		if left := s.deadline(next).Sub(s.now); left < retry {
			retry = left + time.Millisecond
		}
		s.status.WaitingFor = fmt.Sprintf("lull-agent runs %s (since %s)", next.Label(), next.StartedAt.UTC().Format(time.RFC3339))
		if k, ok := next.Type.Kind(); ok {
			s.status.WaitingFor += "; done when " + k.Verified
		}
	} else {
		s.status.WaitingFor = "lull-agent to start " + next.Label()
	}
	alive, why, err := s.agentAlive(ctx)
	if err != nil {
		return reconcile.Result{}, err
	}
	switch {
	case alive:
		s.cond(ConditionAgentReady, true, "Running", "lull-agent runs on the node")
	case writeHeld(next, s.now):
		// follow held it: say so, and look again at the heartbeat's pace
		// (the agent's lease wakes the request when it is back).
		msg := fmt.Sprintf("%s is past its timeout %s, but lull-agent is away (%s): not timed out while it is, since part of the set may be on disk; "+
			"the agent rolls the set back or forward when it starts and runs the step again (abort the request to give up)", next.Label(), next.Timeout.Duration, why)
		if cond := meta.FindStatusCondition(s.status.Conditions, ConditionAgentReady); cond == nil || cond.Reason != ReasonAgentAway {
			s.record(eventAgentAway(msg))
		}
		s.cond(ConditionAgentReady, false, ReasonAgentAway, msg)
		s.status.WaitingFor = msg
		retry = s.r.Options.LeaseDuration / 3
	case next.Type != lullv1alpha1.StepReboot || next.State != lullv1alpha1.ActionRunning:
		// A rebooting node's agent is down with it: that is no news.
		s.cond(ConditionAgentReady, false, "NoAgent", why)
		s.status.WaitingFor += "; " + why
	}
	return s.save(ctx, lullv1alpha1.PhaseActing, reconcile.Result{RequeueAfter: retry})
}
