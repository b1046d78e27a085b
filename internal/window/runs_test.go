package window

import (
	"fmt"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	lullv1alpha1 "lull.dev/lull/api/v1alpha1"
)

func daily(interval int32) *lullv1alpha1.Recurrence {
	return &lullv1alpha1.Recurrence{Frequency: lullv1alpha1.Daily, Interval: interval}
}

func TestLongestPeriod(t *testing.T) {
	override := func(spec *lullv1alpha1.MaintenanceWindowSpec, s lullv1alpha1.OverrideStrategy) *lullv1alpha1.MaintenanceWindowSpec {
		spec.Override = &lullv1alpha1.Override{Strategy: s, Until: metav1.NewTime(time.Date(2026, 6, 1, 0, 0, 0, 0, time.UTC))}
		return spec
	}
	monthly := &lullv1alpha1.Recurrence{Frequency: lullv1alpha1.Monthly, DaysOfMonth: []int32{1, 2}}
	cases := []struct {
		name    string
		spec    *lullv1alpha1.MaintenanceWindowSpec
		longest time.Duration
		bounded bool
	}{
		{"daily 6h UTC: one occurrence", sched("UTC", "01:00", 6*time.Hour, daily(1)), 6 * time.Hour, true},
		{"daily 6h in a DST zone", sched("Europe/Berlin", "01:00", 6*time.Hour, daily(1)), 6 * time.Hour, true},
		{"daily 21h in Berlin: 2h06m32s of offsets (LMT to double summer time) cannot join them", sched("Europe/Berlin", "01:00", 21*time.Hour, daily(1)), 21 * time.Hour, true},
		{"daily 22h in Berlin: a day may be 2h06m32s short", sched("Europe/Berlin", "01:00", 22*time.Hour, daily(1)), 0, false},
		{"daily 23h59m UTC: never touch", sched("UTC", "00:00", 23*time.Hour+59*time.Minute, daily(1)), 23*time.Hour + 59*time.Minute, true},
		{"daily 24h UTC: back to back", sched("UTC", "00:00", 24*time.Hour, daily(1)), 0, false},
		{"daily 24h Berlin: closes an hour a year, merged runs", sched("Europe/Berlin", "00:00", 24*time.Hour, daily(1)), 0, false},
		{"every other day 36h", sched("UTC", "00:00", 36*time.Hour, daily(2)), 36 * time.Hour, true},
		{"weekend 24h: Saturday runs into Sunday", sched("UTC", "00:00", 24*time.Hour, weekly(lullv1alpha1.Saturday, lullv1alpha1.Sunday)), 0, false},
		{"Saturdays 24h", sched("Asia/Tokyo", "00:00", 24*time.Hour, weekly(lullv1alpha1.Saturday)), 24 * time.Hour, true},
		{"Tuesday and Thursday 47h", sched("UTC", "00:00", 47*time.Hour, weekly(lullv1alpha1.Tuesday, lullv1alpha1.Thursday)), 47 * time.Hour, true},
		{"Tuesday and Thursday 48h", sched("UTC", "00:00", 48*time.Hour, weekly(lullv1alpha1.Tuesday, lullv1alpha1.Thursday)), 0, false},
		{"monthly 1st and 2nd, 12h", sched("UTC", "00:00", 12*time.Hour, monthly), 12 * time.Hour, true},
		{"monthly 1st and 2nd, 24h", sched("UTC", "00:00", 24*time.Hour, monthly), 0, false},
		{"restrictive override cuts only", override(sched("UTC", "01:00", 6*time.Hour, daily(1)), lullv1alpha1.OverrideRestrictive), 6 * time.Hour, true},
		{"permissive override: its start is not recorded", override(sched("UTC", "01:00", 6*time.Hour, daily(1)), lullv1alpha1.OverridePermissive), 0, false},
		{"strategy Permissive", &lullv1alpha1.MaintenanceWindowSpec{Strategy: lullv1alpha1.StrategyPermissive}, 0, false},
		{"strategy Restrictive", &lullv1alpha1.MaintenanceWindowSpec{Strategy: lullv1alpha1.StrategyRestrictive}, 0, true},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			w := MustCompile(tc.spec)
			longest, bounded := w.LongestPeriod()
			if longest != tc.longest || bounded != tc.bounded {
				t.Fatalf("LongestPeriod() = %s, %v; want %s, %v", longest, bounded, tc.longest, tc.bounded)
			}
			if !bounded {
				return
			}
			// The bound holds for the periods Upcoming reports, merged
			// where they touch, over two years.
			now := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
			var merged Interval
			for _, iv := range w.Upcoming(now, 800) {
				if merged.End.Equal(iv.Start) {
					merged.End = iv.End
				} else {
					merged = iv
				}
				if merged.End.Sub(merged.Start) > longest {
					t.Fatalf("period %s to %s lasts longer than the bound %s", merged.Start, merged.End, longest)
				}
			}
		})
	}
}

