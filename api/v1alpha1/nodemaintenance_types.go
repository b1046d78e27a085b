package v1alpha1

import (
	"strings"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
)

const (
	// MaintenanceLabel requests maintenance of a node: the value is the
	// maintenance class. Removing it completes the request.
	MaintenanceLabel = "lull.dev/maintenance"
	// DisruptionTolerationKey is the toleration key with which a pod says
	// it does not mind its node being disrupted; lull-scheduler then
	// ignores maintenance for it.
	DisruptionTolerationKey = "lull.dev/disruption"
	// ExpectedRuntimeAnnotation on a pod gives its expected runtime as a
	// Go duration ("45m"), so lull-scheduler can place it on a node it will
	// finish on before the node's next disruption.
	ExpectedRuntimeAnnotation = "lull.dev/expected-runtime"
	// RequestedByAnnotation on a NodeMaintenance says who made it:
	// RequestedByLabel (the drainer, for a labelled node; removing the
	// label completes it), RequestedByCLI (`kubectl lull request`) or
	// RequestedBySentinel (lull-agent, for its node's reboot sentinel) or
	// RequestedByClusterAPI (the drainer, for a governed Cluster API
	// Machine being deleted: docs/cluster-api.md).
	RequestedByAnnotation = "lull.dev/requested-by"
	RequestedByLabel      = "label"
	RequestedByCLI        = "kubectl-lull"
	RequestedBySentinel   = "reboot-sentinel"
	RequestedByClusterAPI = "cluster-api"
	// CordonedByAnnotation on a Node marks lull's cordon: its value is the
	// UID of the NodeMaintenance whose cordon it is. lull sets it in the
	// same write as the cordon and undoes a cordon only while the node
	// still carries its mark, so a cordon someone made after lull gave
	// the node back (or one lull found there) is never lull's to undo.
	CordonedByAnnotation = "lull.dev/cordoned-by"
	// UninstallAnnotation on the Deployment lull-drainer (its value: when,
	// RFC 3339) asks lull-drainer to end every request because lull is
	// about to be uninstalled (kubectl lull uninstall): lull's cordons
	// undone, node leases released, each request kept as Failed with
	// reason Uninstalled, labels left as they are, no new request made.
	UninstallAnnotation = "lull.dev/uninstall"
	// KarpenterBudgetAnnotation on a Karpenter NodePool records the
	// disruption budget entry lull added to it (drainer/karpenter): lull
	// removes that entry, and only that one, when no window governs the
	// pool any more and when it is uninstalled.
	KarpenterBudgetAnnotation = "lull.dev/karpenter-budget"
	// DrainerFinalizer on a NodeMaintenance: lull-drainer has cordons or a
	// lease to give back before the request may go.
	DrainerFinalizer = "lull.dev/maintenance"

	// ConditionRebootSentinel on a request lull-agent made for its node's
	// reboot sentinel says whether the sentinel went away after the
	// request: True (reason StillPresent) when the node rebooted and the
	// sentinel is still there, which is reported and never rebooted again
	// in a loop; False (reason Cleared) once it is gone. lull-agent writes
	// it, and no other condition.
	ConditionRebootSentinel = "RebootSentinel"
	// DefaultSentinelClass is the class of the requests a reboot sentinel
	// files; the shipped policy drains and reboots it.
	DefaultSentinelClass = "reboot-required"

	// ClassPattern is the form of a maintenance class (spec.classes, and so
	// the label's value), at most MaxClassLength characters; the CRDs'
	// pattern markers say the same (a test keeps them equal).
	ClassPattern   = `^[a-z0-9]([-a-z0-9._]*[a-z0-9])?$`
	MaxClassLength = 63
)

// Escalation says what to do about a drain blocked by PodDisruptionBudgets.
// +kubebuilder:validation:Enum=Wait;Abort;Force
type Escalation string

const (
	// EscalationWait keeps retrying evictions and reports the blockers.
	EscalationWait Escalation = "Wait"
	// EscalationAbort gives up the drain after the timeout: uncordon what
	// lull cordoned, release the lease, mark the request Failed.
	EscalationAbort Escalation = "Abort"
	// EscalationForce deletes blocked pods after the timeout, bypassing
	// their PodDisruptionBudget. Only on explicit request.
	EscalationForce Escalation = "Force"
)

