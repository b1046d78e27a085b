package window

// A reference evaluator for the window engine: a deliberately simple and
// slow reading of docs/windows.md and RFC 5545, sharing no code with the
// engine, and a property test that compares the two over random specs.
//
// The reference
//   - decides whether a local date starts a window by building, for the
//     date's period (day, week, month or year), the list of all its dates
//     that pass every BY part, checked one date at a time with the
//     standard library's calendar, then BYSETPOS, COUNT (counted date by
//     date from the anchor) and UNTIL;
//   - finds the instant a local start time begins by stepping minute by
//     minute through the instants around it until the zone's wall clock
//     reaches it: the first instant showing it (a fold's first), or, when
//     no instant shows it (a gap), the first instant after it;
//   - decides whether an instant is permitted by asking whether any
//     occurrence [start, start+duration) holds it, no exclusion does, and
//     no override decides otherwise;
//   - and gets periods, their starts and ends from that predicate alone:
//     it only changes at an occurrence's or exclusion's start or end or
//     at an override's expiry, so a period is a maximal run of segments
//     between those instants in which it holds (overlapping and touching
//     occurrences merge by construction).
//
// The comparison holds the engine to the bounds docs/windows.md gives its
// searches (see refExtend), and nothing looser.

import (
	"encoding/json"
	"fmt"
	"math/rand"
	"os"
	"slices"
	"sort"
	"strconv"
	"strings"
	"testing"
	"time"
	_ "time/tzdata" // every zone, whatever the machine has

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	lullv1alpha1 "lull.dev/lull/api/v1alpha1"
)

const refDay = 24 * time.Hour

// refRule is a recurrence as the generator made it: typed (a
// Recurrence, whose days of the month and ordinal weekdays are a union)
// or an RRULE.
type refRule struct {
	typed     bool
	freq      string // DAILY, WEEKLY, MONTHLY, YEARLY
	interval  int
	count     int
	untilKind string // "", "date", "local", "utc"
	until     time.Time
	wkst      time.Weekday
	months    []int
	weekNos   []int
	yearDays  []int
	monthDays []int
	byDay     []refWeekday
	setPos    []int
}

type refWeekday struct {
	n  int
	wd time.Weekday
}

var refDayNames = []string{"SU", "MO", "TU", "WE", "TH", "FR", "SA"}

// text spells the rule as an RRULE, its parts in the order given.
func (r *refRule) text(order []int) string {
	ints := func(v []int) string {
		s := make([]string, len(v))
		for i, x := range v {
			s[i] = strconv.Itoa(x)
		}
		return strings.Join(s, ",")
	}
	var parts []string
	add := func(k, v string) { parts = append(parts, k+"="+v) }
	add("FREQ", r.freq)
	if r.interval != 1 || len(order)%2 == 0 {
		add("INTERVAL", strconv.Itoa(r.interval))
	}
	if r.count > 0 {
		add("COUNT", strconv.Itoa(r.count))
	}
	switch r.untilKind {
	case "date":
		add("UNTIL", r.until.Format("20060102"))
	case "local":
		add("UNTIL", r.until.Format("20060102T150405"))
	case "utc":
		add("UNTIL", r.until.UTC().Format("20060102T150405Z"))
	}
	if r.wkst != time.Monday || len(order)%3 == 0 {
		add("WKST", refDayNames[r.wkst])
	}
	if len(r.months) > 0 {
		add("BYMONTH", ints(r.months))
	}
	if len(r.weekNos) > 0 {
		add("BYWEEKNO", ints(r.weekNos))
	}
	if len(r.yearDays) > 0 {
		add("BYYEARDAY", ints(r.yearDays))
	}
	if len(r.monthDays) > 0 {
		add("BYMONTHDAY", ints(r.monthDays))
	}
	if len(r.byDay) > 0 {
		s := make([]string, len(r.byDay))
		for i, d := range r.byDay {
			s[i] = refDayNames[d.wd]
			if d.n != 0 {
				s[i] = strconv.Itoa(d.n) + s[i]
			}
		}
		add("BYDAY", strings.Join(s, ","))
	}
	if len(r.setPos) > 0 {
		add("BYSETPOS", ints(r.setPos))
	}
	// FREQ first, the others shuffled.
	for i := len(parts) - 1; i > 1; i-- {
		j := 1 + order[i%len(order)]%i
		parts[i], parts[j] = parts[j], parts[i]
	}
	return strings.Join(parts, ";")
}

var refWeekdayNames = map[time.Weekday]lullv1alpha1.Weekday{
	time.Monday: lullv1alpha1.Monday, time.Tuesday: lullv1alpha1.Tuesday, time.Wednesday: lullv1alpha1.Wednesday,
	time.Thursday: lullv1alpha1.Thursday, time.Friday: lullv1alpha1.Friday, time.Saturday: lullv1alpha1.Saturday, time.Sunday: lullv1alpha1.Sunday,
}

// recurrence spells a typed rule as the API's Recurrence.
func (r *refRule) recurrence() *lullv1alpha1.Recurrence {
	rec := &lullv1alpha1.Recurrence{Interval: int32(r.interval)}
	switch r.freq {
	case "DAILY":
		rec.Frequency = lullv1alpha1.Daily
	case "WEEKLY":
		rec.Frequency = lullv1alpha1.Weekly
	case "MONTHLY":
		rec.Frequency = lullv1alpha1.Monthly
	case "YEARLY":
		rec.Frequency = lullv1alpha1.Yearly
	}
	for _, d := range r.byDay {
		if d.n == 0 {
			rec.DaysOfWeek = append(rec.DaysOfWeek, refWeekdayNames[d.wd])
		} else {
			rec.Weekdays = append(rec.Weekdays, lullv1alpha1.OrdinalWeekday{Ordinal: int32(d.n), Day: refWeekdayNames[d.wd]})
		}
	}
	for _, d := range r.monthDays {
		rec.DaysOfMonth = append(rec.DaysOfMonth, int32(d))
	}
	for _, m := range r.months {
		rec.Months = append(rec.Months, int32(m))
	}
	return rec
}

