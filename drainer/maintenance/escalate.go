package maintenance

import (
	"context"
	"fmt"
	"maps"
	"slices"
	"strings"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/reconcile"

	lullv1alpha1 "lull.dev/lull/api/v1alpha1"
	"lull.dev/lull/internal/drain"
)

// The drain unit's escalation: what blocks a drain (the
// PodDisruptionBudgets that refuse evictions), and what a drain blocked
// past its timeout does (Wait, Abort or Force).

// blockers records the PodDisruptionBudgets that refused evictions, with
// their pods, keeping the time each was first seen.
func (s *step) blockers(round *drain.Round) error {
	prev := map[string]metav1.Time{}
	for _, b := range s.status.Blockers {
		prev[b.PodDisruptionBudget] = b.Since
	}
	byPDB, err := round.Blockers()
	if err != nil {
		return err
	}
	var out []lullv1alpha1.Blocker
	for _, id := range slices.Sorted(maps.Keys(byPDB)) {
		since, ok := prev[id]
		if !ok {
			since = metav1.Time{Time: s.now}
			// One event per budget and node per 10 minutes: a budget that
			// lets pods go one by one blocks and unblocks every round.
			if s.r.events.due(s.node.Name+"|"+id, s.now, 10*time.Minute) {
				s.record(eventDrainBlocked(id, byPDB[id]))
			}
		}
		out = append(out, lullv1alpha1.Blocker{PodDisruptionBudget: id, Pods: byPDB[id], Since: since})
	}
	s.status.Blockers = out
	s.unfinished, err = round.Unfinished()
	return err
}

// escalate applies the request's escalation once a blocked drain has
// waited longer than its timeout.
func (s *step) escalate(ctx context.Context, blocked map[string]*corev1.Pod) (reconcile.Result, bool, error) {
	msg := s.blockedMessage()
	s.cond(ConditionBlocked, true, "EvictionRefused", msg)
	if len(s.status.Blockers) == 0 {
		return reconcile.Result{}, false, nil
	}
	timeout, esc, note := s.escalation()
	if note != "" {
		s.cond(ConditionBlocked, true, "EvictionRefused", msg+note)
	}
	since := s.status.Blockers[0].Since.Time
	if s.now.Sub(since) < timeout || esc == lullv1alpha1.EscalationWait {
		return reconcile.Result{}, false, nil
	}
	switch esc {
	case lullv1alpha1.EscalationAbort:
		why := fmt.Sprintf("%s for %s (timeout %s, escalation Abort)", msg, s.now.Sub(since).Round(time.Second), timeout)
		res, err := s.abort(ctx, lullv1alpha1.PhaseFailed, why)
		return res, true, err
	case lullv1alpha1.EscalationForce:
		s.force(ctx, blocked)
	}
	return reconcile.Result{}, false, nil
}

// blockedMessage says what blocks the drain.
func (s *step) blockedMessage() string {
	if len(s.status.Blockers) > 0 {
		var parts []string
		for _, b := range s.status.Blockers {
			parts = append(parts, fmt.Sprintf("%s (pods %s)", b.PodDisruptionBudget, strings.Join(b.Pods, ", ")))
		}
		for _, u := range s.unfinished {
			parts = append(parts, u.Describe())
		}
		return "drain blocked by PodDisruptionBudget " + strings.Join(parts, "; ")
	}
	if s.status.LastError != "" {
		return "drain blocked: " + s.status.LastError
	}
	return "drain blocked"
}

// escalation is the blocked drain's timeout and escalation: the request's
// own settings win over its policy rule's, which win over the drainer's
// flags. A timeout stored before admission checked it and unreadable now
// is ignored, never read as 0 (which would escalate at once); note says
// so.
func (s *step) escalation() (timeout time.Duration, esc lullv1alpha1.Escalation, note string) {
	timeout, esc = s.r.Options.DrainTimeout, lullv1alpha1.EscalationWait
	if d := s.status.Decision; d != nil {
		if d.Timeout != nil && d.Timeout.Err() == nil {
			timeout = d.Timeout.Duration
		}
		if d.Escalation != "" {
			esc = d.Escalation
		}
	}
	if d := s.nm.Spec.Drain; d != nil {
		if err := d.Timeout.Err(); err != nil {
			note = "; spec.drain.timeout ignored: " + err.Error()
		} else if d.Timeout != nil {
			timeout = d.Timeout.Duration
		}
		if d.Escalation != "" {
			esc = d.Escalation
		}
	}
	return timeout, esc, note
}

// force deletes the blocked pods past their PodDisruptionBudget
// (escalation Force), when the drainer runs with --allow-force.
func (s *step) force(ctx context.Context, blocked map[string]*corev1.Pod) {
	if !s.r.Options.AllowForce {
		s.status.LastError = "escalation Force requested, but lull-drainer runs without --allow-force; still waiting"
		return
	}
	for key, p := range blocked {
		err := s.r.Kube.CoreV1().Pods(p.Namespace).Delete(ctx, p.Name, metav1.DeleteOptions{Preconditions: &metav1.Preconditions{UID: &p.UID}})
		if err != nil && !apierrors.IsNotFound(err) && !apierrors.IsConflict(err) {
			s.status.LastError = fmt.Sprintf("force-deleting %s: %v", key, err)
			continue
		}
		s.r.Metrics.Evictions.WithLabelValues("forced").Inc()
		s.record(eventForceDeleted(key))
	}
}
