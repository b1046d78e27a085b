package window

import (
	"fmt"
	"math"
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

type schedule struct {
	loc      *time.Location
	rec      recurrence
	startMin int
	dur      time.Duration
	excl     exclusionSet
	// joins: consecutive start days are never further apart than an
	// occurrence lasts, so wherever the zone's offset holds, occurrences
	// overlap or touch and the walks below skip them (see skipForward).
	joins bool
	// single: consecutive occurrences never overlap or touch, whatever
	// offsets the zone uses, so every raw run is one occurrence.
	single bool
	// endRule is the COUNT or UNTIL of a rule that ends ("COUNT=3"), for
	// messages; rec.last is then the last day a window may start, and
	// lastKnown says it is the day of the last occurrence (COUNT).
	endRule   string
	lastKnown bool
}

// ended reports whether a rule with COUNT or UNTIL has no start left
// after now: its last day's start time has passed (or it has no
// occurrence at all), so no window opens again.
func (s *schedule) ended(now time.Time) bool {
	r := &s.rec
	return s.endRule != "" && (r.last < r.first || !s.occurrence(r.last).Start.After(now))
}

// endDetail says how a rule with COUNT or UNTIL ends, for the message of
// the state after its last occurrence ("no window").
func (s *schedule) endDetail(now time.Time) string {
	if s.endRule == "" {
		return ""
	}
	r := &s.rec
	ended := s.ended(now)
	verb, is := "ends", "is"
	if ended {
		verb, is = "ended", "was"
	}
	d := fmt.Sprintf("the recurrence %s (%s)", verb, s.endRule)
	switch {
	case r.last < r.first:
		d += ": it has no occurrence on or after the anchor " + fmtDay(r.first)
	case s.lastKnown:
		d += fmt.Sprintf(": its last occurrence %s on %s", is, fmtDay(r.last))
	}
	return d
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

// occurrence returns the raw scheduled interval starting on local day.
func (s *schedule) occurrence(day int) Interval {
	y, m, d := civil(day)
	start := resolveLocal(time.Date(y, m, d, s.startMin/60, s.startMin%60, 0, 0, time.UTC), s.loc)
	return Interval{Start: start, End: start.Add(s.dur)}
}

// extendDays is how many days past the search horizon a permitted period
// is followed before it is reported as never closing: more than the
// longest occurrence lasts, so a period that closes soon after the horizon
// is reported with its end.
const extendDays = 33

// pieceAfter returns the first permitted piece (scheduled occurrences merged
// where they overlap or touch, minus exclusions) that ends after t, looking
// at occurrences that start no later than limit. A piece still open
// extendDays after limit never closes: its End is Forever. Its Start is
// exact only when it lies after t.
func (s *schedule) pieceAfter(t, limit time.Time) (Interval, bool) {
	// An occurrence that is still open at t started at most dur before it;
	// one day of margin covers the local-date rounding.
	from := localDay(t.Add(-s.dur), s.loc) - 1
	to := localDay(limit, s.loc) + 1 + extendDays
	var (
		run, piece  Interval
		have, found bool
		stopped     bool
	)
	for day := from; day <= to && !stopped; {
		resume := to + 1
		s.rec.forEachDay(day, to, func(d int) bool {
			iv := s.occurrence(d)
			switch {
			case have && !iv.Start.After(run.End):
				if iv.End.After(run.End) {
					run.End = iv.End
				}
			case have:
				if piece, found = s.firstPieceAfter(run, t); found {
					stopped = true
					return false
				}
				fallthrough
			default:
				if iv.Start.After(limit) {
					have, stopped = false, true
					return false
				}
				run, have = iv, true
			}
			if last := s.skipForward(d, iv, to); last > d {
				// The occurrences through day last join run, and the
				// last of them ends latest.
				if end := s.occurrence(last).End; end.After(run.End) {
					run.End = end
				}
				resume = last + 1
				return false
			}
			return true
		})
		day = resume
	}
	if !stopped && have {
		if s.continuesAfter(to, run) {
			run.End = Forever
		}
		piece, found = s.firstPieceAfter(run, t)
	}
	return piece, found
}

// regularDays returns how many days after and before iv, the occurrence
// on some day, the occurrences keep iv's offset: they start the same wall
// time a whole number of days away, and every start lies two days inside
// the zone period holding iv.Start, so resolveLocal, which looks a day
// either side of a wall time, sees one offset. Both are 0 when not known.
func (s *schedule) regularDays(iv Interval) (after, before int) {
	const day = 24 * time.Hour
	const margin = 2 * day
	after, before = math.MaxInt32, math.MaxInt32
	zs, ze := iv.Start.In(s.loc).ZoneBounds()
	if !zs.IsZero() {
		before = int((iv.Start.Sub(zs) - margin) / day)
	}
	if !ze.IsZero() {
		after = int((ze.Sub(iv.Start) - margin) / day)
	}
	if after < 0 || before < 0 {
		return 0, 0
	}
	return after, before
}

// skipForward returns the last start day, up to to, through which the
// occurrences after day d (iv) all join iv's run, known by arithmetic:
// for a schedule that joins, consecutive starts inside one zone period are
// no further apart than an occurrence lasts, and each ends later than the
// one before. It returns d when nothing is skipped.
func (s *schedule) skipForward(d int, iv Interval, to int) int {
	if !s.joins {
		return d
	}
	after, _ := s.regularDays(iv)
	if after < to-d {
		to = d + after
	}
	last := d
	s.rec.forEachDayDesc(d+1, to, func(day int) bool {
		last = day
		return false
	})
	return last
}

// skipBackward is skipForward going back: the first start day, from from
// on, through which the occurrences before day d (iv) join iv's run; each
// starts earlier than the one after it.
func (s *schedule) skipBackward(d int, iv Interval, from int) int {
	if !s.joins {
		return d
	}
	_, before := s.regularDays(iv)
	if before < d-from {
		from = d - before
	}
	first := d
	s.rec.forEachDay(from, d-1, func(day int) bool {
		first = day
		return false
	})
	return first
}

// continuesAfter reports whether an occurrence starting on a day after day
// overlaps or touches run (so the run goes on past day).
func (s *schedule) continuesAfter(day int, run Interval) bool {
	more := false
	s.rec.forEachDay(day+1, localDay(run.End, s.loc)+1, func(d int) bool {
		more = !s.occurrence(d).Start.After(run.End)
		return false
	})
	return more
}

// continuesBefore reports whether an occurrence starting on a day before
// day overlaps or touches run (so the run began before day).
func (s *schedule) continuesBefore(day int, run Interval) bool {
	more := false
	s.rec.forEachDayDesc(localDay(run.Start.Add(-s.dur), s.loc)-1, day-1, func(d int) bool {
		more = !s.occurrence(d).End.Before(run.Start)
		return false
	})
	return more
}

// forEachPiece calls fn with the permitted pieces of a raw run (the run
// minus exclusions) in ascending order until fn returns false.
func (s *schedule) forEachPiece(raw Interval, fn func(piece Interval) bool) {
	s.excl.forEachPiece(raw, fn)
}

// firstPieceAfter returns the first permitted piece of raw that ends after t.
func (s *schedule) firstPieceAfter(raw Interval, t time.Time) (Interval, bool) {
	var found Interval
	ok := false
	if !raw.End.After(t) {
		return found, false
	}
	s.forEachPiece(raw, func(p Interval) bool {
		if p.End.After(t) {
			found, ok = p, true
			return false
		}
		return true
	})
	return found, ok
}

// runsBackward calls fn with merged raw runs that start before t, latest
// first, down to runs starting after floor. cut is set for the earliest
// run when it began before the search reached: its Start is then only
// where the search stopped.
func (s *schedule) runsBackward(t, floor time.Time, fn func(run Interval, cut bool) bool) {
	from := localDay(floor, s.loc) - 1
	to := localDay(t, s.loc) + 1
	var cur Interval
	have := false
	stopped := false
	for day := to; day >= from && !stopped; {
		resume := from - 1
		s.rec.forEachDayDesc(from, day, func(d int) bool {
			iv := s.occurrence(d)
			if !iv.Start.Before(t) {
				return true
			}
			if have && !iv.End.Before(cur.Start) {
				if iv.Start.Before(cur.Start) {
					cur.Start = iv.Start
				}
			} else {
				if have && !fn(cur, false) {
					stopped = true
					return false
				}
				cur, have = iv, true
			}
			if first := s.skipBackward(d, iv, from); first < d {
				// The occurrences from day first on join cur, and the
				// first of them starts earliest.
				if start := s.occurrence(first).Start; start.Before(cur.Start) {
					cur.Start = start
				}
				resume = first - 1
				return false
			}
			return true
		})
		day = resume
	}
	if have && !stopped {
		fn(cur, s.continuesBefore(from, cur))
	}
}

// lastEndBefore returns the end of the last permitted piece ending at or
// before t and not before floor. The search starts an occurrence's length
// before floor: an end after floor may come from an occurrence that began
// before it, and "none found" must mean none ended after floor (an
// override that expired after floor relies on it, see afterOverride).
func (s *schedule) lastEndBefore(t, floor time.Time) (time.Time, bool) {
	var end time.Time
	found := false
	s.runsBackward(t, floor.Add(-s.dur), func(run Interval, _ bool) bool {
		// Pieces ascend, so the last one ending by t is the latest.
		s.forEachPiece(run, func(p Interval) bool {
			if p.End.After(t) {
				return false
			}
			end, found = p.End, true
			return true
		})
		return !found
	})
	if found && end.Before(floor) {
		return time.Time{}, false
	}
	return end, found
}

// startOfPieceAt returns the start of the permitted piece containing t, or
// the zero time when the piece began before floor (the start of a schedule
// that never closes is not known). As in lastEndBefore, the search starts
// an occurrence's length before floor, so a piece that begins after floor
// (at an exclusion's end) inside an occurrence that began before it is
// found, and zero means the piece was open at floor.
func (s *schedule) startOfPieceAt(t, floor time.Time) time.Time {
	var start time.Time
	found := false
	s.runsBackward(t.Add(time.Nanosecond), floor.Add(-s.dur), func(run Interval, cut bool) bool {
		s.forEachPiece(run, func(p Interval) bool {
			if p.Contains(t) {
				found = true
				if !cut || !p.Start.Equal(run.Start) {
					start = p.Start
				}
			}
			return !found
		})
		return !found
	})
	if start.Before(floor) {
		return time.Time{} // began before the horizon: not known
	}
	return start
}

// excludedAt returns the exclusion covering t, if any: of several, the
// one that starts first.
func (s *schedule) excludedAt(t time.Time) (exclusion, bool) {
	return s.excl.at(t)
}