// NodeMaintenanceSpec is a request for disruptive maintenance of one node.
// +kubebuilder:validation:XValidation:rule="has(self.classes) || has(self.changes)",message="say what changes: classes (kinds of change a DisruptionPolicy knows), or changes (the files, units, SSH keys, kernel arguments or OS image that change)"
type NodeMaintenanceSpec struct {
	// NodeName is the node to maintain. Immutable.
	// +kubebuilder:validation:MinLength=1
	// +kubebuilder:validation:MaxLength=253
	// +kubebuilder:validation:XValidation:rule="self == oldSelf",message="nodeName is immutable; create a NodeMaintenance for the other node"
	NodeName string `json:"nodeName"`

	// Classes name the kinds of change (kernel-update, ssh-keys, hardware,
	// ...); a DisruptionPolicy maps each to the steps it needs, and the plan
	// merges them (docs/actions.md). A request made from the maintenance
	// label has one: the label's value. Set classes, changes or both.
	// +optional
	// +kubebuilder:validation:MinItems=1
	// +kubebuilder:validation:MaxItems=16
	// +kubebuilder:validation:items:MinLength=1
	// +kubebuilder:validation:items:MaxLength=63
	// +kubebuilder:validation:items:Pattern=`^[a-z0-9]([-a-z0-9._]*[a-z0-9])?$`
	// +kubebuilder:validation:XValidation:rule="self.all(c, self.exists_one(d, d == c))",message="classes must not repeat a class"
	// +listType=atomic
	Classes []string `json:"classes,omitempty"`

	// Changes are what changes on the node (files, units, SSH keys,
	// kernel arguments, OS image), beside or instead of classes: the
	// DisruptionPolicies decide each change, as each class
	// (docs/policy.md). `kubectl lull request --from OLD --to NEW` fills
	// them in from two node configurations.
	// +optional
	Changes *Changes `json:"changes,omitempty"`

	// Reason is free text for people.
	// +optional
	// +kubebuilder:validation:MaxLength=1024
	Reason string `json:"reason,omitempty"`

	// Deadline is a hard time after which maintenance windows no longer
	// gate this request.
	// Written as RFC 3339 with upper-case T and Z (2026-11-25T18:00:00Z): the
	// API server would accept lower case, which lull cannot read.
	// +optional
	// +kubebuilder:validation:Type=string
	// +kubebuilder:validation:Format=date-time
	// +kubebuilder:validation:Pattern=`^[0-9]{4}-[0-9]{2}-[0-9]{2}T[0-9]{2}:[0-9]{2}:[0-9]{2}([.][0-9]+)?(Z|[+-][0-9]{2}:[0-9]{2})$`
	Deadline *metav1.Time `json:"deadline,omitempty"`

	// Complete marks the maintenance done: lull uncordons the node (if it
	// cordoned it) and releases the lease. Removing the node's maintenance
	// label or deleting this object does the same.
	// +optional
	Complete bool `json:"complete,omitempty"`

	// Drain overrides the drainer's defaults for this request.
	// +optional
	Drain *DrainOptions `json:"drain,omitempty"`
}

// DrainOptions override how a node is drained.
type DrainOptions struct {
	// Timeout after which a drain that is still blocked escalates.
	// +optional
	// A Go duration, more than 0 and at most 744h: a drain blocked for a
	// month is better left to Wait than escalated by a timer.
	// +kubebuilder:validation:XValidation:rule="!(size(self) <= 20 && self.matches('^[-+]?(0|(([0-9]{1,6}([.][0-9]*)?|[.][0-9]{1,9})(ns|us|µs|ms|s|m|h))+)$')) || (duration(self) > duration('0s') && duration(self) <= duration('744h'))",message="drain timeout must be positive and at most 744h (31 days), such as 15m"
	Timeout *Duration `json:"timeout,omitempty"`

	// PodSelector limits eviction to matching pods.
	// +optional
	PodSelector *metav1.LabelSelector `json:"podSelector,omitempty"`

	// GracePeriodSeconds overrides each pod's termination grace period.
	// +optional
	// +kubebuilder:validation:Minimum=0
	GracePeriodSeconds *int64 `json:"gracePeriodSeconds,omitempty"`

	// Escalation when the drain is still blocked after Timeout. Unset:
	// the deciding DisruptionPolicy rule's escalation, else Wait.
	// +optional
	Escalation Escalation `json:"escalation,omitempty"`
}