// refCase is one random spec with what the reference needs to read it.
type refCase struct {
	spec     *lullv1alpha1.MaintenanceWindowSpec
	horizon  time.Duration
	rule     refRule
	loc      *time.Location
	hh, mm   int
	dur      time.Duration
	anchor   time.Time // a date (midnight UTC)
	from, to time.Time // the instants queried lie in [from, to)
	extra    []time.Time
}

// ---- the reference ----

// refModel answers for one case; it remembers what it computed.
type refModel struct {
	c         *refCase
	rule      refRule // with the parts filled from the anchor
	periods   map[time.Time][]time.Time
	starts    map[time.Time]time.Time
	countLast time.Time // the COUNTth start date; zero until known
	countTo   time.Time // dates counted so far: up to here
	countN    int
	lastStart time.Time // the last start in [lo, hi] (zero: none), once lastKnown
	lastKnown bool
	excl      []refExclusion
	lo, hi    time.Time // the range the reference looks at
	bounds    []time.Time
	permitted []bool // on [bounds[i], bounds[i+1])
}

type refExclusion struct {
	start, end time.Time
	reason     string
}

func addDays(d time.Time, n int) time.Time { return d.AddDate(0, 0, n) }

func daysBetween(a, b time.Time) int { return int(b.Sub(a) / refDay) }

func dateOf(y int, m time.Month, d int) time.Time { return time.Date(y, m, d, 0, 0, 0, 0, time.UTC) }

func daysInYear(y int) int { return dateOf(y, time.December, 31).YearDay() }

func daysInMonth(y int, m time.Month) int { return dateOf(y, m+1, 0).Day() }

// localDate is t's date on the zone's wall clock.
func (m *refModel) localDate(t time.Time) time.Time {
	y, mo, d := t.In(m.c.loc).Date()
	return dateOf(y, mo, d)
}

// wallInstant returns when the wall clock first shows date at hh:mm: the
// first instant at or after which the clock shows that time or later,
// found a minute at a time.
func (m *refModel) wallInstant(date time.Time, hh, mm int) time.Time {
	y, mo, d := date.Date()
	want := time.Date(y, mo, d, hh, mm, 0, 0, time.UTC)
	wall := func(t time.Time) time.Time {
		l := t.In(m.c.loc)
		return time.Date(l.Year(), l.Month(), l.Day(), l.Hour(), l.Minute(), 0, 0, time.UTC)
	}
	t := time.Date(y, mo, d, hh, mm, 0, 0, m.c.loc).Add(-3 * time.Hour).Truncate(time.Minute)
	for !wall(t).Before(want) {
		t = t.Add(-3 * time.Hour)
	}
	for wall(t).Before(want) {
		t = t.Add(time.Minute)
	}
	return t
}

// start returns when the occurrence on a date starts.
func (m *refModel) start(date time.Time) time.Time {
	if s, ok := m.starts[date]; ok {
		return s
	}
	s := m.wallInstant(date, m.c.hh, m.c.mm)
	m.starts[date] = s
	return s
}

func has(v []int, x int) bool { return slices.Contains(v, x) }

// weekStart returns the first date of the week (starting on wkst) holding d.
func weekStart(d time.Time, wkst time.Weekday) time.Time {
	return addDays(d, -((int(d.Weekday()) - int(wkst) + 7) % 7))
}

// inWeekNo reports whether BYWEEKNO selects date d: ISO 8601 weeks
// starting on wkst (week 1 is the one holding 4 January), read as
// python-dateutil reads them at the year's edges: the days of a year
// that belong to week 1 of the next are selected by 1 only; the days
// before week 1 belong to the last week of the year before and are
// selected by -1 or by that week's number, which dateutil takes, when the
// year before has fewer than four days before its first week start, as
// 52 + ((days in this year - days before its first week start) mod 7) / 4.
func inWeekNo(d time.Time, wkst time.Weekday, weekNos []int) bool {
	week1 := func(y int) time.Time { return weekStart(dateOf(y, time.January, 4), wkst) }
	weeks := func(y int) int { return daysBetween(week1(y), week1(y+1)) / 7 }
	daysBefore := func(y int) int { // days of y before its first week start
		jan1 := dateOf(y, time.January, 1)
		return (int(wkst) - int(jan1.Weekday()) + 7) % 7
	}
	y := d.Year()
	if !d.Before(week1(y)) {
		n := daysBetween(week1(y), d)/7 + 1
		if n > weeks(y) {
			return has(weekNos, 1)
		}
		return has(weekNos, n) || has(weekNos, n-weeks(y)-1)
	}
	if has(weekNos, -1) {
		return true
	}
	last := weeks(y - 1)
	if daysBefore(y-1) < 4 {
		last = 52 + ((daysInYear(y)-daysBefore(y))%7)/4
	}
	return has(weekNos, last)
}

// passes reports whether date d passes the rule's BY parts.
func (m *refModel) passes(d time.Time) bool {
	r := &m.rule
	y, mo, dom := d.Date()
	if len(r.months) > 0 && !has(r.months, int(mo)) {
		return false
	}
	if len(r.weekNos) > 0 && !inWeekNo(d, r.wkst, r.weekNos) {
		return false
	}
	if len(r.yearDays) > 0 {
		doy, n := d.YearDay(), daysInYear(y)
		if !has(r.yearDays, doy) && !has(r.yearDays, doy-n-1) {
			return false
		}
	}
	mday := has(r.monthDays, dom) || has(r.monthDays, dom-daysInMonth(y, mo)-1)
	var plain, nth, hasPlain, hasNth bool
	for _, bd := range r.byDay {
		if bd.n == 0 {
			hasPlain = true
			plain = plain || d.Weekday() == bd.wd
			continue
		}
		hasNth = true
		if d.Weekday() != bd.wd {
			continue
		}
		// Count the same weekdays before and after d in the month, or in
		// the year for a YEARLY rule without BYMONTH.
		first, last := dateOf(y, mo, 1), dateOf(y, mo, daysInMonth(y, mo))
		if r.freq == "YEARLY" && len(r.months) == 0 {
			first, last = dateOf(y, time.January, 1), dateOf(y, time.December, 31)
		}
		before, after := 0, 0
		for x := first; !x.After(last); x = addDays(x, 1) {
			if x.Weekday() == d.Weekday() {
				if x.Before(d) {
					before++
				} else if x.After(d) {
					after++
				}
			}
		}
		nth = nth || bd.n == before+1 || bd.n == -(after+1)
	}
	if hasPlain && !plain {
		return false
	}
	if r.typed {
		return !(len(r.monthDays) > 0 || hasNth) || mday || nth
	}
	return (len(r.monthDays) == 0 || mday) && (!hasNth || nth)
}

