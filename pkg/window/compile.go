package window

import (
	"fmt"
	"regexp"
	"strconv"
	"strings"
	"time"

	"k8s.io/apimachinery/pkg/util/intstr"
	"k8s.io/apimachinery/pkg/util/validation/field"

	lullv1alpha1 "lull.dev/lull/api/v1alpha1"
)

const (
	// DefaultAnchor is the date intervals count from when a schedule names
	// none: Monday 2000-01-03, so "every second week" means the weeks an
	// even number of weeks after that Monday.
	DefaultAnchor = "2000-01-03"
	// DefaultHorizon bounds every search for the next window: long enough
	// for a yearly window on 29 February.
	DefaultHorizon = 1500 * 24 * time.Hour
	// MaxDuration is the longest a single occurrence may last.
	MaxDuration = 31 * 24 * time.Hour
)

// Options tune compilation.
type Options struct {
	// Horizon bounds the search for the next window (DefaultHorizon if 0).
	Horizon time.Duration
}

var weekdays = map[lullv1alpha1.Weekday]time.Weekday{
	lullv1alpha1.Sunday: time.Sunday, lullv1alpha1.Monday: time.Monday, lullv1alpha1.Tuesday: time.Tuesday,
	lullv1alpha1.Wednesday: time.Wednesday, lullv1alpha1.Thursday: time.Thursday,
	lullv1alpha1.Friday: time.Friday, lullv1alpha1.Saturday: time.Saturday,
}

// Compile validates a MaintenanceWindow spec and compiles it for
// evaluation. The errors name the field to fix.
func Compile(spec *lullv1alpha1.MaintenanceWindowSpec, opts Options) (*Window, error) {
	w, errs := compile(spec, opts)
	if len(errs) > 0 {
		return nil, errs.ToAggregate()
	}
	return w, nil
}

// CompileOrInvalid compiles a spec and, for one that does not compile,
// returns a window that is always restrictive and reports why: the one
// place every component gets its windows, so all of them fail closed.
func CompileOrInvalid(spec *lullv1alpha1.MaintenanceWindowSpec, opts Options) *Window {
	w, err := Compile(spec, opts)
	if err != nil {
		return Invalid(err)
	}
	return w
}

// Validate checks a spec and returns every problem with its field path.
func Validate(spec *lullv1alpha1.MaintenanceWindowSpec) field.ErrorList {
	_, errs := compile(spec, Options{})
	return errs
}

func compile(spec *lullv1alpha1.MaintenanceWindowSpec, opts Options) (*Window, field.ErrorList) {
	var errs field.ErrorList
	p := field.NewPath("spec")
	w := &Window{strategy: string(spec.Strategy), horizon: opts.Horizon}
	switch spec.Strategy {
	case "", lullv1alpha1.StrategySchedule:
		w.strategy = string(lullv1alpha1.StrategySchedule)
		if spec.Schedule == nil {
			errs = append(errs, field.Required(p.Child("schedule"), "strategy Schedule needs a schedule"))
		}
	case lullv1alpha1.StrategyPermissive, lullv1alpha1.StrategyRestrictive:
	default:
		errs = append(errs, field.NotSupported(p.Child("strategy"), spec.Strategy, []string{"Schedule", "Permissive", "Restrictive"}))
	}
	if w.horizon <= 0 {
		w.horizon = DefaultHorizon
	}
	if o := spec.Override; o != nil {
		if o.Strategy != lullv1alpha1.OverridePermissive && o.Strategy != lullv1alpha1.OverrideRestrictive {
			errs = append(errs, field.NotSupported(p.Child("override", "strategy"), o.Strategy, []string{"Permissive", "Restrictive"}))
		}
		if o.Until.IsZero() {
			errs = append(errs, field.Required(p.Child("override", "until"), "an override must expire"))
		}
		w.override = &override{permissive: o.Strategy == lullv1alpha1.OverridePermissive, until: o.Until.Time, reason: o.Reason}
	}
	// The engine does not use these two, but a window whose budget or
	// minimum cannot be read must not permit (fail closed), and its status
	// must say why: admission refuses such values, this catches the ones
	// stored before it did.
	if m := spec.MinTimeRemaining; m != nil {
		if err := m.Err(); err != nil {
			errs = append(errs, field.Invalid(p.Child("minTimeRemaining"), m.Invalid, err.Error()))
		} else if m.Duration < 0 || m.Duration > MaxDuration {
			errs = append(errs, field.Invalid(p.Child("minTimeRemaining"), m.Duration.String(), "must be from 0s to 744h (the longest a window lasts)"))
		}
	}
	if mu := spec.MaxUnavailable; mu != nil {
		if err := ValidateMaxUnavailable(*mu); err != nil {
			errs = append(errs, field.Invalid(p.Child("maxUnavailable"), mu.String(), err.Error()))
		}
	}
	if spec.Schedule != nil {
		s, schedErrs := compileSchedule(spec.Schedule)
		errs = append(errs, schedErrs...)
		w.sched = s
	}
	if len(errs) > 0 {
		return nil, errs
	}
	return w, nil
}