// PodCounts says how far a drain has got.
type PodCounts struct {
	Total   int32 `json:"total"`
	Evicted int32 `json:"evicted"`
	Pending int32 `json:"pending"`
	// PendingPods names (namespace/name) the pods still to go, up to 50.
	// +optional
	// +listType=atomic
	PendingPods []string `json:"pendingPods,omitempty"`
}

// Blocker is a PodDisruptionBudget that currently allows no disruption of
// pods on the node.
type Blocker struct {
	// PodDisruptionBudget as namespace/name.
	PodDisruptionBudget string `json:"podDisruptionBudget"`
	// Pods it protects on the node (namespace/name).
	// +listType=atomic
	Pods []string `json:"pods"`
	// Since when the drain has been blocked by it.
	Since metav1.Time `json:"since"`
}

// ClassNames is the request's classes for people: "a, b".
func (s *NodeMaintenanceSpec) ClassNames() string { return strings.Join(s.Classes, ", ") }

// Decision is what the DisruptionPolicies decided for a request. It is
// taken again on every reconcile until the request starts (so a policy
// change affects requests not yet started) and kept from then on.
type Decision struct {
	// Action is the plan's most disruptive step (None when there are no
	// steps).
	Action DisruptionAction `json:"action"`
	// Policy whose rule decided the most disruptive step; empty for the
	// built-in default.
	// +optional
	Policy string `json:"policy,omitempty"`
	// Rule that decided it (DefaultRuleName for the built-in default).
	Rule string `json:"rule"`
	// Steps is the merged plan in the order it is carried out: Cordon,
	// Drain, service restarts, Reboot, PowerOff (docs/actions.md).
	// +optional
	// +listType=atomic
	// +kubebuilder:validation:MaxItems=24
	Steps []PlannedStep `json:"steps,omitempty"`
	// Classes records the rule that decided each class.
	// +optional
	// +listType=atomic
	// +kubebuilder:validation:MaxItems=16
	Classes []ClassDecision `json:"classes,omitempty"`
	// Changes records, for every change of spec.changes, the rule that
	// decided it and the steps it contributed.
	// +optional
	// +listType=atomic
	// +kubebuilder:validation:MaxItems=2200
	Changes []ChangeDecision `json:"changes,omitempty"`
	// Config is the NodeConfig (in lull-configs) lull-agent writes
	// (WriteFiles): spec.changes.config when the request started; a later
	// edit of the spec does not change what is written.
	// +optional
	Config string `json:"config,omitempty"`
	// ConfigUID and ConfigSHA256 identify that NodeConfig as it was when
	// the request started: its UID, and the SHA-256 of its files
	// (internal/hostfiles.ConfigSHA256). lull-agent writes no other: one
	// deleted and created again under the same name since is refused,
	// whatever it holds. Empty in a request started by a lull-drainer that
	// did not record them: its NodeConfig is known by name alone.
	// +optional
	ConfigUID types.UID `json:"configUID,omitempty"`
	// ConfigSHA256 is the SHA-256 (hex) of that NodeConfig's files, sorted
	// by path, as JSON.
	// +optional
	// +kubebuilder:validation:Pattern=`^[0-9a-f]{64}$`
	ConfigSHA256 string `json:"configSHA256,omitempty"`
	// Timeout and Escalation from the rule, when it sets them.
	// +optional
	Timeout *Duration `json:"timeout,omitempty"`
	// +optional
	Escalation Escalation `json:"escalation,omitempty"`
}

// RuleRef names the rule as "policy/rule" (or "(default)").
func (d *Decision) RuleRef() string {
	if d == nil {
		return ""
	}
	if d.Policy == "" {
		return d.Rule
	}
	return d.Policy + "/" + d.Rule
}

