package window

import (
	"fmt"
	"strconv"
	"strings"

	lullv1alpha1 "lull.dev/lull/api/v1alpha1"
)

var rruleDays = map[string]lullv1alpha1.Weekday{
	"MO": lullv1alpha1.Monday, "TU": lullv1alpha1.Tuesday, "WE": lullv1alpha1.Wednesday,
	"TH": lullv1alpha1.Thursday, "FR": lullv1alpha1.Friday, "SA": lullv1alpha1.Saturday, "SU": lullv1alpha1.Sunday,
}

// ParseRRule parses the subset of an RFC 5545 RRULE that maps onto a typed
// Recurrence: FREQ (DAILY, WEEKLY, MONTHLY, YEARLY), INTERVAL, BYDAY (with
// ordinals such as -1MO for MONTHLY and YEARLY), BYMONTHDAY, BYMONTH, and
// WKST=MO. The start time, time zone and anchor come from the schedule, so
// DTSTART, COUNT and UNTIL are not accepted; nor are the BY* parts that
// would select times or positions within a period.
func ParseRRule(s string) (*lullv1alpha1.Recurrence, error) {
	s = strings.TrimSpace(s)
	s = strings.TrimPrefix(s, "RRULE:")
	if s == "" {
		return nil, fmt.Errorf("empty RRULE; expected e.g. FREQ=WEEKLY;BYDAY=SA")
	}
	rec := &lullv1alpha1.Recurrence{}
	seen := map[string]bool{}
	var byday []string
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
			// BYDAY's meaning depends on FREQ, which may come later.
			byday = strings.Split(v, ",")
			continue
		}
		if err := parseRRulePart(rec, k, v); err != nil {
			return nil, err
		}
	}
	if rec.Frequency == "" {
		return nil, fmt.Errorf("RRULE needs FREQ")
	}
	for _, d := range byday {
		if err := addByDay(rec, d); err != nil {
			return nil, err
		}
	}
	if err := checkRRuleParts(rec); err != nil {
		return nil, err
	}
	return rec, nil
}

var rruleFreqs = map[string]lullv1alpha1.Frequency{
	"DAILY": lullv1alpha1.Daily, "WEEKLY": lullv1alpha1.Weekly, "MONTHLY": lullv1alpha1.Monthly, "YEARLY": lullv1alpha1.Yearly,
}

// parseRRulePart sets the field of rec that the RRULE part k=v names
// (any part but BYDAY).
func parseRRulePart(rec *lullv1alpha1.Recurrence, k, v string) error {
	switch k {
	case "FREQ":
		f, ok := rruleFreqs[v]
		if !ok {
			return fmt.Errorf("FREQ=%s is not supported; use DAILY, WEEKLY, MONTHLY or YEARLY", v)
		}
		rec.Frequency = f
	case "INTERVAL":
		n, err := strconv.Atoi(v)
		if err != nil || n < 1 || n > 1000 {
			return fmt.Errorf("INTERVAL=%s must be a whole number from 1 to 1000", v)
		}
		rec.Interval = int32(n)
	case "BYMONTHDAY":
		days, err := parseRRuleList(v, "BYMONTHDAY", "1..31 or -31..-1", func(n int) bool { return n != 0 && n >= -31 && n <= 31 })
		rec.DaysOfMonth = append(rec.DaysOfMonth, days...)
		return err
	case "BYMONTH":
		months, err := parseRRuleList(v, "BYMONTH", "1..12", func(n int) bool { return n >= 1 && n <= 12 })
		rec.Months = append(rec.Months, months...)
		return err
	case "WKST":
		if v != "MO" {
			return fmt.Errorf("WKST=%s is not supported; weeks start on Monday (WKST=MO)", v)
		}
	case "DTSTART", "COUNT", "UNTIL":
		return fmt.Errorf("%s is not supported; the start time, time zone and anchor come from the schedule's startTime, timeZone and anchor", k)
	default:
		return fmt.Errorf("RRULE part %s is not supported (supported: FREQ, INTERVAL, BYDAY, BYMONTHDAY, BYMONTH, WKST=MO)", k)
	}
	return nil
}

