package window

import (
	"encoding/json"
	"testing"
	"time"

	lullv1alpha1 "lull.dev/lull/api/v1alpha1"
)

// FuzzRRule: any string either parses into a recurrence that compiles and
// evaluates, or is rejected with an error; never a panic.
func FuzzRRule(f *testing.F) {
	for _, s := range []string{"FREQ=WEEKLY;BYDAY=SA,SU", "FREQ=MONTHLY;BYDAY=-1MO", "FREQ=YEARLY;BYMONTH=2;BYMONTHDAY=29",
		"FREQ=DAILY;INTERVAL=3", "RRULE:FREQ=MONTHLY;BYMONTHDAY=1,-1", "FREQ=WEEKLY;BYDAY=+5MO", "FREQ=;", "BYDAY=MO", "",
		"FREQ=MONTHLY;BYDAY=FR;BYMONTHDAY=13", "FREQ=YEARLY;INTERVAL=4;BYMONTH=11;BYDAY=TU;BYMONTHDAY=2,3,4,5,6,7,8",
		"FREQ=MONTHLY;BYDAY=MO,TU,WE,TH,FR;BYSETPOS=-2;COUNT=7", "FREQ=YEARLY;BYWEEKNO=-1,1;WKST=SU;UNTIL=20300101T000000Z",
		"FREQ=YEARLY;BYYEARDAY=-1,100;BYDAY=20MO", "FREQ=WEEKLY;INTERVAL=2;WKST=SU", "FREQ=HOURLY"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		if _, err := parseRRule(s); err != nil {
			if err.Error() == "" {
				t.Fatalf("empty error for %q", s)
			}
			return
		}
		w, err := Compile(&lullv1alpha1.MaintenanceWindowSpec{Schedule: &lullv1alpha1.Schedule{StartTime: "01:00",
			Duration: durationOf(time.Hour), RRule: s, Anchor: "2025-12-31"}}, Options{Horizon: 400 * 24 * time.Hour})
		if err != nil {
			t.Fatalf("%q parses but does not compile: %v", s, err)
		}
		now := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
		if r := w.Evaluate(now); r.HasNext && (r.Next.Start.IsZero() || !r.Next.End.After(r.Next.Start)) {
			t.Fatalf("bad next window %+v for %q", r.Next, s)
		}
	})
}

// FuzzCompile: any JSON spec compiles or fails with an error naming a
// field; a compiled window evaluates without panicking and its next window
// is never a zero time.
func FuzzCompile(f *testing.F) {
	for _, s := range []string{
		`{"schedule":{"timeZone":"Europe/Berlin","startTime":"02:00","duration":"4h","recurrence":{"frequency":"Weekly","daysOfWeek":["Saturday"]}}}`,
		`{"schedule":{"startTime":"23:30","duration":"25h","recurrence":{"frequency":"Daily","interval":2},"anchor":"1970-01-01"}}`,
		`{"schedule":{"startTime":"00:00","duration":"1h","recurrence":{"frequency":"Monthly","weekdays":[{"ordinal":5,"day":"Monday"}]}}}`,
		`{"schedule":{"startTime":"00:00","duration":"1h","recurrence":{"frequency":"Yearly","months":[2],"daysOfMonth":[29]},"exclude":[{"startDate":"2028-01-01","endDate":"2028-12-31"}]}}`,
		`{"strategy":"Restrictive","override":{"strategy":"Permissive","until":"2026-01-02T00:00:00Z"}}`,
		`{"schedule":{"timeZone":"Nowhere/Land","startTime":"99:99","duration":"-1h"}}`,
	} {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, data []byte) {
		var spec lullv1alpha1.MaintenanceWindowSpec
		if json.Unmarshal(data, &spec) != nil {
			return
		}
		w, err := Compile(&spec, Options{Horizon: 400 * 24 * time.Hour})
		if err != nil {
			return
		}
		now := time.Date(2026, 3, 29, 1, 30, 0, 0, time.UTC)
		r := w.Evaluate(now)
		if r.HasNext && (r.Next.Start.IsZero() || !r.Next.End.After(r.Next.Start)) {
			t.Fatalf("bad next window %+v for %s", r.Next, data)
		}
		if !r.Permitted && r.HasNext && r.Next.Start.Before(now) {
			t.Fatalf("restricted but next window %v started before now", r.Next)
		}
	})
}
