package maintenance

import (
	"context"
	"fmt"
	"time"

	"k8s.io/apimachinery/pkg/api/equality"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/reconcile"

	lullv1alpha1 "lull.dev/lull/api/v1alpha1"
	"lull.dev/lull/internal/policy"
)

// Condition types of a NodeMaintenance's status.
const (
	ConditionWindowPermits = "WindowPermits"
	ConditionBudget        = "BudgetAvailable"
	ConditionLeaseHeld     = "LeaseHeld"
	// ConditionGatesPass: the health gates of the node's windows (spec.gates)
	// let it start; set only when the windows have gates.
	ConditionGatesPass = "GatesPass"
	ConditionCordoned  = "Cordoned"
	ConditionDrained   = "Drained"
	ConditionBlocked   = "Blocked"
)

// cond sets a condition on the status being built.
func (s *step) cond(t string, ok bool, reason, msg string) {
	st := metav1.ConditionFalse
	if ok {
		st = metav1.ConditionTrue
	}
	// The transition time is the injected clock's (kept when the status
	// does not change).
	meta.SetStatusCondition(&s.status.Conditions, metav1.Condition{Type: t, Status: st, Reason: reason, Message: msg, ObservedGeneration: s.nm.Generation,
		LastTransitionTime: metav1.Time{Time: s.now}})
}

// progressEvery bounds how often a drain's progress alone is written: a
// status that differs from the stored one only in pod counts, pending pod
// names, waitingFor and condition messages waits until this long after the
// request's last status write (the reconcile is requeued for it). A budget
// letting pods go one at a time makes a round per pod, each of which used
// to write the status; anything else (phase, a condition's status or
// reason, a new or cleared blocker, an error) is written at once.
const progressEvery = 5 * time.Second

// save writes the status with the given phase when it changed; the phase
// change is the commit point of each step.
func (s *step) save(ctx context.Context, phase lullv1alpha1.MaintenancePhase, res reconcile.Result) (reconcile.Result, error) {
	s.status.Phase = phase
	s.status.ObservedGeneration = s.nm.Generation
	// The node says the same in the shared vocabulary: the node-conditions
	// controller writes it from the status written here (nodeconditions.go).
	// The node's silence follows the phase (silence.go): a failure is
	// reported and tried again; only handing out the host steps waits for
	// it (act).
	if err := s.syncSilence(ctx, phase); err != nil {
		s.silenceNotKept(err)
		if s.status.Silence != nil && (res.RequeueAfter == 0 || res.RequeueAfter > silenceRetry) {
			res.RequeueAfter = silenceRetry
		}
	}
	kept := *s.status
	kept.Phase = phase
	if d := silenceRound(&kept, s.now); d > 0 && (res.RequeueAfter == 0 || res.RequeueAfter > d) {
		res.RequeueAfter = d
	}
	if phase.Disrupting() && res.Priority == nil {
		// A node lull disrupts holds a budget slot until its request
		// ends: its next round goes ahead of requests waiting to start
		// (which entered the line without a reconcile: lineUp).
		res.Priority = ptr.To(SlotPriority)
	}
	if equality.Semantic.DeepEqual(&s.nm.Status, s.status) {
		return res, nil
	}
	if wait, ok := s.progressWait(); ok {
		if res.RequeueAfter == 0 || res.RequeueAfter > wait {
			res.RequeueAfter = wait
		}
		return res, nil
	}
	old, oldDecision, rv := s.nm.Status.Phase, s.nm.Status.Decision, s.nm.ResourceVersion
	s.nm.Status = *s.status
	if err := s.r.Client.Status().Update(ctx, s.nm); err != nil {
		// A conflict too stops the chain of steps; Reconcile requeues.
		return reconcile.Result{}, fmt.Errorf("updating the status of NodeMaintenance %s: %w", s.nm.Name, err)
	}
	s.r.writes.wrote(s.nm.Name, s.nm.UID, rv, s.now)
	s.r.writes.statusWritten(s.nm.Name, s.nm.UID, s.now) // the request's name is its node's; the node may be gone
	s.status = s.nm.Status.DeepCopy()
	if d := s.status.Decision; d != nil && (oldDecision == nil || !sameDecision(*oldDecision, *d)) {
		// A decision counts once it is recorded: a write lost to a
		// conflict is decided (and announced) again by the next round.
		// The first is told by the Started event (plan); a change of
		// it, by an event of its own.
		if oldDecision != nil {
			s.record(eventPolicyDecided(s.nm.Spec.Classes, s.nm.Spec.Changes, *d))
		}
		s.r.Metrics.Decisions.WithLabelValues(string(d.Action), d.RuleRef()).Inc()
	}
	if old != phase {
		s.logger.Info("Phase changed", "from", old, "to", phase, "waitingFor", s.status.WaitingFor)
	}
	return res, nil
}

// decided says what the request's policy decided, for its Started event.
func (s *step) decided() string {
	if s.status.Decision == nil {
		return ""
	}
	return policy.Describe(s.nm.Spec.Classes, s.nm.Spec.Changes, *s.status.Decision)
}

// progressWait reports whether the status being saved is only a drain's
// progress over the stored one, written too recently to write again, and
// how long until it may be.
func (s *step) progressWait() (time.Duration, bool) {
	if s.status.Phase != lullv1alpha1.PhaseDraining || s.nm.Status.Phase != lullv1alpha1.PhaseDraining || !progressOnly(&s.nm.Status, s.status) {
		return 0, false
	}
	last, ok := s.r.writes.lastStatusWrite(s.nm.Name, s.nm.UID)
	if !ok || s.now.Sub(last) >= progressEvery {
		return 0, false
	}
	return progressEvery - s.now.Sub(last), true
}

// progressOnly reports whether two statuses differ at most in what a
// drain's progress changes: pod counts and names, waitingFor, condition
// messages and the pods each blocker holds.
func progressOnly(stored, next *lullv1alpha1.NodeMaintenanceStatus) bool {
	a, b := stored.DeepCopy(), next.DeepCopy()
	for _, st := range []*lullv1alpha1.NodeMaintenanceStatus{a, b} {
		st.Pods, st.WaitingFor = nil, ""
		for i := range st.Conditions {
			st.Conditions[i].Message = ""
		}
		for i := range st.Blockers {
			st.Blockers[i].Pods = nil
		}
	}
	return equality.Semantic.DeepEqual(a, b)
}

// update writes the request's spec or metadata and remembers the version
// it replaced, so a reconcile reading that version from a cache that has
// not caught up waits instead of conflicting (ownWrites.stale).
func (r *Reconciler) update(ctx context.Context, nm *lullv1alpha1.NodeMaintenance) error {
	rv := nm.ResourceVersion
	if err := r.Client.Update(ctx, nm); err != nil {
		return err
	}
	r.writes.wrote(nm.Name, nm.UID, rv, r.Clock.Now())
	return nil
}
