package v1alpha1

import (
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/intstr"
)

// Strategy says how a window decides whether material changes may start.
// +kubebuilder:validation:Enum=Schedule;Permissive;Restrictive
type Strategy string

const (
	// StrategySchedule permits changes to start only inside the schedule's windows.
	StrategySchedule Strategy = "Schedule"
	// StrategyPermissive always permits changes to start.
	StrategyPermissive Strategy = "Permissive"
	// StrategyRestrictive never permits changes to start.
	StrategyRestrictive Strategy = "Restrictive"
)

// OverrideStrategy is the strategy an override imposes: an opening or a
// freeze (Schedule would say nothing an override could impose).
// +kubebuilder:validation:Enum=Permissive;Restrictive
type OverrideStrategy string

const (
	OverridePermissive  OverrideStrategy = "Permissive"
	OverrideRestrictive OverrideStrategy = "Restrictive"
)

// WindowEndPolicy says what happens to a drain still running when its window closes.
// +kubebuilder:validation:Enum=Pause;Continue;Abort
type WindowEndPolicy string

const (
	// WindowEndPause stops evicting, keeps the node cordoned and the lease
	// held, and resumes in the next window.
	WindowEndPause WindowEndPolicy = "Pause"
	// WindowEndContinue lets a drain that started in the window finish.
	WindowEndContinue WindowEndPolicy = "Continue"
	// WindowEndAbort uncordons what lull cordoned, releases the lease and
	// waits for the next window.
	WindowEndAbort WindowEndPolicy = "Abort"
)

// MaintenanceWindowSpec selects nodes and says when material changes
// (cordon, drain) may start on them.
// +kubebuilder:validation:XValidation:rule="self.strategy != 'Schedule' || has(self.schedule)",message="strategy Schedule needs a schedule; set spec.schedule or use strategy Permissive/Restrictive"
type MaintenanceWindowSpec struct {
	// NodeSelector selects the nodes this window governs. An empty selector
	// selects every node.
	// +optional
	NodeSelector *metav1.LabelSelector `json:"nodeSelector,omitempty"`

	// Strategy: Schedule (default), Permissive (always) or Restrictive (never).
	// +kubebuilder:default=Schedule
	// +optional
	Strategy Strategy `json:"strategy,omitempty"`

	// Override temporarily replaces the strategy until a time: an emergency
	// opening (Permissive) or a freeze (Restrictive). It expires by itself.
	// +optional
	Override *Override `json:"override,omitempty"`

	// Schedule says when the window is open under strategy Schedule.
	// +optional
	Schedule *Schedule `json:"schedule,omitempty"`

	// MaxUnavailable is how many of the selected nodes lull may disrupt at
	// once: a count (0 to 100000) or a percentage of the selected nodes
	// (0% to 100%, rounded down but at least 1 when it is not 0%). 0 and 0%
	// freeze the window's nodes: none may be disrupted. Default 1.
	// +kubebuilder:default=1
	// +kubebuilder:validation:XIntOrString
	// +kubebuilder:validation:XValidation:rule="type(self) == int ? (self >= 0 && self <= 100000) : self.matches('^(100|[1-9]?[0-9])%$')",message="maxUnavailable must be a node count from 0 to 100000 or a percentage from 0% to 100% such as '10%'; 0 or 0% freezes the window (no node may be disrupted)"
	// +optional
	MaxUnavailable *intstr.IntOrString `json:"maxUnavailable,omitempty"`

	// MinTimeRemaining: a node's drain does not start when less than this is
	// left in the current window. A Go duration from 0s to 744h (a window
	// lasts at most 744h, so more would never let a drain start).
	// +kubebuilder:validation:XValidation:rule="!(size(self) <= 20 && self.matches('^[-+]?(0|(([0-9]{1,6}([.][0-9]*)?|[.][0-9]{1,9})(ns|us|µs|ms|s|m|h))+)$')) || (duration(self) >= duration('0s') && duration(self) <= duration('744h'))",message="minTimeRemaining must be from 0s to 744h (the longest a window lasts), such as 30m"
	// +optional
	MinTimeRemaining *Duration `json:"minTimeRemaining,omitempty"`

	// WindowEnd says what happens to a drain still running when the window
	// closes: Pause (default), Continue or Abort.
	// +kubebuilder:default=Pause
	// +optional
	WindowEnd WindowEndPolicy `json:"windowEnd,omitempty"`

	// Gates are health checks every node of the window passes before it
	// starts: matching alerts quiet, no blocking pods on the node, the
	// nodes the window finished back to health. A gate that cannot be
	// checked holds (fails closed). Gates never stop work already started.
	// +optional
	Gates *Gates `json:"gates,omitempty"`
	// Karpenter, when set, makes the window govern Karpenter's voluntary
	// disruption (consolidation, drift, emptiness) of the NodePools whose
	// nodes it selects: outside the window's permitted periods lull keeps
	// them from disrupting any node (a budget entry of its own,
	// nodes "0", in each NodePool's spec.disruption.budgets); inside, the
	// entry bounds Karpenter by the room left in the window's
	// maxUnavailable. Without it Karpenter disrupts at any hour (lull
	// still counts the nodes it disrupts against the window's budget and
	// waits for them). docs/interop.md.
	// +optional
	Karpenter *KarpenterGovernance `json:"karpenter,omitempty"`
	// Silences: while lull takes one of the window's nodes down on purpose
	// (a Reboot or PowerOff step), it keeps an Alertmanager silence for
	// that node, so that the node's own down alerts do not page; the
	// silence lasts a short time past lull's last extension and so
	// expires by itself if lull stops. The alerts gates of every window
	// ignore the alerts such a silence matches while lull holds the node
	// down, and only those. docs/gates.md#silences.
	// +optional
	Silences *Silences `json:"silences,omitempty"`
}

