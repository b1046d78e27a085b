package gate

import (
	"context"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	clocktesting "k8s.io/utils/clock/testing"
	"sigs.k8s.io/controller-runtime/pkg/client/fake"

	lullv1alpha1 "lull.dev/lull/api/v1alpha1"
	"lull.dev/lull/internal/budget"
	"lull.dev/lull/internal/lullscheme"
)

// Red team of 93f424e (HealthSource.Ended = Ledger.SettledAt): the
// recovery gate counts a completion this drainer wrote before its cache
// shows it.

// rtStaleDrained is n1's request as a lagging cache still shows it after
// its Completed write: Drained, holding its slot, no CompletedAt.
func rtStaleDrained() lullv1alpha1.NodeMaintenance {
	nm := finished("n1", t0, []string{"wave"})
	nm.UID = "uid-n1"
	nm.Status.Phase, nm.Status.CompletedAt = lullv1alpha1.PhaseDrained, nil
	return nm
}

func rtRecoveryWindow(settle time.Duration) *lullv1alpha1.MaintenanceWindow {
	return gated(lullv1alpha1.Gates{Recovery: &lullv1alpha1.RecoveryGate{SettleTime: &lullv1alpha1.Duration{Duration: settle}}})
}

// Attack: SettledAt forgets a settled request after releasedFor (1 min);
// the gate then falls back to the cache. A cache still lagging then (a
// watch that stalled, a relist under load) shows the request Drained: the
// gate does not count it, and opens while the node it finished is
// NotReady and well inside its settle time. "Success, nothing known":
// the drainer knows it ended the request (its own status write) but the
// gate says Recovered. (Same as before 93f424e once Ended expired.)
// FAILED, fixed: the ledger remembers a settled request for the gate for
// endedFor (an hour), and leaves it out of the budget's count for
// releasedFor only (budget.endedFor).
func TestRedteamRecoveryEndedExpiresWhileTheCacheLags(t *testing.T) {
	clk := clocktesting.NewFakeClock(t0)
	l := &budget.Ledger{Clock: clk}
	l.Settled("uid-n1") // n1's Completed write landed at t0; its slot went back
	w := rtRecoveryWindow(5 * time.Minute)
	r := fake.NewClientBuilder().WithScheme(lullscheme.New()).
		WithObjects(readyNode("n1", corev1.ConditionFalse, t0.Add(5*time.Second))).Build()
	src := HealthSource{Reader: r, Ended: l.SettledAt}
	nms := []lullv1alpha1.NodeMaintenance{rtStaleDrained()}

	clk.SetTime(t0.Add(30 * time.Second))
	v, err := Recovery(context.Background(), src, w, nms, "n2", clk.Now())
	require.NoError(t, err)
	require.True(t, v.Hold, "sanity: within releasedFor, Ended counts n1 (%s)", v.Message)
	require.Equal(t, ReasonNodeUnwell, v.Reason)

	clk.SetTime(t0.Add(61 * time.Second))
	v, err = Recovery(context.Background(), src, w, nms, "n2", clk.Now())
	require.NoError(t, err)
	require.True(t, v.Hold, "n1 ended 61s ago, is NotReady, and its settle time is 5m: the wave must halt, not open because "+
		"the drainer forgot its own write while its cache still lags (%s: %s)", v.Reason, v.Message)
}

// Attack: the ledger's clock ahead of the reconcile's (SettledAt in the
// future of now). finished clamps to now: the node settles the whole
// settle time from now. Holds.
func TestRedteamRecoveryEndedInTheFutureClampsToNow(t *testing.T) {
	w := rtRecoveryWindow(time.Minute)
	r := fake.NewClientBuilder().WithScheme(lullscheme.New()).
		WithObjects(readyNode("n1", corev1.ConditionTrue, t0.Add(-time.Hour))).Build()
	src := HealthSource{Reader: r, Ended: func(types.UID) (time.Time, bool) { return t0.Add(time.Hour), true }}
	v, err := Recovery(context.Background(), src, w, []lullv1alpha1.NodeMaintenance{rtStaleDrained()}, "n2", t0)
	require.NoError(t, err)
	require.True(t, v.Hold)
	require.Equal(t, ReasonSettling, v.Reason)
	require.Equal(t, time.Minute, v.RetryAfter)
}

// Attack: Ended earlier than what the cache shows once it catches up
// (CompletedAt written later than the ledger's clock says). The cache
// wins: the later finish, a settle time from it. Holds (the change never
// shortens a settle the cache alone would give).
func TestRedteamRecoveryCacheCompletedAtWinsOverEnded(t *testing.T) {
	w := rtRecoveryWindow(time.Minute)
	r := fake.NewClientBuilder().WithScheme(lullscheme.New()).
		WithObjects(readyNode("n1", corev1.ConditionTrue, t0.Add(-time.Hour))).Build()
	nm := finished("n1", t0.Add(-5*time.Second), []string{"wave"})
	nm.UID = "uid-n1"
	src := HealthSource{Reader: r, Ended: func(types.UID) (time.Time, bool) { return t0.Add(-50 * time.Second), true }}
	v, err := Recovery(context.Background(), src, w, []lullv1alpha1.NodeMaintenance{nm}, "n2", t0)
	require.NoError(t, err)
	require.True(t, v.Hold)
	require.Equal(t, 55*time.Second, v.RetryAfter, v.Message)
}

