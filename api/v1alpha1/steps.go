package v1alpha1

import (
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
)

// Steps of the closed vocabulary a DisruptionPolicy rule maps a class or
// a change to, and the most disruptive step a decision needs
// (Decision.Action). The drainer does Cordon and Drain; lull-agent, on the
// node, does the host steps (docs/actions.md).
const (
	// StepWriteFiles writes the request's configuration (spec.changes.config)
	// to the node. No rule asks for it: a request that carries a
	// configuration gets it, before its other host steps.
	StepWriteFiles DisruptionAction = "WriteFiles"
	// StepDaemonReload makes systemd read its unit files again; it is done
	// when no changed unit needs a daemon-reload any more.
	StepDaemonReload DisruptionAction = "DaemonReload"
	// StepReloadService reloads one systemd unit: it is done when the
	// reload succeeded (ReloadResult) and the unit is still active.
	StepReloadService DisruptionAction = "ReloadService"
	// StepRestartService restarts one systemd unit on the node.
	StepRestartService DisruptionAction = "RestartService"
	// StepReboot reboots the node; it is done when the node's boot ID has
	// changed and it is Ready again.
	StepReboot DisruptionAction = "Reboot"
	// StepPowerOff powers the node off; it stays off (phase PoweredOff)
	// until an admin completes the request.
	StepPowerOff DisruptionAction = "PowerOff"
)

// Step is one step of a rule's ordered list.
// +kubebuilder:validation:XValidation:rule="!has(self.unit) || self.type in ['RestartService', 'ReloadService']",message="unit names the systemd unit a RestartService or ReloadService step acts on: set it only for those"
// +kubebuilder:validation:XValidation:rule="self.type != 'WriteFiles'",message="WriteFiles is not a rule's step: lull writes a request's spec.changes.config before its host steps"
// +kubebuilder:validation:XValidation:rule="!has(self.timeout) || self.type in ['DaemonReload', 'ReloadService', 'RestartService', 'Reboot', 'PowerOff']",message="timeout applies to the steps lull-agent carries out (DaemonReload, ReloadService, RestartService, Reboot, PowerOff); a drain's timeout is the rule's drain.timeout"
type Step struct {
	// Type of the step.
	Type DisruptionAction `json:"type"`
	// Unit is the systemd unit a RestartService or ReloadService step acts
	// on ("chronyd", "containerd.service"). A rule that matches units may
	// leave it out: the step then acts on each changed unit the rule
	// decides.
	// +optional
	// +kubebuilder:validation:MinLength=1
	// +kubebuilder:validation:MaxLength=255
	// +kubebuilder:validation:Pattern=`^[A-Za-z0-9_.@:][-A-Za-z0-9_.@:]*$`
	Unit string `json:"unit,omitempty"`
	// Timeout bounds a host step: a RestartService or PowerOff step that
	// has not finished, or a Reboot whose node has not come back, after
	// this long has timed out. Defaults: 5m, a Reboot's 15m.
	// +optional
	// A Go duration, more than 0 and at most 24h.
	// +kubebuilder:validation:XValidation:rule="!(size(self) <= 20 && self.matches('^[-+]?(0|(([0-9]{1,6}([.][0-9]*)?|[.][0-9]{1,9})(ns|us|µs|ms|s|m|h))+)$')) || (duration(self) > duration('0s') && duration(self) <= duration('24h'))",message="a step's timeout must be positive and at most 24h, such as 10m"
	Timeout *Duration `json:"timeout,omitempty"`
}

// PlannedStep is one step of a request's merged plan, with the classes
// that need it.
type PlannedStep struct {
	Type DisruptionAction `json:"type"`
	// +optional
	Unit string `json:"unit,omitempty"`
	// Timeout of a host step (the longest any class gave, else the
	// default).
	// +optional
	Timeout *Duration `json:"timeout,omitempty"`
	// Classes whose rules need this step; empty for a step the merge
	// added (a Reboot or PowerOff is always cordoned and drained first).
	// +optional
	// +listType=atomic
	// +kubebuilder:validation:MaxItems=16
	Classes []string `json:"classes,omitempty"`
	// Changes whose rules need this step, as "kind name" ("file
	// /etc/chrony.conf"), at most MaxStepChanges, then "and N more".
	// +optional
	// +listType=atomic
	// +kubebuilder:validation:MaxItems=17
	Changes []string `json:"changes,omitempty"`
	// Covers lists steps this one makes pointless ("RestartService
	// chronyd (chrony-config)" under a Reboot).
	// +optional
	// +listType=atomic
	// +kubebuilder:validation:MaxItems=24
	Covers []string `json:"covers,omitempty"`
}