// KarpenterGovernance is how a window governs Karpenter.
type KarpenterGovernance struct {
	// GovernDisruption opts the window in: lull writes (and alone
	// removes) its budget entry in the NodePools whose nodes the window
	// selects.
	GovernDisruption bool `json:"governDisruption"`
}

// GovernsKarpenter reports whether the window governs Karpenter's
// voluntary disruption of its nodes.
func (s *MaintenanceWindowSpec) GovernsKarpenter() bool {
	return s.Karpenter != nil && s.Karpenter.GovernDisruption
}

// Gates hold a window's nodes from starting while the cluster is unwell.
type Gates struct {
	// Alerts holds the window while matching alerts fire in Prometheus or
	// Alertmanager.
	// +optional
	Alerts *AlertsGate `json:"alerts,omitempty"`
	// BlockingPods: a node does not start while a pod matching any of
	// these selectors runs on it (kured's --blocking-pod-selector).
	// +kubebuilder:validation:MaxItems=16
	// +listType=atomic
	// +optional
	BlockingPods []metav1.LabelSelector `json:"blockingPods,omitempty"`
	// Recovery: every node this window finished must be Ready, and the
	// PodDisruptionBudgets that covered the pods evicted from it healthy
	// again, for a settle time, before the window's next node starts. A
	// node that comes back unwell halts the wave until it is well.
	// +optional
	Recovery *RecoveryGate `json:"recovery,omitempty"`
}

// AlertsAPI says which server the alerts gate asks.
// +kubebuilder:validation:Enum=Prometheus;Alertmanager
type AlertsAPI string

const (
	// AlertsPrometheus: GET <url>/api/v1/alerts.
	AlertsPrometheus AlertsAPI = "Prometheus"
	// AlertsAlertmanager: GET <url>/api/v2/alerts (active alerts, not
	// silenced, not inhibited).
	AlertsAlertmanager AlertsAPI = "Alertmanager"
)

