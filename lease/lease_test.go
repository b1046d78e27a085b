package lease

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	coordinationv1 "k8s.io/api/coordination/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/kubernetes/fake"
	clocktesting "k8s.io/utils/clock/testing"
	"k8s.io/utils/ptr"
)

func setup(t *testing.T) (*fake.Clientset, *clocktesting.FakeClock) {
	t.Helper()
	cs := fake.NewClientset(&corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: "n1", UID: "uid-n1"}})
	return cs, clocktesting.NewFakeClock(time.Date(2026, 11, 22, 10, 0, 0, 0, time.UTC))
}

func TestAcquireRenewRelease(t *testing.T) {
	cs, clk := setup(t)
	a := New(cs, Options{Clock: clk})
	ctx := t.Context()

	info, err := a.Acquire(ctx, "n1", "tool-a", "reboot", "kernel 6.12", time.Minute)
	require.NoError(t, err)
	assert.Equal(t, "tool-a", info.Holder)
	assert.Equal(t, "reboot", info.Operation)
	assert.Equal(t, "kernel 6.12", info.Reason)
	assert.Equal(t, int32(0), info.Transitions)
	assert.Equal(t, time.Minute, info.Duration)

	l, err := cs.CoordinationV1().Leases(DefaultNamespace).Get(ctx, "node-n1", metav1.GetOptions{})
	require.NoError(t, err)
	require.Len(t, l.OwnerReferences, 1)
	assert.Equal(t, "Node", l.OwnerReferences[0].Kind)
	assert.EqualValues(t, "uid-n1", l.OwnerReferences[0].UID, "a deleted node's lease is garbage-collected")

	clk.Step(30 * time.Second)
	info, err = a.Renew(ctx, "n1", "tool-a")
	require.NoError(t, err)
	assert.Equal(t, clk.Now(), info.Renewed)

	// Acquiring again as the holder renews; no transition.
	info, err = a.Acquire(ctx, "n1", "tool-a", "reboot", "", time.Minute)
	require.NoError(t, err)
	assert.Equal(t, int32(0), info.Transitions)

	assert.True(t, a.Wrote("n1"))
	assert.False(t, New(cs, Options{Clock: clk}).Wrote("n1"), "another client wrote nothing")
	require.NoError(t, a.Release(ctx, "n1", "tool-a"))
	assert.False(t, a.Wrote("n1"), "released")
	_, err = cs.CoordinationV1().Leases(DefaultNamespace).Get(ctx, "node-n1", metav1.GetOptions{})
	assert.True(t, err != nil, "released lease is deleted")
	require.NoError(t, a.Release(ctx, "n1", "tool-a"), "releasing an absent lease succeeds")
}

func TestHeldByAnother(t *testing.T) {
	cs, clk := setup(t)
	a := New(cs, Options{Clock: clk})
	b := New(cs, Options{Clock: clk})
	ctx := t.Context()
	_, err := a.Acquire(ctx, "n1", "tool-a", "reboot", "kernel", time.Minute)
	require.NoError(t, err)

	_, err = b.Acquire(ctx, "n1", "lull-drainer", "drain", "", time.Minute)
	held, ok := IsHeld(err)
	require.True(t, ok, "want HeldError, got %v", err)
	assert.Equal(t, "tool-a", held.Holder)
	assert.Equal(t, "reboot", held.Operation)
	assert.Contains(t, err.Error(), `leased by "tool-a" for reboot (kernel)`)

	err = b.Release(ctx, "n1", "lull-drainer")
	assert.True(t, errors.Is(err, ErrNotHolder), "release of a lease held by another is refused: %v", err)
	_, err = b.Renew(ctx, "n1", "lull-drainer")
	assert.True(t, errors.Is(err, ErrNotHolder), "renew of a lease held by another is refused: %v", err)
}