// NodeMaintenanceStatus is the record of a request.
type NodeMaintenanceStatus struct {
	// Phase for people; Conditions for machines.
	// +optional
	Phase MaintenancePhase `json:"phase,omitempty"`
	// Decision is the action the DisruptionPolicies chose and the rule
	// that chose it.
	// +optional
	Decision *Decision `json:"decision,omitempty"`
	// WaitingFor says, in one line, what the request waits for.
	// +optional
	WaitingFor string `json:"waitingFor,omitempty"`
	// +optional
	// +listType=map
	// +listMapKey=type
	Conditions []metav1.Condition `json:"conditions,omitempty"`
	// ObservedGeneration is the spec generation the status describes.
	// +optional
	ObservedGeneration int64 `json:"observedGeneration,omitempty"`
	// LeaseHolder is the holder of the node's disruption lease when last seen.
	// +optional
	LeaseHolder string `json:"leaseHolder,omitempty"`
	// Windows are the MaintenanceWindows governing the request: every
	// window that has selected its node since the request was made. A
	// label change adds windows, never removes one, so relabelling a node
	// never opens a gate or frees a budget slot: the request waits for,
	// counts against and follows the windowEnd of each (a window deleted
	// stops governing).
	// +optional
	// +listType=atomic
	Windows []string `json:"windows,omitempty"`
	// DefaultBudget is true once no window selected the node at some
	// moment since the request was made: the request then also counts
	// against the default budget of nodes without a window and needs the
	// default's permission (kept when a window selects the node later).
	// +optional
	DefaultBudget bool `json:"defaultBudget,omitempty"`
	// NextWindowStart is when all of them next permit changes to start
	// (with minTimeRemaining left). While that period goes on it keeps the
	// start recorded for it: for an always-open window, when lull first
	// saw it open.
	// +optional
	NextWindowStart *metav1.Time `json:"nextWindowStart,omitempty"`
	// Pods on the node and how far their eviction has got.
	// +optional
	Pods *PodCounts `json:"pods,omitempty"`
	// Blockers are PodDisruptionBudgets that stop the drain now.
	// +optional
	// +listType=atomic
	Blockers []Blocker `json:"blockers,omitempty"`
	// PodDisruptionBudgets covered pods lull evicted from the node
	// (namespace/name, sorted; at most 32). After the request, the
	// recovery gate of the node's windows waits for them to be healthy.
	// +optional
	// +listType=atomic
	// +kubebuilder:validation:MaxItems=32
	PodDisruptionBudgets []string `json:"podDisruptionBudgets,omitempty"`
	// WasUnschedulable records whether the node was already cordoned
	// before lull touched it; lull never uncordons such a node.
	// +optional
	WasUnschedulable *bool `json:"wasUnschedulable,omitempty"`
	// CordonedByLull is true while lull's cordon is in place.
	// +optional
	CordonedByLull bool `json:"cordonedByLull,omitempty"`
	// CordonMarked says lull marks its cordon of this request on the node
	// (the annotation lull.dev/cordoned-by: the request's UID) and undoes
	// only a cordon that carries the mark. It is recorded when the request
	// starts, before the node is touched; a request started by a lull from
	// before the mark has it false, and its cordon is undone as that lull
	// recorded it (cordonedByLull).
	// +optional
	CordonMarked bool `json:"cordonMarked,omitempty"`
	// NodeAnnotations are the annotations lull put on the node while it
	// holds it, telling other disruptors to keep off (cluster-autoscaler's
	// scale-down-disabled, Karpenter's do-not-disrupt). lull removes
	// these, and only these, when the request ends; an annotation that was
	// already on the node is someone else's and is left alone.
	// +optional
	// +listType=atomic
	// +kubebuilder:validation:MaxItems=8
	NodeAnnotations []string `json:"nodeAnnotations,omitempty"`
	// +optional
	StartedAt *metav1.Time `json:"startedAt,omitempty"`
	// +optional
	DrainedAt *metav1.Time `json:"drainedAt,omitempty"`
	// +optional
	CompletedAt *metav1.Time `json:"completedAt,omitempty"`
	// Actions are the plan's host steps and how far lull-agent has got
	// with each, in order.
	// +optional
	// +listType=atomic
	// +kubebuilder:validation:MaxItems=24
	Actions []ActionStatus `json:"actions,omitempty"`
	// Fencing is the lease the host steps run under.
	// +optional
	Fencing *Fencing `json:"fencing,omitempty"`
	// LastError is the last failure, cleared on success.
	// +optional
	LastError string `json:"lastError,omitempty"`
	// Silence is the Alertmanager silence lull keeps while it takes the
	// node down on purpose (its window's spec.silences); gone once lull
	// has seen it expired.
	// +optional
	Silence *SilenceStatus `json:"silence,omitempty"`
}

