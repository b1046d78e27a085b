package v1alpha1

import (
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
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
	// BYYEARDAY, BYMONTHDAY, BYDAY, BYSETPOS, WKST. Admission refuses a
	// rule of the wrong grammar, without FREQ, sub-daily, or with BYHOUR,
	// BYMINUTE, BYSECOND or DTSTART; a rule the window engine refuses
	// besides (a value out of range, a combination RFC 5545 forbids) makes
	// the window invalid, so restrictive, and its Ready condition says why
	// (docs/windows.md, "What an RRULE may say").
	// +kubebuilder:validation:MaxLength=256
	// +kubebuilder:validation:XValidation:rule="self.matches('(?i)^[[:space:]]*(RRULE:)?[[:space:]]*(FREQ[[:space:]]*=[[:space:]]*[A-Z]+|(INTERVAL|COUNT)[[:space:]]*=[[:space:]]*[0-9]+|UNTIL[[:space:]]*=[[:space:]]*[0-9]{8}(T[0-9]{6}Z?)?|WKST[[:space:]]*=[[:space:]]*(MO|TU|WE|TH|FR|SA|SU)|(BYMONTH|BYWEEKNO|BYYEARDAY|BYMONTHDAY|BYSETPOS)[[:space:]]*=[[:space:]]*[+-]?[0-9]+(,[+-]?[0-9]+)*|BYDAY[[:space:]]*=[[:space:]]*([+-]?[0-9]+)?(MO|TU|WE|TH|FR|SA|SU)(,([+-]?[0-9]+)?(MO|TU|WE|TH|FR|SA|SU))*|(BYHOUR|BYMINUTE|BYSECOND|DTSTART)[[:space:]]*=[^;]*)([[:space:]]*;[[:space:]]*(FREQ[[:space:]]*=[[:space:]]*[A-Z]+|(INTERVAL|COUNT)[[:space:]]*=[[:space:]]*[0-9]+|UNTIL[[:space:]]*=[[:space:]]*[0-9]{8}(T[0-9]{6}Z?)?|WKST[[:space:]]*=[[:space:]]*(MO|TU|WE|TH|FR|SA|SU)|(BYMONTH|BYWEEKNO|BYYEARDAY|BYMONTHDAY|BYSETPOS)[[:space:]]*=[[:space:]]*[+-]?[0-9]+(,[+-]?[0-9]+)*|BYDAY[[:space:]]*=[[:space:]]*([+-]?[0-9]+)?(MO|TU|WE|TH|FR|SA|SU)(,([+-]?[0-9]+)?(MO|TU|WE|TH|FR|SA|SU))*|(BYHOUR|BYMINUTE|BYSECOND|DTSTART)[[:space:]]*=[^;]*))*[[:space:]]*$')",message="rrule must be NAME=VALUE parts separated by ';', such as FREQ=WEEKLY;BYDAY=SA,SU: FREQ, INTERVAL and COUNT (whole numbers), UNTIL (20261231, 20261231T235900 or 20261231T235900Z), WKST (MO TU WE TH FR SA SU), BYMONTH, BYWEEKNO, BYYEARDAY, BYMONTHDAY and BYSETPOS (numbers separated by commas), BYDAY (days separated by commas, each with an optional ordinal: SA, 1MO, -1FR)"
	// +kubebuilder:validation:XValidation:rule="self.matches('(?i)(^|[;:])[[:space:]]*FREQ[[:space:]]*=')",message="rrule needs FREQ, such as FREQ=WEEKLY;BYDAY=SA"
	// +kubebuilder:validation:XValidation:rule="!self.matches('(?i)(^|[;:])[[:space:]]*FREQ[[:space:]]*=') || self.matches('(?i)(^|[;:])[[:space:]]*FREQ[[:space:]]*=[[:space:]]*(DAILY|WEEKLY|MONTHLY|YEARLY)[[:space:]]*(;|$)')",message="rrule FREQ must be DAILY, WEEKLY, MONTHLY or YEARLY: a window starts at most once a day, at schedule.startTime"
	// +kubebuilder:validation:XValidation:rule="!self.matches('(?i)(^|[;:])[[:space:]]*(BYHOUR|BYMINUTE|BYSECOND|DTSTART)[[:space:]]*=')",message="rrule must not have BYHOUR, BYMINUTE, BYSECOND or DTSTART: a window starts at schedule.startTime in schedule.timeZone, and the first day is schedule.anchor"
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