// period returns the first and last date of the period holding d, and
// whether the period is in step with the anchor.
func (m *refModel) period(d time.Time) (first, last time.Time, inStep bool) {
	r := &m.rule
	a := m.c.anchor
	switch r.freq {
	case "DAILY":
		return d, d, (daysBetween(a, d)%r.interval+r.interval)%r.interval == 0
	case "WEEKLY":
		first = weekStart(d, r.wkst)
		weeks := daysBetween(weekStart(a, r.wkst), first) / 7
		return first, addDays(first, 6), (weeks%r.interval+r.interval)%r.interval == 0
	case "MONTHLY":
		first = dateOf(d.Year(), d.Month(), 1)
		months := (d.Year()-a.Year())*12 + int(d.Month()) - int(a.Month())
		return first, addDays(first.AddDate(0, 1, 0), -1), (months%r.interval+r.interval)%r.interval == 0
	}
	first = dateOf(d.Year(), time.January, 1)
	years := d.Year() - a.Year()
	return first, dateOf(d.Year(), time.December, 31), (years%r.interval+r.interval)%r.interval == 0
}

// ruleDate reports whether the rule, before COUNT and UNTIL, starts a
// window on date d.
func (m *refModel) ruleDate(d time.Time) bool {
	first, last, inStep := m.period(d)
	if !inStep {
		return false
	}
	days, ok := m.periods[first]
	if !ok {
		for x := first; !x.After(last); x = addDays(x, 1) {
			if m.passes(x) {
				days = append(days, x)
			}
		}
		if len(m.rule.setPos) > 0 {
			var kept []time.Time
			for i, x := range days {
				if has(m.rule.setPos, i+1) || has(m.rule.setPos, i-len(days)) {
					kept = append(kept, x)
				}
			}
			days = kept
		}
		m.periods[first] = days
	}
	for _, x := range days {
		if x.Equal(d) {
			return true
		}
	}
	return false
}

// startsOn reports whether a window starts on date d.
func (m *refModel) startsOn(d time.Time) bool {
	r := &m.rule
	bounded := r.count > 0 || r.untilKind != ""
	if bounded && d.Before(m.c.anchor) {
		return false
	}
	if r.count > 0 {
		// Count the rule's dates from the anchor up to d.
		for m.countLast.IsZero() && !m.countTo.After(d) {
			if m.ruleDate(m.countTo) {
				if m.countN++; m.countN == r.count {
					m.countLast = m.countTo
				}
			}
			m.countTo = addDays(m.countTo, 1)
		}
		if !m.countLast.IsZero() && d.After(m.countLast) {
			return false
		}
	}
	switch r.untilKind {
	case "date":
		if d.After(r.until) {
			return false
		}
	case "local":
		y, mo, dd := d.Date()
		if time.Date(y, mo, dd, m.c.hh, m.c.mm, 0, 0, time.UTC).After(r.until) {
			return false
		}
	case "utc":
		if !m.ruleDate(d) {
			return false
		}
		if m.start(d).After(r.until) {
			return false
		}
	}
	return m.ruleDate(d)
}

// fill completes an RRULE from the anchor as RFC 5545 completes it from
// DTSTART.
func (m *refModel) fill() {
	r := m.rule
	r.months = slices.Clone(r.months)
	if !r.typed && len(r.weekNos)+len(r.yearDays)+len(r.monthDays)+len(r.byDay) == 0 {
		a := m.c.anchor
		switch r.freq {
		case "YEARLY":
			if len(r.months) == 0 {
				r.months = []int{int(a.Month())}
			}
			r.monthDays = []int{a.Day()}
		case "MONTHLY":
			r.monthDays = []int{a.Day()}
		case "WEEKLY":
			r.byDay = []refWeekday{{wd: a.Weekday()}}
		}
	}
	m.rule = r
}

func newRefModel(c *refCase) *refModel {
	m := &refModel{c: c, rule: c.rule, periods: map[time.Time][]time.Time{}, starts: map[time.Time]time.Time{}, countTo: c.anchor}
	m.fill()
	s := c.spec.Schedule
	if s != nil {
		for _, e := range s.Exclude {
			if e.StartDate != "" {
				sd, _ := time.Parse("2006-01-02", e.StartDate)
				ed, _ := time.Parse("2006-01-02", e.EndDate)
				m.excl = append(m.excl, refExclusion{m.wallInstant(sd, 0, 0), m.wallInstant(addDays(ed, 1), 0, 0), e.Reason})
			} else {
				m.excl = append(m.excl, refExclusion{e.Start.Time, e.End.Time, e.Reason})
			}
		}
	}
	margin := c.horizon + 80*refDay + c.dur
	m.lo, m.hi = c.from.Add(-margin), c.to.Add(margin)
	m.build()
	return m
}

// refOccurrence is one occurrence [start, end), the reference's own type
// (it shares nothing with the engine but the API types and the results it
// compares).
type refOccurrence struct{ start, end time.Time }

// occurrencesAround returns the occurrences that may hold an instant of
// [lo, hi).
func (m *refModel) occurrencesAround(lo, hi time.Time) []refOccurrence {
	var out []refOccurrence
	for d := addDays(m.localDate(lo.Add(-m.c.dur)), -2); !d.After(addDays(m.localDate(hi), 2)); d = addDays(d, 1) {
		if m.startsOn(d) {
			s := m.start(d)
			out = append(out, refOccurrence{s, s.Add(m.c.dur)})
		}
	}
	return out
}

