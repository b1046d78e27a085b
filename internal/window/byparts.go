package window

import (
	"slices"
	"time"
)

// The BY parts of a recurrence (RFC 5545's BYMONTH, BYWEEKNO, BYYEARDAY,
// BYMONTHDAY, BYDAY and BYSETPOS, and a typed Recurrence's fields) are
// held as bit masks; this file tests days against them.

// nthSet is a set of ordinals of one weekday: bit n of pos for the nth
// from the start of the month (or year), bit n of neg for the nth from
// its end; n is 1..53.
type nthSet struct{ pos, neg uint64 }

// bits384 is a set of small whole numbers (days of the year and indexes
// into a year's days, 0..383).
type bits384 [6]uint64

func (b *bits384) set(i int)      { b[i>>6] |= 1 << uint(i&63) }
func (b *bits384) has(i int) bool { return b[i>>6]&(1<<uint(i&63)) != 0 }

// matches reports whether the day passes the BY parts; wno is the week
// number mask of the day's year (BYWEEKNO), nil without BYWEEKNO.
func (r *recurrence) matches(c *dayCursor, wno *bits384) bool {
	if r.weekdays != 0 && r.weekdays&(1<<uint(c.wd)) == 0 {
		return false
	}
	if r.months != 0 && r.months&(1<<uint(c.m)) == 0 {
		return false
	}
	if wno != nil && !wno.has(c.doy-1) {
		return false
	}
	if r.hasYday && !r.ydayPos.has(c.doy) && !r.ydayNeg.has(c.ylen-c.doy+1) {
		return false
	}
	mday := r.hasMday() && (r.mdayPos&(1<<uint(c.dom)) != 0 || r.mdayNeg&(1<<uint(c.monthLen-c.dom+1)) != 0)
	nth := r.hasNth && r.nthMatches(c)
	if r.dayOr {
		return !(r.hasMday() || r.hasNth) || mday || nth
	}
	return (!r.hasMday() || mday) && (!r.hasNth || nth)
}

// nthMatches reports whether the day is one of the ordinal weekdays
// (BYDAY with ordinals), counted within its month or year.
func (r *recurrence) nthMatches(c *dayCursor) bool {
	s := r.nth[c.wd]
	pos, length := c.dom, c.monthLen
	if r.nthInYear {
		pos, length = c.doy, c.ylen
	}
	return s.pos&(1<<uint((pos-1)/7+1)) != 0 || s.neg&(1<<uint((length-pos)/7+1)) != 0
}

// selectPositions keeps the days at the positions given (1 the first, -1
// the last), in ascending order; positions beyond the set select nothing.
func selectPositions(days []int, positions []int) []int {
	var keep bits384
	for _, pos := range positions {
		i := pos - 1
		if pos < 0 {
			i = len(days) + pos
		}
		if i >= 0 && i < len(days) {
			keep.set(i)
		}
	}
	out := days[:0]
	for i, d := range days {
		if keep.has(i) {
			out = append(out, d)
		}
	}
	return out
}

// weekNoMask returns which days of year y (0-based) BYWEEKNO selects,
// computed as python-dateutil 2.9 does (rrule._iterinfo.rebuild), so that
// lull reads a rule as the most used implementation does. Weeks start on
// wkst; week 1 is the first with at least four days in the year, and a
// negative number counts from the year's last week. The days after the
// last week belong to week 1 of the next year and are selected by 1 (not
// by a negative number). The days before week 1 belong to the last week
// of the year before and are selected by -1 or by that week's number as
// dateutil computes it: when the year before has no more than three days
// before its first week start, dateutil takes the number from this year's
// length and says 53 instead of 52 for a year with two or three days
// before its first week start (three in a leap year).
func weekNoMask(y int, wkst time.Weekday, weekNos []int) bits384 {
	var mask bits384
	l := newWeekNoLayout(y, wkst)
	for _, n := range weekNos {
		if n < 0 {
			n += l.numweeks + 1
		}
		if n <= 0 || n > l.numweeks {
			continue
		}
		l.markWeek(&mask, l.weekStart(n))
	}
	if slices.Contains(weekNos, 1) {
		if i := l.weekStart(l.numweeks + 1); i < l.yearlen {
			l.markWeek(&mask, i)
		}
	}
	if l.no1wkst != 0 {
		lnumweeks := -1
		if !slices.Contains(weekNos, -1) {
			lnumweeks = l.lastWeekBefore(y)
		}
		if slices.Contains(weekNos, lnumweeks) {
			for i := 0; i < l.no1wkst; i++ {
				mask.set(i)
			}
		}
	}
	return mask
}

// weekNoLayout is where the weeks of a year lie, as dateutil computes it.
// Weekdays count from Monday (0), as in dateutil; days are indexes into
// the year (0 is 1 January).
type weekNoLayout struct {
	jan1      int // the day number of 1 January
	yearlen   int
	yearWd    int // the weekday of 1 January
	wkst      int // the weekday weeks start on
	firstwkst int // the first day starting a week
	no1wkst   int // the first day of week 1 (0 when firstwkst is)
	numweeks  int // how many weeks the year has
}

// pyWeekday is the weekday of day, counted from Monday (0) as dateutil does.
func pyWeekday(day int) int { return floorMod(int(weekdayOf(day))-1, 7) }

func newWeekNoLayout(y int, wkst time.Weekday) weekNoLayout {
	l := weekNoLayout{jan1: dayOf(y, time.January, 1), yearlen: yearLen(y), wkst: floorMod(int(wkst)-1, 7)}
	l.yearWd = pyWeekday(l.jan1)
	l.no1wkst = floorMod(7-l.yearWd+l.wkst, 7)
	l.firstwkst = l.no1wkst
	var wyearlen int
	if l.no1wkst >= 4 {
		l.no1wkst = 0
		wyearlen = l.yearlen + floorMod(l.yearWd-l.wkst, 7)
	} else {
		wyearlen = l.yearlen - l.no1wkst
	}
	l.numweeks = wyearlen/7 + (wyearlen%7)/4
	return l
}

// weekStart returns the first day of week n (1..numweeks, or numweeks+1
// for week 1 of the next year).
func (l *weekNoLayout) weekStart(n int) int {
	if n <= 1 {
		return l.no1wkst
	}
	i := l.no1wkst + (n-1)*7
	if l.no1wkst != l.firstwkst {
		i -= 7 - l.firstwkst
	}
	return i
}

// markWeek sets in mask the days from i up to the next week start (at
// most seven).
func (l *weekNoLayout) markWeek(mask *bits384, i int) {
	for j := 0; j < 7; j++ {
		mask.set(i)
		i++
		if pyWeekday(l.jan1+i) == l.wkst {
			break
		}
	}
}

// lastWeekBefore returns the number dateutil gives the last week of year
// y-1, which holds the days of y before week 1.
func (l *weekNoLayout) lastWeekBefore(y int) int {
	lyearWd := pyWeekday(dayOf(y-1, time.January, 1))
	lno1wkst := floorMod(7-lyearWd+l.wkst, 7)
	if lno1wkst >= 4 {
		return 52 + floorMod(yearLen(y-1)+floorMod(lyearWd-l.wkst, 7), 7)/4
	}
	return 52 + floorMod(l.yearlen-l.no1wkst, 7)/4
}
