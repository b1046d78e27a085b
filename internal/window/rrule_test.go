package window

import (
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"github.com/google/go-cmp/cmp/cmpopts"

	lullv1alpha1 "lull.dev/lull/api/v1alpha1"
)

// rruleExample is one rule of RFC 5545's examples or python-dateutil's
// tests, as data: the rule, its DTSTART (the schedule's anchor, startTime
// and timeZone) and either the local start times it yields, in order, or
// the part lull refuses.
type rruleExample struct {
	Name    string   `json:"name"`
	Source  string   `json:"source"`
	TZ      string   `json:"tz"`
	DTStart string   `json:"dtstart"` // local, 2006-01-02T15:04:05
	RRule   string   `json:"rrule"`
	Want    []string `json:"want"`
	// Complete: Want is the whole set (the rule has COUNT or UNTIL);
	// otherwise its beginning.
	Complete bool   `json:"complete"`
	Refused  string `json:"refused"`
}

// TestRRuleExamples reads every example of RFC 5545 section 3.8.5.3 (and
// the one of 3.3.10), typed from the RFC's text, every single-rule test of
// python-dateutil's tests/test_rrule.py, ported by
// testdata/rrule/port_dateutil.py, and 400 random rules of every form lull
// accepts with the dates python-dateutil gives for them
// (testdata/rrule/gen_random.py), and checks lull's windows start where
// the example says, and no more of them for a rule that ends; a rule lull
// refuses fails to compile with an error naming the part.
func TestRRuleExamples(t *testing.T) {
	for _, file := range []string{"rfc5545.json", "dateutil.json", "dateutil-random.json"} {
		data, err := os.ReadFile(filepath.Join("testdata", "rrule", file))
		if err != nil {
			t.Fatal(err)
		}
		var examples []rruleExample
		if err := json.Unmarshal(data, &examples); err != nil {
			t.Fatalf("%s: %v", file, err)
		}
		accepted := 0
		for _, ex := range examples {
			t.Run(file+"/"+ex.Name, func(t *testing.T) {
				if ex.Refused == "" {
					accepted++
				}
				checkRRuleExample(t, ex)
			})
		}
		t.Logf("%s: %d examples, %d accepted", file, len(examples), accepted)
	}
}

func checkRRuleExample(t *testing.T, ex rruleExample) {
	loc, err := time.LoadLocation(ex.TZ)
	if err != nil {
		t.Fatal(err)
	}
	start, err := time.ParseInLocation("2006-01-02T15:04:05", ex.DTStart, loc)
	if err != nil {
		t.Fatal(err)
	}
	spec := &lullv1alpha1.MaintenanceWindowSpec{Schedule: &lullv1alpha1.Schedule{
		TimeZone: ex.TZ, StartTime: start.Format("15:04"), Duration: durationOf(time.Minute),
		Anchor: start.Format("2006-01-02"), RRule: ex.RRule,
	}}
	// Long enough for dateutil's rule every hundred years.
	w, err := Compile(spec, Options{Horizon: 250 * 365 * 24 * time.Hour})
	if ex.Refused != "" {
		if err == nil {
			t.Fatalf("%s (%s): compiled; want it refused for %s", ex.RRule, ex.Source, ex.Refused)
		}
		if !strings.Contains(err.Error(), ex.Refused) {
			t.Fatalf("%s: error %q does not name %s", ex.RRule, err, ex.Refused)
		}
		return
	}
	if err != nil {
		t.Fatalf("%s (%s): %v", ex.RRule, ex.Source, err)
	}
	var got []string
	at := start
	for range ex.Want {
		up := w.Upcoming(at, 1)
		if len(up) == 0 {
			break
		}
		got = append(got, up[0].Start.In(loc).Format("2006-01-02T15:04:05"))
		at = up[0].End
	}
	if diff := cmp.Diff(ex.Want, got, cmpopts.EquateEmpty()); diff != "" {
		t.Fatalf("%s from %s in %s (%s) (-want,+got):\n%s", ex.RRule, ex.DTStart, ex.TZ, ex.Source, diff)
	}
	if !ex.Complete {
		return
	}
	if up := w.Upcoming(at, 1); len(up) > 0 {
		t.Errorf("%s: a window after the last one: %v", ex.RRule, up[0])
	}
	r := w.Evaluate(at)
	if r.Permitted || r.HasNext || r.Reason != ReasonNoWindow || r.SecondsUntilPermitted(at) != -2 {
		t.Errorf("%s: after the last occurrence: %+v, want no window (-2)", ex.RRule, r)
	}
	if !strings.Contains(r.Message(), "the recurrence end") {
		t.Errorf("%s: message %q does not say how the recurrence ends", ex.RRule, r.Message())
	}
	// Once its last day (COUNT's last occurrence, UNTIL's day) has passed,
	// it has ended for good; every UNTIL in the examples is before 2200.
	if r := w.Evaluate(time.Date(2200, 1, 1, 0, 0, 0, 0, time.UTC)); !r.Ended || r.Reason != ReasonNoWindow ||
		!strings.HasPrefix(r.Message(), "no window opens again: the recurrence ended (") {
		t.Errorf("%s: in 2200: ended %v, message %q; want it ended", ex.RRule, r.Ended, r.Message())
	}
}

