package v1alpha1

import (
	"cmp"
	"slices"
	"time"
)

// StepKind is what lull knows of one kind of step (a DisruptionAction):
// who carries it out, what it needs done first, what it does to the node,
// where it goes in a plan and how its effect is seen. The planner, the
// drainer, lull-agent and the kubectl plugin read it here; adding a kind
// is an entry in stepKinds (docs/design.md, "Where to change what"), and
// TestStepKindCatalog fails until the CRD's enum, the admission
// expressions and lull-agent's runners agree with it.
// +kubebuilder:object:generate=false
type StepKind struct {
	// Host: lull-agent carries it out on the node; otherwise the drainer
	// does (Cordon, Drain) or nobody (None).
	Host bool
	// InRule: a DisruptionPolicy rule may name it. WriteFiles is not a
	// rule's step: lull adds it to a request that carries a configuration.
	InRule bool
	// NamesUnit: it acts on one systemd unit (Step.Unit).
	NamesUnit bool
	// FallsBack: a failed or timed-out step of this kind falls back to a
	// reboot (a step that applies a change to a running system: a reboot
	// applies it too).
	FallsBack bool
	// TakesNodeDown: the node goes down, and every pod on it stops.
	TakesNodeDown bool
	// Drains: the plan cordons and drains the node before it (a step that
	// names a unit drains first when the unit is node-critical, which the
	// planner decides from the unit).
	Drains bool
	// Cordons: the plan cordons the node before it.
	Cordons bool
	// Pointless: a plan that takes the node down makes this step
	// pointless; the step that takes it down lists it in its covers.
	Pointless bool
	// Rank orders kinds by how disruptive they are: a decision's action
	// is its plan's highest.
	Rank int
	// Order is the step's place in a plan, lower first; steps of one
	// order go by unit.
	Order int
	// DefaultTimeout bounds a host step that sets no timeout.
	DefaultTimeout time.Duration
	// Verified says how lull knows the step's effect happened (not from
	// an exit status).
	Verified string
}

// Default timeouts of host steps (a rule's step may set its own).
const (
	DefaultHostStepTimeout = 5 * time.Minute
	DefaultRebootTimeout   = 15 * time.Minute
	DefaultPowerOffTimeout = 5 * time.Minute
)

// stepKinds is the catalog: one entry per DisruptionAction.
var stepKinds = map[DisruptionAction]StepKind{
	ActionNone: {InRule: true, Rank: 0, Order: 0,
		Verified: "nothing is done: the request completes at once"},
	ActionCordon: {InRule: true, Rank: 5, Order: 1,
		Verified: "the node's spec.unschedulable, as the cordon's patch returns it"},
	ActionDrain: {InRule: true, Cordons: true, Rank: 6, Order: 2,
		Verified: "no evictable pod left on the node (listed from the API server)"},
	StepWriteFiles: {Host: true, Rank: 1, Order: 3, DefaultTimeout: DefaultHostStepTimeout,
		Verified: "every file read back with the content and mode written"},
	StepDaemonReload: {Host: true, InRule: true, FallsBack: true, Pointless: true, Rank: 2, Order: 4, DefaultTimeout: DefaultHostStepTimeout,
		Verified: "systemd's UnitsLoadTimestampMonotonic moved, and no changed unit needs a daemon-reload"},
	StepReloadService: {Host: true, InRule: true, NamesUnit: true, FallsBack: true, Pointless: true, Rank: 3, Order: 5, DefaultTimeout: DefaultHostStepTimeout,
		Verified: "the unit's ReloadResult is success and the unit is still active"},
	StepRestartService: {Host: true, InRule: true, NamesUnit: true, FallsBack: true, Pointless: true, Rank: 4, Order: 6, DefaultTimeout: DefaultHostStepTimeout,
		Verified: "a new invocation of the unit, active (or a oneshot's run that succeeded, from its journal)"},
	StepReboot: {Host: true, InRule: true, TakesNodeDown: true, Drains: true, Cordons: true, Pointless: true, Rank: 7, Order: 7, DefaultTimeout: DefaultRebootTimeout,
		Verified: "the node's boot ID changed and the node is Ready again"},
	StepPowerOff: {Host: true, InRule: true, TakesNodeDown: true, Drains: true, Cordons: true, Rank: 8, Order: 8, DefaultTimeout: DefaultPowerOffTimeout,
		Verified: "the node stops being Ready and lull-agent stops answering; it stays off until an admin completes the request"},
}

// Kind is the catalog's entry for a (false: a kind lull does not know,
// such as one stored by a newer lull).
func (a DisruptionAction) Kind() (StepKind, bool) {
	k, ok := stepKinds[a]
	return k, ok
}

// StepKinds are every kind in the catalog, in plan order.
func StepKinds() []DisruptionAction {
	out := make([]DisruptionAction, 0, len(stepKinds))
	for a := range stepKinds {
		out = append(out, a)
	}
	slices.SortFunc(out, func(a, b DisruptionAction) int { return cmp.Compare(stepKinds[a].Order, stepKinds[b].Order) })
	return out
}

// HostStep reports whether the step is done on the node by lull-agent.
func (a DisruptionAction) HostStep() bool { return stepKinds[a].Host }

// FallsBack reports whether a failed or timed-out step of this type falls
// back to a reboot. A failed WriteFiles fails the request (the files are
// as they were), as does a failed Reboot or PowerOff.
func (a DisruptionAction) FallsBack() bool { return stepKinds[a].FallsBack }

// NamesUnit reports whether the step acts on one systemd unit.
func (a DisruptionAction) NamesUnit() bool { return stepKinds[a].NamesUnit }

// TakesNodeDown reports whether the step takes the node down (a reboot,
// a power-off): every pod on it stops.
func (a DisruptionAction) TakesNodeDown() bool { return stepKinds[a].TakesNodeDown }

// Rank orders steps by how disruptive they are; a kind lull does not
// know ranks above every known one (fail closed: it is taken for the most
// disruptive).
func (a DisruptionAction) Rank() int {
	if k, ok := stepKinds[a]; ok {
		return k.Rank
	}
	return len(stepKinds)
}

// DefaultTimeout bounds a host step of this kind that sets none.
func (a DisruptionAction) DefaultTimeout() time.Duration {
	if k, ok := stepKinds[a]; ok && k.DefaultTimeout > 0 {
		return k.DefaultTimeout
	}
	return DefaultHostStepTimeout
}