// parseRRuleList parses a comma-separated list of whole numbers, each of
// which must pass valid (described by want in the error).
func parseRRuleList(v, name, want string, valid func(int) bool) ([]int32, error) {
	var out []int32
	for _, x := range strings.Split(v, ",") {
		n, err := strconv.Atoi(x)
		if err != nil || !valid(n) {
			return out, fmt.Errorf("%s value %q must be %s", name, x, want)
		}
		out = append(out, int32(n))
	}
	return out, nil
}

// addByDay adds one BYDAY value to rec as FREQ reads it: plain weekdays
// for WEEKLY, ordinal weekdays (a plain one meaning every such weekday of
// the month) for MONTHLY and YEARLY.
func addByDay(rec *lullv1alpha1.Recurrence, d string) error {
	ord, day, err := parseByDay(d)
	if err != nil {
		return err
	}
	switch rec.Frequency {
	case lullv1alpha1.Daily:
		return fmt.Errorf("BYDAY is not supported with FREQ=DAILY; use FREQ=WEEKLY;BYDAY=%s", d)
	case lullv1alpha1.Weekly:
		if ord != 0 {
			return fmt.Errorf("BYDAY=%s: ordinals are only valid with FREQ=MONTHLY or YEARLY", d)
		}
		rec.DaysOfWeek = append(rec.DaysOfWeek, day)
	default:
		if ord != 0 {
			rec.Weekdays = append(rec.Weekdays, lullv1alpha1.OrdinalWeekday{Ordinal: int32(ord), Day: day})
			return nil
		}
		// Every such weekday of the month: the first to the fifth.
		for n := int32(1); n <= 5; n++ {
			rec.Weekdays = append(rec.Weekdays, lullv1alpha1.OrdinalWeekday{Ordinal: n, Day: day})
		}
	}
	return nil
}

// checkRRuleParts checks that the parts given fit FREQ.
func checkRRuleParts(rec *lullv1alpha1.Recurrence) error {
	days, months := len(rec.DaysOfMonth) > 0 || len(rec.Weekdays) > 0, len(rec.Months) > 0
	switch rec.Frequency {
	case lullv1alpha1.Daily:
		if len(rec.DaysOfMonth) > 0 || months {
			return fmt.Errorf("FREQ=DAILY takes only INTERVAL")
		}
	case lullv1alpha1.Weekly:
		if len(rec.DaysOfWeek) == 0 {
			return fmt.Errorf("FREQ=WEEKLY needs BYDAY, e.g. BYDAY=SA,SU")
		}
		if len(rec.DaysOfMonth) > 0 || months {
			return fmt.Errorf("FREQ=WEEKLY takes only INTERVAL and BYDAY")
		}
	case lullv1alpha1.Monthly:
		if !days {
			return fmt.Errorf("FREQ=MONTHLY needs BYMONTHDAY or BYDAY, e.g. BYDAY=-1MO")
		}
		if months {
			return fmt.Errorf("BYMONTH is only supported with FREQ=YEARLY")
		}
	case lullv1alpha1.Yearly:
		if !months {
			return fmt.Errorf("FREQ=YEARLY needs BYMONTH")
		}
		if !days {
			return fmt.Errorf("FREQ=YEARLY needs BYMONTHDAY or BYDAY")
		}
	}
	return nil
}

func parseByDay(s string) (int, lullv1alpha1.Weekday, error) {
	if len(s) < 2 {
		return 0, "", fmt.Errorf("BYDAY value %q: expected a day such as MO or -1MO", s)
	}
	day, ok := rruleDays[s[len(s)-2:]]
	if !ok {
		return 0, "", fmt.Errorf("BYDAY value %q: day must be one of MO TU WE TH FR SA SU", s)
	}
	prefix := s[:len(s)-2]
	if prefix == "" {
		return 0, day, nil
	}
	n, err := strconv.Atoi(prefix)
	if err != nil || n == 0 || n < -5 || n > 5 {
		return 0, "", fmt.Errorf("BYDAY value %q: ordinal must be 1..5 or -5..-1", s)
	}
	return n, day, nil
}
