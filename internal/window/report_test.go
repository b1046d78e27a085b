package window

import (
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	lullv1alpha1 "lull.dev/lull/api/v1alpha1"
)

// reported is what status and metrics say about a window at one instant.
type reported struct {
	Permitted          bool
	Since, Until       string
	NextStart, NextEnd string
	SecondsUntil       float64
	SecondsRemaining   float64
}

// fmtReported spells a time as status shows it: "" for zero (not known),
// "forever" for Forever.
func fmtReported(v time.Time) string {
	switch {
	case v.IsZero():
		return ""
	case !v.Before(Forever):
		return "forever"
	}
	return v.UTC().Format(time.RFC3339)
}

func report(r Result, now time.Time) reported {
	got := reported{Permitted: r.Permitted, Since: fmtReported(r.Since), Until: fmtReported(r.Until),
		SecondsUntil: r.SecondsUntilPermitted(now), SecondsRemaining: r.SecondsRemaining(now)}
	if r.HasNext {
		got.NextStart, got.NextEnd = fmtReported(r.Next.Start), fmtReported(r.Next.End)
	}
	return got
}

func withOverride(s *lullv1alpha1.MaintenanceWindowSpec, strategy lullv1alpha1.OverrideStrategy, until time.Time) *lullv1alpha1.MaintenanceWindowSpec {
	s.Override = &lullv1alpha1.Override{Strategy: strategy, Until: metav1.Time{Time: until}}
	return s
}

