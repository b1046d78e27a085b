package window

import (
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	lullv1alpha1 "lull.dev/lull/api/v1alpha1"
)

func mustTime(t *testing.T, s string) time.Time {
	t.Helper()
	v, err := time.Parse(time.RFC3339, s)
	if err != nil {
		t.Fatalf("bad time %q: %v", s, err)
	}
	return v.UTC()
}

func sched(tz, start string, dur time.Duration, rec *lullv1alpha1.Recurrence) *lullv1alpha1.MaintenanceWindowSpec {
	return &lullv1alpha1.MaintenanceWindowSpec{Schedule: &lullv1alpha1.Schedule{
		TimeZone: tz, StartTime: start, Duration: lullv1alpha1.Duration{Duration: dur}, Recurrence: rec,
	}}
}

func weekly(days ...lullv1alpha1.Weekday) *lullv1alpha1.Recurrence {
	return &lullv1alpha1.Recurrence{Frequency: lullv1alpha1.Weekly, DaysOfWeek: days}
}

// starts lists the UTC start times of the next n windows from now.
func starts(w *Window, now time.Time, n int) []string {
	var out []string
	for _, iv := range w.Upcoming(now, n) {
		out = append(out, iv.Start.UTC().Format(time.RFC3339)+"/"+iv.End.Sub(iv.Start).String())
	}
	return out
}