func TestExpiryByObservation(t *testing.T) {
	cs, clk := setup(t)
	holderClock := clocktesting.NewFakeClock(clk.Now().Add(-time.Hour)) // holder's clock is an hour slow
	a := New(cs, Options{Clock: holderClock})
	b := New(cs, Options{Clock: clk})
	ctx := t.Context()
	_, err := a.Acquire(ctx, "n1", "tool-a", "reboot", "", time.Minute)
	require.NoError(t, err)

	// B's first look starts its observation, however old the renew time
	// written by A's slow clock appears.
	_, err = b.Acquire(ctx, "n1", "tool-b", "drain", "", time.Minute)
	_, held := IsHeld(err)
	require.True(t, held, "a lease seen for the first time is never expired: %v", err)

	// A renews before B has watched it for a full duration: still held.
	clk.Step(50 * time.Second)
	holderClock.Step(50 * time.Second)
	_, err = a.Renew(ctx, "n1", "tool-a")
	require.NoError(t, err)
	clk.Step(50 * time.Second)
	_, err = b.Acquire(ctx, "n1", "tool-b", "drain", "", time.Minute)
	_, held = IsHeld(err)
	require.True(t, held, "renewed lease is live: %v", err)

	// A dies. After a full duration without change on B's clock, B takes over.
	clk.Step(59 * time.Second)
	_, err = b.Acquire(ctx, "n1", "tool-b", "drain", "", time.Minute)
	_, held = IsHeld(err)
	require.True(t, held, "not yet a full duration: %v", err)
	clk.Step(time.Second)
	info, err := b.Acquire(ctx, "n1", "tool-b", "drain", "", time.Minute)
	require.NoError(t, err)
	assert.Equal(t, "tool-b", info.Holder)
	assert.Equal(t, int32(1), info.Transitions, "a change of holder increments the fencing token")

	// The fake clientset does not enforce resourceVersion, so A's cached
	// copy would overwrite; a real API server answers Conflict and A then
	// reads the lease (test/integration covers that). A fresh client reads.
	_, err = New(cs, Options{Clock: holderClock}).Renew(ctx, "n1", "tool-a")
	assert.True(t, errors.Is(err, ErrNotHolder), "the old holder learns it lost the lease: %v", err)
}

func TestFreeLeaseIsTakenAtOnce(t *testing.T) {
	cs, clk := setup(t)
	a := New(cs, Options{Clock: clk})
	ctx := t.Context()
	_, err := a.Acquire(ctx, "n1", "tool-a", "reboot", "", time.Minute)
	require.NoError(t, err)
	// A third-party tool that clears the holder instead of deleting.
	l, err := cs.CoordinationV1().Leases(DefaultNamespace).Get(ctx, "node-n1", metav1.GetOptions{})
	require.NoError(t, err)
	l.Spec.HolderIdentity = nil
	_, err = cs.CoordinationV1().Leases(DefaultNamespace).Update(ctx, l, metav1.UpdateOptions{})
	require.NoError(t, err)

	b := New(cs, Options{Clock: clk})
	info, err := b.Acquire(ctx, "n1", "tool-b", "drain", "", time.Minute)
	require.NoError(t, err)
	assert.Equal(t, int32(1), info.Transitions)
}

func TestAcquireUnknownNode(t *testing.T) {
	cs, clk := setup(t)
	_, err := New(cs, Options{Clock: clk}).Acquire(t.Context(), "nope", "a", "drain", "", time.Minute)
	require.Error(t, err)
	assert.Contains(t, err.Error(), "getting node nope")
}