// TestReportedTimes: since, until, next and the metrics for merged
// periods, schedules that never close, expired overrides and windows that
// are always open (issue 15's examples).
func TestReportedTimes(t *testing.T) {
	weekdays := func() *lullv1alpha1.MaintenanceWindowSpec {
		return sched("UTC", "00:00", 24*time.Hour, weekly(lullv1alpha1.Monday, lullv1alpha1.Tuesday,
			lullv1alpha1.Wednesday, lullv1alpha1.Thursday, lullv1alpha1.Friday))
	}
	daily := func(tz string, d time.Duration) *lullv1alpha1.MaintenanceWindowSpec {
		return sched(tz, "00:00", d, &lullv1alpha1.Recurrence{Frequency: lullv1alpha1.Daily})
	}
	saturdayMornings := func() *lullv1alpha1.MaintenanceWindowSpec {
		return sched("UTC", "02:00", 4*time.Hour, weekly(lullv1alpha1.Saturday))
	}
	permissive := func() *lullv1alpha1.MaintenanceWindowSpec {
		return &lullv1alpha1.MaintenanceWindowSpec{Strategy: lullv1alpha1.StrategyPermissive}
	}
	tenthNoon := time.Date(2026, 3, 10, 12, 0, 0, 0, time.UTC)
	tests := []struct {
		name string
		spec *lullv1alpha1.MaintenanceWindowSpec
		now  string
		want reported
	}{
		{"Mon-Fri 24 h merge into one period that began on Monday", weekdays(), "2026-03-12T12:00:00Z",
			reported{true, "2026-03-09T00:00:00Z", "2026-03-14T00:00:00Z", "2026-03-09T00:00:00Z", "2026-03-14T00:00:00Z", 0, 36 * 3600}},
		{"the merged period seen from the weekend", weekdays(), "2026-03-14T12:00:00Z",
			reported{false, "2026-03-14T00:00:00Z", "2026-03-16T00:00:00Z", "2026-03-16T00:00:00Z", "2026-03-21T00:00:00Z", 36 * 3600, 0}},
		{"daily 24 h in UTC never closes", daily("UTC", 24*time.Hour), "2026-03-12T12:00:00Z",
			reported{true, "", "forever", "2026-03-12T12:00:00Z", "forever", 0, -1}},
		{"daily 25 h never closes", daily("UTC", 25*time.Hour), "2026-03-12T12:00:00Z",
			reported{true, "", "forever", "2026-03-12T12:00:00Z", "forever", 0, -1}},
		{"daily 24 h in Berlin closes for the hour clocks go back", daily("Europe/Berlin", 24*time.Hour), "2026-03-12T12:00:00Z",
			reported{true, "2025-10-26T23:00:00Z", "2026-10-25T22:00:00Z", "2025-10-26T23:00:00Z", "2026-10-25T22:00:00Z", 0, 227*86400 + 10*3600}},
		{"restricted until a period that never closes", withExclusionDays(daily("UTC", 24*time.Hour), "2026-03-01", "2026-03-20"), "2026-03-12T12:00:00Z",
			reported{false, "2026-03-01T00:00:00Z", "2026-03-21T00:00:00Z", "2026-03-21T00:00:00Z", "forever", 8*86400 + 12*3600, 0}},
		{"after a Permissive override ends the restriction began at its end", withOverride(saturdayMornings(), lullv1alpha1.OverridePermissive, tenthNoon), "2026-03-10T13:00:00Z",
			reported{false, "2026-03-10T12:00:00Z", "2026-03-14T02:00:00Z", "2026-03-14T02:00:00Z", "2026-03-14T06:00:00Z", 3*86400 + 13*3600, 0}},
		{"a freeze that ended inside a window: the opening began at its end", withOverride(saturdayMornings(), lullv1alpha1.OverrideRestrictive, time.Date(2026, 3, 14, 3, 0, 0, 0, time.UTC)), "2026-03-14T04:00:00Z",
			reported{true, "2026-03-14T03:00:00Z", "2026-03-14T06:00:00Z", "2026-03-14T03:00:00Z", "2026-03-14T06:00:00Z", 0, 2 * 3600}},
		{"an expired freeze that agreed with the schedule: start not known", withOverride(saturdayMornings(), lullv1alpha1.OverrideRestrictive, tenthNoon), "2026-03-10T13:00:00Z",
			reported{false, "", "2026-03-14T02:00:00Z", "2026-03-14T02:00:00Z", "2026-03-14T06:00:00Z", 3*86400 + 13*3600, 0}},
		{"a schedule transition after the expiry is the start again", withOverride(saturdayMornings(), lullv1alpha1.OverridePermissive, tenthNoon), "2026-03-14T07:00:00Z",
			reported{false, "2026-03-14T06:00:00Z", "2026-03-21T02:00:00Z", "2026-03-21T02:00:00Z", "2026-03-21T06:00:00Z", 6*86400 + 19*3600, 0}},
		{"Permissive: open with no end, start not known", permissive(), "2026-03-12T12:00:00Z",
			reported{true, "", "forever", "2026-03-12T12:00:00Z", "forever", 0, -1}},
		{"Permissive after a freeze ended: open since its end", withOverride(permissive(), lullv1alpha1.OverrideRestrictive, tenthNoon), "2026-03-12T12:00:00Z",
			reported{true, "2026-03-10T12:00:00Z", "forever", "2026-03-10T12:00:00Z", "forever", 0, -1}},
		{"a freeze on a schedule that never closes reopens it for good", withOverride(daily("UTC", 24*time.Hour), lullv1alpha1.OverrideRestrictive, tenthNoon), "2026-03-10T11:00:00Z",
			reported{false, "", "2026-03-10T12:00:00Z", "2026-03-10T12:00:00Z", "forever", 3600, 0}},
		{"an opening override runs into a schedule that never closes", withOverride(withExclusionDays(daily("UTC", 24*time.Hour), "2026-03-01", "2026-03-09"), lullv1alpha1.OverridePermissive, tenthNoon), "2026-03-09T11:00:00Z",
			reported{true, "", "forever", "2026-03-09T11:00:00Z", "forever", 0, -1}},
	}
	always := MustCompile(permissive())
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			w, err := Compile(tc.spec, Options{})
			if err != nil {
				t.Fatalf("Compile: %v", err)
			}
			now := mustTime(t, tc.now)
			r := w.Evaluate(now)
			if diff := cmp.Diff(tc.want, report(r, now)); diff != "" {
				t.Errorf("Evaluate(%s) (-want,+got):\n%s\nmessage: %s", tc.now, diff, r.Message())
			}
			// An always-open window beside it changes nothing.
			all := EvaluateAll([]*Window{w, always}, now)
			if diff := cmp.Diff(tc.want, report(all, now)); diff != "" {
				t.Errorf("EvaluateAll with a Permissive window (-want,+got):\n%s", diff)
			}
			if up := w.Upcoming(now, 1); len(up) != 1 || !up[0].Start.Equal(r.Next.Start) || !up[0].End.Equal(r.Next.End) {
				t.Errorf("Upcoming(now, 1) = %v, want Next %v", up, r.Next)
			}
		})
	}
}

