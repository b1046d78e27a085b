package maintenance

import (
	"fmt"
	"strings"
	"time"

	corev1 "k8s.io/api/core/v1"

	lullv1alpha1 "lull.dev/lull/api/v1alpha1"
	"lull.dev/lull/internal/gate"
	"lull.dev/lull/internal/policy"
)

// evt is one event on a request: its type, reason and message. Each
// unit of the controller (gate, cordon, drain, act, complete) builds its
// events with the constructors below, so what an event says is written
// once, next to the others of its unit, and tested (events_test.go).
type evt struct {
	Type, Reason, Message string
}

// record raises e on the request.
func (s *step) record(e evt) {
	if s.r.Recorder != nil {
		s.r.Recorder.Eventf(s.nm, nil, e.Type, e.Reason, "Maintenance", "%s", e.Message)
	}
}

// nodeEvent raises e on a node (about its maintenance label).
func (r *Reconciler) nodeEvent(node *corev1.Node, e evt) {
	if r.Recorder != nil {
		r.Recorder.Eventf(node, nil, e.Type, e.Reason, "Request", "%s", e.Message)
	}
}

func normal(reason, msg string) evt {
	return evt{Type: corev1.EventTypeNormal, Reason: reason, Message: msg}
}
func warning(reason, msg string) evt {
	return evt{Type: corev1.EventTypeWarning, Reason: reason, Message: msg}
}

// Event reasons on a NodeMaintenance (and, for the label, on its node).
// The finishing reasons are also the Cordoned condition's reason.
const (
	ReasonStarted                 = "Started"
	ReasonWaitingForLease         = "WaitingForLease"
	ReasonHeldByGate              = "HeldByGate"
	ReasonPolicyDecided           = "PolicyDecided"
	ReasonInvalidMaintenanceLabel = "InvalidMaintenanceLabel"
	ReasonCordoned                = "Cordoned"
	ReasonUncordonedByOthers      = "UncordonedByOthers"
	ReasonLeaseLost               = "LeaseLost"
	ReasonPaused                  = "Paused"
	ReasonDrainBlocked            = "DrainBlocked"
	ReasonForceDeleted            = "ForceDeleted"
	ReasonNoAgent                 = "WaitingForAgent"
	ReasonAgentAway               = "AgentAway"
	ReasonActing                  = "Acting"
	ReasonCameBack                = "NodeCameBack"
	ReasonNodeUnwell              = "NodeUnwell"
	ReasonStepFailed              = "StepFailed"
	ReasonFellBack                = "FellBack"
	ReasonPoweredOff              = "PoweredOff"
	ReasonAborted                 = "Aborted"
	ReasonCompleted               = "Completed"
	ReasonNodeDeleted             = "NodeDeleted"
	ReasonNodeNotFound            = "NodeNotFound"
	ReasonUninstalled             = "Uninstalled"
)

// The gate unit (gate.go): a request waiting to start, and its start.

// eventHeldByGate: a health gate holds the request; a node unwell or
// alerts that cannot be read are a warning.
func eventHeldByGate(v gate.Verdict) evt {
	if v.Reason == gate.ReasonNodeUnwell || v.Reason == gate.ReasonAlertsUnknown {
		return warning(ReasonHeldByGate, v.Message)
	}
	return normal(ReasonHeldByGate, v.Message)
}

func eventWaitingForLease(msg string) evt { return normal(ReasonWaitingForLease, msg) }

// eventStarted: the request took its lease and starts; how says how it
// found the node ("" when it is not cordoned), plan what its policy
// decided. A request's first decision is told here, not in an event of
// its own (PolicyDecided is raised when a recorded decision changes):
// each event is a write to the API server, and a fleet's wave makes one
// request per node.
func eventStarted(how, plan string) evt {
	msg := "lease acquired"
	for _, part := range []string{how, plan} {
		if part != "" {
			msg += "; " + part
		}
	}
	return normal(ReasonStarted, msg)
}

func eventPolicyDecided(classes []string, changes *lullv1alpha1.Changes, d lullv1alpha1.Decision) evt {
	return normal(ReasonPolicyDecided, policy.Describe(classes, changes, d))
}

