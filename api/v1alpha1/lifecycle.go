package v1alpha1

import (
	"slices"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// The request lifecycle, in one place: its phases, what each phase means
// to the rest of lull (the table lifecycle), the rule by which a request
// made from the maintenance label follows it, and what a recorded plan
// holds. The drainer, its metrics, kubectl lull, the plan preview and the
// forecast ask these predicates; none of them lists phases itself.
// Adding a phase is one edit here: its constant, its enum value and its
// row (TestLifecycleCoversEveryPhase fails for a phase without one).

// MaintenancePhase is where a maintenance request is in its life. It is for
// people; machines read the conditions.
// +kubebuilder:validation:Enum=Pending;WaitingForWindow;WaitingForBudget;WaitingForLease;WaitingForAgent;WaitingForGates;Cordoning;Cordoned;Draining;Drained;Acting;PoweredOff;Uncordoning;Completed;Failed;NodeNotFound
type MaintenancePhase string

const (
	PhasePending          MaintenancePhase = "Pending"
	PhaseWaitingForWindow MaintenancePhase = "WaitingForWindow"
	PhaseWaitingForBudget MaintenancePhase = "WaitingForBudget"
	PhaseWaitingForLease  MaintenancePhase = "WaitingForLease"
	// PhaseWaitingForAgent: the plan has host steps and no lull-agent is
	// running on the node.
	PhaseWaitingForAgent MaintenancePhase = "WaitingForAgent"
	// PhaseWaitingForGates: a health gate of the node's windows holds it
	// (alerts firing, blocking pods, a finished node not recovered).
	PhaseWaitingForGates MaintenancePhase = "WaitingForGates"
	PhaseCordoning       MaintenancePhase = "Cordoning"
	// PhaseCordoned: the node is cordoned and held for a class whose
	// policy action is Cordon (nothing is evicted).
	PhaseCordoned MaintenancePhase = "Cordoned"
	PhaseDraining MaintenancePhase = "Draining"
	PhaseDrained  MaintenancePhase = "Drained"
	// PhaseActing: lull-agent carries out the plan's host steps
	// (status.actions) under the lease (status.fencing).
	PhaseActing MaintenancePhase = "Acting"
	// PhasePoweredOff: the node was powered off; it stays cordoned and
	// leased until an admin completes the request.
	PhasePoweredOff  MaintenancePhase = "PoweredOff"
	PhaseUncordoning MaintenancePhase = "Uncordoning"
	PhaseCompleted   MaintenancePhase = "Completed"
	PhaseFailed      MaintenancePhase = "Failed"
	// PhaseNodeNotFound: the request named a node that did not exist when
	// the drainer first looked at it; nothing was done. (A node deleted
	// while its request was under way ends Completed, reason NodeDeleted.)
	PhaseNodeNotFound MaintenancePhase = "NodeNotFound"
)

// stage is the part of its life a request is in.
type stage int

const (
	// waiting to start: nothing done to the node yet.
	stageWaiting stage = iota + 1
	// disrupting: lull cordons, drains or acts on the node, or holds it.
	stageDisrupting
	// giving the node back (uncordoning, releasing the lease).
	stageEnding
	// finished: nothing more happens.
	stageFinished
)

// phaseTraits is what the rest of lull asks of a phase.
// +kubebuilder:object:generate=false
type phaseTraits struct {
	phase MaintenancePhase
	stage stage
	// holds: lull holds the node for the request — it keeps its cordon
	// and hold annotations on the node and renews its lease.
	holds bool
	// agent: lull-agent has, or waits to be given, the node.
	agent bool
	// inLine: the request may be in its budgets' line for a slot.
	inLine bool
}

// lifecycle has one row per phase, in the order a request goes through
// them.
var lifecycle = []phaseTraits{
	{phase: PhasePending, stage: stageWaiting, inLine: true},
	{phase: PhaseWaitingForWindow, stage: stageWaiting},
	{phase: PhaseWaitingForAgent, stage: stageWaiting, agent: true},
	{phase: PhaseWaitingForGates, stage: stageWaiting},
	{phase: PhaseWaitingForBudget, stage: stageWaiting, inLine: true},
	{phase: PhaseWaitingForLease, stage: stageWaiting},
	{phase: PhaseCordoning, stage: stageDisrupting},
	{phase: PhaseCordoned, stage: stageDisrupting, holds: true},
	{phase: PhaseDraining, stage: stageDisrupting, holds: true},
	{phase: PhaseDrained, stage: stageDisrupting, holds: true},
	{phase: PhaseActing, stage: stageDisrupting, holds: true, agent: true},
	{phase: PhasePoweredOff, stage: stageDisrupting, holds: true, agent: true},
	{phase: PhaseUncordoning, stage: stageEnding},
	{phase: PhaseCompleted, stage: stageFinished},
	{phase: PhaseFailed, stage: stageFinished},
	{phase: PhaseNodeNotFound, stage: stageFinished},
}

// Phases are every phase, in the order a request goes through them.
var Phases = func() []MaintenancePhase {
	out := make([]MaintenancePhase, len(lifecycle))
	for i, t := range lifecycle {
		out[i] = t.phase
	}
	return out
}()

var traitsOf = func() map[MaintenancePhase]phaseTraits {
	m := make(map[MaintenancePhase]phaseTraits, len(lifecycle))
	for _, t := range lifecycle {
		m[t.phase] = t
	}
	return m
}()

// traits is the phase's row; "" (a request the drainer has not seen yet)
// is Pending.
func (p MaintenancePhase) traits() phaseTraits { return traitsOf[p.OrPending()] }

// OrPending is the phase, with "" (a request the drainer has not seen yet)
// read as Pending.
func (p MaintenancePhase) OrPending() MaintenancePhase {
	if p == "" {
		return PhasePending
	}
	return p
}

// Waiting reports whether the request waits to start: nothing has been
// done to the node for it.
func (p MaintenancePhase) Waiting() bool { return p.traits().stage == stageWaiting }

// Disrupting reports whether a node in this phase is being, or has been,
// disrupted by lull: cordoned, draining or drained, acted on, powered off.
func (p MaintenancePhase) Disrupting() bool { return p.traits().stage == stageDisrupting }

// Holding reports whether lull holds the node in this phase: it keeps the
// cordon and hold annotations it put on the node, and renews the node's
// lease (every disrupting phase but Cordoning, which is putting them on).
func (p MaintenancePhase) Holding() bool { return p.traits().holds }

// WithAgent reports whether lull-agent has, or waits to be given, the
// node: the phases in which a request's host steps are what it is at.
func (p MaintenancePhase) WithAgent() bool { return p.traits().agent }

// InLine reports whether a request in this phase may be in its budgets'
// line for a slot (not started, not held elsewhere by a gate).
func (p MaintenancePhase) InLine() bool { return p.traits().inLine }

// Ending reports whether the request is over for its node: lull is giving
// the node back (Uncordoning) or the request has finished.
func (p MaintenancePhase) Ending() bool { return p.traits().stage >= stageEnding }

// Finished reports whether the request has ended.
func (p MaintenancePhase) Finished() bool { return p.traits().stage == stageFinished }

// HoldsSlot reports whether the request holds a slot of its disruption
// budgets: lull has cordoned the node (or is about to), or lost the
// node's lease while its cordon is still in place.
func (s *NodeMaintenanceStatus) HoldsSlot() bool {
	return s.Phase.Disrupting() || (s.Phase == PhaseWaitingForLease && s.CordonedByLull)
}

// HasHostSteps reports whether the request has steps lull-agent carries
// out: its recorded plan has some, or they have been handed out
// (status.actions, which may hold a fallback Reboot the plan does not).
func (s *NodeMaintenanceStatus) HasHostSteps() bool {
	return s.Decision.Plan().HostSteps() || len(s.Actions) > 0
}

// ConditionAgentReady on a request says whether lull-agent runs on its
// node to carry out the host steps.
const ConditionAgentReady = "AgentReady"

// DownOnPurpose reports whether lull takes the request's node down on
// purpose now: its host steps are handed out (phase Acting) and a Reboot
// or PowerOff among them is running, or pending while lull-agent is there
// to run it (not while the request says it has no agent: a node waiting
// for one is up, and its alerts are news), or the node stays powered off
// (PoweredOff). A Reboot that timed out or failed is no longer on
// purpose: a node still down then is news. While this holds, lull keeps
// the node's silence, and alerts gates ignore what it silences.
func (s *NodeMaintenanceStatus) DownOnPurpose() bool {
	switch s.Phase {
	case PhasePoweredOff:
		return true
	case PhaseActing:
		noAgent := false
		for _, c := range s.Conditions {
			noAgent = noAgent || (c.Type == ConditionAgentReady && c.Status == metav1.ConditionFalse)
		}
		for _, a := range s.Actions {
			if !a.Type.TakesNodeDown() {
				continue
			}
			if a.State == ActionRunning || (a.State == ActionPending && !noAgent) {
				return true
			}
		}
	}
	return false
}

// LabelChange is what the node's maintenance label asks of the request
// made from it.
type LabelChange int

const (
	// LabelUnchanged: nothing (or the request does not follow the label).
	LabelUnchanged LabelChange = iota
	// LabelRemoved: the label is gone; the request completes.
	LabelRemoved
	// LabelReclassed: the label names another class and the request has
	// not started; the request takes the new class (and its policy
	// decision with it). A started request keeps its class.
	LabelReclassed
)

// FollowLabel is the rule by which a request made from the maintenance
// label follows it: value is the node's label (labelled false when the
// node has none). A request made any other way, or already being
// completed, does not follow the label.
func (nm *NodeMaintenance) FollowLabel(value string, labelled bool) LabelChange {
	if nm.Annotations[RequestedByAnnotation] != RequestedByLabel || nm.Spec.Complete {
		return LabelUnchanged
	}
	switch {
	case !labelled:
		return LabelRemoved
	case !nm.Spec.HasOnlyClass(value) && nm.Status.StartedAt == nil:
		return LabelReclassed
	}
	return LabelUnchanged
}

// DefaultPlan is the plan of a request no policy decision covers yet:
// cordon and drain.
var DefaultPlan = Plan{{Type: ActionCordon}, {Type: ActionDrain}}

// Plan is a recorded decision's steps, in the order they are carried out.
type Plan []PlannedStep

// Plan is the plan the decision stands for: its steps; DefaultPlan for no
// decision. The drainer carries a request out by it and kubectl lull plan
// previews it.
func (d *Decision) Plan() Plan {
	if d == nil {
		return slices.Clone(DefaultPlan)
	}
	return d.Steps
}

// Has reports whether the plan has a step of type t.
func (p Plan) Has(t DisruptionAction) bool {
	for _, st := range p {
		if st.Type == t {
			return true
		}
	}
	return false
}

// HostSteps reports whether the plan has steps lull-agent carries out.
func (p Plan) HostSteps() bool {
	for _, st := range p {
		if st.Type.HostStep() {
			return true
		}
	}
	return false
}

// TakesNodeDown reports whether the plan reboots or powers off the node:
// every pod on it stops, so the drain before must evict every evictable
// pod, whatever the request's podSelector says (a narrower drain would
// stop the other pods without their PodDisruptionBudgets being asked).
func (p Plan) TakesNodeDown() bool {
	return slices.ContainsFunc(p, func(st PlannedStep) bool { return st.Type.TakesNodeDown() })
}

// LeaseOperation is what the node's lease says lull does for the request:
// "delete" for a Cluster API Machine's deletion (the node does not come
// back), "drain" for every other request.
func (nm *NodeMaintenance) LeaseOperation() string {
	if nm.Annotations[RequestedByAnnotation] == RequestedByClusterAPI {
		return "delete"
	}
	return "drain"
}