// build lists the instants where permission may change in [lo, hi) and
// whether the spec permits on each segment, asking the predicate at each
// segment's start.
func (m *refModel) build() {
	spec := m.c.spec
	set := map[time.Time]bool{m.lo: true, m.hi: true}
	var occ []refOccurrence
	if spec.Schedule != nil && spec.Strategy == lullv1alpha1.StrategySchedule {
		occ = m.occurrencesAround(m.lo, m.hi)
		for _, o := range occ {
			set[o.start], set[o.end] = true, true
		}
		for _, e := range m.excl {
			set[e.start], set[e.end] = true, true
		}
	}
	if o := spec.Override; o != nil {
		set[o.Until.Time] = true
	}
	for t := range set {
		if !t.Before(m.lo) && !t.After(m.hi) {
			m.bounds = append(m.bounds, t)
		}
	}
	sort.Slice(m.bounds, func(i, j int) bool { return m.bounds[i].Before(m.bounds[j]) })
	for _, b := range m.bounds {
		m.permitted = append(m.permitted, m.permittedAt(b, occ))
	}
}

// permittedAt is the predicate: does the spec permit at t?
func (m *refModel) permittedAt(t time.Time, occ []refOccurrence) bool {
	spec := m.c.spec
	if o := spec.Override; o != nil && t.Before(o.Until.Time) {
		return o.Strategy == lullv1alpha1.OverridePermissive
	}
	switch spec.Strategy {
	case lullv1alpha1.StrategyPermissive:
		return true
	case lullv1alpha1.StrategyRestrictive:
		return false
	}
	in := false
	for _, o := range occ {
		in = in || (!t.Before(o.start) && t.Before(o.end))
	}
	if !in {
		return false
	}
	_, excluded := m.excludedAt(t)
	return !excluded
}

// excludedAt returns the exclusion holding t that starts first (the first
// listed of those starting together).
func (m *refModel) excludedAt(t time.Time) (refExclusion, bool) {
	best, found := refExclusion{}, false
	for _, e := range m.excl {
		if !t.Before(e.start) && t.Before(e.end) && (!found || e.start.Before(best.start)) {
			best, found = e, true
		}
	}
	return best, found
}

// noStartAfter reports whether the rule starts no window after t, up to
// the end of the range the reference looks at; a rule said to have
// ended must not.
func (m *refModel) noStartAfter(t time.Time) bool {
	if m.rule.count == 0 && m.rule.untilKind == "" {
		return false // a rule without COUNT or UNTIL never ends
	}
	if !m.lastKnown {
		for d := m.localDate(m.hi); !d.Before(m.localDate(m.lo)); d = addDays(d, -1) {
			if m.startsOn(d) {
				m.lastStart = m.start(d)
				break
			}
		}
		m.lastKnown = true
	}
	return !m.lastStart.After(t)
}

// segment returns the index of the segment holding t.
func (m *refModel) segment(t time.Time) int {
	return sort.Search(len(m.bounds), func(i int) bool { return m.bounds[i].After(t) }) - 1
}

// refRun is a maximal run of segments with one state. A start or end at
// the edge of the range the reference looks at is not known.
type refRun struct {
	start, end            time.Time
	startKnown, endKnown  bool
	permitted, exists     bool
	startIndex, nextIndex int
}

// runAt returns the run holding t.
func (m *refModel) runAt(t time.Time) refRun {
	i := m.segment(t)
	return m.runFrom(i)
}

func (m *refModel) runFrom(i int) refRun {
	p := m.permitted[i]
	lo, hi := i, i
	for lo > 0 && m.permitted[lo-1] == p {
		lo--
	}
	for hi+1 < len(m.bounds)-1 && m.permitted[hi+1] == p {
		hi++
	}
	r := refRun{start: m.bounds[lo], end: m.bounds[hi+1], startKnown: lo > 0, endKnown: hi+1 < len(m.bounds)-1,
		permitted: p, exists: true, startIndex: lo, nextIndex: hi + 1}
	return r
}

// nextRun returns the permitted run holding t, or the first after it.
func (m *refModel) nextRun(t time.Time) refRun {
	r := m.runAt(t)
	if r.permitted {
		return r
	}
	if r.nextIndex >= len(m.bounds)-1 {
		return refRun{}
	}
	return m.runFrom(r.nextIndex)
}

// ---- the comparison ----

// The engine's searches are bounded as docs/windows.md says; the
// reference answers exactly, so it holds the engine to those bounds:
//   - every period that starts by now+horizon is found (a start is
//     compared exactly up to the horizon; one reported beyond it must be
//     right too);
//   - a period is followed 33 days past the horizon before it is called
//     endless: an end up to refExtend past the horizon is compared
//     exactly, a later one may be reported as never;
//   - looking back, a state's start is known when it began within the
//     horizon. The engine finds it from the occurrences that start within
//     the horizon (with a day of margin for local dates), so a start less
//     than sinceDoubt after the horizon's edge may be reported as not
//     known; one reported must be right.
const refExtend = 32 * refDay // 33 days, less a day of margin for local dates

func (c *refCase) sinceDoubt() time.Duration { return c.dur + 2*refDay }

type refChecker struct {
	t   *testing.T
	c   *refCase
	m   *refModel
	w   *Window
	bad int
	st  *refStats
}

// refStats counts what was compared exactly, to show the test is not
// vacuous.
type refStats struct {
	instants, permitted, excluded, noWindow, ended, since, nextStart, ends, forever, upcoming int
}

func (k *refChecker) fail(now time.Time, format string, args ...any) {
	k.t.Helper()
	k.bad++
	if k.bad > 3 {
		return
	}
	spec, _ := json.Marshal(k.c.spec)
	k.t.Errorf("at %s (%s): %s\nspec: %s\nhorizon: %s", now.UTC().Format(time.RFC3339Nano), now.In(k.c.loc).Format("2006-01-02 15:04:05 MST"),
		fmt.Sprintf(format, args...), spec, k.c.horizon)
}