// eventInvalidLabel (on the node): its maintenance label does not make a
// valid request, or names a class the request cannot take.
func eventInvalidLabel(label, class string, err error, newClass bool) evt {
	if newClass {
		return warning(ReasonInvalidMaintenanceLabel, fmt.Sprintf("label %s=%q is not a valid maintenance class: %v", label, class, err))
	}
	return warning(ReasonInvalidMaintenanceLabel, fmt.Sprintf("label %s=%q does not make a valid NodeMaintenance: %v", label, class, err))
}

// The cordon unit (cordon.go): the node cordoned and held.

func eventCordoned(msg string) evt { return normal(ReasonCordoned, msg) }

func eventUncordonedByOthers(node string, phase lullv1alpha1.MaintenancePhase) evt {
	return warning(ReasonUncordonedByOthers, fmt.Sprintf("node %s was uncordoned by someone else while lull holds it for maintenance (phase %s); lull cordoned it again, since its plan needs the cordon, and will remove it when the request ends",
		node, phase))
}

func eventLeaseLost(holder string) evt {
	return warning(ReasonLeaseLost, fmt.Sprintf("lost the node's lease (now held by %q); evictions stopped", holder))
}

// The drain unit (drain.go, escalate.go).

func eventPaused(msg string) evt { return normal(ReasonPaused, msg) }

func eventDrainBlocked(budget string, pods []string) evt {
	return warning(ReasonDrainBlocked, fmt.Sprintf("PodDisruptionBudget %s allows no disruption of %s", budget, strings.Join(pods, ", ")))
}

func eventForceDeleted(pod string) evt {
	return warning(ReasonForceDeleted, fmt.Sprintf("deleted %s past its PodDisruptionBudget (escalation Force)", pod))
}

// The act unit (act.go): lull-agent's host steps.

func eventNoAgent(msg string) evt { return warning(ReasonNoAgent, msg) }

func eventAgentAway(msg string) evt { return warning(ReasonAgentAway, msg) }

func eventActing(as []lullv1alpha1.ActionStatus) evt {
	return normal(ReasonActing, "lull-agent carries out: "+actionsLine(as))
}

func eventCameBack() evt { return normal(ReasonCameBack, "node rebooted and Ready again") }

func eventStepFailed(why string) evt { return warning(ReasonStepFailed, why) }

func eventNodeUnwell(msg string) evt { return warning(ReasonNodeUnwell, msg) }

func eventFellBack(msg string) evt { return warning(ReasonFellBack, msg) }

func eventPoweredOff() evt {
	return normal(ReasonPoweredOff, "node powered off; it stays off and cordoned until the request is completed")
}

// The complete unit (complete.go): the request ends.

func eventAborted(why string) evt { return warning(ReasonAborted, why) }

// eventCompleted tells the end of a request and how it went: its drain is
// told here, not in an event of its own (the phase, the Drained condition
// and the node's MaintenanceInProgress condition say it as it happens).
func eventCompleted(st *lullv1alpha1.NodeMaintenanceStatus) evt {
	msg := "maintenance completed; node returned to service"
	if st.StartedAt != nil && st.DrainedAt != nil {
		msg += fmt.Sprintf(" (drained %s after the start", st.DrainedAt.Sub(st.StartedAt.Time).Round(100*time.Millisecond))
		if st.Pods != nil && st.Pods.Evicted > 0 {
			msg += fmt.Sprintf(", %d pod(s) evicted", st.Pods.Evicted)
		}
		msg += ")"
	}
	return normal(ReasonCompleted, msg)
}

func eventNodeDeleted() evt { return normal(ReasonNodeDeleted, "the node was deleted; request ended") }

func eventNodeNotFound(node string) evt {
	return warning(ReasonNodeNotFound, fmt.Sprintf("node %q does not exist; nothing was done. Check spec.nodeName (kubectl get nodes) and create the request again", node))
}

func eventNoDisruption(msg string) evt { return normal(gate.ReasonNoDisruption, msg) }

func eventUninstalled(msg string) evt { return warning(ReasonUninstalled, msg) }