// SilenceStatus records the Alertmanager silence lull keeps for a node
// it takes down.
type SilenceStatus struct {
	// ID is Alertmanager's ID of the silence.
	// +kubebuilder:validation:MaxLength=64
	ID string `json:"id"`
	// URL of the Alertmanager.
	// +kubebuilder:validation:MaxLength=2048
	URL string `json:"url"`
	// Window whose spec.silences asked for it.
	// +kubebuilder:validation:MaxLength=253
	Window string `json:"window"`
	// SecretName is the Secret with the credentials (spec.silences.secretName).
	// +kubebuilder:validation:MaxLength=253
	// +optional
	SecretName string `json:"secretName,omitempty"`
	// Matchers of the silence, the node's name in them.
	// +listType=atomic
	// +kubebuilder:validation:MaxItems=16
	// +kubebuilder:validation:items:MaxLength=1024
	Matchers []string `json:"matchers"`
	// StartsAt and EndsAt are the silence's, as Alertmanager keeps them:
	// it expires by itself at EndsAt unless lull extends it.
	StartsAt metav1.Time `json:"startsAt"`
	EndsAt   metav1.Time `json:"endsAt"`
	// Withdrawn: someone expired the silence before its end; lull does
	// not make it again for this request (they want the node's alerts).
	// +optional
	Withdrawn bool `json:"withdrawn,omitempty"`
}

// NodeMaintenance is a request for disruptive maintenance of a node and the
// record of how it went. Its name is the node's name, so a node has at most
// one; labelling a node lull.dev/maintenance=<class> creates it.
//
// +kubebuilder:object:root=true
// +kubebuilder:subresource:status
// +kubebuilder:resource:scope=Cluster,shortName=nm,categories=lull
// +kubebuilder:printcolumn:name="Node",type=string,JSONPath=`.spec.nodeName`
// +kubebuilder:printcolumn:name="Classes",type=string,JSONPath=`.spec.classes`
// +kubebuilder:printcolumn:name="Classes",type=string,JSONPath=`.spec.classes`,priority=1
// +kubebuilder:printcolumn:name="Config",type=string,JSONPath=`.spec.changes.config`,priority=1
// +kubebuilder:printcolumn:name="Action",type=string,JSONPath=`.status.decision.action`
// +kubebuilder:printcolumn:name="Phase",type=string,JSONPath=`.status.phase`
// +kubebuilder:printcolumn:name="Next-Window",type=string,JSONPath=`.status.nextWindowStart`
// +kubebuilder:printcolumn:name="Evicted",type=integer,JSONPath=`.status.pods.evicted`
// +kubebuilder:printcolumn:name="Pending",type=integer,JSONPath=`.status.pods.pending`
// +kubebuilder:printcolumn:name="Age",type=date,JSONPath=`.metadata.creationTimestamp`
// +kubebuilder:validation:XValidation:rule="self.metadata.name == self.spec.nodeName",message="a NodeMaintenance is named after its node: set metadata.name to spec.nodeName"
type NodeMaintenance struct {
	metav1.TypeMeta   `json:",inline"`
	metav1.ObjectMeta `json:"metadata,omitempty"`

	Spec   NodeMaintenanceSpec   `json:"spec"`
	Status NodeMaintenanceStatus `json:"status,omitempty"`
}

// NodeMaintenanceList is a list of NodeMaintenance.
// +kubebuilder:object:root=true
type NodeMaintenanceList struct {
	metav1.TypeMeta `json:",inline"`
	metav1.ListMeta `json:"metadata,omitempty"`
	Items           []NodeMaintenance `json:"items"`
}

func init() {
	register(&NodeMaintenance{}, &NodeMaintenanceList{})
}