func TestRecurrences(t *testing.T) {
	tests := []struct {
		name string
		spec *lullv1alpha1.MaintenanceWindowSpec
		now  string
		want []string
	}{
		{
			name: "daily",
			spec: sched("UTC", "22:00", time.Hour, &lullv1alpha1.Recurrence{Frequency: lullv1alpha1.Daily}),
			now:  "2026-01-30T12:00:00Z",
			want: []string{"2026-01-30T22:00:00Z/1h0m0s", "2026-01-31T22:00:00Z/1h0m0s", "2026-02-01T22:00:00Z/1h0m0s"},
		},
		{
			name: "every third day counted from the anchor",
			spec: func() *lullv1alpha1.MaintenanceWindowSpec {
				s := sched("UTC", "01:00", time.Hour, &lullv1alpha1.Recurrence{Frequency: lullv1alpha1.Daily, Interval: 3})
				s.Schedule.Anchor = "2026-01-01"
				return s
			}(),
			now:  "2026-01-02T00:00:00Z",
			want: []string{"2026-01-04T01:00:00Z/1h0m0s", "2026-01-07T01:00:00Z/1h0m0s", "2026-01-10T01:00:00Z/1h0m0s"},
		},
		{
			name: "occurrences before the anchor date exist (the anchor only fixes the phase)",
			spec: func() *lullv1alpha1.MaintenanceWindowSpec {
				s := sched("UTC", "01:00", time.Hour, &lullv1alpha1.Recurrence{Frequency: lullv1alpha1.Daily, Interval: 3})
				s.Schedule.Anchor = "2026-01-10"
				return s
			}(),
			now:  "2026-01-02T00:00:00Z",
			want: []string{"2026-01-04T01:00:00Z/1h0m0s", "2026-01-07T01:00:00Z/1h0m0s", "2026-01-10T01:00:00Z/1h0m0s"},
		},
		{
			name: "every second month before its anchor month",
			spec: func() *lullv1alpha1.MaintenanceWindowSpec {
				s := sched("UTC", "00:00", time.Hour, &lullv1alpha1.Recurrence{Frequency: lullv1alpha1.Monthly, Interval: 2, DaysOfMonth: []int32{1}})
				s.Schedule.Anchor = "2027-03-15"
				return s
			}(),
			now:  "2026-10-02T00:00:00Z",
			want: []string{"2026-11-01T00:00:00Z/1h0m0s", "2027-01-01T00:00:00Z/1h0m0s", "2027-03-01T00:00:00Z/1h0m0s"},
		},
		{
			name: "weekends in Berlin, winter",
			spec: sched("Europe/Berlin", "02:00", 4*time.Hour, weekly(lullv1alpha1.Saturday, lullv1alpha1.Sunday)),
			now:  "2026-11-23T00:00:00Z",
			want: []string{"2026-11-28T01:00:00Z/4h0m0s", "2026-11-29T01:00:00Z/4h0m0s", "2026-12-05T01:00:00Z/4h0m0s"},
		},
		{
			name: "every second week from the default anchor (2000-01-03, a Monday)",
			spec: func() *lullv1alpha1.MaintenanceWindowSpec {
				r := weekly(lullv1alpha1.Tuesday)
				r.Interval = 2
				return sched("UTC", "10:00", time.Hour, r)
			}(),
			// 2026-01-05 is 1357 weeks after 2000-01-03: an odd week.
			now:  "2026-01-05T00:00:00Z",
			want: []string{"2026-01-13T10:00:00Z/1h0m0s", "2026-01-27T10:00:00Z/1h0m0s", "2026-02-10T10:00:00Z/1h0m0s"},
		},
		{
			name: "last Monday of the month",
			spec: sched("UTC", "03:00", 2*time.Hour, &lullv1alpha1.Recurrence{Frequency: lullv1alpha1.Monthly,
				Weekdays: []lullv1alpha1.OrdinalWeekday{{Ordinal: -1, Day: lullv1alpha1.Monday}}}),
			now:  "2026-01-01T00:00:00Z",
			want: []string{"2026-01-26T03:00:00Z/2h0m0s", "2026-02-23T03:00:00Z/2h0m0s", "2026-03-30T03:00:00Z/2h0m0s"},
		},
		{
			name: "second Tuesday of the month (patch Tuesday)",
			spec: sched("UTC", "20:00", time.Hour, &lullv1alpha1.Recurrence{Frequency: lullv1alpha1.Monthly,
				Weekdays: []lullv1alpha1.OrdinalWeekday{{Ordinal: 2, Day: lullv1alpha1.Tuesday}}}),
			now:  "2026-01-01T00:00:00Z",
			want: []string{"2026-01-13T20:00:00Z/1h0m0s", "2026-02-10T20:00:00Z/1h0m0s", "2026-03-10T20:00:00Z/1h0m0s"},
		},
		{
			name: "fifth Monday only in months that have one",
			spec: sched("UTC", "00:00", time.Hour, &lullv1alpha1.Recurrence{Frequency: lullv1alpha1.Monthly,
				Weekdays: []lullv1alpha1.OrdinalWeekday{{Ordinal: 5, Day: lullv1alpha1.Monday}}}),
			now:  "2026-01-01T00:00:00Z",
			want: []string{"2026-03-30T00:00:00Z/1h0m0s", "2026-06-29T00:00:00Z/1h0m0s", "2026-08-31T00:00:00Z/1h0m0s"},
		},
		{
			name: "the 31st skips short months",
			spec: sched("UTC", "00:00", time.Hour, &lullv1alpha1.Recurrence{Frequency: lullv1alpha1.Monthly, DaysOfMonth: []int32{31}}),
			now:  "2026-01-31T01:00:00Z",
			want: []string{"2026-03-31T00:00:00Z/1h0m0s", "2026-05-31T00:00:00Z/1h0m0s", "2026-07-31T00:00:00Z/1h0m0s"},
		},
		{
			name: "last day of the month (-1) includes Feb 28 and Feb 29",
			spec: sched("UTC", "23:00", 2*time.Hour, &lullv1alpha1.Recurrence{Frequency: lullv1alpha1.Monthly, DaysOfMonth: []int32{-1}}),
			now:  "2028-01-31T12:00:00Z",
			want: []string{"2028-01-31T23:00:00Z/2h0m0s", "2028-02-29T23:00:00Z/2h0m0s", "2028-03-31T23:00:00Z/2h0m0s"},
		},
		{
			name: "Feb 29 yearly happens only in leap years",
			spec: sched("UTC", "12:00", time.Hour, &lullv1alpha1.Recurrence{Frequency: lullv1alpha1.Yearly, Months: []int32{2}, DaysOfMonth: []int32{29}}),
			now:  "2025-03-01T00:00:00Z",
			// The next one, 2032, lies beyond the default search horizon.
			want: []string{"2028-02-29T12:00:00Z/1h0m0s"},
		},
		{
			name: "yearly first Sunday of January and July",
			spec: sched("UTC", "06:00", time.Hour, &lullv1alpha1.Recurrence{Frequency: lullv1alpha1.Yearly, Months: []int32{1, 7},
				Weekdays: []lullv1alpha1.OrdinalWeekday{{Ordinal: 1, Day: lullv1alpha1.Sunday}}}),
			now:  "2026-01-05T00:00:00Z",
			want: []string{"2026-07-05T06:00:00Z/1h0m0s", "2027-01-03T06:00:00Z/1h0m0s", "2027-07-04T06:00:00Z/1h0m0s"},
		},
		{
			name: "crossing midnight and the month end",
			spec: sched("UTC", "23:00", 3*time.Hour, &lullv1alpha1.Recurrence{Frequency: lullv1alpha1.Monthly, DaysOfMonth: []int32{-1}}),
			now:  "2026-02-01T00:30:00Z",
			want: []string{"2026-01-31T23:00:00Z/3h0m0s", "2026-02-28T23:00:00Z/3h0m0s"},
		},
		{
			name: "overlapping daily occurrences merge into one period",
			spec: sched("UTC", "00:00", 30*time.Hour, &lullv1alpha1.Recurrence{Frequency: lullv1alpha1.Weekly,
				DaysOfWeek: []lullv1alpha1.Weekday{lullv1alpha1.Saturday, lullv1alpha1.Sunday}}),
			now:  "2026-11-20T00:00:00Z",
			want: []string{"2026-11-21T00:00:00Z/54h0m0s", "2026-11-28T00:00:00Z/54h0m0s"},
		},
		{
			name: "touching occurrences merge (half-open)",
			spec: sched("UTC", "00:00", 24*time.Hour, &lullv1alpha1.Recurrence{Frequency: lullv1alpha1.Weekly,
				DaysOfWeek: []lullv1alpha1.Weekday{lullv1alpha1.Saturday, lullv1alpha1.Sunday}}),
			now:  "2026-11-20T00:00:00Z",
			want: []string{"2026-11-21T00:00:00Z/48h0m0s", "2026-11-28T00:00:00Z/48h0m0s"},
		},
		{
			name: "rrule spelling of last Monday",
			spec: &lullv1alpha1.MaintenanceWindowSpec{Schedule: &lullv1alpha1.Schedule{
				StartTime: "03:00", Duration: lullv1alpha1.Duration{Duration: 2 * time.Hour}, RRule: "FREQ=MONTHLY;BYDAY=-1MO"}},
			now:  "2026-01-01T00:00:00Z",
			want: []string{"2026-01-26T03:00:00Z/2h0m0s", "2026-02-23T03:00:00Z/2h0m0s", "2026-03-30T03:00:00Z/2h0m0s"},
		},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			w, err := Compile(tc.spec, Options{})
			if err != nil {
				t.Fatalf("Compile: %v", err)
			}
			got := starts(w, mustTime(t, tc.now), len(tc.want))
			if diff := cmp.Diff(tc.want, got); diff != "" {
				t.Errorf("upcoming windows (-want,+got):\n%s", diff)
			}
		})
	}
}