// checkEnd compares the end of a period the engine found searching from
// at with the reference's.
func (k *refChecker) checkEnd(now, at time.Time, run refRun, got time.Time) (sure bool) {
	limit := at.Add(k.c.horizon)
	switch {
	case run.endKnown && !run.end.After(limit.Add(refExtend)):
		k.st.ends++
		if !got.Equal(run.end) {
			k.fail(now, "period ends %s, want %s", fmtReported(got), run.end.UTC().Format(time.RFC3339))
		}
		return true
	case run.endKnown || k.m.hi.After(limit.Add(refExtend+2*refDay)):
		k.st.forever++
		if !got.Equal(Forever) && !(run.endKnown && got.Equal(run.end)) {
			k.fail(now, "period ends %s; it goes on past the search horizon %s, want its end or never", fmtReported(got), limit.UTC().Format(time.RFC3339))
		}
		return run.endKnown && got.Equal(run.end)
	}
	return false
}

func (k *refChecker) checkInstant(now time.Time) {
	c, m, w := k.c, k.m, k.w
	res := w.Evaluate(now)
	i := m.segment(now)
	want := m.permitted[i]
	k.st.instants++
	if want {
		k.st.permitted++
	}
	if res.Reason == ReasonExcluded {
		k.st.excluded++
	}
	if res.Reason == ReasonNoWindow {
		k.st.noWindow++
	}
	if res.Ended {
		k.st.ended++
	}
	if res.Permitted != want {
		k.fail(now, "permitted %v, want %v (%s)", res.Permitted, want, res.Message())
		return
	}
	if res.HasNext && !res.Next.End.After(res.Next.Start) {
		k.fail(now, "empty next period %v", res.Next)
	}
	switch {
	case res.Permitted && !res.Until.Equal(res.Next.End),
		!res.Permitted && res.HasNext && !res.Until.Equal(res.Next.Start),
		!res.HasNext && !res.Until.Equal(Forever):
		k.fail(now, "until %s does not follow next %v", fmtReported(res.Until), res.Next)
	}
	// The reason.
	o := c.spec.Override
	switch {
	case o != nil && now.Before(o.Until.Time):
		if res.Reason != ReasonOverride || res.Detail != o.Reason || !res.Since.IsZero() {
			k.fail(now, "reason %s %q since %s, want Override %q with no since", res.Reason, res.Detail, fmtReported(res.Since), o.Reason)
		}
	case c.spec.Strategy != lullv1alpha1.StrategySchedule:
		if string(res.Reason) != string(c.spec.Strategy) {
			k.fail(now, "reason %s, want %s", res.Reason, c.spec.Strategy)
		}
	case res.Permitted:
		if res.Reason != ReasonSchedule {
			k.fail(now, "reason %s, want Schedule", res.Reason)
		}
	case !res.HasNext:
		if res.Reason != ReasonNoWindow {
			k.fail(now, "reason %s with no next window, want NoWindow", res.Reason)
		}
		if res.Ended && !m.noStartAfter(now) {
			k.fail(now, "ended (%s), but the rule has a start after now", res.Message())
		}
	default:
		e, excluded := m.excludedAt(now)
		switch {
		case excluded && (res.Reason != ReasonExcluded || res.Detail != e.reason):
			k.fail(now, "reason %s %q, want Excluded %q", res.Reason, res.Detail, e.reason)
		case !excluded && res.Reason != ReasonSchedule:
			k.fail(now, "reason %s %q, want Schedule", res.Reason, res.Detail)
		}
	}

	// Since: when the state began.
	cur := m.runAt(now)
	back := now.Add(-c.horizon)
	switch {
	case cur.startKnown && !cur.start.Before(back.Add(c.sinceDoubt())):
		k.st.since++
		if !res.Since.Equal(cur.start) {
			k.fail(now, "since %s, want %s", fmtReported(res.Since), cur.start.UTC().Format(time.RFC3339))
		}
	case !cur.startKnown || cur.start.Before(back.Add(-2*refDay)):
		if !res.Since.IsZero() {
			k.fail(now, "since %s; the state began before the search horizon, want not known", fmtReported(res.Since))
		}
	case !res.Since.IsZero() && !res.Since.Equal(cur.start):
		k.fail(now, "since %s, want %s or not known (near the search horizon)", fmtReported(res.Since), cur.start.UTC().Format(time.RFC3339))
	}
	if res.Permitted && res.Since.IsZero() && !res.Next.Start.Equal(now) {
		k.fail(now, "next starts %s; a start not known is reported as now", fmtReported(res.Next.Start))
	}

	// Next: the current or next period.
	next := m.nextRun(now)
	limit := now.Add(c.horizon)
	switch {
	case !next.exists:
		if res.HasNext {
			k.fail(now, "next %v, want none", res.Next)
		}
	case next.permitted && cur.permitted:
		k.checkEnd(now, now, next, res.Next.End)
	case !next.start.After(limit):
		k.st.nextStart++
		if !res.HasNext || !res.Next.Start.Equal(next.start) {
			k.fail(now, "next %v (has %v), want it to start %s", res.Next, res.HasNext, next.start.UTC().Format(time.RFC3339))
			break
		}
		k.checkEnd(now, now, next, res.Next.End)
	case res.HasNext && !res.Next.Start.Equal(next.start):
		k.fail(now, "next %v, want it to start %s (or none: beyond the horizon)", res.Next, next.start.UTC().Format(time.RFC3339))
	}

	// Upcoming: the periods after it, each searched from the end of the
	// one before, all starting by now+horizon.
	up := w.Upcoming(now, 4)
	at := now
	run := next
	for j := 0; ; j++ {
		if !run.exists || run.start.After(limit) {
			if len(up) > j {
				k.fail(now, "upcoming[%d] = %v, want none", j, up[j])
			}
			return
		}
		if j == 4 {
			return
		}
		if len(up) <= j {
			k.fail(now, "upcoming has %d periods, want one starting %s", len(up), run.start.UTC().Format(time.RFC3339))
			return
		}
		wantStart := run.start
		if run.permitted && !run.start.After(at) {
			wantStart = res.Next.Start // the start known or not, as compared above
		}
		k.st.upcoming++
		if !up[j].Start.Equal(wantStart) {
			k.fail(now, "upcoming[%d] starts %s, want %s", j, fmtReported(up[j].Start), wantStart.UTC().Format(time.RFC3339))
			return
		}
		if !k.checkEnd(now, at, run, up[j].End) {
			return
		}
		at = run.end
		if run.nextIndex >= len(m.bounds)-1 {
			return
		}
		run = m.runFrom(run.nextIndex)
		if !run.permitted {
			if run.nextIndex >= len(m.bounds)-1 {
				run = refRun{}
			} else {
				run = m.runFrom(run.nextIndex)
			}
		}
	}
}

