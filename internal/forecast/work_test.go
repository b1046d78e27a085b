package forecast

import (
	"fmt"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	testingclock "k8s.io/utils/clock/testing"

	lullv1alpha1 "lull.dev/lull/api/v1alpha1"
	"lull.dev/lull/internal/settings"
)

// These tests hold each event to what it affects: the work it does must
// not grow with the nodes and windows it does not touch.

func takeWork(f *Forecast) work {
	f.mu.Lock()
	defer f.mu.Unlock()
	w := f.work
	f.work = work{}
	return w
}

func teamWindow(i int) *lullv1alpha1.MaintenanceWindow {
	w := dailyWindow(fmt.Sprintf("team-%04d", i))
	w.Spec.NodeSelector = &metav1.LabelSelector{MatchLabels: map[string]string{"team": fmt.Sprintf("t%d", i)}}
	return w
}

func TestNodeEventTriesOnlyWindowsThatMaySelectIt(t *testing.T) {
	f, _, _ := newForecast(t, true)
	for i := 0; i < 1000; i++ {
		f.SetWindow(teamWindow(i))
	}
	f.SetWindow(dailyWindow("daily")) // pool=a
	everywhere := dailyWindow("everywhere")
	everywhere.Spec.NodeSelector = nil
	f.SetWindow(everywhere)
	notB := dailyWindow("not-b")
	notB.Spec.NodeSelector = &metav1.LabelSelector{MatchExpressions: []metav1.LabelSelectorRequirement{
		{Key: "pool", Operator: metav1.LabelSelectorOpNotIn, Values: []string{"b"}}}}
	f.SetWindow(notB)
	hasTeam := dailyWindow("has-team")
	hasTeam.Spec.NodeSelector = &metav1.LabelSelector{MatchExpressions: []metav1.LabelSelectorRequirement{
		{Key: "team", Operator: metav1.LabelSelectorOpExists}}}
	f.SetWindow(hasTeam)
	takeWork(f)

	f.SetNode(node("n1", map[string]string{"pool": "a", "team": "t7", lullv1alpha1.MaintenanceLabel: "kernel-update"}))
	w := takeWork(f)
	require.Equal(t, 1, w.computed)
	require.LessOrEqual(t, w.windowsTried, 5, "windows tried for one node among 1,004")
	require.Equal(t, []string{"daily", "everywhere", "has-team", "not-b", "team-0007"}, f.Snapshot().Get("n1").Windows.Names)

	f.SetNode(node("n2", map[string]string{"pool": "b", lullv1alpha1.MaintenanceLabel: "kernel-update"}))
	require.LessOrEqual(t, takeWork(f).windowsTried, 5)
	require.Equal(t, []string{"everywhere"}, f.Snapshot().Get("n2").Windows.Names)
}

func TestWindowChangeRecomputesOnlyNodesItSelects(t *testing.T) {
	f, _, _ := newForecast(t, true)
	for i := 0; i < 100; i++ {
		pool := "b"
		if i < 3 {
			pool = "a"
		}
		f.SetNode(node(fmt.Sprintf("n%02d", i), map[string]string{"pool": pool, lullv1alpha1.MaintenanceLabel: "kernel-update"}))
	}
	f.SetNode(node("idle", map[string]string{"pool": "a"})) // not requested: nothing to forecast
	takeWork(f)

	f.SetWindow(dailyWindow("daily")) // pool=a, opens at 12:00
	require.Equal(t, 3, takeWork(f).computed, "the requested nodes in pool a")
	require.False(t, f.Snapshot().Get("n00").WindowOpen)
	require.True(t, f.Snapshot().Get("n50").WindowOpen, "no window: the permissive default")

	moved := dailyWindow("daily")
	moved.Spec.NodeSelector.MatchLabels["pool"] = "b"
	f.SetWindow(moved)
	require.Equal(t, 100, takeWork(f).computed, "the nodes it selected and those it selects")
	require.True(t, f.Snapshot().Get("n00").WindowOpen)
	require.False(t, f.Snapshot().Get("n50").WindowOpen)

	status := moved.DeepCopy()
	status.ResourceVersion = "2"
	status.Status.SelectedNodes = 97
	f.SetWindow(status)
	require.Equal(t, 0, takeWork(f).computed, "a status update changes no forecast")

	f.DeleteWindow("daily")
	require.Equal(t, 97, takeWork(f).computed)
	require.True(t, f.Snapshot().Get("n50").WindowOpen)
	f.DeleteWindow("daily")
	require.Equal(t, 0, takeWork(f).computed, "deleting an unknown window")
}

// Before the MaintenanceWindows are synced a requested node counts as open
// whatever its windows, so listing them recomputes nothing.
func TestWindowsBeforeSyncRecomputeNothing(t *testing.T) {
	f := New(Options{Settings: settings.Settings{NodesWithoutWindow: settings.NoWindowRestrictive},
		Clock: testingclock.NewFakeClock(t0)})
	defer f.Stop()
	for i := 0; i < 10; i++ {
		f.SetNode(node(fmt.Sprintf("n%d", i), map[string]string{"pool": "a", lullv1alpha1.MaintenanceLabel: "x"}))
	}
	takeWork(f)
	for i := 0; i < 100; i++ {
		f.SetWindow(teamWindow(i))
	}
	f.SetWindow(dailyWindow("daily"))
	require.Equal(t, 0, takeWork(f).computed)
	require.True(t, f.Snapshot().Get("n0").WindowOpen)
	f.SetSynced()
	require.Equal(t, 10, takeWork(f).computed)
	n := f.Snapshot().Get("n0")
	require.False(t, n.WindowOpen)
	require.Equal(t, []string{"daily"}, n.Windows.Names)
}

func TestLeaseEventTouchesOnlyItsNode(t *testing.T) {
	f, clk, rec := newForecast(t, true)
	const leased = 1000
	for i := 0; i < leased; i++ {
		f.SetLease(leaseFor(fmt.Sprintf("n%d", i), "tool", "1"))
	}
	takeWork(f)
	rec.take()

	clk.Step(time.Second)
	f.SetLease(leaseFor("n7", "tool", "2")) // a renewal
	w := takeWork(f)
	require.Equal(t, 1, w.computed)
	require.Less(t, w.copied, leased/8, "node entries copied to publish the renewal")
	require.Less(t, w.scanned, leased/8, "node entries visited to arm the timer")
	require.Equal(t, t0.Add(61*time.Second), f.Snapshot().Get("n7").Lease.Expires)
	require.Empty(t, rec.take(), "a renewal changes nothing a reader acts on")
	require.Equal(t, leased, f.Snapshot().Len())

	// The others expire by observation at t0+60s, n7 a second later.
	clk.Step(59 * time.Second)
	var expired []Change
	// Listeners are called after the snapshot is published: wait for them.
	waitFor(t, func() bool { expired = append(expired, rec.take()...); return len(expired) >= leased-1 })
	require.Len(t, expired, leased-1)
	require.Equal(t, 1, f.Snapshot().Len())
	require.NotNil(t, f.Snapshot().Get("n7"))
	clk.Step(time.Second)
	waitFor(t, func() bool { return f.Snapshot().Len() == 0 })
}
