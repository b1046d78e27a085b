package maintenance

import (
	"context"
	"fmt"
	"time"

	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/handler"
	"sigs.k8s.io/controller-runtime/pkg/reconcile"

	lullv1alpha1 "lull.dev/lull/api/v1alpha1"
	"lull.dev/lull/internal/budget"
	"lull.dev/lull/internal/disruptors"
	"lull.dev/lull/internal/gate"
	"lull.dev/lull/lease"
)

// otherDisruptorRetry is how often a request waiting for another tool's
// disruption of its node looks again by itself; the node's changes wake
// it sooner.
const otherDisruptorRetry = 30 * time.Second

// The gate unit: a request waiting to start (Pending, WaitingFor*) is
// taken through internal/gate's gates and either keeps waiting, holding nothing,
// or starts: its lease and budget slot taken, the node marked, and the
// cordon unit (or, for host steps alone, the act unit) next.

// gate asks internal/gate whether the request may start (policy decision,
// lull-agent on the node for a plan with host steps, window, health,
// budget, lease, in that order) and acts on its verdict. The
// budget slot and the lease are taken, not only checked, as the gates
// pass.
func (s *step) gate(ctx context.Context) (reconcile.Result, error) {
	var taken *lease.Info
	v, err := gate.Check(ctx, gate.Request{Classes: s.nm.Spec.Classes, Changes: s.nm.Spec.Changes, Started: s.status.StartedAt != nil,
		Decision: s.recordedDecision(), Forecast: s.fc, Now: s.now}, gate.Checks{
		Decide: s.r.Forecast.Decide,
		Agent:  s.agentAlive,
		Health: s.health,
		Budget: s.reserveBudget,
		Lease: func(ctx context.Context) (*lease.HeldError, error) {
			// Another tool disrupting the node holds it as far as lull is
			// concerned: lull takes no lease beside it (internal/disruptors).
			// Its mark going (or the node) wakes the request.
			if d, ok := disruptors.Of(s.node); ok {
				return d.Held(s.node.Name, otherDisruptorRetry), nil
			}
			info, err := s.acquire(ctx)
			if held, ok := lease.IsHeld(err); ok {
				return held, nil
			}
			if err != nil {
				return nil, fmt.Errorf("acquiring the lease of node %s: %w", s.node.Name, err)
			}
			taken = info
			return nil, nil
		},
	})
	if err != nil {
		return reconcile.Result{}, err
	}
	s.inLine(ctx, v.Gate == gate.Budget)
	if s.status.StartedAt == nil {
		// Until the request starts, the policies decide again on every
		// reconcile: a policy change affects requests not yet started.
		s.status.Decision = &v.Decision // announced by save once written
	}
	if v.Gate == gate.Policy {
		return s.noDisruption(ctx, v.Message)
	}
	if v.Gate == gate.Agent {
		return s.waitForAgent(ctx, v.Message, v.RetryAfter)
	}
	s.noteWindows()
	if v.Gate == gate.Window {
		return s.waitForWindow(ctx, v)
	}
	s.cond(ConditionWindowPermits, true, v.Window.Reason, v.Window.Message)
	if v.Gate == gate.Health {
		return s.waitForGates(ctx, v)
	}
	if v.Health.Reason != "" {
		s.cond(ConditionGatesPass, true, v.Health.Reason, v.Health.Message)
	} else {
		// The windows have no gates (any more): nothing to say.
		meta.RemoveStatusCondition(&s.status.Conditions, ConditionGatesPass)
	}
	if v.Gate == gate.Budget {
		return s.waitForBudget(ctx, v)
	}
	s.cond(ConditionBudget, true, "BudgetAvailable", "the window's disruption budget has room")
	if v.Gate == gate.Lease {
		return s.waitForLease(ctx, v)
	}
	if msg := s.bindConfig(ctx); msg != "" {
		return s.waitForConfig(ctx, msg)
	}
	return s.start(ctx, taken)
}

// recordedDecision is the decision a started request keeps; nil until it
// starts (the policies decide again).
func (s *step) recordedDecision() *lullv1alpha1.Decision {
	if s.status.StartedAt == nil {
		return nil
	}
	return s.status.Decision
}

// reserveBudget takes the request's budget slot (not only checks it), in
// one write the API server serialises with every other replica's: see
// budget.Ledger.
func (s *step) reserveBudget(ctx context.Context) (budget.Result, error) {
	ws, err := s.windows(ctx)
	if err != nil {
		return budget.Result{}, err
	}
	res, err := s.r.Budget.Reserve(ctx, s.r.Client, s.nm, budget.Request{Node: s.node.Name, Windows: ws,
		Default: s.status.DefaultBudget, DefaultMaxUnavailable: s.r.Options.DefaultMaxUnavailable})
	if err == nil && res.Free && res.Room > 0 {
		// Room is left after this start: the next in line may start too,
		// now, rather than when its own first look comes round (a wave's
		// new requests filled 4 of 10 slots while their first reconciles
		// queued behind the drains).
		s.r.waiters.Done(s.node.Name) // not waiting any more: not the next in line
		s.r.wakeNextWaiting(ctx, s.budgets(ws))
	}
	return res, err
}

// waitForWindow keeps a request whose windows do not let it start
// waiting, holding nothing: a lease still held from before a restart is
// not needed yet.
func (s *step) waitForWindow(ctx context.Context, v gate.Verdict) (reconcile.Result, error) {
	if s.fc != nil {
		s.cond(ConditionWindowPermits, false, v.Reason, v.Message)
		s.status.WaitingFor = v.Message
	}
	s.releaseIfHeld(ctx)
	return s.save(ctx, lullv1alpha1.PhaseWaitingForWindow, lookAgain(v.RetryAfter))
}