func TestEvaluate(t *testing.T) {
	weekend := sched("Europe/Berlin", "02:00", 4*time.Hour, weekly(lullv1alpha1.Saturday, lullv1alpha1.Sunday))
	withExclusion := sched("Europe/Berlin", "02:00", 4*time.Hour, weekly(lullv1alpha1.Saturday, lullv1alpha1.Sunday))
	withExclusion.Schedule.Exclude = []lullv1alpha1.Exclusion{
		{StartDate: "2026-12-19", EndDate: "2027-01-03", Reason: "holiday freeze"},
		{Start: &metav1.Time{Time: time.Date(2027, 1, 9, 3, 0, 0, 0, time.UTC)}, End: &metav1.Time{Time: time.Date(2027, 1, 9, 4, 0, 0, 0, time.UTC)}, Reason: "db migration"},
	}
	overridden := func(strategy lullv1alpha1.OverrideStrategy, until string) *lullv1alpha1.MaintenanceWindowSpec {
		s := sched("Europe/Berlin", "02:00", 4*time.Hour, weekly(lullv1alpha1.Saturday, lullv1alpha1.Sunday))
		s.Override = &lullv1alpha1.Override{Strategy: strategy, Until: metav1.Time{Time: mustTime(t, until)}, Reason: "INC-42"}
		return s
	}
	type want struct {
		permitted bool
		reason    Reason
		since     string
		until     string
		next      string
		seconds   float64
	}
	tests := []struct {
		name string
		spec *lullv1alpha1.MaintenanceWindowSpec
		now  string
		want want
	}{
		{"inside the window", weekend, "2026-11-28T02:00:00Z",
			want{true, ReasonSchedule, "2026-11-28T01:00:00Z", "2026-11-28T05:00:00Z", "2026-11-28T01:00:00Z", 0}},
		{"start instant is inside (half-open)", weekend, "2026-11-28T01:00:00Z",
			want{true, ReasonSchedule, "2026-11-28T01:00:00Z", "2026-11-28T05:00:00Z", "2026-11-28T01:00:00Z", 0}},
		{"end instant is outside (half-open)", weekend, "2026-11-28T05:00:00Z",
			want{false, ReasonSchedule, "2026-11-28T05:00:00Z", "2026-11-29T01:00:00Z", "2026-11-29T01:00:00Z", 20 * 3600}},
		{"weekday", weekend, "2026-11-25T12:00:00Z",
			want{false, ReasonSchedule, "2026-11-22T05:00:00Z", "2026-11-28T01:00:00Z", "2026-11-28T01:00:00Z", 2*86400 + 13*3600}},
		{"inside a scheduled window cut by a local-date exclusion", withExclusion, "2026-12-19T02:00:00Z",
			want{false, ReasonExcluded, "2026-12-13T05:00:00Z", "2027-01-09T01:00:00Z", "2027-01-09T01:00:00Z", 21*86400 - 3600}},
		{"an instant exclusion splits a window", withExclusion, "2027-01-09T02:30:00Z",
			want{true, ReasonSchedule, "2027-01-09T01:00:00Z", "2027-01-09T03:00:00Z", "2027-01-09T01:00:00Z", 0}},
		{"after the instant exclusion", withExclusion, "2027-01-09T03:30:00Z",
			want{false, ReasonExcluded, "2027-01-09T03:00:00Z", "2027-01-09T04:00:00Z", "2027-01-09T04:00:00Z", 1800}},
		{"emergency override opens a closed window", overridden(lullv1alpha1.OverridePermissive, "2026-11-25T18:00:00Z"), "2026-11-25T12:00:00Z",
			want{true, ReasonOverride, "", "2026-11-25T18:00:00Z", "2026-11-25T12:00:00Z", 0}},
		{"an expired override no longer opens; the restriction began when it expired", overridden(lullv1alpha1.OverridePermissive, "2026-11-25T18:00:00Z"), "2026-11-25T18:00:00Z",
			want{false, ReasonSchedule, "2026-11-25T18:00:00Z", "2026-11-28T01:00:00Z", "2026-11-28T01:00:00Z", 2*86400 + 7*3600}},
		{"a freeze closes an open window until it expires", overridden(lullv1alpha1.OverrideRestrictive, "2026-11-28T03:00:00Z"), "2026-11-28T02:00:00Z",
			want{false, ReasonOverride, "", "2026-11-28T03:00:00Z", "2026-11-28T03:00:00Z", 3600}},
		{"Permissive", &lullv1alpha1.MaintenanceWindowSpec{Strategy: lullv1alpha1.StrategyPermissive}, "2026-11-25T12:00:00Z",
			want{true, ReasonPermissive, "", "", "2026-11-25T12:00:00Z", 0}},
		{"Restrictive", &lullv1alpha1.MaintenanceWindowSpec{Strategy: lullv1alpha1.StrategyRestrictive}, "2026-11-25T12:00:00Z",
			want{false, ReasonRestrictive, "", "", "", -1}},
		{"Feb 29 beyond a short horizon is an explicit no-window", sched("UTC", "12:00", time.Hour, &lullv1alpha1.Recurrence{Frequency: lullv1alpha1.Yearly, Months: []int32{2}, DaysOfMonth: []int32{30}}), "2026-01-01T00:00:00Z",
			want{false, ReasonNoWindow, "", "", "", -2}},
	}
	fmtT := func(v time.Time) string {
		if v.IsZero() || !v.Before(Forever) {
			return ""
		}
		return v.UTC().Format(time.RFC3339)
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			w, err := Compile(tc.spec, Options{})
			if err != nil {
				t.Fatalf("Compile: %v", err)
			}
			now := mustTime(t, tc.now)
			r := w.Evaluate(now)
			got := want{r.Permitted, r.Reason, fmtT(r.Since), fmtT(r.Until), "", r.SecondsUntilPermitted(now)}
			if r.HasNext {
				got.next = fmtT(r.Next.Start)
			}
			if diff := cmp.Diff(tc.want, got, cmp.AllowUnexported(want{})); diff != "" {
				t.Errorf("Evaluate(%s) (-want,+got):\n%s\nmessage: %s", tc.now, diff, r.Message())
			}
			if r.Message() == "" {
				t.Errorf("empty message")
			}
		})
	}
}