func compileSchedule(in *lullv1alpha1.Schedule) (*schedule, field.ErrorList) {
	var errs field.ErrorList
	p := field.NewPath("spec", "schedule")
	s := &schedule{}

	tz := in.TimeZone
	if tz == "" {
		tz = "UTC"
	}
	loc, err := time.LoadLocation(tz)
	if err != nil || tz == "Local" {
		errs = append(errs, field.Invalid(p.Child("timeZone"), in.TimeZone, "unknown time zone; use an IANA name such as Europe/Berlin"))
		loc = time.UTC
	}
	s.loc = loc

	if hh, mm, ok := parseHHMM(in.StartTime); ok {
		s.startMin = hh*60 + mm
	} else {
		errs = append(errs, field.Invalid(p.Child("startTime"), in.StartTime, `must be local wall time "HH:MM" (00:00 to 23:59)`))
	}
	s.dur = in.Duration.Duration
	if err := in.Duration.Err(); err != nil {
		errs = append(errs, field.Invalid(p.Child("duration"), in.Duration.Invalid, err.Error()))
	} else if s.dur <= 0 || s.dur > MaxDuration {
		errs = append(errs, field.Invalid(p.Child("duration"), in.Duration.Duration.String(), "must be more than 0 and at most 744h (31 days)"))
	}

	anchor := in.Anchor
	if anchor == "" {
		anchor = DefaultAnchor
	}
	anchorDay, ok := parseDate(anchor)
	if !ok {
		errs = append(errs, field.Invalid(p.Child("anchor"), in.Anchor, `must be a date that exists, "YYYY-MM-DD"`))
	}

	var rrule *rruleParts
	switch {
	case in.Recurrence != nil && in.RRule != "":
		errs = append(errs, field.Invalid(p.Child("rrule"), in.RRule, "set exactly one of recurrence and rrule"))
	case in.Recurrence == nil && in.RRule == "":
		errs = append(errs, field.Required(p.Child("recurrence"), "set recurrence or rrule"))
	case in.RRule != "":
		parsed, err := parseRRule(in.RRule)
		if err != nil {
			errs = append(errs, field.Invalid(p.Child("rrule"), in.RRule, err.Error()))
			break
		}
		rrule = parsed
		s.rec = parsed.recurrence(anchorDay)
	default:
		r, recErrs := compileRecurrence(in.Recurrence, p.Child("recurrence"))
		errs = append(errs, recErrs...)
		r.setAnchor(anchorDay)
		s.rec = r
	}

	var excl []exclusion
	for i, ex := range in.Exclude {
		ep := p.Child("exclude").Index(i)
		var e exclusion
		e.reason = ex.Reason
		switch {
		case ex.StartDate != "" || ex.EndDate != "":
			sd, ok1 := parseDate(ex.StartDate)
			ed, ok2 := parseDate(ex.EndDate)
			if !ok1 {
				errs = append(errs, field.Invalid(ep.Child("startDate"), ex.StartDate, `must be a date that exists, "YYYY-MM-DD"`))
			}
			if !ok2 {
				errs = append(errs, field.Invalid(ep.Child("endDate"), ex.EndDate, `must be a date that exists, "YYYY-MM-DD"`))
			}
			if ex.Start != nil || ex.End != nil {
				errs = append(errs, field.Invalid(ep, "", "use either startDate/endDate or start/end, not both"))
			}
			if ok1 && ok2 {
				if ed < sd {
					errs = append(errs, field.Invalid(ep.Child("endDate"), ex.EndDate, "must not be before startDate"))
				}
				e.start = midnight(sd, loc)
				e.end = midnight(ed+1, loc)
			}
		case ex.Start != nil && ex.End != nil:
			e.start, e.end = ex.Start.Time, ex.End.Time
			if !e.end.After(e.start) {
				errs = append(errs, field.Invalid(ep.Child("end"), ex.End.Time.Format(time.RFC3339), "must be after start"))
			}
		default:
			errs = append(errs, field.Required(ep, "set startDate and endDate (local dates) or start and end (instants)"))
		}
		excl = append(excl, e)
	}
	s.excl = newExclusionSet(excl)

	if len(errs) > 0 {
		return nil, errs
	}
	if rrule != nil {
		s.bound(rrule, anchorDay)
	}
	fewest, most := s.rec.gaps()
	const day = 24 * time.Hour
	s.joins = most > 0 && time.Duration(most)*day <= s.dur
	s.single = time.Duration(fewest)*day-offsetSpan(loc) > s.dur
	return s, nil
}

