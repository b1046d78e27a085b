package windowcontroller

import (
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus/testutil"
	"github.com/stretchr/testify/require"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	clocktesting "k8s.io/utils/clock/testing"

	lullv1alpha1 "lull.dev/lull/api/v1alpha1"
	"lull.dev/lull/internal/window"
)

func nightly() *lullv1alpha1.MaintenanceWindow {
	return &lullv1alpha1.MaintenanceWindow{ObjectMeta: metav1.ObjectMeta{Name: "nightly", Generation: 3},
		Spec: lullv1alpha1.MaintenanceWindowSpec{Schedule: &lullv1alpha1.Schedule{StartTime: "01:00",
			Duration: lullv1alpha1.Duration{Duration: 2 * time.Hour}, Recurrence: &lullv1alpha1.Recurrence{Frequency: lullv1alpha1.Daily}}}}
}

func TestSetStatus(t *testing.T) {
	now := time.Date(2026, 11, 22, 12, 0, 0, 0, time.UTC)
	mw := nightly()
	w := window.CompileOrInvalid(&mw.Spec, window.Options{})
	var st lullv1alpha1.MaintenanceWindowStatus
	setStatus(&st, mw.Generation, w, w.Evaluate(now), now, nil)
	require.Equal(t, metav1.ConditionTrue, meta.FindStatusCondition(st.Conditions, ConditionReady).Status)
	p := meta.FindStatusCondition(st.Conditions, ConditionPermitted)
	require.Equal(t, metav1.ConditionFalse, p.Status)
	require.Equal(t, int64(3), p.ObservedGeneration)
	require.Equal(t, lullv1alpha1.StateRestricted, st.Current.State)
	require.Equal(t, time.Date(2026, 11, 23, 1, 0, 0, 0, time.UTC), st.Next.Start.UTC())
	require.Len(t, st.Upcoming, upcomingCount)
	require.Equal(t, time.Date(2026, 11, 24, 1, 0, 0, 0, time.UTC), st.Upcoming[0].Start.UTC())

	mw.Spec.Schedule.TimeZone = "Nowhere/Atlantis"
	w = window.CompileOrInvalid(&mw.Spec, window.Options{})
	st = lullv1alpha1.MaintenanceWindowStatus{}
	setStatus(&st, mw.Generation, w, w.Evaluate(now), now, nil)
	ready := meta.FindStatusCondition(st.Conditions, ConditionReady)
	require.Equal(t, metav1.ConditionFalse, ready.Status)
	require.Equal(t, "InvalidSpec", ready.Reason)
	require.Contains(t, ready.Message, "spec.schedule.timeZone")
	require.Nil(t, st.Next, "an invalid window has no next period")

	// A rule whose COUNT is used up: valid, but no window opens again; its
	// own reason, not the search horizon's.
	mw = nightly()
	mw.Spec.Schedule.Recurrence, mw.Spec.Schedule.RRule, mw.Spec.Schedule.Anchor = nil, "FREQ=DAILY;COUNT=3", "2026-11-01"
	w = window.CompileOrInvalid(&mw.Spec, window.Options{})
	st = lullv1alpha1.MaintenanceWindowStatus{}
	setStatus(&st, mw.Generation, w, w.Evaluate(now), now, nil)
	ready = meta.FindStatusCondition(st.Conditions, ConditionReady)
	require.Equal(t, metav1.ConditionFalse, ready.Status)
	require.Equal(t, "RecurrenceEnded", ready.Reason)
	require.Contains(t, ready.Message, "no window opens again: the recurrence ended (COUNT=3)")

	mw.Spec.Schedule.RRule = "FREQ=YEARLY;BYMONTH=2;BYMONTHDAY=30"
	w = window.CompileOrInvalid(&mw.Spec, window.Options{})
	st = lullv1alpha1.MaintenanceWindowStatus{}
	setStatus(&st, mw.Generation, w, w.Evaluate(now), now, nil)
	require.Equal(t, "NoWindowInHorizon", meta.FindStatusCondition(st.Conditions, ConditionReady).Reason, "30 February never comes")
}