// ---- the generator ----

// refZones: zones with what goes wrong most easily: DST in both
// hemispheres, half-hour and 2-hour shifts, negative DST, midnight
// transitions, a skipped day, transitions close together, no DST.
var refZones = []string{
	"UTC", "Europe/Berlin", "Europe/London", "Europe/Dublin", "America/New_York", "America/Santiago", "America/Havana",
	"America/St_Johns", "America/Sao_Paulo", "America/Asuncion", "Australia/Sydney", "Australia/Lord_Howe", "Pacific/Apia",
	"Pacific/Chatham", "Pacific/Auckland", "Africa/Casablanca", "Africa/Cairo", "Antarctica/Troll", "Asia/Tehran",
	"Asia/Gaza", "Asia/Beirut", "Asia/Kolkata", "Asia/Kathmandu", "Asia/Tokyo", "America/Godthab", "Europe/Moscow",
	"America/Scoresbysund", "Pacific/Kiritimati", "Asia/Pyongyang", "Europe/Chisinau",
}

func pick[T any](rng *rand.Rand, v ...T) T { return v[rng.Intn(len(v))] }

// someInts returns 1 to n distinct values from gen.
func someInts(rng *rand.Rand, n int, gen func() int) []int {
	var out []int
	for k := 1 + rng.Intn(n); len(out) < k; {
		if x := gen(); !has(out, x) {
			out = append(out, x)
		}
	}
	return out
}

func genRule(rng *rand.Rand) refRule {
	r := refRule{interval: 1, wkst: time.Monday}
	r.freq = pick(rng, "DAILY", "WEEKLY", "MONTHLY", "MONTHLY", "YEARLY", "YEARLY")
	switch rng.Intn(10) {
	case 0, 1, 2:
		r.interval = 2 + rng.Intn(3)
	case 3:
		r.interval = pick(rng, 7, 10, 18)
	}
	weekday := func() time.Weekday { return time.Weekday(rng.Intn(7)) }
	plainDays := func() {
		for _, d := range someInts(rng, 4, func() int { return rng.Intn(7) }) {
			r.byDay = append(r.byDay, refWeekday{wd: time.Weekday(d)})
		}
	}
	ordinalDays := func(most int) {
		for k := 1 + rng.Intn(3); k > 0; k-- {
			n := 1 + rng.Intn(most)
			if rng.Intn(2) == 0 {
				n = -n
			}
			r.byDay = append(r.byDay, refWeekday{n: n, wd: weekday()})
		}
	}
	monthDays := func() []int {
		return someInts(rng, 4, func() int {
			d := 1 + rng.Intn(31)
			if rng.Intn(3) == 0 {
				d = -d
			}
			return d
		})
	}
	months := func() []int { return someInts(rng, 4, func() int { return 1 + rng.Intn(12) }) }

	if rng.Intn(4) == 0 {
		// Typed: the forms the API's Recurrence has.
		r.typed = true
		switch r.freq {
		case "WEEKLY":
			plainDays()
		case "MONTHLY", "YEARLY":
			if r.freq == "YEARLY" {
				r.months = months()
			}
			switch rng.Intn(3) {
			case 0:
				r.monthDays = monthDays()
			case 1:
				ordinalDays(5)
			default:
				r.monthDays = monthDays()
				ordinalDays(5)
			}
		}
		return r
	}

	r.wkst = pick(rng, time.Monday, time.Monday, time.Sunday, weekday())
	if rng.Intn(3) == 0 {
		r.months = months()
	}
	switch r.freq {
	case "DAILY":
		if rng.Intn(2) == 0 {
			plainDays()
		}
		if rng.Intn(3) == 0 {
			r.monthDays = monthDays()
		}
	case "WEEKLY":
		if rng.Intn(4) != 0 {
			plainDays()
		}
	case "MONTHLY":
		switch rng.Intn(5) {
		case 0: // from the anchor
		case 1:
			r.monthDays = monthDays()
		case 2:
			if rng.Intn(2) == 0 {
				plainDays()
			} else {
				ordinalDays(5)
			}
		default: // both: BYDAY limits BYMONTHDAY
			r.monthDays = monthDays()
			if rng.Intn(2) == 0 {
				plainDays()
			} else {
				ordinalDays(5)
			}
		}
	case "YEARLY":
		switch rng.Intn(7) {
		case 0: // from the anchor
		case 1:
			r.monthDays = monthDays()
		case 2:
			r.weekNos = someInts(rng, 3, func() int {
				n := pick(rng, 1, 2, 20, 26, 51, 52, 53, 1+rng.Intn(53))
				if rng.Intn(3) == 0 {
					n = -n
				}
				return n
			})
			if rng.Intn(2) == 0 {
				plainDays()
			}
		case 3:
			r.yearDays = someInts(rng, 3, func() int {
				n := pick(rng, 1, 59, 60, 100, 200, 365, 366, 1+rng.Intn(366))
				if rng.Intn(3) == 0 {
					n = -n
				}
				return n
			})
			if rng.Intn(3) == 0 {
				plainDays()
			}
		case 4:
			if len(r.months) > 0 {
				ordinalDays(5)
			} else {
				ordinalDays(53)
			}
		default:
			r.monthDays = monthDays()
			if rng.Intn(2) == 0 {
				plainDays()
			} else if len(r.months) > 0 {
				ordinalDays(5)
			} else {
				ordinalDays(53)
			}
		}
	}
	if rng.Intn(5) == 0 && len(r.months)+len(r.weekNos)+len(r.yearDays)+len(r.monthDays)+len(r.byDay) > 0 {
		r.setPos = someInts(rng, 2, func() int {
			n := 1 + rng.Intn(pick(rng, 2, 4, 8))
			if rng.Intn(2) == 0 {
				n = -n
			}
			return n
		})
	}
	// Ordinals and plain weekdays do not mix (refused).
	if len(r.byDay) > 1 && (r.byDay[0].n == 0) != (r.byDay[len(r.byDay)-1].n == 0) {
		r.byDay = r.byDay[:1]
	}
	return r
}

