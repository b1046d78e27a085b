package maintenance

import corev1 "k8s.io/api/core/v1"

// Event reasons on a NodeMaintenance (and, for the label, on its node).
// The finishing reasons are also the Cordoned condition's reason.
const (
	ReasonStarted                 = "Started"
	ReasonWaitingForLease         = "WaitingForLease"
	ReasonHeldByGate              = "HeldByGate"
	ReasonCordoned                = "Cordoned"
	ReasonPaused                  = "Paused"
	ReasonDrainBlocked            = "DrainBlocked"
	ReasonForceDeleted            = "ForceDeleted"
	ReasonDrained                 = "Drained"
	ReasonLeaseLost               = "LeaseLost"
	ReasonAborted                 = "Aborted"
	ReasonPolicyDecided           = "PolicyDecided"
	ReasonInvalidMaintenanceLabel = "InvalidMaintenanceLabel"
	ReasonCompleted               = "Completed"
	ReasonNodeDeleted             = "NodeDeleted"
	ReasonNodeNotFound            = "NodeNotFound"
)

// event records an event on the request.
func (s *step) event(eventType, reason, msg string) {
	if s.r.Recorder != nil {
		s.r.Recorder.Eventf(s.nm, nil, eventType, reason, "Maintenance", "%s", msg)
	}
}

// nodeEvent records an event on a node (about its maintenance label).
func (r *Reconciler) nodeEvent(node *corev1.Node, eventType, reason, format string, args ...any) {
	if r.Recorder != nil {
		r.Recorder.Eventf(node, nil, eventType, reason, "Request", format, args...)
	}
}
