package window

import (
	"sync"
	"time"
)

// Civil dates are handled as day numbers (days since 1970-01-01) so that
// interval arithmetic is plain integer arithmetic, independent of time zones.

func floorDiv(a, b int) int {
	q := a / b
	if (a%b != 0) && ((a < 0) != (b < 0)) {
		q--
	}
	return q
}

func floorMod(a, b int) int {
	return a - floorDiv(a, b)*b
}

// dayOf returns the day number of a civil date; time.Date normalises
// out-of-range months and days.
func dayOf(y int, m time.Month, d int) int {
	return floorDiv(int(time.Date(y, m, d, 0, 0, 0, 0, time.UTC).Unix()), 86400)
}

// civil returns the civil date of a day number.
func civil(day int) (int, time.Month, int) {
	return time.Unix(int64(day)*86400, 0).UTC().Date()
}

// weekdayOf returns the weekday of a day number (1970-01-01 was a Thursday).
func weekdayOf(day int) time.Weekday {
	return time.Weekday(floorMod(day+4, 7))
}

// localDay returns the day number of t's local date in loc.
func localDay(t time.Time, loc *time.Location) int {
	y, m, d := t.In(loc).Date()
	return dayOf(y, m, d)
}

// resolveLocal turns a local wall time (given as the same wall clock in UTC)
// into an instant in loc, following the rules operators are promised:
// a wall time inside a spring-forward gap moves to the end of the gap (the
// instant of the transition); an ambiguous wall time in a fall-back overlap
// takes its first instant.
func resolveLocal(wall time.Time, loc *time.Location) time.Time {
	if loc == time.UTC {
		return wall
	}
	secs := wall.Unix()
	// The offsets in force a day either side of the wall time bound the
	// candidates: no zone has two transitions within two days.
	_, before := time.Unix(secs-86400, 0).In(loc).Zone()
	_, after := time.Unix(secs+86400, 0).In(loc).Zone()
	if before == after {
		inst := time.Unix(secs-int64(before), 0).UTC()
		_, off := inst.In(loc).Zone()
		if off == before {
			return inst
		}
		// Two transitions close together (rare, historical); use the
		// offset in force at the naive instant.
		return time.Unix(secs-int64(off), 0).UTC()
	}
	var best time.Time
	found := false
	for _, off := range [2]int{before, after} {
		inst := time.Unix(secs-int64(off), 0).UTC()
		if _, o := inst.In(loc).Zone(); o == off {
			if !found || inst.Before(best) {
				best, found = inst, true
			}
		}
	}
	if found {
		return best
	}
	// In a gap: the wall time does not exist. Interpreted with the earlier
	// (smaller) offset it lies after the transition; the zone period
	// containing it starts at the transition, the end of the gap.
	small := before
	if after < small {
		small = after
	}
	start, _ := time.Unix(secs-int64(small), 0).In(loc).ZoneBounds()
	if start.IsZero() {
		return time.Unix(secs-int64(small), 0).UTC()
	}
	return start.UTC()
}

// offsetSpans caches offsetSpan by zone name.
var offsetSpans sync.Map

// offsetSpan returns how far apart the largest and the smallest UTC offset
// loc has ever used or will use are: a wall time's instant moves by at most
// this much from one day to another. The zone's rules repeat yearly after
// its table ends, so following its transitions to 2100 sees every offset.
func offsetSpan(loc *time.Location) time.Duration {
	if v, ok := offsetSpans.Load(loc.String()); ok {
		return v.(time.Duration)
	}
	t := time.Date(1000, time.January, 1, 0, 0, 0, 0, time.UTC)
	_, lo := t.In(loc).Zone()
	hi := lo
	for t.Year() < 2100 {
		_, end := t.In(loc).ZoneBounds()
		if end.IsZero() {
			break
		}
		if !end.After(t) {
			// Past its table a zone's bounds also stop at year ends;
			// the offset cannot change in the hour skipped.
			end = t.Add(time.Hour)
		}
		t = end
		_, off := t.In(loc).Zone()
		lo, hi = min(lo, off), max(hi, off)
	}
	span := time.Duration(hi-lo) * time.Second
	offsetSpans.Store(loc.String(), span)
	return span
}