// health runs the health gates of the node's windows (none: a zero
// verdict, and no GatesPass condition).
func (s *step) health(ctx context.Context) (gate.HealthVerdict, error) {
	ws, err := s.windows(ctx)
	if err != nil {
		return gate.HealthVerdict{}, err
	}
	return gate.CheckHealth(ctx, gate.HealthSource{Reader: s.r.Client, Pods: gate.PodsFromAPI(s.r.Kube), Ended: s.r.Budget.SettledAt}, ws, s.node.Name, s.now)
}

// waitForGates keeps a request a health gate holds waiting, holding
// nothing: no lease, no budget slot.
func (s *step) waitForGates(ctx context.Context, v gate.Verdict) (reconcile.Result, error) {
	s.releaseIfHeld(ctx)
	if s.status.Phase != lullv1alpha1.PhaseWaitingForGates {
		s.record(eventHeldByGate(v))
	}
	s.cond(ConditionGatesPass, false, v.Reason, v.Message)
	s.status.WaitingFor = v.Message
	// A window's gate condition, a node's Ready and a budget's health
	// wake it (the controller's watches); pods leaving do not (the
	// drainer caches no pods): it looks again by itself, at least every
	// MaxRetryDelay.
	return s.save(ctx, lullv1alpha1.PhaseWaitingForGates, lookAgain(min(v.RetryAfter, s.r.Options.MaxRetryDelay)))
}

// lookAgain is when a waiting request looks at its gates again by itself:
// at low priority, so that with hundreds waiting, the request a freed slot
// or an opened window woke, and the drains in progress, go first.
func lookAgain(after time.Duration) reconcile.Result {
	return reconcile.Result{RequeueAfter: after, Priority: ptr.To(handler.LowPriority)}
}

// waitForBudget keeps a request waiting for room in its budget, holding
// no lease meanwhile.
func (s *step) waitForBudget(ctx context.Context, v gate.Verdict) (reconcile.Result, error) {
	s.releaseIfHeld(ctx)
	s.cond(ConditionBudget, false, v.Reason, v.Message)
	s.status.WaitingFor = v.Message
	return s.save(ctx, lullv1alpha1.PhaseWaitingForBudget, lookAgain(v.RetryAfter))
}

// waitForLease keeps a request waiting for another holder's lease.
func (s *step) waitForLease(ctx context.Context, v gate.Verdict) (reconcile.Result, error) {
	held := v.Held
	if lease.SameFamily(held.Holder, s.r.Options.Identity) {
		// Another replica of the drainer holds it and is carrying this
		// request out (replicas without leader election, or a deposed
		// leader not yet stopped): leave the request, its slot and its
		// status to that replica; look again once its lease could expire.
		s.logger.V(2).Info("Another drainer replica holds the lease", "holder", held.Holder)
		return reconcile.Result{RequeueAfter: s.r.Options.LeaseDuration / 3}, nil
	}
	// Waiting for another actor must not keep a budget slot others
	// could use; the gate takes it again when the lease is free. The
	// slot just taken is free again: the next in line may have it
	// (unless lull's cordon is still on the node: see releaseBudget).
	s.releaseBudget(ctx)
	if s.status.Phase != lullv1alpha1.PhaseWaitingForLease {
		s.record(eventWaitingForLease(v.Message))
	}
	s.status.LeaseHolder = held.Holder
	s.status.WaitingFor = v.Message
	s.cond(ConditionLeaseHeld, false, v.Reason, v.Message)
	return s.save(ctx, lullv1alpha1.PhaseWaitingForLease, reconcile.Result{RequeueAfter: v.RetryAfter})
}

// start records a request every gate let through (its lease taken) and
// cordons the node.
func (s *step) start(ctx context.Context, info *lease.Info) (reconcile.Result, error) {
	s.r.renewals.renewed(s.node.Name, s.now)
	s.status.LeaseHolder = info.Holder
	s.cond(ConditionLeaseHeld, true, "Acquired", fmt.Sprintf("lease held by %s", info.Holder))
	// Record whether the node was cordoned before we touch it; this is
	// written before the cordon, so a crash in between cannot lose it.
	if s.status.WasUnschedulable == nil {
		s.status.WasUnschedulable = ptr.To(s.node.Spec.Unschedulable)
	}
	if !s.status.CordonedByLull {
		// Nothing of lull's on the node: its cordon will carry lull's mark.
		s.status.CordonMarked = true
	}
	if s.status.StartedAt == nil {
		s.status.StartedAt = &metav1.Time{Time: s.now}
	}
	s.markNode()
	s.status.WaitingFor = ""
	if !s.needsCordon() {
		// Service restarts alone: the node keeps its pods and takes new ones.
		s.record(eventStarted("", s.decided()))
		return s.act(ctx)
	}
	if _, err := s.save(ctx, lullv1alpha1.PhaseCordoning, reconcile.Result{}); err != nil {
		return reconcile.Result{}, err
	}
	s.starting = true // cordon announces the start and the cordon in one event
	return s.cordon(ctx)
}

// noDisruption ends a request whose class needs nothing disruptive: no
// lease, window or budget; the label goes and the request is recorded as
// completed.
func (s *step) noDisruption(ctx context.Context, msg string) (reconcile.Result, error) {
	if err := s.r.removeLabel(ctx, s.node); err != nil {
		return reconcile.Result{}, err
	}
	return s.finish(ctx, eventNoDisruption(msg))
}