func TestCollector(t *testing.T) {
	clk := clocktesting.NewFakeClock(time.Date(2026, 11, 22, 0, 30, 0, 0, time.UTC))
	c := NewCollector(clk)
	c.Set("nightly", window.CompileOrInvalid(&nightly().Spec, window.Options{}))
	c.Set("never", window.MustCompile(&lullv1alpha1.MaintenanceWindowSpec{Strategy: lullv1alpha1.StrategyRestrictive}))
	c.Set("broken", window.Invalid(errString("bad")))
	want := `
# HELP lull_window_seconds_until_permitted Seconds until the window permits material changes to start: 0 when permitted now, -1 when restricted indefinitely, -2 when no window can be computed (invalid spec or none within the search horizon).
# TYPE lull_window_seconds_until_permitted gauge
lull_window_seconds_until_permitted{window="broken"} -2
lull_window_seconds_until_permitted{window="never"} -1
lull_window_seconds_until_permitted{window="nightly"} 1800
`
	require.NoError(t, testutil.CollectAndCompare(c, strings.NewReader(want), "lull_window_seconds_until_permitted"))
	clk.Step(time.Hour) // 01:30, inside the window until 03:00
	want = `
# HELP lull_window_permitted_remaining_seconds Seconds left in the current permitted period; 0 when restricted, -1 when permitted indefinitely.
# TYPE lull_window_permitted_remaining_seconds gauge
lull_window_permitted_remaining_seconds{window="broken"} 0
lull_window_permitted_remaining_seconds{window="never"} 0
lull_window_permitted_remaining_seconds{window="nightly"} 5400
`
	require.NoError(t, testutil.CollectAndCompare(c, strings.NewReader(want), "lull_window_permitted_remaining_seconds"))
	c.SetWaiting("nightly", 2)
	want = `
# HELP lull_window_nodes_waiting Nodes selected by the window whose maintenance request waits (for the window, the budget or the lease).
# TYPE lull_window_nodes_waiting gauge
lull_window_nodes_waiting{window="broken"} 0
lull_window_nodes_waiting{window="never"} 0
lull_window_nodes_waiting{window="nightly"} 2
`
	require.NoError(t, testutil.CollectAndCompare(c, strings.NewReader(want), "lull_window_nodes_waiting"))
	c.Forget("broken")
	require.Equal(t, 6, testutil.CollectAndCount(c)) // 3 metrics x 2 windows
}

type errString string

func (e errString) Error() string { return string(e) }

func windowOf(spec lullv1alpha1.MaintenanceWindowSpec) *lullv1alpha1.MaintenanceWindow {
	return &lullv1alpha1.MaintenanceWindow{ObjectMeta: metav1.ObjectMeta{Name: "w", Generation: 1}, Spec: spec}
}

func dailyFor(d time.Duration) lullv1alpha1.MaintenanceWindowSpec {
	return lullv1alpha1.MaintenanceWindowSpec{Schedule: &lullv1alpha1.Schedule{StartTime: "00:00",
		Duration: lullv1alpha1.Duration{Duration: d}, Recurrence: &lullv1alpha1.Recurrence{Frequency: lullv1alpha1.Daily}}}
}

// statusAt evaluates mw at now and writes its status over st, as a
// reconcile does.
func statusAt(st *lullv1alpha1.MaintenanceWindowStatus, mw *lullv1alpha1.MaintenanceWindow, now time.Time) {
	w := window.CompileOrInvalid(&mw.Spec, window.Options{})
	setStatus(st, mw.Generation, w, w.Evaluate(now), now, nil)
}

func utc(s string) time.Time {
	t, err := time.Parse(time.RFC3339, s)
	if err != nil {
		panic(err)
	}
	return t.UTC()
}

func timeOf(t *metav1.Time) string {
	if t == nil {
		return ""
	}
	return t.UTC().Format(time.RFC3339)
}

