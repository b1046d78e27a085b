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
		switch k {
		case "FREQ":
			switch v {
			case "DAILY":
				rec.Frequency = lullv1alpha1.Daily
			case "WEEKLY":
				rec.Frequency = lullv1alpha1.Weekly
			case "MONTHLY":
				rec.Frequency = lullv1alpha1.Monthly
			case "YEARLY":
				rec.Frequency = lullv1alpha1.Yearly
			default:
				return nil, fmt.Errorf("FREQ=%s is not supported; use DAILY, WEEKLY, MONTHLY or YEARLY", v)
			}
		case "INTERVAL":
			n, err := strconv.Atoi(v)
			if err != nil || n < 1 || n > 1000 {
				return nil, fmt.Errorf("INTERVAL=%s must be a whole number from 1 to 1000", v)
			}
			rec.Interval = int32(n)
		case "BYDAY":
			byday = strings.Split(v, ",")
		case "BYMONTHDAY":
			for _, x := range strings.Split(v, ",") {
				n, err := strconv.Atoi(x)
				if err != nil || n == 0 || n < -31 || n > 31 {
					return nil, fmt.Errorf("BYMONTHDAY value %q must be 1..31 or -31..-1", x)
				}
				rec.DaysOfMonth = append(rec.DaysOfMonth, int32(n))
			}
		case "BYMONTH":
			for _, x := range strings.Split(v, ",") {
				n, err := strconv.Atoi(x)
				if err != nil || n < 1 || n > 12 {
					return nil, fmt.Errorf("BYMONTH value %q must be 1..12", x)
				}
				rec.Months = append(rec.Months, int32(n))
			}
		case "WKST":
			if v != "MO" {
				return nil, fmt.Errorf("WKST=%s is not supported; weeks start on Monday (WKST=MO)", v)
			}
		case "DTSTART", "COUNT", "UNTIL":
			return nil, fmt.Errorf("%s is not supported; the start time, time zone and anchor come from the schedule's startTime, timeZone and anchor", k)
		default:
			return nil, fmt.Errorf("RRULE part %s is not supported (supported: FREQ, INTERVAL, BYDAY, BYMONTHDAY, BYMONTH, WKST=MO)", k)
		}
	}
	if rec.Frequency == "" {
		return nil, fmt.Errorf("RRULE needs FREQ")
	}
	for _, d := range byday {
		ord, day, err := parseByDay(d)
		if err != nil {
			return nil, err
		}
		switch rec.Frequency {
		case lullv1alpha1.Daily:
			return nil, fmt.Errorf("BYDAY is not supported with FREQ=DAILY; use FREQ=WEEKLY;BYDAY=%s", d)
		case lullv1alpha1.Weekly:
			if ord != 0 {
				return nil, fmt.Errorf("BYDAY=%s: ordinals are only valid with FREQ=MONTHLY or YEARLY", d)
			}
			rec.DaysOfWeek = append(rec.DaysOfWeek, day)
		default:
			if ord == 0 {
				// Every such weekday of the month: the first to the fifth.
				for n := int32(1); n <= 5; n++ {
					rec.Weekdays = append(rec.Weekdays, lullv1alpha1.OrdinalWeekday{Ordinal: n, Day: day})
				}
				continue
			}
			rec.Weekdays = append(rec.Weekdays, lullv1alpha1.OrdinalWeekday{Ordinal: int32(ord), Day: day})
		}
	}
	switch rec.Frequency {
	case lullv1alpha1.Daily:
		if len(rec.DaysOfMonth) > 0 || len(rec.Months) > 0 {
			return nil, fmt.Errorf("FREQ=DAILY takes only INTERVAL")
		}
	case lullv1alpha1.Weekly:
		if len(rec.DaysOfWeek) == 0 {
			return nil, fmt.Errorf("FREQ=WEEKLY needs BYDAY, e.g. BYDAY=SA,SU")
		}
		if len(rec.DaysOfMonth) > 0 || len(rec.Months) > 0 {
			return nil, fmt.Errorf("FREQ=WEEKLY takes only INTERVAL and BYDAY")
		}
	case lullv1alpha1.Monthly:
		if len(rec.DaysOfMonth) == 0 && len(rec.Weekdays) == 0 {
			return nil, fmt.Errorf("FREQ=MONTHLY needs BYMONTHDAY or BYDAY, e.g. BYDAY=-1MO")
		}
		if len(rec.Months) > 0 {
			return nil, fmt.Errorf("BYMONTH is only supported with FREQ=YEARLY")
		}
	case lullv1alpha1.Yearly:
		if len(rec.Months) == 0 {
			return nil, fmt.Errorf("FREQ=YEARLY needs BYMONTH")
		}
		if len(rec.DaysOfMonth) == 0 && len(rec.Weekdays) == 0 {
			return nil, fmt.Errorf("FREQ=YEARLY needs BYMONTHDAY or BYDAY")
		}
	}
	return rec, nil
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