func withExclusionDays(s *lullv1alpha1.MaintenanceWindowSpec, from, to string) *lullv1alpha1.MaintenanceWindowSpec {
	s.Schedule.Exclude = append(s.Schedule.Exclude, lullv1alpha1.Exclusion{StartDate: from, EndDate: to, Reason: "freeze"})
	return s
}

// TestSinceNearTheHorizon: a state's start that lies inside the search
// horizon looking back is found even when the occurrence it comes from
// began before it, so an override that expired inside that occurrence does
// not pass for the start (found by TestReferenceEvaluator, seed 20261125).
func TestSinceNearTheHorizon(t *testing.T) {
	// On the 1st of the month for 20 days: [03-01, 03-21).
	monthly := func() *lullv1alpha1.MaintenanceWindowSpec {
		return sched("UTC", "00:00", 20*24*time.Hour, &lullv1alpha1.Recurrence{Frequency: lullv1alpha1.Monthly, DaysOfMonth: []int32{1}})
	}
	excluded := monthly()
	excluded.Schedule.Exclude = []lullv1alpha1.Exclusion{{Start: &metav1.Time{Time: time.Date(2026, 3, 1, 0, 0, 0, 0, time.UTC)},
		End: &metav1.Time{Time: time.Date(2026, 3, 12, 0, 0, 0, 0, time.UTC)}, Reason: "freeze"}}
	for _, tc := range []struct {
		name string
		spec *lullv1alpha1.MaintenanceWindowSpec
		now  string
		want reported
	}{
		{"an opening override expired inside the period: restricted since the period's end",
			withOverride(monthly(), lullv1alpha1.OverridePermissive, time.Date(2026, 3, 18, 0, 0, 0, 0, time.UTC)), "2026-03-25T12:00:00Z",
			reported{false, "2026-03-21T00:00:00Z", "2026-04-01T00:00:00Z", "2026-04-01T00:00:00Z", "2026-04-21T00:00:00Z", 6*86400 + 12*3600, 0}},
		{"a freeze expired inside an exclusion: open since the exclusion's end",
			withOverride(excluded, lullv1alpha1.OverrideRestrictive, time.Date(2026, 3, 10, 0, 0, 0, 0, time.UTC)), "2026-03-19T12:00:00Z",
			reported{true, "2026-03-12T00:00:00Z", "2026-03-21T00:00:00Z", "2026-03-12T00:00:00Z", "2026-03-21T00:00:00Z", 0, 36 * 3600}},
		{"a period that began before the horizon: start not known",
			monthly(), "2026-03-19T12:00:00Z",
			reported{true, "", "2026-03-21T00:00:00Z", "2026-03-19T12:00:00Z", "2026-03-21T00:00:00Z", 0, 36 * 3600}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			// The horizon (10 days) is shorter than the period (20 days).
			w, err := Compile(tc.spec, Options{Horizon: 10 * 24 * time.Hour})
			if err != nil {
				t.Fatalf("Compile: %v", err)
			}
			now := mustTime(t, tc.now)
			r := w.Evaluate(now)
			if diff := cmp.Diff(tc.want, report(r, now)); diff != "" {
				t.Errorf("Evaluate(%s) (-want,+got):\n%s\nmessage: %s", tc.now, diff, r.Message())
			}
		})
	}
}