func TestMessages(t *testing.T) {
	spec := sched("UTC", "02:00", time.Hour, &lullv1alpha1.Recurrence{Frequency: lullv1alpha1.Daily})
	spec.Schedule.Exclude = []lullv1alpha1.Exclusion{{StartDate: "2026-12-24", EndDate: "2026-12-26", Reason: "Christmas"}}
	w := MustCompile(spec)
	r := w.Evaluate(mustTime(t, "2026-12-25T02:30:00Z"))
	if got := r.Message(); !strings.Contains(got, `excluded by "Christmas"`) {
		t.Errorf("message %q does not name the exclusion", got)
	}
	spec.Override = &lullv1alpha1.Override{Strategy: lullv1alpha1.OverrideRestrictive, Until: metav1.Time{Time: mustTime(t, "2027-01-01T00:00:00Z")}, Reason: "CAB freeze"}
	r = MustCompile(spec).Evaluate(mustTime(t, "2026-12-20T02:30:00Z"))
	if got := r.Message(); !strings.Contains(got, "frozen by override until 2027-01-01T00:00:00Z: CAB freeze") {
		t.Errorf("message %q", got)
	}
	r = Invalid(errFake("bad zone")).Evaluate(time.Now())
	if r.Permitted || r.SecondsUntilPermitted(time.Now()) != -2 || !strings.Contains(r.Message(), "bad zone") {
		t.Errorf("invalid window must be restrictive with -2: %+v %s", r, r.Message())
	}
}