// TestStatusTimes: what status says for a merged period, a schedule that
// never closes, an expired override, and a window that is always open
// (issue 15's examples).
func TestStatusTimes(t *testing.T) {
	weekdays := lullv1alpha1.MaintenanceWindowSpec{Schedule: &lullv1alpha1.Schedule{StartTime: "00:00",
		Duration: lullv1alpha1.Duration{Duration: 24 * time.Hour}, Recurrence: &lullv1alpha1.Recurrence{Frequency: lullv1alpha1.Weekly,
			DaysOfWeek: []lullv1alpha1.Weekday{lullv1alpha1.Monday, lullv1alpha1.Tuesday, lullv1alpha1.Wednesday, lullv1alpha1.Thursday, lullv1alpha1.Friday}}}}
	saturdays := saturdayMornings()
	saturdays.Override = &lullv1alpha1.Override{Strategy: lullv1alpha1.OverridePermissive, Until: metav1.Time{Time: utc("2026-03-10T12:00:00Z")}}
	type shown struct{ state, since, until, nextStart, nextEnd string }
	tests := []struct {
		name string
		spec lullv1alpha1.MaintenanceWindowSpec
		now  string
		want shown
	}{
		{"a merged Mon-Fri period began on Monday", weekdays, "2026-03-12T12:00:00Z",
			shown{"Permitted", "2026-03-09T00:00:00Z", "2026-03-14T00:00:00Z", "2026-03-09T00:00:00Z", "2026-03-14T00:00:00Z"}},
		{"daily 24 h never closes; its start is when lull saw it open", dailyFor(24 * time.Hour), "2026-03-12T12:00:00Z",
			shown{"Permitted", "", "", "2026-03-12T12:00:00Z", ""}},
		{"daily 25 h never closes", dailyFor(25 * time.Hour), "2026-03-12T12:00:00Z",
			shown{"Permitted", "", "", "2026-03-12T12:00:00Z", ""}},
		{"restricted since the Permissive override ended", saturdays, "2026-03-10T13:00:00Z",
			shown{"Restricted", "2026-03-10T12:00:00Z", "2026-03-14T02:00:00Z", "2026-03-14T02:00:00Z", "2026-03-14T06:00:00Z"}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			var st lullv1alpha1.MaintenanceWindowStatus
			statusAt(&st, windowOf(tc.spec), utc(tc.now))
			got := shown{string(st.Current.State), timeOf(st.Current.Since), timeOf(st.Current.Until), timeOf(&st.Next.Start), timeOf(st.Next.End)}
			require.Equal(t, tc.want, got)
		})
	}
}

// TestAlwaysOpenStartIsStable: an always-open window's next start is when
// lull saw it open, not the time of the last reconcile; a window reopened
// by the end of a freeze starts at that end.
func TestAlwaysOpenStartIsStable(t *testing.T) {
	mw := windowOf(lullv1alpha1.MaintenanceWindowSpec{Strategy: lullv1alpha1.StrategyPermissive})
	opened := utc("2026-03-12T12:00:00Z")
	var st lullv1alpha1.MaintenanceWindowStatus
	statusAt(&st, mw, opened)
	for _, later := range []time.Duration{time.Minute, time.Hour, 30 * 24 * time.Hour} {
		statusAt(&st, mw, opened.Add(later))
		require.Equal(t, opened, st.Next.Start.UTC(), "reconciled %v after it opened", later)
		require.Nil(t, st.Next.End, "an always-open window has no end")
		require.Nil(t, st.Current.Until)
	}

	// A window that was closed and is made Permissive opened at the reconcile
	// that saw the change.
	mw = windowOf(saturdayMornings())
	st = lullv1alpha1.MaintenanceWindowStatus{}
	statusAt(&st, mw, utc("2026-03-11T09:00:00Z"))
	require.Equal(t, lullv1alpha1.StateRestricted, st.Current.State)
	mw.Spec, mw.Generation = lullv1alpha1.MaintenanceWindowSpec{Strategy: lullv1alpha1.StrategyPermissive}, 2
	statusAt(&st, mw, utc("2026-03-11T10:00:00Z"))
	statusAt(&st, mw, utc("2026-03-11T11:00:00Z"))
	require.Equal(t, utc("2026-03-11T10:00:00Z"), st.Next.Start.UTC())

	// The engine knows when a freeze ended: that is the start, whatever
	// the reconcile saw.
	mw.Spec.Override = &lullv1alpha1.Override{Strategy: lullv1alpha1.OverrideRestrictive, Until: metav1.Time{Time: utc("2026-03-11T12:00:00Z")}}
	mw.Generation = 3
	statusAt(&st, mw, utc("2026-03-11T11:30:00Z"))
	require.Equal(t, lullv1alpha1.StateRestricted, st.Current.State)
	statusAt(&st, mw, utc("2026-03-11T12:00:05Z"))
	require.Equal(t, utc("2026-03-11T12:00:00Z"), st.Next.Start.UTC())
	require.Equal(t, utc("2026-03-11T12:00:00Z"), st.Current.Since.UTC())
}

