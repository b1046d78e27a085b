package v1alpha1

import (
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// DisruptionAction is a step of what a maintenance class or a change needs
// done to its node (steps.go has the steps lull-agent carries out).
// +kubebuilder:validation:Enum=None;Cordon;Drain;WriteFiles;DaemonReload;ReloadService;RestartService;Reboot;PowerOff
type DisruptionAction string

const (
	// ActionNone: the change disrupts nothing (no lease, window or budget
	// is needed); the request completes at once and is recorded.
	ActionNone DisruptionAction = "None"
	// ActionCordon: cordon the node (gated like any material change:
	// window, budget, lease), evict nothing.
	ActionCordon DisruptionAction = "Cordon"
	// ActionDrain: cordon and drain the node. The built-in default for a
	// class no rule matches.
	ActionDrain DisruptionAction = "Drain"
)

// DefaultRuleName names the built-in fallback in statuses: a class no
// DisruptionPolicy rule matches is drained; a change no rule matches is
// drained and the node rebooted.
const DefaultRuleName = "(default)"

// DisruptionRule maps maintenance classes, or changes to a node, to an
// ordered list of steps. It matches by exactly one of class, classPattern,
// files, units, sshKeys, kernelArguments or osImage.
// +kubebuilder:validation:XValidation:rule="[has(self.class), has(self.classPattern), has(self.files), has(self.units), has(self.sshKeys), has(self.kernelArguments), has(self.osImage)].filter(x, x).size() == 1",message="set exactly one of class (an exact class), classPattern (a glob such as kernel-*), files, units, sshKeys, kernelArguments or osImage (what a change touches)"
// +kubebuilder:validation:XValidation:rule="has(self.action) != has(self.steps)",message="set exactly one of steps (an ordered list, such as [{type: Drain}, {type: Reboot}]) or action (one step, such as Drain)"
// +kubebuilder:validation:XValidation:rule="!has(self.action) || !(self.action in ['RestartService', 'ReloadService']) || has(self.units)",message="a RestartService or ReloadService step names its unit: write steps: [{type: RestartService, unit: chronyd}] (only a rule matching units may leave it out: the changed unit)"
// +kubebuilder:validation:XValidation:rule="!has(self.steps) || has(self.units) || self.steps.all(s, !(s.type in ['RestartService', 'ReloadService']) || has(s.unit))",message="a RestartService or ReloadService step names its unit (only in a rule matching units may it leave it out: the changed unit)"
// +kubebuilder:validation:XValidation:rule="!has(self.action) || self.action != 'WriteFiles'",message="WriteFiles is not a rule's step: lull writes a request's spec.changes.config before its host steps"
// +kubebuilder:validation:XValidation:rule="!has(self.osImage) || self.osImage",message="osImage: true matches a change of the OS image; leave it out otherwise"
// +kubebuilder:validation:XValidation:rule="!has(self.steps) || !self.steps.exists(s, s.type == 'None') || size(self.steps) == 1",message="None means the class needs nothing done: it cannot be combined with other steps"
// +kubebuilder:validation:XValidation:rule="!has(self.drain) || (has(self.action) && self.action in ['Drain', 'Reboot', 'PowerOff']) || (has(self.steps) && self.steps.exists(s, s.type in ['Drain', 'Reboot', 'PowerOff']))",message="drain settings apply only to rules that drain (a Drain, Reboot or PowerOff step)"
type DisruptionRule struct {
	// Name identifies the rule; requests record which rule decided them.
	// +kubebuilder:validation:MinLength=1
	// +kubebuilder:validation:MaxLength=63
	// +kubebuilder:validation:Pattern=`^[a-z0-9]([-a-z0-9]*[a-z0-9])?$`
	Name string `json:"name"`

	// Class matches exactly one maintenance class.
	// +optional
	// +kubebuilder:validation:MinLength=1
	// +kubebuilder:validation:MaxLength=63
	// +kubebuilder:validation:Pattern=`^[a-z0-9]([-a-z0-9._]*[a-z0-9])?$`
	Class string `json:"class,omitempty"`

	// ClassPattern matches classes by glob: `*` matches any run of
	// characters, `?` any one character ("kernel-*", "*").
	// +optional
	// +kubebuilder:validation:MinLength=1
	// +kubebuilder:validation:MaxLength=63
	// +kubebuilder:validation:Pattern=`^[-a-z0-9._*?]+$`
	ClassPattern string `json:"classPattern,omitempty"`

	// Files matches changed files by absolute path or glob: `*` and `?`
	// match within one path segment, `**` across segments
	// ("/etc/chrony.conf", "/etc/containerd/certs.d/**"). Unit files and
	// drop-ins are units, not files.
	// +optional
	// +kubebuilder:validation:MinItems=1
	// +kubebuilder:validation:MaxItems=32
	// +kubebuilder:validation:items:MaxLength=1024
	// +kubebuilder:validation:items:Pattern=`^/`
	// +listType=atomic
	Files []string `json:"files,omitempty"`

	// Units matches systemd units whose unit file or a drop-in changed, by
	// name or glob ("chronyd.service", "*"). A RestartService or
	// ReloadService step without a unit acts on each matched unit.
	// +optional
	// +kubebuilder:validation:MinItems=1
	// +kubebuilder:validation:MaxItems=32
	// +kubebuilder:validation:items:MinLength=1
	// +kubebuilder:validation:items:MaxLength=255
	// +listType=atomic
	Units []string `json:"units,omitempty"`

	// SSHKeys matches a change of the authorized SSH keys of users, by
	// name or glob ("core", "*").
	// +optional
	// +kubebuilder:validation:MinItems=1
	// +kubebuilder:validation:MaxItems=32
	// +kubebuilder:validation:items:MinLength=1
	// +kubebuilder:validation:items:MaxLength=64
	// +listType=atomic
	SSHKeys []string `json:"sshKeys,omitempty"`

	// KernelArguments matches kernel arguments added or removed, by glob
	// over the argument as written ("hugepages*", "*").
	// +optional
	// +kubebuilder:validation:MinItems=1
	// +kubebuilder:validation:MaxItems=32
	// +kubebuilder:validation:items:MinLength=1
	// +kubebuilder:validation:items:MaxLength=1024
	// +listType=atomic
	KernelArguments []string `json:"kernelArguments,omitempty"`

	// OSImage: true matches a change of the node's OS image.
	// +optional
	OSImage *bool `json:"osImage,omitempty"`

	// Action is a one-step rule: what the matched classes need (None,
	// Cordon, Drain, Reboot or PowerOff). Set it or steps.
	// +optional
	Action DisruptionAction `json:"action,omitempty"`

	// Steps the matched classes or changes need, in order. A request's
	// plan merges the steps of all its classes and changes
	// (docs/actions.md). Set it or action.
	// +optional
	// +kubebuilder:validation:MinItems=1
	// +kubebuilder:validation:MaxItems=16
	// +listType=atomic
	Steps []Step `json:"steps,omitempty"`

	// Drain settings for requests this rule decides, unless the request
	// sets its own (spec.drain). Only for rules that drain.
	// +optional
	Drain *RuleDrain `json:"drain,omitempty"`
}

// RuleDrain are a rule's drain settings.
type RuleDrain struct {
	// Timeout after which a drain that is still blocked escalates.
	// +optional
	// A Go duration, more than 0 and at most 744h: a drain blocked for a
	// month is better left to Wait than escalated by a timer.
	// +kubebuilder:validation:XValidation:rule="!(size(self) <= 20 && self.matches('^[-+]?(0|(([0-9]{1,6}([.][0-9]*)?|[.][0-9]{1,9})(ns|us|µs|ms|s|m|h))+)$')) || (duration(self) > duration('0s') && duration(self) <= duration('744h'))",message="drain timeout must be positive and at most 744h (31 days), such as 15m"
	Timeout *Duration `json:"timeout,omitempty"`
	// Escalation when the drain is still blocked after Timeout.
	// +optional
	Escalation Escalation `json:"escalation,omitempty"`
}

// DisruptionPolicySpec is an ordered list of rules.
type DisruptionPolicySpec struct {
	// Priority orders policies: rules of a higher-priority policy are
	// tried first; equal priorities are ordered by name. The shipped
	// default policy has priority -100, so any policy at the default 0
	// overrides it.
	// +optional
	// +kubebuilder:validation:Minimum=-1000
	// +kubebuilder:validation:Maximum=1000
	Priority int32 `json:"priority,omitempty"`

	// Rules are tried in order; for each class, and each change, of a
	// request the first rule that matches it decides.
	// +kubebuilder:validation:MinItems=1
	// +kubebuilder:validation:MaxItems=128
	// +listType=map
	// +listMapKey=name
	Rules []DisruptionRule `json:"rules"`
}

// EffectiveRule is one rule of the merged, cluster-wide order.
type EffectiveRule struct {
	// Policy the rule comes from; empty for the built-in default.
	// +optional
	Policy string `json:"policy,omitempty"`
	// Rule name (DefaultRuleName for the built-in default).
	Rule string `json:"rule"`
	// Match is what the rule matches: a class or class pattern, or a
	// change matcher ("files: /etc/chrony.conf", "units: *").
	Match string `json:"match"`
	// Action is the rule's most disruptive step.
	Action DisruptionAction `json:"action"`
	// Steps are the rule's steps as people write them ("Drain",
	// "RestartService chronyd").
	// +optional
	// +listType=atomic
	Steps []string `json:"steps,omitempty"`
	// ShadowedBy names an earlier rule that matches every class or change
	// this one does, so this one never decides anything.
	// +optional
	ShadowedBy string `json:"shadowedBy,omitempty"`
}

// DisruptionPolicyStatus shows how the cluster's policies combine.
type DisruptionPolicyStatus struct {
	// ObservedGeneration is the generation the status was computed for.
	// +optional
	ObservedGeneration int64 `json:"observedGeneration,omitempty"`
	// Order is this policy's place among all policies (1 is tried first).
	// +optional
	Order int32 `json:"order,omitempty"`
	// Summary of this policy's rules, "match=Action" in order.
	// +optional
	Summary string `json:"summary,omitempty"`
	// EffectiveRules are the rules of every DisruptionPolicy merged in the
	// order they are tried, ending with the built-in defaults (a class:
	// Drain; a change: Drain, Reboot). The drainer and `kubectl lull plan`
	// decide with exactly this list.
	// +optional
	// +listType=atomic
	EffectiveRules []EffectiveRule `json:"effectiveRules,omitempty"`
	// +optional
	// +listType=map
	// +listMapKey=type
	Conditions []metav1.Condition `json:"conditions,omitempty"`
}

// DisruptionPolicy maps maintenance classes, and changes to a node (files,
// units, SSH keys, kernel arguments, OS image), to the steps they need done
// to it: None, Cordon, Drain, DaemonReload, ReloadService, RestartService,
// Reboot, PowerOff. A class no rule matches is drained; a change no rule
// matches is drained and the node rebooted.
//
// +kubebuilder:object:root=true
// +kubebuilder:subresource:status
// +kubebuilder:resource:scope=Cluster,shortName=dp,categories=lull
// +kubebuilder:printcolumn:name="Priority",type=integer,JSONPath=`.spec.priority`
// +kubebuilder:printcolumn:name="Order",type=integer,JSONPath=`.status.order`
// +kubebuilder:printcolumn:name="Rules",type=string,JSONPath=`.status.summary`
// +kubebuilder:printcolumn:name="Age",type=date,JSONPath=`.metadata.creationTimestamp`
type DisruptionPolicy struct {
	metav1.TypeMeta   `json:",inline"`
	metav1.ObjectMeta `json:"metadata,omitempty"`

	Spec   DisruptionPolicySpec   `json:"spec"`
	Status DisruptionPolicyStatus `json:"status,omitempty"`
}

// DisruptionPolicyList is a list of DisruptionPolicy.
// +kubebuilder:object:root=true
type DisruptionPolicyList struct {
	metav1.TypeMeta `json:",inline"`
	metav1.ListMeta `json:"metadata,omitempty"`
	Items           []DisruptionPolicy `json:"items"`
}

func init() {
	register(&DisruptionPolicy{}, &DisruptionPolicyList{})
}