// Attack: a request settled without having started (its slot reserved,
// then given back waiting for another holder's lease: Settled is called
// for it, its stored phase holding no slot) is not a finished node, and
// a request of another window is not this window's. Holds: neither
// holds the wave.
func TestRedteamRecoveryEndedNeverStartedOrOtherWindow(t *testing.T) {
	w := rtRecoveryWindow(time.Minute)
	r := fake.NewClientBuilder().WithScheme(lullscheme.New()).
		WithObjects(readyNode("n1", corev1.ConditionFalse, t0), readyNode("n3", corev1.ConditionFalse, t0)).Build()
	pending := rtStaleDrained()
	pending.Status.Phase, pending.Status.StartedAt = lullv1alpha1.PhaseWaitingForLease, nil
	other := finished("n3", t0, []string{"other"})
	other.UID, other.Status.Phase, other.Status.CompletedAt = "uid-n3", lullv1alpha1.PhaseDrained, nil
	src := HealthSource{Reader: r, Ended: func(types.UID) (time.Time, bool) { return t0.Add(-time.Second), true }}
	v, err := Recovery(context.Background(), src, w, []lullv1alpha1.NodeMaintenance{pending, other}, "n2", t0)
	require.NoError(t, err)
	require.False(t, v.Hold, v.Message)
}

// Attack: leader failover. The new leader's ledger has no settled map: its
// gate falls back to its cache, which may lag the old leader's last
// Completed write, and opens (as before 93f424e). Not a regression, and
// the budget covers it: with nothing settled in this process the cache
// count keeps the lagging request's slot (maxUnavailable 1: full). Holds
// for maxUnavailable 1.
func TestRedteamRecoveryFailoverGateOpensButBudgetCountsTheLaggingRequest(t *testing.T) {
	clk := clocktesting.NewFakeClock(t0)
	stale := rtStaleDrained()
	stale.Status.DefaultBudget = true
	cached := fake.NewClientBuilder().WithScheme(lullscheme.New()).WithObjects(
		readyNode("n1", corev1.ConditionFalse, t0.Add(5*time.Second)), readyNode("n2", corev1.ConditionTrue, t0.Add(-time.Hour)), stale.DeepCopy()).
		WithStatusSubresource(&lullv1alpha1.NodeMaintenance{}).Build()
	live := fake.NewClientBuilder().WithScheme(lullscheme.New()).Build() // the old leader released n1's slot
	l := &budget.Ledger{Client: live, Live: live, Namespace: "lull-system", Name: budget.DefaultLedgerName, Holder: "new", Clock: clk}
	w := rtRecoveryWindow(5 * time.Minute)
	v, err := Recovery(context.Background(), HealthSource{Reader: cached, Ended: l.SettledAt}, w, []lullv1alpha1.NodeMaintenance{stale}, "n2", t0.Add(10*time.Second))
	require.NoError(t, err)
	require.False(t, v.Hold, "the new leader's gate knows nothing of n1's end (as before the change)")
	n2 := &lullv1alpha1.NodeMaintenance{ObjectMeta: metav1.ObjectMeta{Name: "n2", UID: "uid-n2"}, Spec: lullv1alpha1.NodeMaintenanceSpec{NodeName: "n2"}}
	res, err := l.Reserve(context.Background(), cached, n2, budget.Request{Node: "n2", DefaultMaxUnavailable: 1})
	require.NoError(t, err)
	require.False(t, res.Free, "the cache still counts n1's slot: n2 does not start")
}

// Attack: the window controller judges the gate without Ended
// (drainer/windowcontroller/gates.go). While the cache lags it says
// Recovered where the drainer holds: the window's status says open, the
// drainer closed. That direction is safe (no node reads the Recovered
// condition to start; it only wakes held requests, which judge again).
// The reverse cannot come of Ended: it only ever adds a finished request.
// Holds.
func TestRedteamRecoveryWindowControllerWithoutEndedOnlyOpensMore(t *testing.T) {
	w := rtRecoveryWindow(time.Minute)
	r := fake.NewClientBuilder().WithScheme(lullscheme.New()).
		WithObjects(readyNode("n1", corev1.ConditionFalse, t0.Add(-5*time.Second))).Build()
	nms := []lullv1alpha1.NodeMaintenance{rtStaleDrained()}
	status, err := Recovery(context.Background(), HealthSource{Reader: r}, w, nms, "", t0)
	require.NoError(t, err)
	require.False(t, status.Hold, "the window controller, without Ended, does not see n1's end yet")
	drainer, err := Recovery(context.Background(), HealthSource{Reader: r, Ended: func(types.UID) (time.Time, bool) { return t0.Add(-10 * time.Second), true }}, w, nms, "n2", t0)
	require.NoError(t, err)
	require.True(t, drainer.Hold, "the drainer, with Ended, holds")
	require.Equal(t, ReasonNodeUnwell, drainer.Reason)
}