// TestSkippedRunsMatchTheWalk compares every answer of schedules whose
// occurrences join (the walks skip through them by arithmetic) with the
// same schedules walked one occurrence at a time, across DST transitions
// of zones with summer time, negative summer time, half-hour shifts,
// transitions close together and a skipped day.
func TestSkippedRunsMatchTheWalk(t *testing.T) {
	zones := []string{"UTC", "Europe/Berlin", "America/New_York", "Australia/Sydney", "Australia/Lord_Howe",
		"Europe/Dublin", "Africa/Casablanca", "Pacific/Apia", "Asia/Tokyo"}
	freeze := []lullv1alpha1.Exclusion{{StartDate: "2026-12-19", EndDate: "2027-01-03", Reason: "freeze"}}
	specs := []struct {
		name string
		spec func(tz string) *lullv1alpha1.MaintenanceWindowSpec
	}{
		{"daily 24h", func(tz string) *lullv1alpha1.MaintenanceWindowSpec { return sched(tz, "00:00", 24*time.Hour, daily(1)) }},
		{"daily 24h at 02:30 (in a gap)", func(tz string) *lullv1alpha1.MaintenanceWindowSpec {
			return sched(tz, "02:30", 24*time.Hour, daily(1))
		}},
		{"daily 24h30m", func(tz string) *lullv1alpha1.MaintenanceWindowSpec {
			return sched(tz, "01:00", 24*time.Hour+30*time.Minute, daily(1))
		}},
		{"every other day 48h with a freeze", func(tz string) *lullv1alpha1.MaintenanceWindowSpec {
			s := sched(tz, "00:00", 48*time.Hour, daily(2))
			s.Schedule.Exclude = freeze
			return s
		}},
		{"weekdays 72h", func(tz string) *lullv1alpha1.MaintenanceWindowSpec {
			return sched(tz, "22:00", 72*time.Hour, weekly(lullv1alpha1.Monday, lullv1alpha1.Wednesday, lullv1alpha1.Friday))
		}},
	}
	horizons := []time.Duration{DefaultHorizon, 40 * 24 * time.Hour}
	from := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	to := time.Date(2028, 1, 1, 0, 0, 0, 0, time.UTC)
	for _, tz := range zones {
		loc, err := time.LoadLocation(tz)
		if err != nil {
			t.Fatal(err)
		}
		// Instants every 11 days 7 hours, and an hour and a day either
		// side of each transition.
		var instants []time.Time
		for at := from; at.Before(to); at = at.Add(11*24*time.Hour + 7*time.Hour) {
			instants = append(instants, at)
		}
		for _, tr := range transitions(loc, from, to) {
			for _, d := range []time.Duration{-25 * time.Hour, -time.Hour, 0, time.Hour, 25 * time.Hour} {
				instants = append(instants, tr.Add(d))
			}
		}
		for _, sc := range specs {
			for _, h := range horizons {
				t.Run(fmt.Sprintf("%s/%s/horizon=%s", tz, sc.name, h), func(t *testing.T) {
					fast, err := Compile(sc.spec(tz), Options{Horizon: h})
					if err != nil {
						t.Fatal(err)
					}
					if !fast.sched.joins {
						t.Fatalf("the schedule's occurrences should join")
					}
					walk := *fast
					s := *fast.sched
					s.joins = false
					walk.sched = &s
					for _, at := range instants {
						if diff := cmp.Diff(walk.Evaluate(at), fast.Evaluate(at)); diff != "" {
							t.Fatalf("Evaluate(%s) (-walk,+skipping):\n%s", at, diff)
						}
						if diff := cmp.Diff(walk.Upcoming(at, 3), fast.Upcoming(at, 3)); diff != "" {
							t.Fatalf("Upcoming(%s) (-walk,+skipping):\n%s", at, diff)
						}
					}
				})
			}
		}
	}
}
