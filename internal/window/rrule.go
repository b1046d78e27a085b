package window

import (
	"fmt"
	"strconv"
	"strings"
	"time"
)

// rruleParts is an RFC 5545 RRULE as written, checked against the RFC's
// rules for its FREQ, before the anchor fills in what it leaves out.
type rruleParts struct {
	freq      freq
	interval  int
	count     int // 0: no COUNT
	until     *rruleUntil
	untilText string
	wkst      time.Weekday
	months    []int
	weekNos   []int
	yearDays  []int
	monthDays []int
	byDay     []ordinalWeekday // n == 0: every such weekday of the period
	setPos    []int
}

// ordinalWeekday is the nth weekday of a month or year; n < 0 counts from
// its end, 0 means every such weekday.
type ordinalWeekday struct {
	n   int
	day time.Weekday
}

// rruleUntil is an UNTIL value: a local date, a local date and time, or a
// UTC instant.
type rruleUntil struct {
	day int       // the local date (date and local forms)
	sec int       // seconds into that day (local and UTC forms); -1 for a date
	utc bool      // the UTC form: at is the instant
	at  time.Time // the UTC form's instant
}

// maxCount bounds COUNT: compiling a rule with COUNT walks its occurrences
// from the anchor once, so the cost of that walk has a bound.
const maxCount = 10000

var rruleDays = map[string]time.Weekday{
	"MO": time.Monday, "TU": time.Tuesday, "WE": time.Wednesday, "TH": time.Thursday,
	"FR": time.Friday, "SA": time.Saturday, "SU": time.Sunday,
}

var rruleFreqs = map[string]freq{"DAILY": freqDaily, "WEEKLY": freqWeekly, "MONTHLY": freqMonthly, "YEARLY": freqYearly}

// supportedParts lists the rule parts lull reads, for messages.
const supportedParts = "FREQ, INTERVAL, COUNT, UNTIL, BYMONTH, BYWEEKNO, BYYEARDAY, BYMONTHDAY, BYDAY, BYSETPOS, WKST"

// parseRRule parses an RFC 5545 RRULE with a daily or coarser FREQ. The
// start time, time zone and first day come from the schedule (startTime,
// timeZone, anchor), so DTSTART and the parts that select times of day
// (BYHOUR, BYMINUTE, BYSECOND) and sub-daily frequencies are refused, as
// are the combinations the RFC forbids.
func parseRRule(s string) (*rruleParts, error) {
	s = strings.TrimSpace(s)
	if len(s) >= 6 && strings.EqualFold(s[:6], "RRULE:") {
		s = s[6:]
	}
	if s == "" {
		return nil, fmt.Errorf("empty RRULE; expected e.g. FREQ=WEEKLY;BYDAY=SA")
	}
	r := &rruleParts{interval: 1, wkst: time.Monday}
	seen := map[string]bool{}
	var byday string
	for _, part := range strings.Split(s, ";") {
		k, v, ok := strings.Cut(part, "=")
		k = strings.ToUpper(strings.TrimSpace(k))
		v = strings.ToUpper(strings.TrimSpace(v))
		if !ok || k == "" || v == "" {
			return nil, fmt.Errorf("RRULE part %q is not NAME=VALUE", part)
		}
		if seen[k] {
			return nil, fmt.Errorf("RRULE part %s appears twice", k)
		}
		seen[k] = true
		if k == "BYDAY" {
			byday = v // read once FREQ is known
			continue
		}
		if err := r.parsePart(k, v); err != nil {
			return nil, err
		}
	}
	if !seen["FREQ"] {
		return nil, fmt.Errorf("RRULE needs FREQ")
	}
	if byday != "" {
		for _, d := range strings.Split(byday, ",") {
			o, err := parseByDay(d)
			if err != nil {
				return nil, err
			}
			r.byDay = append(r.byDay, o)
		}
	}
	if err := r.check(byday); err != nil {
		return nil, err
	}
	return r, nil
}

// parsePart reads one NAME=VALUE part of a rule other than BYDAY (which
// parseRRule reads once FREQ is known); k and v are upper case.
func (p *rruleParts) parsePart(k, v string) error {
	var err error
	switch k {
	case "FREQ":
		err = p.parseFreq(v)
	case "INTERVAL":
		p.interval, err = parseNumber(v, "INTERVAL", 1, 1000)
	case "COUNT":
		p.count, err = parseNumber(v, "COUNT", 1, maxCount)
	case "UNTIL":
		p.until, err = parseUntil(v)
		p.untilText = v
	case "WKST":
		wd, ok := rruleDays[v]
		if !ok {
			err = fmt.Errorf("WKST=%s must be one of MO TU WE TH FR SA SU", v)
		}
		p.wkst = wd
	case "BYMONTH":
		p.months, err = parseRRuleList(v, "BYMONTH", 1, 12, false)
	case "BYWEEKNO":
		p.weekNos, err = parseRRuleList(v, "BYWEEKNO", 1, 53, true)
	case "BYYEARDAY":
		p.yearDays, err = parseRRuleList(v, "BYYEARDAY", 1, 366, true)
	case "BYMONTHDAY":
		p.monthDays, err = parseRRuleList(v, "BYMONTHDAY", 1, 31, true)
	case "BYSETPOS":
		p.setPos, err = parseRRuleList(v, "BYSETPOS", 1, 366, true)
	case "BYHOUR", "BYMINUTE", "BYSECOND":
		err = fmt.Errorf("%s is not supported: a window starts once a day, at schedule.startTime", k)
	case "DTSTART":
		err = fmt.Errorf("DTSTART is not an RRULE part here: the first day is schedule.anchor and the time schedule.startTime in schedule.timeZone")
	default:
		err = fmt.Errorf("RRULE part %s is not supported (supported: %s)", k, supportedParts)
	}
	return err
}