// AlertsGate asks Prometheus or Alertmanager which alerts fire.
type AlertsGate struct {
	// URL of the server, such as http://prometheus.monitoring:9090.
	// +kubebuilder:validation:MaxLength=2048
	// +kubebuilder:validation:XValidation:rule=`self.matches(r'^https?://[^/?#@\s]+(/[^?#\s]*)?$')`,message="url must be an http:// or https:// URL without credentials, query or fragment, such as http://prometheus.monitoring:9090"
	// +required
	URL string `json:"url"`
	// API: Prometheus (default) or Alertmanager.
	// +kubebuilder:default=Prometheus
	// +optional
	API AlertsAPI `json:"api,omitempty"`
	// SecretName names a Secret in lull's configuration namespace
	// (lull-configs; lull-drainer's --config-namespace) with the
	// credentials: key token (a bearer token), or keys username and
	// password (basic auth), and key ca.crt (PEM) to trust for https. The
	// Secret must carry the label lull.dev/alerts-credentials: "true", so
	// that a window cannot send another Secret's token to its URL.
	// +kubebuilder:validation:MaxLength=253
	// +optional
	SecretName string `json:"secretName,omitempty"`
	// Matchers select the alerts that hold the window; every matcher must
	// match. PromQL label matchers: alertname="NodeDown",
	// severity=~"critical|page", team!="dev". None: every alert holds.
	// +kubebuilder:validation:MaxItems=16
	// +kubebuilder:validation:items:MaxLength=512
	// +kubebuilder:validation:items:XValidation:rule=`self.matches(r'^\s*[a-zA-Z_][a-zA-Z0-9_]*\s*(=|!=|=~|!~)\s*"([^"\\]|\\.)*"\s*$')`,message=`a matcher is a label name, an operator (=, !=, =~ or !~) and a double-quoted value, such as severity="critical"`
	// +listType=atomic
	// +optional
	Matchers []string `json:"matchers,omitempty"`
	// IgnoreAlerts are alert names (regular expressions matching the whole
	// name) that never hold the window, whatever the matchers say (kured's
	// --alert-filter-regexp).
	// +kubebuilder:validation:MaxItems=32
	// +kubebuilder:validation:items:MaxLength=256
	// +listType=atomic
	// +optional
	IgnoreAlerts []string `json:"ignoreAlerts,omitempty"`
	// FiringOnly: only firing alerts hold; pending ones (Prometheus alerts
	// whose for: has not elapsed yet) do not (kured's --alert-firing-only).
	// +optional
	FiringOnly bool `json:"firingOnly,omitempty"`
	// Period is how often lull asks: a Go duration from 5s to 10m, default 30s.
	// +kubebuilder:validation:XValidation:rule="!(size(self) <= 20 && self.matches('^[-+]?(0|(([0-9]{1,6}([.][0-9]*)?|[.][0-9]{1,9})(ns|us|µs|ms|s|m|h))+)$')) || (duration(self) >= duration('5s') && duration(self) <= duration('10m'))",message="period must be from 5s to 10m, such as 30s"
	// +optional
	Period *Duration `json:"period,omitempty"`
}

// SilenceNodeName in a silence matcher's value stands for the name of the
// node lull takes down.
const SilenceNodeName = "$(NODE_NAME)"

// Defaults and bounds of silences.
const (
	DefaultSilenceDuration = 10 * time.Minute
	// DefaultSilenceMatcher is the silence's matcher when none is given.
	DefaultSilenceMatcher = `node="` + SilenceNodeName + `"`
)

