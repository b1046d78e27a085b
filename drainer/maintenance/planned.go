package maintenance

import lullv1alpha1 "lull.dev/lull/api/v1alpha1"

// What the request's recorded plan asks of the node.

// plan is the request's recorded plan (before a decision is recorded,
// the default's cordon and drain: lullv1alpha1.Decision.Plan).
func (s *step) plan() lullv1alpha1.Plan { return s.status.Decision.Plan() }

func (s *step) planHas(t lullv1alpha1.DisruptionAction) bool { return s.plan().Has(t) }

// rebootsOrPowersOff reports whether a Reboot or PowerOff is still to
// come (planned, or a fallback).
func (s *step) rebootsOrPowersOff() bool { return rebootsOrPowersOff(s.status) }

func rebootsOrPowersOff(st *lullv1alpha1.NodeMaintenanceStatus) bool {
	for _, a := range st.Actions {
		if a.Type.TakesNodeDown() && !a.State.Done() {
			return true
		}
	}
	return false
}

// needsCordon and needsDrain: what the plan, and a fallback reboot, need
// done to the node before the host steps.
func (s *step) needsCordon() bool {
	return s.planHas(lullv1alpha1.ActionCordon) || s.needsDrain()
}

func (s *step) needsDrain() bool { return needsDrain(s.status) }

// needsDrain: what a request in status st needs of its node before the
// host steps; the node-conditions controller asks it of the status alone.
func needsDrain(st *lullv1alpha1.NodeMaintenanceStatus) bool {
	return st.Decision.Plan().Has(lullv1alpha1.ActionDrain) || rebootsOrPowersOff(st)
}