func saturdayMornings() lullv1alpha1.MaintenanceWindowSpec {
	return lullv1alpha1.MaintenanceWindowSpec{Schedule: &lullv1alpha1.Schedule{StartTime: "02:00",
		Duration: lullv1alpha1.Duration{Duration: 4 * time.Hour}, Recurrence: &lullv1alpha1.Recurrence{Frequency: lullv1alpha1.Weekly,
			DaysOfWeek: []lullv1alpha1.Weekday{lullv1alpha1.Saturday}}}}
}

// TestCollectorNeverClosing: a schedule that never closes is permitted
// indefinitely (-1), not until the end of the search horizon.
func TestCollectorNeverClosing(t *testing.T) {
	clk := clocktesting.NewFakeClock(utc("2026-03-12T12:00:00Z"))
	c := NewCollector(clk)
	c.Set("daily24h", window.MustCompile(&lullv1alpha1.MaintenanceWindowSpec{Schedule: dailyFor(24 * time.Hour).Schedule}))
	c.Set("daily25h", window.MustCompile(&lullv1alpha1.MaintenanceWindowSpec{Schedule: dailyFor(25 * time.Hour).Schedule}))
	c.Set("weekdays", window.MustCompile(&lullv1alpha1.MaintenanceWindowSpec{Schedule: &lullv1alpha1.Schedule{StartTime: "00:00",
		Duration: lullv1alpha1.Duration{Duration: 24 * time.Hour}, Recurrence: &lullv1alpha1.Recurrence{Frequency: lullv1alpha1.Weekly,
			DaysOfWeek: []lullv1alpha1.Weekday{lullv1alpha1.Monday, lullv1alpha1.Tuesday, lullv1alpha1.Wednesday, lullv1alpha1.Thursday, lullv1alpha1.Friday}}}}))
	want := `
# HELP lull_window_permitted_remaining_seconds Seconds left in the current permitted period; 0 when restricted, -1 when permitted indefinitely.
# TYPE lull_window_permitted_remaining_seconds gauge
lull_window_permitted_remaining_seconds{window="daily24h"} -1
lull_window_permitted_remaining_seconds{window="daily25h"} -1
lull_window_permitted_remaining_seconds{window="weekdays"} 129600
`
	require.NoError(t, testutil.CollectAndCompare(c, strings.NewReader(want), "lull_window_permitted_remaining_seconds"))
	want = `
# HELP lull_window_seconds_until_permitted Seconds until the window permits material changes to start: 0 when permitted now, -1 when restricted indefinitely, -2 when no window can be computed (invalid spec or none within the search horizon).
# TYPE lull_window_seconds_until_permitted gauge
lull_window_seconds_until_permitted{window="daily24h"} 0
lull_window_seconds_until_permitted{window="daily25h"} 0
lull_window_seconds_until_permitted{window="weekdays"} 0
`
	require.NoError(t, testutil.CollectAndCompare(c, strings.NewReader(want), "lull_window_seconds_until_permitted"))
}