// Silences says where and how lull silences the alerts of the nodes it
// takes down on purpose.
type Silences struct {
	// URL of the Alertmanager (its API, /api/v2 below it), such as
	// http://alertmanager.monitoring:9093.
	// +kubebuilder:validation:MaxLength=2048
	// +kubebuilder:validation:XValidation:rule=`self.matches(r'^https?://[^/?#@\s]+(/[^?#\s]*)?$')`,message="url must be an http:// or https:// URL without credentials, query or fragment, such as http://alertmanager.monitoring:9093"
	// +required
	URL string `json:"url"`
	// SecretName names a Secret in lull's configuration namespace with
	// the credentials, bound exactly as an alerts gate's are: the label
	// lull.dev/alerts-credentials: "true" and its url (and insecure-http
	// for plain http) name where they may be sent.
	// +kubebuilder:validation:MaxLength=253
	// +optional
	SecretName string `json:"secretName,omitempty"`
	// Matchers of the silence, all of which an alert must match to be
	// silenced, in PromQL's syntax; $(NODE_NAME) in a value stands for
	// the node's name (escaped as a regular expression in =~ and !~). At
	// least one must be an equality matcher naming the node, the name not
	// run into other letters, digits, dots or dashes (node="$(NODE_NAME)",
	// instance="$(NODE_NAME):9100"; not node="$(NODE_NAME)0", which names
	// node-10 for node-1), so that a silence never reaches past its node.
	// Default: node="$(NODE_NAME)".
	// +kubebuilder:validation:MaxItems=16
	// +kubebuilder:validation:items:MaxLength=512
	// +kubebuilder:validation:items:XValidation:rule=`self.matches(r'^\s*[a-zA-Z_][a-zA-Z0-9_]*\s*(=|!=|=~|!~)\s*"([^"\\]|\\.)*"\s*$')`,message=`a matcher is a label name, an operator (=, !=, =~ or !~) and a double-quoted value, such as node="$(NODE_NAME)"`
	// +kubebuilder:validation:XValidation:rule=`size(self) == 0 || self.exists(m, m.matches(r'^\s*[a-zA-Z_][a-zA-Z0-9_]*\s*=\s*"(([^"\\]|\\.)*[^a-z0-9.\-"\\])?\$\(NODE_NAME\)([^a-z0-9.\-"\\]([^"\\]|\\.)*)?"\s*$'))`,message=`at least one matcher must be an equality matcher naming the node, such as node="$(NODE_NAME)" or instance="$(NODE_NAME):9100", the name not run into other letters, digits, dots or dashes: a silence reaches no further than its node`
	// +listType=atomic
	// +optional
	Matchers []string `json:"matchers,omitempty"`
	// Duration is how long the silence lasts past lull's last extension
	// (lull extends it while it holds the node down): if lull stops, the
	// silence expires at most this long after. A Go duration from 1m to
	// 24h, default 10m.
	// +kubebuilder:validation:XValidation:rule="!(size(self) <= 20 && self.matches('^[-+]?(0|(([0-9]{1,6}([.][0-9]*)?|[.][0-9]{1,9})(ns|us|µs|ms|s|m|h))+)$')) || (duration(self) >= duration('1m') && duration(self) <= duration('24h'))",message="duration must be from 1m to 24h, such as 10m"
	// +optional
	Duration *Duration `json:"duration,omitempty"`
}

// SilenceMatchers are the matchers as written, or the default.
func (s *Silences) SilenceMatchers() []string {
	if len(s.Matchers) == 0 {
		return []string{DefaultSilenceMatcher}
	}
	return s.Matchers
}

// SilenceDuration is how long a silence lasts past its last extension.
func (s *Silences) SilenceDuration() time.Duration {
	if s == nil || s.Duration == nil || s.Duration.Duration <= 0 || s.Duration.Invalid != "" {
		return DefaultSilenceDuration
	}
	// Admission keeps it from 1m to 24h; an object written past it (an
	// older CRD) is held to the same bounds.
	return min(max(s.Duration.Duration, time.Minute), 24*time.Hour)
}

// RecoveryGate waits for the nodes a window finished to be well.
type RecoveryGate struct {
	// SettleTime is how long a finished node, and the budgets of the pods
	// evicted from it, must stay well before the next node starts: a Go
	// duration from 0s to 24h, default 2m.
	// +kubebuilder:validation:XValidation:rule="!(size(self) <= 20 && self.matches('^[-+]?(0|(([0-9]{1,6}([.][0-9]*)?|[.][0-9]{1,9})(ns|us|µs|ms|s|m|h))+)$')) || (duration(self) >= duration('0s') && duration(self) <= duration('24h'))",message="settleTime must be from 0s to 24h, such as 2m"
	// +optional
	SettleTime *Duration `json:"settleTime,omitempty"`
}