// genCase makes a random spec around a transition of a random zone.
func genCase(rng *rand.Rand, allZones []string) *refCase {
	zone := pick(rng, refZones...)
	if rng.Intn(2) == 0 && len(allZones) > 0 {
		zone = pick(rng, allZones...)
	}
	loc, err := time.LoadLocation(zone)
	if err != nil {
		panic(err)
	}
	c := &refCase{loc: loc}
	// The queries lie around a transition (or any time for a zone that
	// has none), from 2011 (Apia's skipped day) to 2032.
	center := time.Date(2011+rng.Intn(21), time.Month(1+rng.Intn(12)), 1+rng.Intn(28), rng.Intn(24), 0, 0, 0, time.UTC)
	if zone == "Pacific/Apia" && rng.Intn(2) == 0 {
		center = time.Date(2011, 12, 29, 10, 0, 0, 0, time.UTC)
	}
	trs := transitions(loc, center.Add(-200*refDay), center.Add(200*refDay))
	var tr time.Time
	if len(trs) > 0 {
		tr = trs[rng.Intn(len(trs))]
		center = tr.Add(time.Duration(rng.Intn(48)-24) * time.Hour)
	}
	// Start times: in the gap or the fold of that transition, or any.
	c.hh, c.mm = rng.Intn(24), pick(rng, 0, 0, 0, 30, rng.Intn(60))
	if !tr.IsZero() && rng.Intn(2) == 0 {
		_, before := tr.Add(-time.Second).In(loc).Zone()
		_, after := tr.In(loc).Zone()
		lo, hi := before, after
		if lo > hi {
			lo, hi = hi, lo
		}
		w := tr.Add(time.Duration(lo)*time.Second + time.Duration(rng.Intn(max(1, (hi-lo)/60)+1))*time.Minute).UTC()
		c.hh, c.mm = w.Hour(), w.Minute()
	}
	switch k := rng.Intn(20); {
	case k < 2:
		c.dur = time.Duration(1+rng.Intn(59)) * time.Minute
	case k < 9:
		c.dur = time.Duration(1+rng.Intn(6)) * time.Hour
	case k < 12:
		c.dur = 23*time.Hour + time.Duration(rng.Intn(121))*time.Minute
	case k < 14:
		c.dur = 24 * time.Hour
	case k < 17:
		c.dur = time.Duration(2+rng.Intn(9)) * refDay
	default:
		c.dur = time.Duration(20*24+rng.Intn(11*24+1)) * time.Hour
	}
	c.rule = genRule(rng)
	r := &c.rule
	a := center.AddDate(-rng.Intn(12), -rng.Intn(12), -rng.Intn(28))
	if !r.typed {
		switch rng.Intn(8) {
		case 0, 1:
			r.count = pick(rng, 1, 2, 3, 5, 10, 30, 1+rng.Intn(100))
			a = center.AddDate(0, -rng.Intn(24), -rng.Intn(28))
		case 2:
			r.untilKind = pick(rng, "date", "local", "utc")
			a = center.AddDate(0, -rng.Intn(24), -rng.Intn(28))
			u := center.Add(time.Duration(rng.Intn(120*24)-60*24) * time.Hour)
			switch r.untilKind {
			case "date":
				r.until = dateOf(u.Year(), u.Month(), u.Day())
			case "local":
				r.until = time.Date(u.Year(), u.Month(), u.Day(), pick(rng, c.hh, rng.Intn(24)), pick(rng, c.mm, 0, rng.Intn(60)), 0, 0, time.UTC)
			default:
				r.until = u.Truncate(time.Minute)
			}
		}
	}
	c.anchor = dateOf(a.Year(), a.Month(), a.Day())
	c.horizon = pick(rng, 7*refDay, 30*refDay, 60*refDay, 120*refDay, 120*refDay, 400*refDay)
	if rng.Intn(20) == 0 && r.freq != "DAILY" {
		c.horizon = DefaultHorizon
	}
	c.from = center.Add(-time.Duration(rng.Intn(40*24)) * time.Hour)
	c.to = center.Add(time.Duration(1+rng.Intn(40*24)) * time.Hour)

	sched := &lullv1alpha1.Schedule{TimeZone: zone, StartTime: fmt.Sprintf("%02d:%02d", c.hh, c.mm),
		Duration: lullv1alpha1.Duration{Duration: c.dur}, Anchor: c.anchor.Format("2006-01-02")}
	if r.typed {
		sched.Recurrence = r.recurrence()
	} else {
		order := make([]int, 1+rng.Intn(7))
		for i := range order {
			order[i] = rng.Intn(100)
		}
		sched.RRule = r.text(order)
	}
	// Exclusions: local dates and instants, nested, overlapping, touching.
	day := func(t time.Time) string { return t.In(loc).Format("2006-01-02") }
	span := c.to.Sub(c.from)
	someInstant := func() time.Time {
		return c.from.Add(time.Duration(rng.Int63n(int64(span)))).Add(-20 * refDay).Truncate(time.Minute)
	}
	for k := pick(rng, 0, 0, 1, 2, 3, 4); k > 0; k-- {
		s := someInstant()
		switch rng.Intn(4) {
		case 0, 1:
			e := s.Add(time.Duration(rng.Intn(20)) * refDay)
			sched.Exclude = append(sched.Exclude, lullv1alpha1.Exclusion{StartDate: day(s), EndDate: day(e), Reason: fmt.Sprintf("dates %d", k)})
		default:
			e := s.Add(time.Duration(1+rng.Int63n(int64(10*refDay/time.Minute))) * time.Minute)
			sched.Exclude = append(sched.Exclude, lullv1alpha1.Exclusion{Start: &metav1.Time{Time: s}, End: &metav1.Time{Time: e}, Reason: fmt.Sprintf("instants %d", k)})
		}
		if rng.Intn(3) == 0 {
			// One inside the one just added, or touching its end.
			last := sched.Exclude[len(sched.Exclude)-1]
			is := s.Add(time.Duration(rng.Intn(3*24)) * time.Hour)
			if last.Start != nil && rng.Intn(2) == 0 {
				is = last.End.Time
			}
			ie := is.Add(time.Duration(1+rng.Intn(24*60)) * time.Minute)
			if rng.Intn(2) == 0 {
				sched.Exclude = append(sched.Exclude, lullv1alpha1.Exclusion{StartDate: day(is), EndDate: day(is), Reason: "inner"})
			} else {
				sched.Exclude = append(sched.Exclude, lullv1alpha1.Exclusion{Start: &metav1.Time{Time: is}, End: &metav1.Time{Time: ie}, Reason: "inner"})
			}
		}
	}
	if rng.Intn(2) == 0 {
		rng.Shuffle(len(sched.Exclude), func(i, j int) { sched.Exclude[i], sched.Exclude[j] = sched.Exclude[j], sched.Exclude[i] })
	}
	c.spec = &lullv1alpha1.MaintenanceWindowSpec{Strategy: lullv1alpha1.StrategySchedule, Schedule: sched}
	switch rng.Intn(30) {
	case 0:
		c.spec.Strategy = lullv1alpha1.StrategyPermissive
	case 1:
		c.spec.Strategy = lullv1alpha1.StrategyRestrictive
	}
	if rng.Intn(4) == 0 {
		c.spec.Override = &lullv1alpha1.Override{Strategy: pick(rng, lullv1alpha1.OverridePermissive, lullv1alpha1.OverrideRestrictive),
			Until: metav1.Time{Time: someInstant().Add(20 * refDay)}, Reason: "INC-1"}
	}
	// Instants to ask about besides random ones: the transition.
	if !tr.IsZero() {
		c.extra = append(c.extra, tr, tr.Add(-time.Nanosecond), tr.Add(time.Hour))
	}
	return c
}