func (p *rruleParts) parseFreq(v string) error {
	switch v {
	case "HOURLY", "MINUTELY", "SECONDLY":
		return fmt.Errorf("FREQ=%s is not supported: a window starts at most once a day, at schedule.startTime; use FREQ=DAILY", v)
	}
	f, ok := rruleFreqs[v]
	if !ok {
		return fmt.Errorf("FREQ=%s is not a frequency; use DAILY, WEEKLY, MONTHLY or YEARLY", v)
	}
	p.freq = f
	return nil
}

// check refuses what RFC 5545 says MUST NOT be written for the rule's
// FREQ, and what readers of the RFC disagree on.
func (p *rruleParts) check(byday string) error {
	if p.count > 0 && p.until != nil {
		return fmt.Errorf("COUNT and UNTIL must not both be given (RFC 5545); use one")
	}
	if len(p.weekNos) > 0 && p.freq != freqYearly {
		return fmt.Errorf("BYWEEKNO is only valid with FREQ=YEARLY (RFC 5545)")
	}
	if len(p.yearDays) > 0 && p.freq != freqYearly {
		return fmt.Errorf("BYYEARDAY is only valid with FREQ=YEARLY (RFC 5545)")
	}
	if len(p.monthDays) > 0 && p.freq == freqWeekly {
		return fmt.Errorf("BYMONTHDAY is not valid with FREQ=WEEKLY (RFC 5545); use FREQ=MONTHLY, or FREQ=DAILY to keep days of some weeks")
	}
	if err := p.checkOrdinals(byday); err != nil {
		return err
	}
	if len(p.setPos) > 0 && len(p.months)+len(p.weekNos)+len(p.yearDays)+len(p.monthDays)+len(p.byDay) == 0 {
		return fmt.Errorf("BYSETPOS needs another BY part to choose from (RFC 5545), e.g. BYDAY=MO,TU,WE,TH,FR;BYSETPOS=-1")
	}
	return nil
}

// checkOrdinals refuses BYDAY ordinals (-1MO, 2TU) where the RFC does not
// give them a meaning, or where RRULE implementations read them
// differently; byday is the part as written, for messages.
func (p *rruleParts) checkOrdinals(byday string) error {
	plain, ordinals := 0, 0
	for _, o := range p.byDay {
		if o.n == 0 {
			plain++
		} else {
			ordinals++
		}
	}
	if ordinals == 0 {
		return nil
	}
	switch {
	case p.freq != freqMonthly && p.freq != freqYearly:
		return fmt.Errorf("BYDAY=%s: ordinals are only valid with FREQ=MONTHLY or YEARLY", byday)
	case len(p.weekNos) > 0:
		return fmt.Errorf("BYDAY=%s: ordinals are not valid with BYWEEKNO (RFC 5545)", byday)
	case plain > 0:
		return fmt.Errorf("BYDAY=%s mixes weekdays with and without ordinals, which RRULE implementations read differently; use two windows", byday)
	}
	inMonth := p.freq == freqMonthly || len(p.months) > 0
	for _, o := range p.byDay {
		if inMonth && (o.n > 5 || o.n < -5) {
			return fmt.Errorf("BYDAY=%s: counted within a month (FREQ=MONTHLY, or BYMONTH given) an ordinal must be 1..5 or -5..-1", byday)
		}
	}
	return nil
}

func parseNumber(v, name string, lo, hi int) (int, error) {
	n, err := strconv.Atoi(v)
	if err != nil || n < lo || n > hi || strings.HasPrefix(v, "+") {
		return 0, fmt.Errorf("%s=%s must be a whole number from %d to %d", name, v, lo, hi)
	}
	return n, nil
}

