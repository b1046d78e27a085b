package window

import (
	"time"
)

// ordinalWeekday is the Nth weekday of a month; n < 0 counts from the end.
type ordinalWeekday struct {
	n   int
	day time.Weekday
}

// recurrence says on which local dates a window starts.
type recurrence struct {
	freq        string // Daily, Weekly, Monthly, Yearly
	interval    int
	anchorDay   int
	weekdays    uint8 // Weekly: bit i set for time.Weekday(i)
	daysOfMonth []int // Monthly/Yearly: 1..31 or -31..-1
	ordinals    []ordinalWeekday
	months      uint16 // Yearly: bit m set for time.Month(m)
}

// forEachDay calls fn with each start day in [from, to] in ascending order
// until fn returns false. The first period considered is found by
// arithmetic from the anchor, so the cost does not depend on how far the
// anchor lies in the past.
func (r *recurrence) forEachDay(from, to int, fn func(day int) bool) {
	if from > to {
		return
	}
	switch r.freq {
	case "Daily":
		for d := from + floorMod(r.anchorDay-from, r.interval); d <= to; d += r.interval {
			if !fn(d) {
				return
			}
		}
	case "Weekly":
		anchorWeek := mondayOf(r.anchorDay)
		w := mondayOf(from)
		w += 7 * floorMod(-((w-anchorWeek)/7), r.interval)
		for ; w <= to; w += 7 * r.interval {
			for i := 0; i < 7; i++ {
				d := w + i
				if r.weekdays&(1<<uint(weekdayOf(d))) == 0 || d < from {
					continue
				}
				if d > to || !fn(d) {
					return
				}
			}
		}
	case "Monthly", "Yearly":
		var buf [64]int
		y, m, _ := civil(from)
		ay, am, _ := civil(r.anchorDay)
		if r.freq == "Monthly" {
			idx := y*12 + int(m-1)
			anchorIdx := ay*12 + int(am-1)
			idx += floorMod(anchorIdx-idx, r.interval)
			for ; ; idx += r.interval {
				my, mm := floorDiv(idx, 12), time.Month(floorMod(idx, 12)+1)
				if dayOf(my, mm, 1) > to {
					return
				}
				if !r.emit(r.monthDays(buf[:0], my, mm), from, to, fn) {
					return
				}
			}
		}
		y += floorMod(ay-y, r.interval)
		for ; ; y += r.interval {
			if dayOf(y, time.January, 1) > to {
				return
			}
			for mm := time.January; mm <= time.December; mm++ {
				if r.months&(1<<uint(mm)) == 0 {
					continue
				}
				if !r.emit(r.monthDays(buf[:0], y, mm), from, to, fn) {
					return
				}
			}
		}
	}
}

// forEachDayDesc is forEachDay in descending order, from to down to from.
func (r *recurrence) forEachDayDesc(from, to int, fn func(day int) bool) {
	if from > to {
		return
	}
	switch r.freq {
	case "Daily":
		for d := to - floorMod(to-r.anchorDay, r.interval); d >= from; d -= r.interval {
			if !fn(d) {
				return
			}
		}
	case "Weekly":
		anchorWeek := mondayOf(r.anchorDay)
		w := mondayOf(to)
		w -= 7 * floorMod((w-anchorWeek)/7, r.interval)
		for ; w+6 >= from; w -= 7 * r.interval {
			for i := 6; i >= 0; i-- {
				d := w + i
				if r.weekdays&(1<<uint(weekdayOf(d))) == 0 || d > to {
					continue
				}
				if d < from || !fn(d) {
					return
				}
			}
		}
	case "Monthly", "Yearly":
		var buf [64]int
		y, m, _ := civil(to)
		ay, am, _ := civil(r.anchorDay)
		if r.freq == "Monthly" {
			idx := y*12 + int(m-1)
			anchorIdx := ay*12 + int(am-1)
			idx -= floorMod(idx-anchorIdx, r.interval)
			for ; ; idx -= r.interval {
				my, mm := floorDiv(idx, 12), time.Month(floorMod(idx, 12)+1)
				if dayOf(my, mm, daysIn(my, mm)) < from {
					return
				}
				if !r.emitDesc(r.monthDays(buf[:0], my, mm), from, to, fn) {
					return
				}
			}
		}
		y -= floorMod(y-ay, r.interval)
		for ; ; y -= r.interval {
			if dayOf(y, time.December, 31) < from {
				return
			}
			for mm := time.December; mm >= time.January; mm-- {
				if r.months&(1<<uint(mm)) == 0 {
					continue
				}
				if !r.emitDesc(r.monthDays(buf[:0], y, mm), from, to, fn) {
					return
				}
			}
		}
	}
}

func (r *recurrence) emit(days []int, from, to int, fn func(int) bool) bool {
	for _, d := range days {
		if d < from {
			continue
		}
		if d > to || !fn(d) {
			return false
		}
	}
	return true
}

func (r *recurrence) emitDesc(days []int, from, to int, fn func(int) bool) bool {
	for i := len(days) - 1; i >= 0; i-- {
		d := days[i]
		if d > to {
			continue
		}
		if d < from || !fn(d) {
			return false
		}
	}
	return true
}

// monthDays appends the sorted, distinct start days in month y-m. A month
// lacking a date (the 31st, a fifth Monday) contributes nothing for it.
func (r *recurrence) monthDays(buf []int, y int, m time.Month) []int {
	first := dayOf(y, m, 1)
	n := daysIn(y, m)
	for _, dom := range r.daysOfMonth {
		d := dom
		if d < 0 {
			d = n + d + 1
		}
		if d >= 1 && d <= n {
			buf = insertSorted(buf, first+d-1)
		}
	}
	if len(r.ordinals) > 0 {
		wdFirst := weekdayOf(first)
		last := first + n - 1
		wdLast := weekdayOf(last)
		for _, o := range r.ordinals {
			var d int
			if o.n > 0 {
				d = first + floorMod(int(o.day-wdFirst), 7) + 7*(o.n-1)
			} else {
				d = last - floorMod(int(wdLast-o.day), 7) - 7*(-o.n-1)
			}
			if d >= first && d <= last {
				buf = insertSorted(buf, d)
			}
		}
	}
	return buf
}

func insertSorted(buf []int, v int) []int {
	i := len(buf)
	for i > 0 && buf[i-1] > v {
		i--
	}
	if i > 0 && buf[i-1] == v {
		return buf
	}
	buf = append(buf, 0)
	copy(buf[i+1:], buf[i:])
	buf[i] = v
	return buf
}

// gaps returns the fewest and the most days between consecutive start
// days; most is 0 when it is not known (Monthly and Yearly, whose gaps
// depend on the calendar).
func (r *recurrence) gaps() (fewest, most int) {
	switch r.freq {
	case "Daily":
		return r.interval, r.interval
	case "Weekly":
		var days []int // Monday is 0
		for i := 0; i < 7; i++ {
			if r.weekdays&(1<<uint((i+1)%7)) != 0 {
				days = append(days, i)
			}
		}
		if len(days) == 0 {
			return 1, 0
		}
		fewest = 7*r.interval - (days[len(days)-1] - days[0])
		most = fewest
		for i := 1; i < len(days); i++ {
			g := days[i] - days[i-1]
			fewest, most = min(fewest, g), max(most, g)
		}
		return fewest, most
	}
	return 1, 0
}