// TestRRuleByDayLimitsByMonthDay is issue 28's second bug: with
// BYMONTHDAY, BYDAY limits (RFC 5545 3.3.10, note 1 and 2); lull read the
// two as a union and opened on every Friday and on every 13th.
func TestRRuleByDayLimitsByMonthDay(t *testing.T) {
	for _, tc := range []struct {
		rrule, anchor, now string
		want               []string
	}{
		{"FREQ=MONTHLY;BYDAY=FR;BYMONTHDAY=13", "2026-01-01", "2026-01-01T00:00:00Z",
			[]string{"2026-02-13T09:00:00Z/1h0m0s", "2026-03-13T09:00:00Z/1h0m0s", "2026-11-13T09:00:00Z/1h0m0s"}},
		{"FREQ=YEARLY;INTERVAL=4;BYMONTH=11;BYDAY=TU;BYMONTHDAY=2,3,4,5,6,7,8", "2024-01-01", "2026-01-01T00:00:00Z",
			[]string{"2028-11-07T09:00:00Z/1h0m0s", "2032-11-02T09:00:00Z/1h0m0s", "2036-11-04T09:00:00Z/1h0m0s"}},
	} {
		t.Run(tc.rrule, func(t *testing.T) {
			w := MustCompile(&lullv1alpha1.MaintenanceWindowSpec{Schedule: &lullv1alpha1.Schedule{
				TimeZone: "UTC", StartTime: "09:00", Duration: durationOf(time.Hour), Anchor: tc.anchor, RRule: tc.rrule}})
			var got []string
			at := mustTime(t, tc.now)
			for range tc.want {
				got = append(got, starts(w, at, 1)...)
				at = w.Upcoming(at, 1)[0].End
			}
			if diff := cmp.Diff(tc.want, got); diff != "" {
				t.Errorf("upcoming (-want,+got):\n%s", diff)
			}
		})
	}
	w := MustCompile(&lullv1alpha1.MaintenanceWindowSpec{Schedule: &lullv1alpha1.Schedule{
		TimeZone: "UTC", StartTime: "09:00", Duration: durationOf(time.Hour), Anchor: "2026-01-01", RRule: "FREQ=MONTHLY;BYDAY=FR;BYMONTHDAY=13"}})
	if r := w.Evaluate(mustTime(t, "2026-01-02T09:30:00Z")); r.Permitted || !r.Next.Start.Equal(mustTime(t, "2026-02-13T09:00:00Z")) {
		t.Errorf("Friday 2 January: permitted %v, next %v; want closed until Friday 13 February", r.Permitted, r.Next)
	}
}

// TestTypedRecurrenceListsDays: a typed recurrence's daysOfMonth and
// weekdays are a union of start days (the 1st and every last Friday), as
// they always were; only the RRULE spelling follows the RFC's limits.
func TestTypedRecurrenceListsDays(t *testing.T) {
	w := MustCompile(sched("UTC", "09:00", time.Hour, &lullv1alpha1.Recurrence{Frequency: lullv1alpha1.Monthly,
		DaysOfMonth: []int32{1}, Weekdays: []lullv1alpha1.OrdinalWeekday{{Ordinal: -1, Day: lullv1alpha1.Friday}}}))
	want := []string{"2026-01-30T09:00:00Z/1h0m0s", "2026-02-01T09:00:00Z/1h0m0s", "2026-02-27T09:00:00Z/1h0m0s", "2026-03-01T09:00:00Z/1h0m0s"}
	if diff := cmp.Diff(want, starts(w, mustTime(t, "2026-01-02T00:00:00Z"), 4)); diff != "" {
		t.Errorf("upcoming (-want,+got):\n%s", diff)
	}
}