// A negative duration, or one a Lease cannot hold, is refused and writes
// nothing; zero means the default.
func TestAcquireDuration(t *testing.T) {
	cs, clk := setup(t)
	c := New(cs, Options{Clock: clk})
	_, err := c.Acquire(t.Context(), "n1", "a", "drain", "", -90*time.Second)
	require.ErrorContains(t, err, "duration -1m30s is negative")
	// One a Lease cannot hold (its int32 of seconds would wrap to a
	// negative or short duration, or round to zero) is refused too.
	for _, d := range []time.Duration{500 * time.Millisecond, MaxDuration + time.Second, 1 << 62} {
		_, err = c.Acquire(t.Context(), "n1", "a", "drain", "", d)
		require.ErrorContains(t, err, "does not fit a Lease", "duration %s", d)
	}
	_, err = cs.CoordinationV1().Leases(DefaultNamespace).Get(t.Context(), "node-n1", metav1.GetOptions{})
	require.True(t, apierrors.IsNotFound(err), "nothing created: %v", err)

	info, err := c.Acquire(t.Context(), "n1", "a", "drain", "", 0)
	require.NoError(t, err)
	require.Equal(t, DefaultDuration, info.Duration)
}

func TestNamespaceOption(t *testing.T) {
	cs, clk := setup(t)
	c := New(cs, Options{Namespace: Medik8sNamespace, Clock: clk})
	_, err := c.Acquire(t.Context(), "n1", "a", "drain", "", time.Minute)
	require.NoError(t, err)
	_, err = cs.CoordinationV1().Leases(Medik8sNamespace).Get(t.Context(), "node-n1", metav1.GetOptions{})
	require.NoError(t, err)
}

// A lease written by another tool without a duration is live for
// DefaultDuration after it was last seen to change, never taken at once.
func TestLeaseWithoutDurationIsNotTakenOnSecondLook(t *testing.T) {
	cs, clk := setup(t)
	ctx := t.Context()
	_, err := cs.CoordinationV1().Leases(DefaultNamespace).Create(ctx, &coordinationv1.Lease{
		ObjectMeta: metav1.ObjectMeta{Name: Name("n1"), Namespace: DefaultNamespace},
		Spec:       coordinationv1.LeaseSpec{HolderIdentity: ptr.To("other-tool")},
	}, metav1.CreateOptions{})
	require.NoError(t, err)
	c := New(cs, Options{Clock: clk})
	for _, step := range []time.Duration{0, time.Second, DefaultDuration - 2*time.Second} {
		clk.Step(step)
		_, err := c.Acquire(ctx, "n1", "lull-drainer", "drain", "", time.Minute)
		_, held := IsHeld(err)
		require.True(t, held, "after %s: %v", step, err)
	}
	clk.Step(time.Second)
	info, err := c.Acquire(ctx, "n1", "lull-drainer", "drain", "", time.Minute)
	require.NoError(t, err, "taken after DefaultDuration without change")
	assert.Equal(t, "lull-drainer", info.Holder)
}

