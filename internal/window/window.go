package window

import (
	"fmt"
	"time"
)

// Forever stands for "no end" in an Interval. It is never reported as a
// time: status and metrics map it to "indefinitely".
var Forever = time.Date(9999, time.December, 31, 0, 0, 0, 0, time.UTC)

// Interval is a half-open period [Start, End).
type Interval struct {
	Start, End time.Time
}

// Contains reports whether t lies in [Start, End).
func (iv Interval) Contains(t time.Time) bool {
	return !t.Before(iv.Start) && t.Before(iv.End)
}

// Unbounded reports whether the interval has no end.
func (iv Interval) Unbounded() bool { return !iv.End.Before(Forever) }

// Reason says why a window is in its state.
type Reason string

const (
	// ReasonSchedule: inside (or, when restricted, outside) a scheduled window.
	ReasonSchedule Reason = "Schedule"
	// ReasonExcluded: a scheduled window is cut by an exclusion.
	ReasonExcluded Reason = "Excluded"
	// ReasonOverride: a temporary override is in force.
	ReasonOverride Reason = "Override"
	// ReasonPermissive: strategy Permissive.
	ReasonPermissive Reason = "Permissive"
	// ReasonRestrictive: strategy Restrictive.
	ReasonRestrictive Reason = "Restrictive"
	// ReasonInvalid: the spec is invalid; an invalid window is restrictive.
	ReasonInvalid Reason = "Invalid"
	// ReasonNoWindow: no permitted period lies within the search horizon
	// (Detail says how a rule with COUNT or UNTIL ends; Result.Ended when
	// it has).
	ReasonNoWindow Reason = "NoWindow"
	// ReasonNoWindows: a set of windows is empty (the caller's default applies).
	ReasonNoWindows Reason = "NoWindows"
)

// Result is a window's state at one instant.
type Result struct {
	// Permitted reports whether material changes may start now.
	Permitted bool
	// Reason says why; Detail adds the exclusion or override reason, or
	// the error for an invalid spec.
	Reason Reason
	Detail string
	// Since is when the current state began: the start of the merged
	// permitted period, the end of the last one, or the expiry of an
	// override that decided the state before. It is zero when that is not
	// known: the state began before the search horizon (a schedule that
	// never closes), with a strategy that always held, or with an override
	// (whose start is not recorded).
	Since time.Time
	// Until is the next transition; Forever when the state holds
	// indefinitely or at least beyond the horizon.
	Until time.Time
	// Next is the current permitted period when Permitted, otherwise the
	// next one; valid only when HasNext. Next.End is Forever for a period
	// that never closes. When Permitted, Next.Start equals Since, except
	// that a start which is not known (Since zero) is reported as the
	// instant evaluated.
	Next    Interval
	HasNext bool
	// OverrideUntil is when an override in force expires (Reason Override).
	OverrideUntil time.Time
	// Ended: the schedule's RRULE (COUNT or UNTIL) has ended, so no window
	// opens again (Reason NoWindow; Detail says how it ended).
	Ended bool
}

// Message is a one-line explanation for status and events.
func (r Result) Message() string {
	switch r.Reason {
	case ReasonExcluded:
		return fmt.Sprintf("excluded by %q", r.Detail)
	case ReasonOverride:
		verb := "opened"
		if !r.Permitted {
			verb = "frozen"
		}
		if r.Detail != "" {
			return fmt.Sprintf("%s by override until %s: %s", verb, fmtTime(r.OverrideUntil), r.Detail)
		}
		return fmt.Sprintf("%s by override until %s", verb, fmtTime(r.OverrideUntil))
	case ReasonInvalid:
		return "invalid spec (treated as restrictive): " + r.Detail
	case ReasonNoWindow:
		if r.Ended {
			return "no window opens again: " + r.Detail
		}
		if r.Detail != "" {
			return "no permitted window within the search horizon: " + r.Detail
		}
		return "no permitted window within the search horizon"
	case ReasonRestrictive:
		return "strategy Restrictive: changes never start"
	case ReasonPermissive:
		return "strategy Permissive: changes may always start"
	case ReasonNoWindows:
		return "no window selects the node"
	}
	if r.Permitted && !r.Until.Before(Forever) {
		return "inside a scheduled window that never closes (its occurrences overlap or touch)"
	}
	if r.Permitted {
		return "inside a scheduled window until " + fmtTime(r.Until)
	}
	if r.HasNext {
		return "outside the schedule; next window starts " + fmtTime(r.Next.Start)
	}
	return "outside the schedule"
}