// TestRRuleFromTheAnchor: the parts a rule leaves out come from the
// anchor, as RFC 5545 takes them from DTSTART, and a rule without COUNT
// or UNTIL still has occurrences before its anchor.
func TestRRuleFromTheAnchor(t *testing.T) {
	for _, tc := range []struct {
		rrule, anchor, now string
		want               []string
	}{
		{"FREQ=YEARLY", "2024-03-17", "2026-01-01T00:00:00Z", []string{"2026-03-17", "2027-03-17", "2028-03-17"}},
		{"FREQ=YEARLY;BYMONTH=1,7", "2024-03-17", "2026-01-01T00:00:00Z", []string{"2026-01-17", "2026-07-17", "2027-01-17"}},
		{"FREQ=MONTHLY", "2026-01-31", "2026-01-01T00:00:00Z", []string{"2026-01-31", "2026-03-31", "2026-05-31"}},
		{"FREQ=MONTHLY;BYMONTH=2,8", "2026-01-10", "2026-01-01T00:00:00Z", []string{"2026-02-10", "2026-08-10", "2027-02-10"}},
		{"FREQ=WEEKLY", "2026-01-07", "2026-01-01T00:00:00Z", []string{"2026-01-07", "2026-01-14", "2026-01-21"}},
		{"FREQ=WEEKLY;INTERVAL=2;BYMONTH=3", "2026-01-07", "2026-01-01T00:00:00Z", []string{"2026-03-04", "2026-03-18", "2027-03-03"}},
		{"FREQ=DAILY;BYDAY=MO,FR;BYMONTH=2", "2026-01-07", "2026-01-01T00:00:00Z", []string{"2026-02-02", "2026-02-06", "2026-02-09"}},
		{"FREQ=DAILY;INTERVAL=10", "2026-06-01", "2026-01-01T00:00:00Z", []string{"2026-01-02", "2026-01-12", "2026-01-22"}},
		{"FREQ=DAILY;INTERVAL=10;COUNT=2", "2026-06-01", "2026-01-01T00:00:00Z", []string{"2026-06-01", "2026-06-11"}},
		{"FREQ=WEEKLY;BYDAY=SA;UNTIL=20260620", "2026-06-01", "2026-01-01T00:00:00Z", []string{"2026-06-06", "2026-06-13", "2026-06-20"}},
	} {
		t.Run(tc.rrule, func(t *testing.T) {
			w := MustCompile(&lullv1alpha1.MaintenanceWindowSpec{Schedule: &lullv1alpha1.Schedule{
				StartTime: "02:00", Duration: durationOf(time.Hour), Anchor: tc.anchor, RRule: tc.rrule}})
			var got []string
			for _, iv := range w.Upcoming(mustTime(t, tc.now), 3) {
				got = append(got, iv.Start.Format("2006-01-02"))
			}
			if diff := cmp.Diff(tc.want, got); diff != "" {
				t.Errorf("upcoming (-want,+got):\n%s", diff)
			}
		})
	}
}