// Defaults of the gates.
const (
	DefaultAlertsPeriod    = 30 * time.Second
	DefaultRecoverySettle  = 2 * time.Minute
	AlertsCredentialsLabel = "lull.dev/alerts-credentials" //nolint:gosec // G101: a label key that marks a Secret, not a credential
	// AlertsCredentialsURLKey is the key of an alerts credentials
	// Secret naming where its credentials may be sent: a server, or a
	// path prefix of one (https://monitoring.example/prometheus).
	AlertsCredentialsURLKey = "url"
	// AlertsCredentialsInsecureKey set to "true" lets the credentials
	// go over plain http to that server.
	AlertsCredentialsInsecureKey = "insecure-http"
)

// AlertsPeriod is how often the alerts gate asks.
func (g *AlertsGate) AlertsPeriod() time.Duration {
	if g == nil || g.Period == nil || g.Period.Duration <= 0 {
		return DefaultAlertsPeriod
	}
	return g.Period.Duration
}

// Settle is the recovery gate's settle time.
func (g *RecoveryGate) Settle() time.Duration {
	if g == nil || g.SettleTime == nil || g.SettleTime.Invalid != "" {
		return DefaultRecoverySettle
	}
	return g.SettleTime.Duration
}

// Override replaces a window's strategy until a time.
type Override struct {
	// Strategy in force until Until: Permissive or Restrictive.
	// +required
	Strategy OverrideStrategy `json:"strategy"`
	// Until is when the override expires and the window's own strategy
	// applies again.
	// Written as RFC 3339 with upper-case T and Z (2026-11-25T18:00:00Z): the
	// API server would accept lower case, which lull cannot read.
	// +required
	// +kubebuilder:validation:Type=string
	// +kubebuilder:validation:Format=date-time
	// +kubebuilder:validation:Pattern=`^[0-9]{4}-[0-9]{2}-[0-9]{2}T[0-9]{2}:[0-9]{2}:[0-9]{2}([.][0-9]+)?(Z|[+-][0-9]{2}:[0-9]{2})$`
	Until metav1.Time `json:"until"`
	// Reason is shown in status and events, e.g. a ticket number.
	// +kubebuilder:validation:MaxLength=256
	// +optional
	Reason string `json:"reason,omitempty"`
}

// WindowState is a window's state at one moment.
type WindowState string

const (
	// StatePermitted: material changes may start now.
	StatePermitted WindowState = "Permitted"
	// StateRestricted: material changes may not start now.
	StateRestricted WindowState = "Restricted"
)

// Condition types of a MaintenanceWindow's status.
const (
	// WindowConditionReady: the spec is valid and a window can be computed.
	WindowConditionReady = "Ready"
	// WindowConditionPermitted: material changes may start now. Its
	// lastTransitionTime is when lull saw the window open (or close).
	WindowConditionPermitted = "Permitted"
	// WindowConditionAlertsQuiet: no alert the alerts gate matches fires
	// (False: some fire, or the server could not be asked).
	WindowConditionAlertsQuiet = "AlertsQuiet"
	// WindowConditionRecovered: every node the window finished is back to
	// health (False: one is settling or came back unwell).
	WindowConditionRecovered = "Recovered"
)

// CurrentWindow is the state now and the interval it holds for.
type CurrentWindow struct {
	// State: Permitted or Restricted.
	State WindowState `json:"state"`
	// Reason explains the state: schedule, excluded, override, restrictive, invalid, no window.
	// +optional
	Reason string `json:"reason,omitempty"`
	// Since is when the state began, when known within the search horizon.
	// +optional
	Since *metav1.Time `json:"since,omitempty"`
	// Until is the next transition; absent when the state holds indefinitely.
	// +optional
	Until *metav1.Time `json:"until,omitempty"`
}

