package window

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
	engine "lull.dev/lull/pkg/window"
)

func nightly() *lullv1alpha1.MaintenanceWindow {
	return &lullv1alpha1.MaintenanceWindow{ObjectMeta: metav1.ObjectMeta{Name: "nightly", Generation: 3},
		Spec: lullv1alpha1.MaintenanceWindowSpec{Schedule: &lullv1alpha1.Schedule{StartTime: "01:00",
			Duration: lullv1alpha1.Duration{Duration: 2 * time.Hour}, Recurrence: &lullv1alpha1.Recurrence{Frequency: lullv1alpha1.Daily}}}}
}

func TestSetStatus(t *testing.T) {
	now := time.Date(2026, 11, 22, 12, 0, 0, 0, time.UTC)
	mw := nightly()
	w := engine.CompileOrInvalid(&mw.Spec, engine.Options{})
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
	w = engine.CompileOrInvalid(&mw.Spec, engine.Options{})
	st = lullv1alpha1.MaintenanceWindowStatus{}
	setStatus(&st, mw.Generation, w, w.Evaluate(now), now, nil)
	ready := meta.FindStatusCondition(st.Conditions, ConditionReady)
	require.Equal(t, metav1.ConditionFalse, ready.Status)
	require.Equal(t, "InvalidSpec", ready.Reason)
	require.Contains(t, ready.Message, "spec.schedule.timeZone")
	require.Nil(t, st.Next, "an invalid window has no next period")
}

func TestCollector(t *testing.T) {
	clk := clocktesting.NewFakeClock(time.Date(2026, 11, 22, 0, 30, 0, 0, time.UTC))
	c := NewCollector(clk)
	c.Set("nightly", engine.CompileOrInvalid(&nightly().Spec, engine.Options{}))
	c.Set("never", engine.MustCompile(&lullv1alpha1.MaintenanceWindowSpec{Strategy: lullv1alpha1.StrategyRestrictive}))
	c.Set("broken", engine.Invalid(errString("bad")))
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