// lastDay is the last start day lull considers: occurrences after it
// would start after Forever.
var lastDay = dayOf(9999, time.December, 30)

// bound applies an RRULE's COUNT or UNTIL. A rule that ends also starts:
// its occurrences are those on and after the anchor date (the anchor is
// its DTSTART), and COUNT counts from there. The cost of counting grows
// with COUNT (at most maxCount) and with how sparse the rule is, not with
// how far back the anchor lies; it is paid once, here.
func (s *schedule) bound(p *rruleParts, anchorDay int) {
	if p.count == 0 && p.until == nil {
		return
	}
	r := &s.rec
	r.first, r.last = anchorDay, lastDay
	if u := p.until; u != nil {
		switch {
		case u.sec < 0:
			r.last = u.day
		case !u.utc:
			r.last = u.day
			if s.startMin*60 > u.sec {
				r.last--
			}
		default:
			// The last day whose occurrence starts by the instant, as lull
			// resolves starts (a start in a gap moves to the gap's end).
			r.last = localDay(u.at, s.loc) + 1
			for s.occurrence(r.last).Start.After(u.at) {
				r.last--
			}
		}
		s.endRule = "UNTIL=" + p.untilText
		return
	}
	n, last := 0, 0
	r.forEachDay(r.first, r.last, func(d int) bool {
		n, last = n+1, d
		return n < p.count
	})
	switch {
	case n == 0:
		r.last = r.first - 1
		s.endRule = fmt.Sprintf("COUNT=%d", p.count)
	case n == p.count:
		r.last = last
		s.endRule, s.lastKnown = fmt.Sprintf("COUNT=%d", p.count), true
	}
	// Otherwise the rule has fewer than COUNT occurrences before lastDay:
	// as far as lull looks, it does not end.
}

func fmtDay(day int) string {
	y, m, d := civil(day)
	return fmt.Sprintf("%04d-%02d-%02d", y, m, d)
}

func compileRecurrence(in *lullv1alpha1.Recurrence, p *field.Path) (recurrence, field.ErrorList) {
	var errs field.ErrorList
	// A typed recurrence lists start days: a day of the month or an
	// ordinal weekday suffices (dayOr), unlike an RRULE's BYMONTHDAY and
	// BYDAY, which both limit.
	r := recurrence{interval: int(in.Interval), wkst: time.Monday, dayOr: true, first: -unbounded, last: unbounded}
	if r.interval == 0 {
		r.interval = 1
	}
	if r.interval < 1 || r.interval > 1000 {
		errs = append(errs, field.Invalid(p.Child("interval"), in.Interval, "must be 1..1000"))
		r.interval = 1
	}
	for i, d := range in.DaysOfWeek {
		wd, ok := weekdays[d]
		if !ok {
			errs = append(errs, field.NotSupported(p.Child("daysOfWeek").Index(i), d, weekdayNames()))
			continue
		}
		r.weekdays |= 1 << uint(wd)
	}
	for i, d := range in.DaysOfMonth {
		switch {
		case d == 0 || d < -31 || d > 31:
			errs = append(errs, field.Invalid(p.Child("daysOfMonth").Index(i), d, "must be 1..31 or -31..-1 (-1 is the last day)"))
		case d > 0:
			r.mdayPos |= 1 << uint(d)
		default:
			r.mdayNeg |= 1 << uint(-d)
		}
	}
	for i, o := range in.Weekdays {
		wd, ok := weekdays[o.Day]
		if !ok {
			errs = append(errs, field.NotSupported(p.Child("weekdays").Index(i).Child("day"), o.Day, weekdayNames()))
		}
		switch {
		case o.Ordinal == 0 || o.Ordinal < -5 || o.Ordinal > 5:
			errs = append(errs, field.Invalid(p.Child("weekdays").Index(i).Child("ordinal"), o.Ordinal, "must be 1..5 or -5..-1 (-1 is the last)"))
		case !ok:
		case o.Ordinal > 0:
			r.hasNth = true
			r.nth[wd].pos |= 1 << uint(o.Ordinal)
		default:
			r.hasNth = true
			r.nth[wd].neg |= 1 << uint(-o.Ordinal)
		}
	}
	for i, m := range in.Months {
		if m < 1 || m > 12 {
			errs = append(errs, field.Invalid(p.Child("months").Index(i), m, "must be 1..12"))
			continue
		}
		r.months |= 1 << uint(m)
	}
	switch in.Frequency {
	case lullv1alpha1.Daily:
		r.freq = freqDaily
		if r.weekdays != 0 || r.hasMday() || r.hasNth || r.months != 0 {
			errs = append(errs, field.Invalid(p, "", "a Daily recurrence takes only interval"))
		}
	case lullv1alpha1.Weekly:
		r.freq = freqWeekly
		if r.weekdays == 0 && len(in.DaysOfWeek) == 0 {
			errs = append(errs, field.Required(p.Child("daysOfWeek"), "a Weekly recurrence needs daysOfWeek"))
		}
		if r.hasMday() || r.hasNth || r.months != 0 {
			errs = append(errs, field.Invalid(p, "", "a Weekly recurrence takes only interval and daysOfWeek"))
		}
	case lullv1alpha1.Monthly, lullv1alpha1.Yearly:
		r.freq = freqMonthly
		if in.Frequency == lullv1alpha1.Yearly {
			r.freq = freqYearly
		}
		if len(in.DaysOfMonth) == 0 && len(in.Weekdays) == 0 {
			errs = append(errs, field.Required(p.Child("daysOfMonth"), "a Monthly or Yearly recurrence needs daysOfMonth or weekdays"))
		}
		if len(in.DaysOfWeek) > 0 {
			errs = append(errs, field.Invalid(p.Child("daysOfWeek"), "", "use weekdays (with ordinals) for Monthly and Yearly"))
		}
		if in.Frequency == lullv1alpha1.Yearly && len(in.Months) == 0 {
			errs = append(errs, field.Required(p.Child("months"), "a Yearly recurrence needs months"))
		}
		if in.Frequency == lullv1alpha1.Monthly && len(in.Months) > 0 {
			errs = append(errs, field.Invalid(p.Child("months"), "", "months is only valid with frequency Yearly"))
		}
	default:
		errs = append(errs, field.NotSupported(p.Child("frequency"), in.Frequency, []string{"Daily", "Weekly", "Monthly", "Yearly"}))
	}
	return r, errs
}