// parseRRuleList parses a comma-separated list of whole numbers from lo
// to hi, or also from -hi to -lo when signed.
//
//nolint:unparam // lo is RFC 5545's lower bound of the rule part, said at each call (1 for all five today)
func parseRRuleList(v, name string, lo, hi int, signed bool) ([]int, error) {
	want := fmt.Sprintf("%d..%d", lo, hi)
	if signed {
		want += fmt.Sprintf(" or -%d..-%d", hi, lo)
	}
	var out []int
	for _, x := range strings.Split(v, ",") {
		n, err := strconv.Atoi(x)
		if err == nil && n < 0 && !signed {
			err = strconv.ErrRange
		}
		if a := max(n, -n); err != nil || a < lo || a > hi {
			return nil, fmt.Errorf("%s value %q must be %s", name, x, want)
		}
		out = append(out, n)
	}
	return out, nil
}

func parseByDay(s string) (ordinalWeekday, error) {
	if len(s) < 2 {
		return ordinalWeekday{}, fmt.Errorf("BYDAY value %q: expected a day such as MO or -1MO", s)
	}
	day, ok := rruleDays[s[len(s)-2:]]
	if !ok {
		return ordinalWeekday{}, fmt.Errorf("BYDAY value %q: day must be one of MO TU WE TH FR SA SU", s)
	}
	prefix := s[:len(s)-2]
	if prefix == "" {
		return ordinalWeekday{day: day}, nil
	}
	n, err := strconv.Atoi(prefix)
	if err != nil || n == 0 || n < -53 || n > 53 {
		return ordinalWeekday{}, fmt.Errorf("BYDAY value %q: ordinal must be 1..53 or -53..-1", s)
	}
	return ordinalWeekday{n: n, day: day}, nil
}

// parseUntil reads UNTIL as a date (20261231), a local date and time
// (20261231T235900) or a UTC instant (20261231T235900Z).
func parseUntil(v string) (*rruleUntil, error) {
	bad := fmt.Errorf("UNTIL=%s must be a date such as 20261231, a local time such as 20261231T235900 or a UTC time such as 20261231T235900Z", v)
	u := &rruleUntil{sec: -1}
	switch len(v) {
	case 8:
		t, err := time.Parse("20060102", v)
		if err != nil {
			return nil, bad
		}
		u.day = dayOf(t.Year(), t.Month(), t.Day())
	case 15, 16:
		layout := "20060102T150405"
		if len(v) == 16 {
			if v[15] != 'Z' {
				return nil, bad
			}
			layout += "Z"
			u.utc = true
		}
		t, err := time.Parse(layout, v)
		if err != nil {
			return nil, bad
		}
		u.day = dayOf(t.Year(), t.Month(), t.Day())
		u.sec = t.Hour()*3600 + t.Minute()*60 + t.Second()
		u.at = t.UTC()
	default:
		return nil, bad
	}
	return u, nil
}

// recurrence builds the engine's model of the rule. What the rule leaves
// out comes from the anchor, as RFC 5545 takes it from DTSTART (and as
// python-dateutil does): without BYWEEKNO, BYYEARDAY, BYMONTHDAY and
// BYDAY, a YEARLY rule starts on the anchor's day of the month in the
// anchor's month (or in the months of BYMONTH), a MONTHLY rule on the
// anchor's day of the month, a WEEKLY rule on the anchor's weekday. COUNT
// and UNTIL are applied by the caller, which knows the zone.
func (p *rruleParts) recurrence(anchorDay int) recurrence {
	r := recurrence{freq: p.freq, interval: p.interval, wkst: p.wkst, setPos: p.setPos, weekNos: p.weekNos,
		first: -unbounded, last: unbounded}
	months, monthDays, byDay := p.months, p.monthDays, p.byDay
	if len(p.weekNos)+len(p.yearDays)+len(p.monthDays)+len(p.byDay) == 0 {
		_, am, ad := civil(anchorDay)
		switch p.freq {
		case freqYearly:
			if len(months) == 0 {
				months = []int{int(am)}
			}
			monthDays = []int{ad}
		case freqMonthly:
			monthDays = []int{ad}
		case freqWeekly:
			byDay = []ordinalWeekday{{day: weekdayOf(anchorDay)}}
		}
	}
	for _, m := range months {
		r.months |= 1 << uint(m)
	}
	for _, d := range monthDays {
		if d > 0 {
			r.mdayPos |= 1 << uint(d)
		} else {
			r.mdayNeg |= 1 << uint(-d)
		}
	}
	for _, d := range p.yearDays {
		r.hasYday = true
		if d > 0 {
			r.ydayPos.set(d)
		} else {
			r.ydayNeg.set(-d)
		}
	}
	r.nthInYear = p.freq == freqYearly && len(months) == 0
	for _, o := range byDay {
		switch {
		case o.n == 0:
			r.weekdays |= 1 << uint(o.day)
		case o.n > 0:
			r.hasNth = true
			r.nth[o.day].pos |= 1 << uint(o.n)
		default:
			r.hasNth = true
			r.nth[o.day].neg |= 1 << uint(-o.n)
		}
	}
	r.setAnchor(anchorDay)
	return r
}

// setAnchor sets the day intervals count from.
func (r *recurrence) setAnchor(day int) {
	r.anchorDay = day
	r.anchorPeriod = r.periodOf(day)
}
