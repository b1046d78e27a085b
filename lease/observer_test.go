package lease

import (
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	coordinationv1 "k8s.io/api/coordination/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	clocktesting "k8s.io/utils/clock/testing"
	"k8s.io/utils/ptr"
)

func observed(rv, holder string, transitions int32, renewed time.Time) *coordinationv1.Lease {
	return &coordinationv1.Lease{ObjectMeta: metav1.ObjectMeta{Namespace: "lull-leases", Name: "node-n1", UID: "uid-1", ResourceVersion: rv},
		Spec: coordinationv1.LeaseSpec{HolderIdentity: ptr.To(holder), LeaseDurationSeconds: ptr.To[int32](60),
			LeaseTransitions: ptr.To(transitions), RenewTime: &metav1.MicroTime{Time: renewed}}}
}

// Expiry is judged on the observer's clock from when it first saw a
// version: a renewTime far in the past (the holder's clock behind, or an
// observer that just started) does not make a lease expired, and one in
// the future does not keep it alive.
func TestObserverJudgesByObservation(t *testing.T) {
	now := time.Date(2026, 11, 25, 10, 0, 0, 0, time.UTC)
	clk := clocktesting.NewFakeClock(now)
	o := NewObserver(clk)
	stale := observed("1", "lull-drainer/a", 0, now.Add(-time.Hour))
	require.False(t, o.Expired(stale), "first sight: a lease renewed an hour ago by the holder's clock")
	clk.Step(59 * time.Second)
	require.False(t, o.Expired(stale))
	clk.Step(time.Second)
	require.True(t, o.Expired(stale), "unchanged for its duration on our clock")

	future := observed("2", "lull-drainer/a", 0, now.Add(time.Hour))
	require.False(t, o.Expired(future), "a new version starts a new observation")
	clk.Step(time.Minute)
	require.True(t, o.Expired(future), "a renewTime in the future keeps nothing alive")

	o.Forget("lull-leases", "node-n1")
	require.False(t, o.Expired(future), "forgotten: seen again for the first time")
}

func TestObserverFenced(t *testing.T) {
	now := time.Date(2026, 11, 25, 10, 0, 0, 0, time.UTC)
	clk := clocktesting.NewFakeClock(now)
	o := NewObserver(clk)
	tok := Token{UID: "uid-1", Transitions: 3}
	l := observed("1", "lull-drainer/a", 3, now)
	require.Empty(t, o.Fenced(l, tok, "lull-drainer"))
	require.Contains(t, o.Fenced(l, Token{UID: "uid-0", Transitions: 3}, "lull-drainer"), "released and taken again")
	require.Contains(t, o.Fenced(l, Token{UID: "uid-1", Transitions: 2}, "lull-drainer"), "changed holder")
	require.Contains(t, o.Fenced(observed("2", "kured", 3, now), tok, "lull-drainer"), `held by "kured"`)
	clk.Step(2 * time.Minute)
	require.Contains(t, o.Fenced(observed("2", "kured", 3, now), tok, "lull-drainer"), `held by "kured"`)
	require.Contains(t, o.Fenced(l, tok, "lull-drainer"), "expired")
}