// Period is a half-open interval [start, end).
type Period struct {
	Start metav1.Time `json:"start"`
	// End is absent for a period without end (strategy Permissive).
	// +optional
	End *metav1.Time `json:"end,omitempty"`
}

// MaintenanceWindowStatus is computed by lull-drainer's window controller.
type MaintenanceWindowStatus struct {
	// ObservedGeneration is the generation the status was computed for.
	// +optional
	ObservedGeneration int64 `json:"observedGeneration,omitempty"`
	// Conditions: Ready (the spec is valid and a window is computable) and
	// Permitted (changes may start now).
	// +listType=map
	// +listMapKey=type
	// +optional
	Conditions []metav1.Condition `json:"conditions,omitempty"`
	// Current state.
	// +optional
	Current *CurrentWindow `json:"current,omitempty"`
	// Next permitted period (the current one when permitted now).
	// +optional
	Next *Period `json:"next,omitempty"`
	// Upcoming permitted periods after Next.
	// +listType=atomic
	// +optional
	Upcoming []Period `json:"upcoming,omitempty"`
	// SelectedNodes is how many nodes the selector selects.
	// +optional
	SelectedNodes int32 `json:"selectedNodes,omitempty"`
	// NodesInMaintenance is how many selected nodes lull has cordoned or is draining.
	// +optional
	NodesInMaintenance int32 `json:"nodesInMaintenance,omitempty"`
	// NodesWaiting is how many selected nodes have a request waiting.
	// +optional
	NodesWaiting int32 `json:"nodesWaiting,omitempty"`
	// Alerts is what the alerts gate found when it last asked; the
	// AlertsQuiet condition says what it means for the window.
	// +optional
	Alerts *AlertsStatus `json:"alerts,omitempty"`
}

// AlertsStatus is the alerts gate's last answer.
type AlertsStatus struct {
	// CheckedAt is when lull last asked (successfully or not). A gate not
	// asked for three periods holds, as an unanswered one does.
	CheckedAt metav1.Time `json:"checkedAt"`
	// Firing are the matching alerts that fired then (at most 10).
	// +kubebuilder:validation:MaxItems=10
	// +listType=atomic
	// +optional
	Firing []string `json:"firing,omitempty"`
}

// MaintenanceWindow says when material changes may start on the nodes it selects.
//
// +kubebuilder:object:root=true
// +kubebuilder:subresource:status
// +kubebuilder:resource:scope=Cluster,shortName=mw,categories=lull
// +kubebuilder:printcolumn:name="Strategy",type=string,JSONPath=`.spec.strategy`
// +kubebuilder:printcolumn:name="Permitted",type=string,JSONPath=`.status.conditions[?(@.type=="Permitted")].status`
// +kubebuilder:printcolumn:name="Next-Start",type=string,JSONPath=`.status.next.start`
// +kubebuilder:printcolumn:name="Next-End",type=string,JSONPath=`.status.next.end`
// +kubebuilder:printcolumn:name="Ready",type=string,JSONPath=`.status.conditions[?(@.type=="Ready")].status`,priority=1
// +kubebuilder:printcolumn:name="Age",type=date,JSONPath=`.metadata.creationTimestamp`
// +kubebuilder:printcolumn:name="Message",type=string,JSONPath=`.status.conditions[?(@.type=="Permitted")].message`,priority=1
type MaintenanceWindow struct {
	metav1.TypeMeta   `json:",inline"`
	metav1.ObjectMeta `json:"metadata,omitempty"`

	Spec   MaintenanceWindowSpec   `json:"spec"`
	Status MaintenanceWindowStatus `json:"status,omitempty"`
}

// MaintenanceWindowList is a list of MaintenanceWindows.
//
// +kubebuilder:object:root=true
type MaintenanceWindowList struct {
	metav1.TypeMeta `json:",inline"`
	metav1.ListMeta `json:"metadata,omitempty"`
	Items           []MaintenanceWindow `json:"items"`
}

func init() {
	register(&MaintenanceWindow{}, &MaintenanceWindowList{})
}