type errFake string

func (e errFake) Error() string { return string(e) }

func TestEvaluateAll(t *testing.T) {
	nights := MustCompile(sched("UTC", "00:00", 6*time.Hour, &lullv1alpha1.Recurrence{Frequency: lullv1alpha1.Daily}))
	saturdays := MustCompile(sched("UTC", "04:00", 12*time.Hour, weekly(lullv1alpha1.Saturday)))
	now := mustTime(t, "2026-11-23T12:00:00Z") // Monday

	r := EvaluateAll([]*Window{nights, saturdays}, now)
	if r.Permitted {
		t.Fatalf("not permitted on Monday noon")
	}
	if want := mustTime(t, "2026-11-28T04:00:00Z"); !r.Next.Start.Equal(want) || !r.Next.End.Equal(mustTime(t, "2026-11-28T06:00:00Z")) {
		t.Errorf("next common window = %v, want [Sat 04:00, Sat 06:00)", r.Next)
	}
	r = EvaluateAll([]*Window{nights, saturdays}, mustTime(t, "2026-11-28T05:00:00Z"))
	if !r.Permitted || !r.Until.Equal(mustTime(t, "2026-11-28T06:00:00Z")) {
		t.Errorf("both permit at Sat 05:00 until 06:00: %+v", r)
	}
	restrictive := MustCompile(&lullv1alpha1.MaintenanceWindowSpec{Strategy: lullv1alpha1.StrategyRestrictive})
	r = EvaluateAll([]*Window{nights, restrictive}, now)
	if r.Permitted || r.HasNext || r.SecondsUntilPermitted(now) != -1 {
		t.Errorf("a Restrictive window blocks indefinitely: %+v", r)
	}
	if r := EvaluateAll(nil, now); r.Reason != ReasonNoWindows {
		t.Errorf("empty set: %+v", r)
	}
	disjoint := MustCompile(sched("UTC", "12:00", time.Hour, &lullv1alpha1.Recurrence{Frequency: lullv1alpha1.Daily}))
	r = EvaluateAll([]*Window{nights, disjoint}, now)
	if r.Permitted || r.HasNext || r.Reason != ReasonNoWindow {
		t.Errorf("windows that never overlap: %+v", r)
	}
}

func TestAnchorFarInThePastGivesSameAnswer(t *testing.T) {
	for _, anchor := range []string{"1970-01-05", "2000-01-03", "2026-11-16"} {
		r := weekly(lullv1alpha1.Monday)
		r.Interval = 2
		s := sched("UTC", "10:00", time.Hour, r)
		s.Schedule.Anchor = anchor
		w := MustCompile(s)
		got := starts(w, mustTime(t, "2026-11-20T00:00:00Z"), 2)
		// All three anchors lie on even weeks relative to 2026-11-16 or not;
		// compute the expectation from the week difference.
		a, _ := time.Parse("2006-01-02", anchor)
		weeks := int(mustTime(t, "2026-11-23T00:00:00Z").Sub(a).Hours() / 24 / 7)
		first := "2026-11-23T10:00:00Z/1h0m0s"
		if weeks%2 != 0 {
			first = "2026-11-30T10:00:00Z/1h0m0s"
		}
		if got[0] != first {
			t.Errorf("anchor %s: first window %s, want %s", anchor, got[0], first)
		}
	}
}

func durationOf(d time.Duration) lullv1alpha1.Duration { return lullv1alpha1.Duration{Duration: d} }
