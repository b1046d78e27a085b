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

// compileSchedule compiles a Schedule: its time zone, start time and
// duration, the recurrence or RRULE counted from the anchor, and the
// exclusions. The errors name the field under spec.schedule.
func compileSchedule(in *lullv1alpha1.Schedule) (*schedule, field.ErrorList) {
	p := field.NewPath("spec", "schedule")
	s := &schedule{}
	var errs field.ErrorList
	s.loc, errs = compileTimeZone(in.TimeZone, p.Child("timeZone"))
	errs = append(errs, s.compileStartAndDuration(in, p)...)
	anchorDay, anchorErrs := compileAnchor(in.Anchor, p.Child("anchor"))
	errs = append(errs, anchorErrs...)
	rrule, ruleErrs := s.compileRule(in, anchorDay, p)
	errs = append(errs, ruleErrs...)
	excl, exclErrs := compileExclusions(in.Exclude, s.loc, p.Child("exclude"))
	errs = append(errs, exclErrs...)
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
	s.single = time.Duration(fewest)*day-offsetSpan(s.loc) > s.dur
	return s, nil
}

// compileTimeZone loads the schedule's IANA time zone (UTC when unset);
// for one that does not load it reports the error and returns UTC.
func compileTimeZone(timeZone string, p *field.Path) (*time.Location, field.ErrorList) {
	tz := timeZone
	if tz == "" {
		tz = "UTC"
	}
	loc, err := time.LoadLocation(tz)
	if err != nil || tz == "Local" {
		return time.UTC, field.ErrorList{field.Invalid(p, timeZone, "unknown time zone; use an IANA name such as Europe/Berlin")}
	}
	return loc, nil
}

// compileStartAndDuration reads when each occurrence starts (local wall
// time) and how long it lasts.
func (s *schedule) compileStartAndDuration(in *lullv1alpha1.Schedule, p *field.Path) field.ErrorList {
	var errs field.ErrorList
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
	return errs
}

// compileAnchor returns the day number of the anchor date (DefaultAnchor
// when unset).
func compileAnchor(anchor string, p *field.Path) (int, field.ErrorList) {
	a := anchor
	if a == "" {
		a = DefaultAnchor
	}
	day, ok := parseDate(a)
	if !ok {
		return day, field.ErrorList{field.Invalid(p, anchor, `must be a date that exists, "YYYY-MM-DD"`)}
	}
	return day, nil
}

// compileRule compiles the schedule's recurrence or RRULE (exactly one
// must be set), counted from anchorDay, into s.rec. It returns the parsed
// RRULE, if any: its COUNT or UNTIL is applied (bound) once the rest of
// the schedule has compiled.
func (s *schedule) compileRule(in *lullv1alpha1.Schedule, anchorDay int, p *field.Path) (*rruleParts, field.ErrorList) {
	switch {
	case in.Recurrence != nil && in.RRule != "":
		return nil, field.ErrorList{field.Invalid(p.Child("rrule"), in.RRule, "set exactly one of recurrence and rrule")}
	case in.Recurrence == nil && in.RRule == "":
		return nil, field.ErrorList{field.Required(p.Child("recurrence"), "set recurrence or rrule")}
	case in.RRule != "":
		parsed, err := parseRRule(in.RRule)
		if err != nil {
			return nil, field.ErrorList{field.Invalid(p.Child("rrule"), in.RRule, err.Error())}
		}
		s.rec = parsed.recurrence(anchorDay)
		return parsed, nil
	}
	r, errs := compileRecurrence(in.Recurrence, p.Child("recurrence"))
	r.setAnchor(anchorDay)
	s.rec = r
	return nil, errs
}

// compileExclusions compiles the schedule's exclusions; local dates are
// whole days in loc.
func compileExclusions(in []lullv1alpha1.Exclusion, loc *time.Location, p *field.Path) ([]exclusion, field.ErrorList) {
	var (
		excl []exclusion
		errs field.ErrorList
	)
	for i := range in {
		e, exErrs := compileExclusion(&in[i], loc, p.Index(i))
		errs = append(errs, exErrs...)
		excl = append(excl, e)
	}
	return excl, errs
}

// compileExclusion compiles one exclusion: either local dates
// (startDate and endDate, both included) or instants (start and end).
func compileExclusion(ex *lullv1alpha1.Exclusion, loc *time.Location, p *field.Path) (exclusion, field.ErrorList) {
	var errs field.ErrorList
	e := exclusion{reason: ex.Reason}
	switch {
	case ex.StartDate != "" || ex.EndDate != "":
		sd, ok1 := parseDate(ex.StartDate)
		ed, ok2 := parseDate(ex.EndDate)
		if !ok1 {
			errs = append(errs, field.Invalid(p.Child("startDate"), ex.StartDate, `must be a date that exists, "YYYY-MM-DD"`))
		}
		if !ok2 {
			errs = append(errs, field.Invalid(p.Child("endDate"), ex.EndDate, `must be a date that exists, "YYYY-MM-DD"`))
		}
		if ex.Start != nil || ex.End != nil {
			errs = append(errs, field.Invalid(p, "", "use either startDate/endDate or start/end, not both"))
		}
		if ok1 && ok2 {
			if ed < sd {
				errs = append(errs, field.Invalid(p.Child("endDate"), ex.EndDate, "must not be before startDate"))
			}
			e.start = midnight(sd, loc)
			e.end = midnight(ed+1, loc)
		}
	case ex.Start != nil && ex.End != nil:
		e.start, e.end = ex.Start.Time, ex.End.Time
		if !e.end.After(e.start) {
			errs = append(errs, field.Invalid(p.Child("end"), ex.End.Time.Format(time.RFC3339), "must be after start"))
		}
	default:
		errs = append(errs, field.Required(p, "set startDate and endDate (local dates) or start and end (instants)"))
	}
	return e, errs
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
	switch n {
	case 0:
		r.last = r.first - 1
		s.endRule = fmt.Sprintf("COUNT=%d", p.count)
	case p.count:
		r.last = last
		s.endRule, s.lastKnown = fmt.Sprintf("COUNT=%d", p.count), true
	}
	// Otherwise the rule has fewer than COUNT occurrences before lastDay:
	// as far as lull looks, it does not end.
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
