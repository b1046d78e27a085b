package window

import (
	"fmt"
	"math"
	"time"
)

// schedule is a compiled Schedule: the local days a window starts on
// (rec), the wall time and zone it starts in and how long it lasts, and
// the exclusions cut from it. Its methods walk the occurrences forwards
// and backwards, merging those that overlap or touch into runs and
// cutting the exclusions from them, by calendar arithmetic from the
// anchor.
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

func fmtDay(day int) string {
	y, m, d := civil(day)
	return fmt.Sprintf("%04d-%02d-%02d", y, m, d)
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