// Replicas of one tool hold leases as <tool>/<replica>: each is the other's
// sibling, which Acquire takes over at once only with TakeOverReplicas (a
// leader taking over a deposed leader's lease), and ReleaseForTool releases.
func TestReplicasOfOneTool(t *testing.T) {
	cs, clk := setup(t)
	ctx := t.Context()
	assert.Equal(t, "lull-drainer", Family("lull-drainer/pod-a"))
	assert.Equal(t, "lull-drainer", Family("lull-drainer"))
	assert.True(t, SameFamily("lull-drainer/pod-a", "lull-drainer"))
	assert.False(t, SameFamily("lull-drainer/pod-a", "kured/pod-a"))
	assert.False(t, SameFamily("", ""))

	a := New(cs, Options{Clock: clk})
	_, err := a.Acquire(ctx, "n1", "lull-drainer/a", "drain", "", time.Minute)
	require.NoError(t, err)

	// Without leader election, another replica waits like anyone else.
	peer := New(cs, Options{Clock: clk})
	_, err = peer.Acquire(ctx, "n1", "lull-drainer/b", "drain", "", time.Minute)
	_, held := IsHeld(err)
	require.True(t, held, "a live sibling lease is not taken without TakeOverReplicas: %v", err)
	// Releasing as one replica never deletes another's lease...
	require.ErrorIs(t, peer.Release(ctx, "n1", "lull-drainer/b"), ErrNotHolder)
	// ...and never another tool's.
	require.ErrorIs(t, New(cs, Options{Clock: clk}).ReleaseForTool(ctx, "n1", "kured/x"), ErrNotHolder)

	// The leader takes a deposed leader's lease at once; the deposed
	// replica's renewal then fails.
	leader := New(cs, Options{Clock: clk, TakeOverReplicas: true})
	info, err := leader.Acquire(ctx, "n1", "lull-drainer/b", "drain", "", time.Minute)
	require.NoError(t, err)
	assert.Equal(t, "lull-drainer/b", info.Holder)
	assert.Equal(t, int32(1), info.Transitions, "a takeover is a transition: the fencing token changes")
	// (A fresh client: the fake clientset does not refuse a's stale cached
	// copy with a conflict the way the API server does.)
	_, err = New(cs, Options{Clock: clk}).Renew(ctx, "n1", "lull-drainer/a")
	require.ErrorIs(t, err, ErrNotHolder)
	require.NoError(t, leader.ReleaseForTool(ctx, "n1", "lull-drainer/c"), "a request ended for the tool releases any replica's lease")
	_, err = cs.CoordinationV1().Leases(DefaultNamespace).Get(ctx, "node-n1", metav1.GetOptions{})
	require.Error(t, err, "released")
	_, err = New(cs, Options{Clock: clk}).Acquire(ctx, "n1", "kured/node-1", "reboot", "", time.Minute)
	require.NoError(t, err)
	_, err = leader.Acquire(ctx, "n1", "lull-drainer/b", "drain", "", time.Minute)
	_, held = IsHeld(err)
	require.True(t, held, "TakeOverReplicas never takes another tool's lease: %v", err)
}

// A free node's lease costs one request: Acquire creates it without
// reading it first, and the node's UID comes from the caller's NodeUID
// (an informer) when given. A lease that exists is read and taken as
// before.
func TestAcquireCreatesFirst(t *testing.T) {
	cs, clk := setup(t)
	ctx := t.Context()
	var asked []string
	c := New(cs, Options{Clock: clk, NodeUID: func(_ context.Context, node string) (types.UID, error) {
		asked = append(asked, node)
		return "uid-from-cache", nil
	}})
	cs.ClearActions()
	_, err := c.Acquire(ctx, "n1", "tool-a", "reboot", "", time.Minute)
	require.NoError(t, err)
	require.Len(t, cs.Actions(), 1)
	assert.Equal(t, "create", cs.Actions()[0].GetVerb())
	assert.Equal(t, []string{"n1"}, asked)
	l, err := cs.CoordinationV1().Leases(DefaultNamespace).Get(ctx, "node-n1", metav1.GetOptions{})
	require.NoError(t, err)
	assert.EqualValues(t, "uid-from-cache", l.OwnerReferences[0].UID)

	// Another client, with no lease of its own: its create finds the
	// lease, which it reads and finds held.
	other := New(cs, Options{Clock: clk})
	cs.ClearActions()
	_, err = other.Acquire(ctx, "n1", "tool-b", "reboot", "", time.Minute)
	_, held := IsHeld(err)
	require.True(t, held, "%v", err)
	var verbs []string
	for _, a := range cs.Actions() {
		verbs = append(verbs, a.GetVerb()+" "+a.GetResource().Resource)
	}
	assert.Equal(t, []string{"get nodes", "create leases", "get leases"}, verbs)

	// The holder renewing through Acquire reads and updates, creating nothing.
	cs.ClearActions()
	_, err = c.Acquire(ctx, "n1", "tool-a", "reboot", "", time.Minute)
	require.NoError(t, err)
	verbs = nil
	for _, a := range cs.Actions() {
		verbs = append(verbs, a.GetVerb())
	}
	assert.Equal(t, []string{"get", "update"}, verbs)
}
