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

// Frequency is the period of a recurrence.
// +kubebuilder:validation:Enum=Daily;Weekly;Monthly;Yearly
type Frequency string

const (
	Daily   Frequency = "Daily"
	Weekly  Frequency = "Weekly"
	Monthly Frequency = "Monthly"
	Yearly  Frequency = "Yearly"
)

// Weekday names a day of the week.
// +kubebuilder:validation:Enum=Monday;Tuesday;Wednesday;Thursday;Friday;Saturday;Sunday
type Weekday string

const (
	Monday    Weekday = "Monday"
	Tuesday   Weekday = "Tuesday"
	Wednesday Weekday = "Wednesday"
	Thursday  Weekday = "Thursday"
	Friday    Weekday = "Friday"
	Saturday  Weekday = "Saturday"
	Sunday    Weekday = "Sunday"
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
	AlertsCredentialsLabel = "lull.dev/alerts-credentials"
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

// Schedule is a recurring window in local wall time.
// +kubebuilder:validation:XValidation:rule="has(self.recurrence) != has(self.rrule)",message="set exactly one of schedule.recurrence and schedule.rrule"
type Schedule struct {
	// TimeZone is an IANA zone name such as Europe/Berlin. Default UTC.
	// +kubebuilder:default=UTC
	// +kubebuilder:validation:MaxLength=64
	// +optional
	TimeZone string `json:"timeZone,omitempty"`

	// Recurrence says on which local dates a window starts.
	// +optional
	Recurrence *Recurrence `json:"recurrence,omitempty"`

	// RRule says on which local dates a window starts as an RFC 5545 RRULE
	// (e.g. "FREQ=WEEKLY;BYDAY=SA,SU"), read as the RFC reads it, with the
	// anchor as its DTSTART: FREQ DAILY, WEEKLY, MONTHLY or YEARLY,
	// INTERVAL, COUNT or UNTIL (the window ends), BYMONTH, BYWEEKNO,
	// BYYEARDAY, BYMONTHDAY, BYDAY, BYSETPOS, WKST. A rule lull refuses
	// (sub-daily, BYHOUR, ...) makes the window invalid, so restrictive;
	// its Ready condition says why (docs/windows.md, "What an RRULE may say").
	// +kubebuilder:validation:MaxLength=256
	// +optional
	RRule string `json:"rrule,omitempty"`

	// StartTime is the local wall time a window starts, "HH:MM" (24 h).
	// +kubebuilder:validation:Pattern=`^([01][0-9]|2[0-3]):[0-5][0-9]$`
	// +required
	StartTime string `json:"startTime"`

	// Duration is the elapsed time a window stays open (so a window across a
	// daylight-saving change is still this long). At most 31 days.
	// +kubebuilder:validation:XValidation:rule="!(size(self) <= 20 && self.matches('^[-+]?(0|(([0-9]{1,6}([.][0-9]*)?|[.][0-9]{1,9})(ns|us|µs|ms|s|m|h))+)$')) || (duration(self) > duration('0s') && duration(self) <= duration('744h'))",message="duration must be more than 0 and at most 744h (31 days), such as 4h"
	// +required
	Duration Duration `json:"duration"`

	// Anchor is the local date ("YYYY-MM-DD") intervals count from: with
	// interval 2, Weekly windows fall in the anchor's week and every second
	// week after and before it. Default 2000-01-03 (a Monday). It is an
	// RRULE's DTSTART: the parts the rule leaves out come from it, and a
	// rule with COUNT or UNTIL starts on it.
	// +kubebuilder:validation:XValidation:rule="self.matches('^[0-9]{4}-[0-9]{2}-[0-9]{2}$')",message="must be a date YYYY-MM-DD such as 2026-12-19"
	// +kubebuilder:validation:XValidation:rule="!self.matches('^[0-9]{4}-[0-9]{2}-[0-9]{2}$') || (int(self.substring(5,7)) >= 1 && int(self.substring(5,7)) <= 12 && int(self.substring(8,10)) >= 1 && int(self.substring(8,10)) <= [31, 28, 31, 30, 31, 30, 31, 31, 30, 31, 30, 31][int(self.substring(5,7)) - 1] + (int(self.substring(5,7)) == 2 && int(self.substring(0,4)) % 4 == 0 && (int(self.substring(0,4)) % 100 != 0 || int(self.substring(0,4)) % 400 == 0) ? 1 : 0))",message="must be a date that exists (month 01-12, a day the month has: 2026-02-28, not 2026-02-30)"
	// +kubebuilder:validation:MaxLength=10
	// +optional
	Anchor string `json:"anchor,omitempty"`

	// Exclude lists periods in which the window is never open (holiday
	// freezes), as local dates or as instants.
	// +kubebuilder:validation:MaxItems=64
	// +listType=atomic
	// +optional
	Exclude []Exclusion `json:"exclude,omitempty"`
}

// Recurrence is a typed recurrence rule.
// +kubebuilder:validation:XValidation:rule="self.frequency != 'Weekly' || (has(self.daysOfWeek) && size(self.daysOfWeek) > 0)",message="a Weekly recurrence needs daysOfWeek"
// +kubebuilder:validation:XValidation:rule="!(self.frequency in ['Monthly','Yearly']) || (has(self.daysOfMonth) && size(self.daysOfMonth) > 0) || (has(self.weekdays) && size(self.weekdays) > 0)",message="a Monthly or Yearly recurrence needs daysOfMonth or weekdays"
// +kubebuilder:validation:XValidation:rule="self.frequency != 'Yearly' || (has(self.months) && size(self.months) > 0)",message="a Yearly recurrence needs months"
// +kubebuilder:validation:XValidation:rule="self.frequency == 'Yearly' || !has(self.months)",message="months is only valid with frequency Yearly"
// +kubebuilder:validation:XValidation:rule="self.frequency in ['Monthly','Yearly'] || (!has(self.daysOfMonth) && !has(self.weekdays))",message="daysOfMonth and weekdays are only valid with frequency Monthly or Yearly"
// +kubebuilder:validation:XValidation:rule="self.frequency == 'Weekly' || !has(self.daysOfWeek)",message="daysOfWeek is only valid with frequency Weekly"
type Recurrence struct {
	// Frequency: Daily, Weekly, Monthly or Yearly.
	// +required
	Frequency Frequency `json:"frequency"`

	// Interval: every Nth day/week/month/year counted from the anchor. Default 1.
	// +kubebuilder:validation:Minimum=1
	// +kubebuilder:validation:Maximum=1000
	// +optional
	Interval int32 `json:"interval,omitempty"`

	// DaysOfWeek for Weekly.
	// +kubebuilder:validation:MaxItems=7
	// +listType=set
	// +optional
	DaysOfWeek []Weekday `json:"daysOfWeek,omitempty"`

	// DaysOfMonth for Monthly and Yearly: 1..31, or -1..-31 counting from the
	// month's end (-1 is the last day). A month without that date is skipped.
	// +kubebuilder:validation:MaxItems=31
	// +kubebuilder:validation:items:XValidation:rule="(self >= 1 && self <= 31) || (self >= -31 && self <= -1)",message="daysOfMonth entries must be 1..31 or -31..-1"
	// +listType=set
	// +optional
	DaysOfMonth []int32 `json:"daysOfMonth,omitempty"`

	// Weekdays for Monthly and Yearly: ordinal weekdays such as the last
	// Monday or the second Tuesday of the month.
	// +kubebuilder:validation:MaxItems=35
	// +listType=atomic
	// +optional
	Weekdays []OrdinalWeekday `json:"weekdays,omitempty"`

	// Months for Yearly: 1..12.
	// +kubebuilder:validation:MaxItems=12
	// +kubebuilder:validation:items:Minimum=1
	// +kubebuilder:validation:items:Maximum=12
	// +listType=set
	// +optional
	Months []int32 `json:"months,omitempty"`
}

// OrdinalWeekday is the Nth given weekday of a month.
type OrdinalWeekday struct {
	// Ordinal: 1..5 from the start of the month, -1..-5 from its end (-1 is
	// the last). A month without a fifth one is skipped.
	// +kubebuilder:validation:XValidation:rule="(self >= 1 && self <= 5) || (self >= -5 && self <= -1)",message="ordinal must be 1..5 or -5..-1 (-1 is the last)"
	// +required
	Ordinal int32 `json:"ordinal"`
	// Day of the week.
	// +required
	Day Weekday `json:"day"`
}

// Exclusion is a period in which a window is never open.
// +kubebuilder:validation:XValidation:rule="(has(self.startDate) && has(self.endDate) && !has(self.start) && !has(self.end)) || (!has(self.startDate) && !has(self.endDate) && has(self.start) && has(self.end))",message="an exclusion needs either startDate and endDate (local dates) or start and end (instants)"
// +kubebuilder:validation:XValidation:rule="!has(self.startDate) || self.startDate <= self.endDate",message="exclusion endDate must not be before startDate"
// +kubebuilder:validation:XValidation:rule="!has(self.start) || timestamp(self.start) < timestamp(self.end)",message="exclusion end must be after start"
type Exclusion struct {
	// StartDate and EndDate are local dates ("YYYY-MM-DD"), both included,
	// in the schedule's time zone: whole local days.
	// +kubebuilder:validation:XValidation:rule="self.matches('^[0-9]{4}-[0-9]{2}-[0-9]{2}$')",message="must be a date YYYY-MM-DD such as 2026-12-19"
	// +kubebuilder:validation:XValidation:rule="!self.matches('^[0-9]{4}-[0-9]{2}-[0-9]{2}$') || (int(self.substring(5,7)) >= 1 && int(self.substring(5,7)) <= 12 && int(self.substring(8,10)) >= 1 && int(self.substring(8,10)) <= [31, 28, 31, 30, 31, 30, 31, 31, 30, 31, 30, 31][int(self.substring(5,7)) - 1] + (int(self.substring(5,7)) == 2 && int(self.substring(0,4)) % 4 == 0 && (int(self.substring(0,4)) % 100 != 0 || int(self.substring(0,4)) % 400 == 0) ? 1 : 0))",message="must be a date that exists (month 01-12, a day the month has: 2026-02-28, not 2026-02-30)"
	// +kubebuilder:validation:MaxLength=10
	// +optional
	StartDate string `json:"startDate,omitempty"`
	// +kubebuilder:validation:XValidation:rule="self.matches('^[0-9]{4}-[0-9]{2}-[0-9]{2}$')",message="must be a date YYYY-MM-DD such as 2026-12-19"
	// +kubebuilder:validation:XValidation:rule="!self.matches('^[0-9]{4}-[0-9]{2}-[0-9]{2}$') || (int(self.substring(5,7)) >= 1 && int(self.substring(5,7)) <= 12 && int(self.substring(8,10)) >= 1 && int(self.substring(8,10)) <= [31, 28, 31, 30, 31, 30, 31, 31, 30, 31, 30, 31][int(self.substring(5,7)) - 1] + (int(self.substring(5,7)) == 2 && int(self.substring(0,4)) % 4 == 0 && (int(self.substring(0,4)) % 100 != 0 || int(self.substring(0,4)) % 400 == 0) ? 1 : 0))",message="must be a date that exists (month 01-12, a day the month has: 2026-02-28, not 2026-02-30)"
	// +kubebuilder:validation:MaxLength=10
	// +optional
	EndDate string `json:"endDate,omitempty"`
	// Start and End are instants; the range is half-open [start, end).
	// Written as RFC 3339 with upper-case T and Z (2026-11-25T18:00:00Z): the
	// API server would accept lower case, which lull cannot read.
	// +optional
	// +kubebuilder:validation:Type=string
	// +kubebuilder:validation:Format=date-time
	// +kubebuilder:validation:Pattern=`^[0-9]{4}-[0-9]{2}-[0-9]{2}T[0-9]{2}:[0-9]{2}:[0-9]{2}([.][0-9]+)?(Z|[+-][0-9]{2}:[0-9]{2})$`
	Start *metav1.Time `json:"start,omitempty"`
	// +optional
	// +kubebuilder:validation:Type=string
	// +kubebuilder:validation:Format=date-time
	// +kubebuilder:validation:Pattern=`^[0-9]{4}-[0-9]{2}-[0-9]{2}T[0-9]{2}:[0-9]{2}:[0-9]{2}([.][0-9]+)?(Z|[+-][0-9]{2}:[0-9]{2})$`
	End *metav1.Time `json:"end,omitempty"`
	// Reason is shown in status, e.g. "year-end freeze".
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
	SchemeBuilder.Register(&MaintenanceWindow{}, &MaintenanceWindowList{})
}