func weekdayNames() []string {
	return []string{"Monday", "Tuesday", "Wednesday", "Thursday", "Friday", "Saturday", "Sunday"}
}

func parseHHMM(s string) (int, int, bool) {
	if len(s) != 5 || s[2] != ':' {
		return 0, 0, false
	}
	hh, err1 := strconv.Atoi(s[:2])
	mm, err2 := strconv.Atoi(s[3:])
	if err1 != nil || err2 != nil || hh < 0 || hh > 23 || mm < 0 || mm > 59 || strings.ContainsAny(s, "+-") {
		return 0, 0, false
	}
	return hh, mm, true
}

// parseDate parses "YYYY-MM-DD" into a day number, rejecting dates that do
// not exist (2023-02-29).
func parseDate(s string) (int, bool) {
	t, err := time.Parse("2006-01-02", s)
	if err != nil {
		return 0, false
	}
	return dayOf(t.Year(), t.Month(), t.Day()), true
}

func midnight(day int, loc *time.Location) time.Time {
	y, m, d := civil(day)
	return resolveLocal(time.Date(y, m, d, 0, 0, 0, 0, time.UTC), loc)
}

// MustCompile is Compile for tests and static specs; it panics on error.
func MustCompile(spec *lullv1alpha1.MaintenanceWindowSpec) *Window {
	w, err := Compile(spec, Options{})
	if err != nil {
		panic(fmt.Sprintf("window.MustCompile: %v", err))
	}
	return w
}

// MaxMaxUnavailable is the largest count maxUnavailable may be: more nodes
// than any cluster has, and far from the int32 limit a larger number would
// break decoding at.
const MaxMaxUnavailable = 100000

var percent = regexp.MustCompile(`^(100|[1-9]?[0-9])%$`)

// ValidateMaxUnavailable checks a window's maxUnavailable as admission
// does: a count from 0 to MaxMaxUnavailable or a percentage from 0% to
// 100%.
func ValidateMaxUnavailable(v intstr.IntOrString) error {
	switch {
	case v.Type == intstr.Int && v.IntVal >= 0 && v.IntVal <= MaxMaxUnavailable:
		return nil
	case v.Type == intstr.String && percent.MatchString(v.StrVal):
		return nil
	}
	return fmt.Errorf("must be a node count from 0 to %d or a percentage from 0%% to 100%% such as '10%%'; 0 or 0%% freezes the window", MaxMaxUnavailable)
}