func fmtTime(t time.Time) string {
	if !t.Before(Forever) {
		return "indefinitely"
	}
	return t.UTC().Format(time.RFC3339)
}

// SecondsUntilPermitted is the value of lull_window_seconds_until_permitted:
// 0 when permitted now, -1 when restricted indefinitely, -2 when no window
// can be computed (invalid spec or nothing within the horizon).
func (r Result) SecondsUntilPermitted(now time.Time) float64 {
	switch {
	case r.Permitted:
		return 0
	case r.Reason == ReasonInvalid || r.Reason == ReasonNoWindow:
		return -2
	case !r.HasNext:
		return -1
	}
	return r.Next.Start.Sub(now).Seconds()
}

// SecondsRemaining is the value of lull_window_permitted_remaining_seconds:
// the seconds left in the current permitted period, 0 when restricted, -1
// when the period never closes.
func (r Result) SecondsRemaining(now time.Time) float64 {
	switch {
	case !r.Permitted:
		return 0
	case !r.Until.Before(Forever):
		return -1
	}
	return r.Until.Sub(now).Seconds()
}

// Window is a compiled MaintenanceWindow spec. It is immutable and safe for
// concurrent use.
type Window struct {
	strategy string
	override *override
	sched    *schedule
	horizon  time.Duration
	invalid  error
}

type override struct {
	permissive bool
	until      time.Time
	reason     string
}

// Invalid returns a Window that is always restrictive and reports err; it
// is what callers evaluate for a spec that did not compile (fail closed).
func Invalid(err error) *Window { return &Window{invalid: err} }

// Evaluate returns the window's state at now.
func (w *Window) Evaluate(now time.Time) Result {
	if w.invalid != nil {
		return Result{Reason: ReasonInvalid, Detail: w.invalid.Error(), Until: Forever}
	}
	next, ok := w.nextPermitted(now)
	res := Result{Next: next, HasNext: ok}
	if o := w.override; o != nil && now.Before(o.until) {
		res.Permitted, res.Reason, res.Detail, res.OverrideUntil = o.permissive, ReasonOverride, o.reason, o.until
	} else {
		res.Permitted = ok && !next.Start.After(now)
		res.Reason, res.Detail, res.Since = w.baseState(now, res.Permitted, next, ok)
		res.Ended = res.Reason == ReasonNoWindow && w.sched.ended(now)
	}
	switch {
	case res.Permitted:
		res.Until = next.End
	case ok:
		res.Until = next.Start
	default:
		res.Until = Forever
	}
	if res.Permitted && next.Start.IsZero() {
		res.Next.Start = now
	}
	return res
}

// baseState is the reason and start of the state at now when no override
// is in force; permitted and next are what nextPermitted found.
func (w *Window) baseState(now time.Time, permitted bool, next Interval, ok bool) (Reason, string, time.Time) {
	switch {
	case w.strategy == "Permissive":
		return ReasonPermissive, "", next.Start
	case w.strategy == "Restrictive":
		return ReasonRestrictive, "", w.afterOverride(time.Time{}, false, now)
	case permitted:
		return ReasonSchedule, "", next.Start
	}
	since, _ := w.sched.lastEndBefore(now, now.Add(-w.horizon))
	since = w.afterOverride(since, false, now)
	if !ok {
		return ReasonNoWindow, w.sched.endDetail(now), since
	}
	if e, in := w.sched.excludedAt(now); in {
		return ReasonExcluded, e.reason, since
	}
	return ReasonSchedule, "", since
}