// queries: random instants in [from, to), and the reference's
// boundaries there (where the answers change) and just before them.
func (c *refCase) queries(rng *rand.Rand, m *refModel) []time.Time {
	var out []time.Time
	span := int64(c.to.Sub(c.from))
	for k := 0; k < 25; k++ {
		out = append(out, c.from.Add(time.Duration(rng.Int63n(span))))
	}
	for _, b := range m.bounds {
		if !b.Before(c.from) && b.Before(c.to) && rng.Intn(3) == 0 {
			out = append(out, b, b.Add(-time.Nanosecond))
		}
	}
	for _, t := range c.extra {
		if !t.Before(c.from) && t.Before(c.to) {
			out = append(out, t)
		}
	}
	if len(out) > 80 {
		rng.Shuffle(len(out), func(i, j int) { out[i], out[j] = out[j], out[i] })
		out = out[:80]
	}
	return out
}

// TestReferenceEvaluator compares the engine with the reference over
// random specs: LULL_REFERENCE_SPECS of them (1000 by default, about two
// seconds) from LULL_REFERENCE_SEED (fixed by default; make fuzz runs
// many more from a seed of its own, which it prints).
func TestReferenceEvaluator(t *testing.T) {
	n, seed := 1000, int64(28)
	var err error
	if v := os.Getenv("LULL_REFERENCE_SPECS"); v != "" {
		if n, err = strconv.Atoi(v); err != nil || n < 1 {
			t.Fatalf("LULL_REFERENCE_SPECS=%q: want a count of specs, at least 1", v)
		}
	}
	if v := os.Getenv("LULL_REFERENCE_SEED"); v != "" {
		if seed, err = strconv.ParseInt(v, 10, 64); err != nil {
			t.Fatalf("LULL_REFERENCE_SEED=%q: want a whole number", v)
		}
	}
	t.Logf("%d specs from seed %d (LULL_REFERENCE_SEED=%d reproduces them)", n, seed, seed)
	allZones := zoneNames(t)
	rng := rand.New(rand.NewSource(seed))
	failed := 0
	var st refStats
	for i := 0; i < n && failed < 5; i++ {
		c := genCase(rng, allZones)
		qrng := rand.New(rand.NewSource(rng.Int63()))
		if !checkCase(t, c, qrng, &st) {
			failed++
			t.Logf("spec %d of seed %d failed", i, seed)
		}
	}
	t.Logf("%d instants asked (%d permitted, %d excluded, %d with no window, %d of them after the rule ended); compared exactly: %d since, %d next starts, %d ends, %d ends beyond the horizon, %d upcoming starts",
		st.instants, st.permitted, st.excluded, st.noWindow, st.ended, st.since, st.nextStart, st.ends, st.forever, st.upcoming)
}

func checkCase(t *testing.T, c *refCase, rng *rand.Rand, st *refStats) bool {
	t.Helper()
	w, err := Compile(c.spec, Options{Horizon: c.horizon})
	if err != nil {
		spec, _ := json.Marshal(c.spec)
		t.Errorf("compile: %v\nspec: %s", err, spec)
		return false
	}
	m := newRefModel(c)
	k := &refChecker{t: t, c: c, m: m, w: w, st: st}
	for _, now := range c.queries(rng, m) {
		k.checkInstant(now)
		if k.bad > 0 {
			break
		}
	}
	return k.bad == 0
}

// FuzzReference is TestReferenceEvaluator for go's fuzzer: each input is
// a seed for one random spec.
func FuzzReference(f *testing.F) {
	for _, s := range []int64{1, 28, 2026} {
		f.Add(s)
	}
	zones := []string{}
	f.Fuzz(func(t *testing.T, seed int64) {
		rng := rand.New(rand.NewSource(seed))
		checkCase(t, genCase(rng, zones), rand.New(rand.NewSource(rng.Int63())), &refStats{})
	})
}
