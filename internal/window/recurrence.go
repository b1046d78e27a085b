package window

import (
	"math"
	"time"
)

// freq is the period of a recurrence.
type freq int

const (
	freqDaily freq = iota
	freqWeekly
	freqMonthly
	freqYearly
)

// recurrence says on which local dates a window starts. It is RFC 5545's
// model for daily-or-coarser rules: the periods (days, weeks, months or
// years) in step with the anchor by the interval; in each, the days that
// pass every BY part given (each limits; a day of a coarser period that
// passes them is what the RFC's "expand" produces); of those, the
// positions BYSETPOS names; all of that bounded by COUNT or UNTIL.
//
// A typed Recurrence compiles into the same model, except that its
// daysOfMonth and ordinal weekdays are a union of start days (dayOr)
// where an RRULE's BYMONTHDAY and BYDAY both limit.
type recurrence struct {
	freq         freq
	interval     int
	anchorDay    int
	anchorPeriod int // the period holding the anchor (see periodOf)
	wkst         time.Weekday

	months    uint16    // BYMONTH: bit m set for time.Month(m); 0: any month
	weekdays  uint8     // BYDAY without ordinals: bit i for time.Weekday(i); 0: any
	nth       [7]nthSet // BYDAY with ordinals, by weekday
	hasNth    bool
	nthInYear bool   // ordinals count within the year (YEARLY without BYMONTH), else the month
	mdayPos   uint32 // BYMONTHDAY: bit d for d
	mdayNeg   uint32 // BYMONTHDAY: bit d for -d
	ydayPos   bits384
	ydayNeg   bits384
	hasYday   bool
	weekNos   []int // BYWEEKNO (YEARLY only)
	setPos    []int // BYSETPOS
	dayOr     bool  // typed recurrences: a day of the month or an ordinal weekday suffices

	// first and last bound the start days (the anchor and COUNT or
	// UNTIL); -unbounded and unbounded when the rule does not end. first >
	// last when no day is left.
	first, last int
}

const unbounded = math.MaxInt32

func (r *recurrence) hasMday() bool { return r.mdayPos|r.mdayNeg != 0 }

// filtered reports whether BY parts other than plain weekdays select
// days, so the gaps between start days are not known from the weekdays.
func (r *recurrence) filtered() bool {
	return r.months != 0 || r.hasMday() || r.hasNth || r.hasYday || len(r.weekNos) > 0 || len(r.setPos) > 0
}

// needsDate reports whether the filters need a day's calendar date (not
// only its weekday).
func (r *recurrence) needsDate() bool {
	return r.months != 0 || r.hasMday() || r.hasNth || r.hasYday || len(r.weekNos) > 0
}

// dayCursor is a day with its calendar fields, stepped one day at a time
// without converting from a day number again.
type dayCursor struct {
	day            int
	y              int
	m              time.Month
	dom, doy       int
	monthLen, ylen int
	wd             time.Weekday
}

func cursorAt(day int) dayCursor {
	y, m, d := civil(day)
	return dayCursor{day: day, y: y, m: m, dom: d, doy: day - dayOf(y, time.January, 1) + 1,
		monthLen: monthLen(y, m), ylen: yearLen(y), wd: weekdayOf(day)}
}

func (c *dayCursor) next() {
	c.day++
	c.dom++
	c.doy++
	c.wd = (c.wd + 1) % 7
	if c.dom > c.monthLen {
		c.dom = 1
		if c.m++; c.m > time.December {
			c.m, c.y, c.doy = time.January, c.y+1, 1
			c.ylen = yearLen(c.y)
		}
		c.monthLen = monthLen(c.y, c.m)
	}
}

func isLeap(y int) bool { return y%4 == 0 && (y%100 != 0 || y%400 == 0) }

func yearLen(y int) int {
	if isLeap(y) {
		return 366
	}
	return 365
}

var monthDays = [13]int{0, 31, 28, 31, 30, 31, 30, 31, 31, 30, 31, 30, 31}

func monthLen(y int, m time.Month) int {
	if m == time.February && isLeap(y) {
		return 29
	}
	return monthDays[m]
}

// periodOf returns the period holding day: the day itself (Daily), the
// day starting its week (Weekly, weeks starting on wkst), a month index
// y*12+m-1 (Monthly) or the year (Yearly).
func (r *recurrence) periodOf(day int) int {
	switch r.freq {
	case freqDaily:
		return day
	case freqWeekly:
		return day - floorMod(int(weekdayOf(day)-r.wkst), 7)
	case freqMonthly:
		y, m, _ := civil(day)
		return y*12 + int(m) - 1
	}
	y, _, _ := civil(day)
	return y
}

// unit is how far apart periodOf's values for consecutive periods are.
func (r *recurrence) unit() int {
	if r.freq == freqWeekly {
		return 7
	}
	return 1
}

// alignUp returns the first period in step with the anchor at or after
// period p; alignDown the last at or before it. Arithmetic, so the cost
// does not depend on how far the anchor lies.
func (r *recurrence) alignUp(p int) int {
	u := r.unit()
	return p + u*floorMod((r.anchorPeriod-p)/u, r.interval)
}

func (r *recurrence) alignDown(p int) int {
	u := r.unit()
	return p - u*floorMod((p-r.anchorPeriod)/u, r.interval)
}