// afterOverride corrects since, the start of a state (permitted or not)
// that holds at now, for an override that expired by now: the override
// decided the state until it expired, so a state other than the
// override's began at the expiry, and the override's own state began when
// the override did, which is not recorded (zero). A state that began after
// the expiry keeps its start. A start not known (zero) stays unknown when
// the override expired before the search horizon: the state may have begun
// between the two.
func (w *Window) afterOverride(since time.Time, permitted bool, now time.Time) time.Time {
	o := w.override
	if o == nil || now.Before(o.until) || since.After(o.until) {
		return since
	}
	if o.permissive == permitted || (since.IsZero() && o.until.Before(now.Add(-w.horizon))) {
		return time.Time{}
	}
	return o.until
}

// nextPermitted returns the first permitted period that ends after t, with
// overrides applied; its Start may lie before t, and is zero when it is not
// known (see Result.Since).
func (w *Window) nextPermitted(t time.Time) (Interval, bool) {
	if w.invalid != nil {
		return Interval{}, false
	}
	o := w.override
	if o == nil || !t.Before(o.until) {
		iv, ok := w.basePermitted(t)
		if ok {
			iv.Start = w.afterOverride(iv.Start, true, t)
		}
		return iv, ok
	}
	if o.permissive {
		// Opened by the override, whose start is not recorded; the
		// schedule may keep it open past the expiry.
		iv := Interval{End: o.until}
		if base, ok := w.basePermitted(o.until); ok && !base.Start.After(o.until) {
			iv.End = base.End
		}
		return iv, true
	}
	base, ok := w.basePermitted(o.until)
	if ok {
		base.Start = w.afterOverride(base.Start, true, o.until)
	}
	return base, ok
}

// basePermitted is nextPermitted without the override. Strategy
// Permissive has always been open (zero Start).
func (w *Window) basePermitted(t time.Time) (Interval, bool) {
	switch w.strategy {
	case "Permissive":
		return Interval{End: Forever}, true
	case "Restrictive":
		return Interval{}, false
	}
	iv, ok := w.sched.pieceAfter(t, t.Add(w.horizon))
	if ok && !iv.Start.After(t) {
		// pieceAfter looks back only as far as one occurrence lasts; the
		// merged period may have begun earlier.
		iv.Start = w.sched.startOfPieceAt(t, t.Add(-w.horizon))
	}
	return iv, ok
}

// LongestPeriod bounds how long a permitted period lasts, with the
// periods that follow it without a gap: ok is false when no bound is
// known. A schedule whose occurrences never overlap or touch bounds it by
// an occurrence's duration; one whose occurrences may merge, strategy
// Permissive and a permissive override (its start is not recorded) are
// not bounded.
func (w *Window) LongestPeriod() (d time.Duration, ok bool) {
	switch {
	case w.override != nil && w.override.permissive:
		return 0, false
	case w.invalid != nil, w.strategy == "Restrictive":
		return 0, true
	case w.strategy == "Permissive", !w.sched.single:
		return 0, false
	}
	return w.sched.dur, true
}

// Upcoming returns up to n permitted periods, the first being the current
// or next one. A current period whose start is not known starts at now.
func (w *Window) Upcoming(now time.Time, n int) []Interval {
	var out []Interval
	t := now
	limit := now.Add(w.horizon)
	for len(out) < n && t.Before(limit) {
		iv, ok := w.nextPermitted(t)
		if !ok || iv.Start.After(limit) {
			break
		}
		if iv.Start.IsZero() {
			iv.Start = t
		}
		out = append(out, iv)
		if iv.Unbounded() {
			break
		}
		t = iv.End
	}
	return out
}