// TestRRuleErrors: what lull refuses, with the message docs/windows.md
// gives for it.
func TestRRuleErrors(t *testing.T) {
	for rule, want := range map[string]string{
		"FREQ=HOURLY;INTERVAL=3":                 "FREQ=HOURLY is not supported: a window starts at most once a day, at schedule.startTime; use FREQ=DAILY",
		"FREQ=MINUTELY":                          "FREQ=MINUTELY is not supported: a window starts at most once a day, at schedule.startTime; use FREQ=DAILY",
		"FREQ=FORTNIGHTLY":                       "FREQ=FORTNIGHTLY is not a frequency; use DAILY, WEEKLY, MONTHLY or YEARLY",
		"FREQ=DAILY;BYHOUR=9":                    "BYHOUR is not supported: a window starts once a day, at schedule.startTime",
		"FREQ=DAILY;BYMINUTE=0,30":               "BYMINUTE is not supported: a window starts once a day, at schedule.startTime",
		"DTSTART=20260101T000000;FREQ=DAILY":     "DTSTART is not an RRULE part here: the first day is schedule.anchor and the time schedule.startTime in schedule.timeZone",
		"FREQ=YEARLY;BYEASTER=0":                 "RRULE part BYEASTER is not supported (supported: FREQ, INTERVAL, COUNT, UNTIL, BYMONTH, BYWEEKNO, BYYEARDAY, BYMONTHDAY, BYDAY, BYSETPOS, WKST)",
		"FREQ=DAILY;COUNT=3;UNTIL=20261231":      "COUNT and UNTIL must not both be given (RFC 5545); use one",
		"FREQ=DAILY;COUNT=10001":                 "COUNT=10001 must be a whole number from 1 to 10000",
		"FREQ=DAILY;UNTIL=2026-12-31":            "UNTIL=2026-12-31 must be a date such as 20261231, a local time such as 20261231T235900 or a UTC time such as 20261231T235900Z",
		"FREQ=MONTHLY;BYWEEKNO=1":                "BYWEEKNO is only valid with FREQ=YEARLY (RFC 5545)",
		"FREQ=DAILY;BYYEARDAY=1":                 "BYYEARDAY is only valid with FREQ=YEARLY (RFC 5545)",
		"FREQ=WEEKLY;BYMONTHDAY=1":               "BYMONTHDAY is not valid with FREQ=WEEKLY (RFC 5545); use FREQ=MONTHLY, or FREQ=DAILY to keep days of some weeks",
		"FREQ=WEEKLY;BYDAY=1MO":                  "BYDAY=1MO: ordinals are only valid with FREQ=MONTHLY or YEARLY",
		"FREQ=YEARLY;BYWEEKNO=20;BYDAY=1MO":      "BYDAY=1MO: ordinals are not valid with BYWEEKNO (RFC 5545)",
		"FREQ=MONTHLY;BYDAY=MO,1TU":              "BYDAY=MO,1TU mixes weekdays with and without ordinals, which RRULE implementations read differently; use two windows",
		"FREQ=MONTHLY;BYDAY=6MO":                 "BYDAY=6MO: counted within a month (FREQ=MONTHLY, or BYMONTH given) an ordinal must be 1..5 or -5..-1",
		"FREQ=MONTHLY;BYSETPOS=1":                "BYSETPOS needs another BY part to choose from (RFC 5545), e.g. BYDAY=MO,TU,WE,TH,FR;BYSETPOS=-1",
		"FREQ=MONTHLY;BYMONTHDAY=32":             `BYMONTHDAY value "32" must be 1..31 or -31..-1`,
		"FREQ=YEARLY;BYMONTH=0":                  `BYMONTH value "0" must be 1..12`,
		"FREQ=WEEKLY;WKST=XX":                    "WKST=XX must be one of MO TU WE TH FR SA SU",
		"FREQ=WEEKLY;BYDAY=SA;":                  `RRULE part "" is not NAME=VALUE`,
		"BYDAY=MO":                               "RRULE needs FREQ",
		"FREQ=YEARLY;BYDAY=54MO":                 `BYDAY value "54MO": ordinal must be 1..53 or -53..-1`,
		"FREQ=WEEKLY;INTERVAL=0":                 "INTERVAL=0 must be a whole number from 1 to 1000",
		"FREQ=WEEKLY;BYDAY=SA;FREQ=WEEKLY":       "RRULE part FREQ appears twice",
		"":                                       "",
		"FREQ=MONTHLY;BYDAY=FR;BYMONTHDAY=13":    "",
		"RRULE:FREQ=YEARLY;BYDAY=20MO;WKST=SU":   "",
		"freq=weekly;byday=sa,su;until=20261231": "",
	} {
		_, err := parseRRule(rule)
		switch {
		case rule == "":
			if err == nil {
				t.Errorf("the empty rule parses")
			}
		case want == "" && err != nil:
			t.Errorf("%q: %v", rule, err)
		case want != "" && (err == nil || err.Error() != want):
			t.Errorf("%q: error %v, want %q", rule, err, want)
		}
	}
}