// periodDays returns, in buf, the start days of period p in ascending
// order, BYSETPOS applied. It does not look at the bounds.
func (r *recurrence) periodDays(buf []int, p int) []int {
	switch r.freq {
	case freqDaily:
		if r.needsDate() {
			c := cursorAt(p)
			if !r.matches(&c, nil) {
				return buf
			}
		} else if r.weekdays != 0 && r.weekdays&(1<<uint(weekdayOf(p))) == 0 {
			return buf
		}
		buf = append(buf, p)
	case freqWeekly:
		if !r.needsDate() {
			for d := p; d < p+7; d++ {
				if r.weekdays == 0 || r.weekdays&(1<<uint(weekdayOf(d))) != 0 {
					buf = append(buf, d)
				}
			}
			break
		}
		c := cursorAt(p)
		for i := 0; i < 7; i++ {
			if r.matches(&c, nil) {
				buf = append(buf, c.day)
			}
			c.next()
		}
	case freqMonthly:
		y, m := floorDiv(p, 12), time.Month(floorMod(p, 12)+1)
		if r.months != 0 && r.months&(1<<uint(m)) == 0 {
			return buf
		}
		c := cursorAt(dayOf(y, m, 1))
		for n := c.monthLen; n > 0; n-- {
			if r.matches(&c, nil) {
				buf = append(buf, c.day)
			}
			c.next()
		}
	case freqYearly:
		buf = r.yearDays(buf, p)
	}
	if len(r.setPos) == 0 {
		return buf
	}
	return selectPositions(buf, r.setPos)
}

// yearDays appends to buf the days of year y that pass the BY parts, in
// ascending order (periodDays of a Yearly recurrence, before BYSETPOS).
func (r *recurrence) yearDays(buf []int, y int) []int {
	var wno *bits384
	if len(r.weekNos) > 0 {
		mask := weekNoMask(y, r.wkst, r.weekNos)
		wno = &mask
	}
	for m := time.January; m <= time.December; m++ {
		if r.months != 0 && r.months&(1<<uint(m)) == 0 {
			continue
		}
		c := cursorAt(dayOf(y, m, 1))
		for n := c.monthLen; n > 0; n-- {
			if r.matches(&c, wno) {
				buf = append(buf, c.day)
			}
			c.next()
		}
	}
	return buf
}

// periodStart returns the first day of period p.
func (r *recurrence) periodStart(p int) int {
	switch r.freq {
	case freqMonthly:
		return dayOf(floorDiv(p, 12), time.Month(floorMod(p, 12)+1), 1)
	case freqYearly:
		return dayOf(p, time.January, 1)
	}
	return p
}

// periodEnd returns the last day of period p.
func (r *recurrence) periodEnd(p int) int {
	switch r.freq {
	case freqWeekly:
		return p + 6
	case freqMonthly:
		y, m := floorDiv(p, 12), time.Month(floorMod(p, 12)+1)
		return dayOf(y, m, monthLen(y, m))
	case freqYearly:
		return dayOf(p, time.December, 31)
	}
	return p
}

// maxPeriodDays is the most start days one period has (a leap year).
const maxPeriodDays = 366

// forEachDay calls fn with each start day in [from, to] in ascending order
// until fn returns false. The first period considered is found by
// arithmetic from the anchor, so the cost does not depend on how far the
// anchor lies in the past.
func (r *recurrence) forEachDay(from, to int, fn func(day int) bool) {
	from, to = max(from, r.first), min(to, r.last)
	if from > to {
		return
	}
	var buf [maxPeriodDays]int
	step := r.unit() * r.interval
	for p := r.alignUp(r.periodOf(from)); r.periodStart(p) <= to; p += step {
		if r.freq == freqDaily && r.months != 0 {
			// Whole months that BYMONTH leaves out are skipped at once.
			if y, m, _ := civil(p); r.months&(1<<uint(m)) == 0 {
				p = r.alignUp(dayOf(y, m+1, 1)) - step
				continue
			}
		}
		for _, d := range r.periodDays(buf[:0], p) {
			if d < from {
				continue
			}
			if d > to || !fn(d) {
				return
			}
		}
	}
}

// forEachDayDesc is forEachDay in descending order, from to down to from.
func (r *recurrence) forEachDayDesc(from, to int, fn func(day int) bool) {
	from, to = max(from, r.first), min(to, r.last)
	if from > to {
		return
	}
	var buf [maxPeriodDays]int
	step := r.unit() * r.interval
	for p := r.alignDown(r.periodOf(to)); r.periodEnd(p) >= from; p -= step {
		if r.freq == freqDaily && r.months != 0 {
			if y, m, _ := civil(p); r.months&(1<<uint(m)) == 0 {
				p = r.alignDown(dayOf(y, m, 0)) + step
				continue
			}
		}
		days := r.periodDays(buf[:0], p)
		for i := len(days) - 1; i >= 0; i-- {
			d := days[i]
			if d > to {
				continue
			}
			if d < from || !fn(d) {
				return
			}
		}
	}
}

// gaps returns the fewest and the most days between consecutive start
// days; most is 0 when it is not known (BY parts other than weekdays,
// Monthly and Yearly, whose gaps depend on the calendar). Filters only
// remove start days, so fewest holds for them too.
func (r *recurrence) gaps() (fewest, most int) {
	switch r.freq {
	case freqDaily:
		if r.filtered() || r.weekdays != 0 {
			return r.interval, 0
		}
		return r.interval, r.interval
	case freqWeekly:
		var days []int // days after the week's start
		for i := 0; i < 7; i++ {
			if r.weekdays == 0 || r.weekdays&(1<<uint((int(r.wkst)+i)%7)) != 0 {
				days = append(days, i)
			}
		}
		fewest = 7*r.interval - (days[len(days)-1] - days[0])
		most = fewest
		for i := 1; i < len(days); i++ {
			g := days[i] - days[i-1]
			fewest, most = min(fewest, g), max(most, g)
		}
		if r.filtered() {
			most = 0
		}
		return fewest, most
	}
	return 1, 0
}
