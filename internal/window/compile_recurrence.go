package window

import (
	"time"

	"k8s.io/apimachinery/pkg/util/validation/field"

	lullv1alpha1 "lull.dev/lull/api/v1alpha1"
)

var weekdays = map[lullv1alpha1.Weekday]time.Weekday{
	lullv1alpha1.Sunday: time.Sunday, lullv1alpha1.Monday: time.Monday, lullv1alpha1.Tuesday: time.Tuesday,
	lullv1alpha1.Wednesday: time.Wednesday, lullv1alpha1.Thursday: time.Thursday,
	lullv1alpha1.Friday: time.Friday, lullv1alpha1.Saturday: time.Saturday,
}

// compileRecurrence compiles a typed Recurrence into the engine's model
// of a rule (see recurrence); the anchor is set by the caller. The errors
// name the field under p.
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
	errs = append(errs, r.compileDays(in, p)...)
	errs = append(errs, r.compileFrequency(in, p)...)
	return r, errs
}

// compileDays reads the days a typed recurrence selects: daysOfWeek,
// daysOfMonth, the ordinal weekdays and months.
func (r *recurrence) compileDays(in *lullv1alpha1.Recurrence, p *field.Path) field.ErrorList {
	var errs field.ErrorList
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
	return errs
}

// compileFrequency sets the recurrence's period and checks that the
// fields given are the ones its frequency takes.
func (r *recurrence) compileFrequency(in *lullv1alpha1.Recurrence, p *field.Path) field.ErrorList {
	switch in.Frequency {
	case lullv1alpha1.Daily:
		r.freq = freqDaily
		return r.dailyFieldErrors(p)
	case lullv1alpha1.Weekly:
		r.freq = freqWeekly
		return r.weeklyFieldErrors(in, p)
	case lullv1alpha1.Monthly, lullv1alpha1.Yearly:
		r.freq = freqMonthly
		if in.Frequency == lullv1alpha1.Yearly {
			r.freq = freqYearly
		}
		return monthlyFieldErrors(in, p)
	default:
		return field.ErrorList{field.NotSupported(p.Child("frequency"), in.Frequency, []string{"Daily", "Weekly", "Monthly", "Yearly"})}
	}
}

// dailyFieldErrors refuses the day fields a Daily recurrence does not take.
func (r *recurrence) dailyFieldErrors(p *field.Path) field.ErrorList {
	var errs field.ErrorList
	if r.weekdays != 0 || r.hasMday() || r.hasNth || r.months != 0 {
		errs = append(errs, field.Invalid(p, "", "a Daily recurrence takes only interval"))
	}
	return errs
}

// weeklyFieldErrors checks that a Weekly recurrence has daysOfWeek and no
// other day fields.
func (r *recurrence) weeklyFieldErrors(in *lullv1alpha1.Recurrence, p *field.Path) field.ErrorList {
	var errs field.ErrorList
	if r.weekdays == 0 && len(in.DaysOfWeek) == 0 {
		errs = append(errs, field.Required(p.Child("daysOfWeek"), "a Weekly recurrence needs daysOfWeek"))
	}
	if r.hasMday() || r.hasNth || r.months != 0 {
		errs = append(errs, field.Invalid(p, "", "a Weekly recurrence takes only interval and daysOfWeek"))
	}
	return errs
}

// monthlyFieldErrors checks the day and month fields of a Monthly or
// Yearly recurrence: days of the month or ordinal weekdays, and months
// only (and always) with Yearly.
func monthlyFieldErrors(in *lullv1alpha1.Recurrence, p *field.Path) field.ErrorList {
	var errs field.ErrorList
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
	return errs
}

func weekdayNames() []string {
	return []string{"Monday", "Tuesday", "Wednesday", "Thursday", "Friday", "Saturday", "Sunday"}
}