// ClassDecision is the rule that decided one class of a request.
type ClassDecision struct {
	Class string `json:"class"`
	// Policy whose rule decided; empty for the built-in default.
	// +optional
	Policy string `json:"policy,omitempty"`
	Rule   string `json:"rule"`
	// Steps the rule gave, in its words ("RestartService chronyd").
	// +optional
	// +listType=atomic
	// +kubebuilder:validation:MaxItems=16
	Steps []string `json:"steps,omitempty"`
}

// RuleRef names the rule that decided the class as "policy/rule" (or
// "(default)"), as Decision.RuleRef does.
func (c *ClassDecision) RuleRef() string {
	if c.Policy == "" {
		return c.Rule
	}
	return c.Policy + "/" + c.Rule
}

// ActionState is how far a host step has got.
// +kubebuilder:validation:Enum=Pending;Running;Succeeded;Failed;TimedOut;Skipped
type ActionState string

const (
	ActionPending   ActionState = "Pending"
	ActionRunning   ActionState = "Running"
	ActionSucceeded ActionState = "Succeeded"
	ActionFailed    ActionState = "Failed"
	ActionTimedOut  ActionState = "TimedOut"
	// ActionSkipped: a fallback Reboot made the step pointless.
	ActionSkipped ActionState = "Skipped"
)

// Done reports whether the step has ended, well or not.
func (s ActionState) Done() bool { return s != ActionPending && s != ActionRunning }

// ActionStatus records one host step lull-agent carries out.
type ActionStatus struct {
	Type DisruptionAction `json:"type"`
	// +optional
	Unit string `json:"unit,omitempty"`
	// Timeout the step is bounded by.
	Timeout Duration    `json:"timeout"`
	State   ActionState `json:"state"`
	// +optional
	StartedAt *metav1.Time `json:"startedAt,omitempty"`
	// +optional
	FinishedAt *metav1.Time `json:"finishedAt,omitempty"`
	// BootID is the node's boot ID when a Reboot started: the node has
	// come back when it reports another one and is Ready.
	// +optional
	BootID string `json:"bootID,omitempty"`
	// Fallback marks a Reboot added because an earlier step failed or
	// timed out.
	// +optional
	Fallback bool `json:"fallback,omitempty"`
	// Message says what happened (the command's last output line, the
	// error).
	// +optional
	// +kubebuilder:validation:MaxLength=1024
	Message string `json:"message,omitempty"`
}

// Label is the step as people write it: "RestartService chronyd".
func (a *ActionStatus) Label() string { return StepLabel(a.Type, a.Unit) }

// UnhandledFailure is the index of a step that failed or timed out and
// that nothing handled yet (a fallback reboot after it handles it), -1 if
// none. While there is one, no further step runs: the drainer decides
// (a fallback reboot, or the request fails).
func UnhandledFailure(as []ActionStatus) int {
	for i := range as {
		if as[i].State != ActionFailed && as[i].State != ActionTimedOut {
			continue
		}
		handled := false
		for _, b := range as[i+1:] {
			handled = handled || b.Fallback
		}
		if !handled {
			return i
		}
	}
	return -1
}

// NextAction is the index of the first step not done (the one lull-agent
// runs or is to run next), -1 when all are.
func NextAction(as []ActionStatus) int {
	for i := range as {
		if !as[i].State.Done() {
			return i
		}
	}
	return -1
}

// StepLabel is a step as people write it: its type, and its unit if any.
func StepLabel(t DisruptionAction, unit string) string {
	if unit == "" {
		return string(t)
	}
	return string(t) + " " + unit
}

// Fencing is the disruption lease a request's host steps run under: the
// agent acts only while the node's lease still has this UID and this many
// transitions (a lease released and taken again, or taken over, has
// another), and is held by lull.
type Fencing struct {
	LeaseUID         types.UID `json:"leaseUID"`
	LeaseTransitions int32     `json:"leaseTransitions"`
}
