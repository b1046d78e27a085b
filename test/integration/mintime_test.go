package integration

import (
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	lullv1alpha1 "lull.dev/lull/api/v1alpha1"
	"lull.dev/lull/drainer/maintenance"
	"lull.dev/lull/internal/forecast"
	"lull.dev/lull/internal/gate"
	"lull.dev/lull/internal/plan"
)

// Issue 15's acceptance scenario: a window that closes in 10 minutes with
// minTimeRemaining 30m, and a labelled node. The scheduler does not treat
// the node as disrupted now (a pod is placed on it), the drainer waits for
// the next window, and `kubectl lull plan` says the next window: all three
// from the forecast and the gates of internal/gate, agreeing on the same start.
func TestMinTimeRemainingOneAnswer(t *testing.T) {
	e := newDrainEnv(t)
	// Daily 08:10-10:10 UTC; the fake now is 10:00, so 10 minutes are left.
	e.window("closing-soon", func(w *lullv1alpha1.MaintenanceWindow) {
		w.Spec.Strategy = lullv1alpha1.StrategySchedule
		w.Spec.NodeSelector = &metav1.LabelSelector{MatchLabels: map[string]string{"pool": "mintime"}}
		w.Spec.Schedule = &lullv1alpha1.Schedule{TimeZone: "UTC", StartTime: "08:10", Duration: lullv1alpha1.Duration{Duration: 2 * time.Hour},
			Recurrence: &lullv1alpha1.Recurrence{Frequency: lullv1alpha1.Daily}}
		w.Spec.MinTimeRemaining = lullv1alpha1.NewDuration(30 * time.Minute)
	})
	next := time.Date(2026, 11, 22, 8, 10, 0, 0, time.UTC)
	s := &schedEnv{t: t, ctx: e.ctx, cs: e.cs, clock: e.clock, ns: e.ns} // the drainer's clock and namespace
	s.node("n1", map[string]string{"pool": "mintime", lullv1alpha1.MaintenanceLabel: "kernel-update"})
	s.start(nil)
	e.start(nil)

	// (c) The preview: the request would start when the next window opens.
	p := e.predict("kernel-update", nil, "n1").Nodes[0]
	require.Equal(t, plan.StartWindow, p.Start, p.WaitingFor)
	require.Equal(t, next, *p.StartAt)
	require.Contains(t, p.WaitingFor, "only 10m0s left in window closing-soon; minTimeRemaining is 30m0s; next opens at 2026-11-22T08:10:00Z")

	// (b) The drainer waits, saying so, with the same start and message.
	nm := e.verify(p)
	require.Equal(t, next, nm.Status.NextWindowStart.UTC())
	c := meta.FindStatusCondition(nm.Status.Conditions, maintenance.ConditionWindowPermits)
	require.NotNil(t, c)
	require.Equal(t, metav1.ConditionFalse, c.Status)
	require.Equal(t, gate.ReasonTooLittleLeft, c.Reason)
	require.False(t, e.nodeObj("n1").Spec.Unschedulable, "nothing cordoned")
	require.Empty(t, e.leaseHolder("n1"), "no lease taken")

	// (a) The scheduler: the node is not disrupted now; it is expected to
	// be at the same start, and a pod is placed on it.
	var fc *forecast.Node
	s.forecastShows("n1 expected at the next window", func(snap *forecast.Snapshot) bool {
		fc = snap.Get("n1")
		return fc != nil && fc.Requested()
	})
	_, blocked := forecast.Blocks(fc, false)
	require.False(t, blocked, fc.Reason)
	require.False(t, fc.WindowOpen)
	require.Equal(t, next, fc.Disruption)
	require.Contains(t, fc.Reason, "next opens at 2026-11-22T08:10:00Z")
	s.pod("web")
	require.Equal(t, "n1", s.boundNode("web"))

	// When the next window opens, the drainer starts when all three said.
	e.clock.SetTime(next)
	e.verifyStartedAt(p)
	s.forecastShows("n1 disrupted now", func(snap *forecast.Snapshot) bool {
		_, blocked := forecast.Blocks(snap.Get("n1"), false)
		return blocked
	})
	require.Equal(t, "n1", s.boundNode("web"), "the pod placed before stays where it was")
	s.pod("late")
	require.NotEmpty(t, s.unschedulableMessage("late"), "the node now takes no new pods")
}
