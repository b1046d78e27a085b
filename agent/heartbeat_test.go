package agent

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	coordinationv1 "k8s.io/api/coordination/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	kubefake "k8s.io/client-go/kubernetes/fake"
	k8stesting "k8s.io/client-go/testing"
	clocktesting "k8s.io/utils/clock/testing"
	"k8s.io/utils/ptr"

	"lull.dev/lull/internal/agentlease"
)

const agentNamespace = "lull-system"

// agentLease is n1's agent lease as Renew leaves it for identity, acquired
// at acquired and renewed at renewed.
func agentLease(identity string, acquired, renewed time.Time) *coordinationv1.Lease {
	return &coordinationv1.Lease{
		ObjectMeta: metav1.ObjectMeta{Name: "lull-agent-n1", Namespace: agentNamespace,
			Labels: map[string]string{agentlease.ComponentLabel: agentlease.Component}},
		Spec: coordinationv1.LeaseSpec{HolderIdentity: ptr.To(identity), LeaseDurationSeconds: ptr.To[int32](40),
			AcquireTime: &metav1.MicroTime{Time: acquired}, RenewTime: &metav1.MicroTime{Time: renewed}},
	}
}

func getAgentLease(t *testing.T, kube *kubefake.Clientset) *coordinationv1.Lease {
	t.Helper()
	l, err := kube.CoordinationV1().Leases(agentNamespace).Get(context.Background(), agentlease.Name(testNode), metav1.GetOptions{})
	require.NoError(t, err)
	// What Renew writes: the bookkeeping of the fake API server aside.
	return &coordinationv1.Lease{ObjectMeta: metav1.ObjectMeta{Name: l.Name, Namespace: l.Namespace, Labels: l.Labels}, Spec: l.Spec}
}

// Renew creates the agent lease (internal/agentlease: its name, its label, its
// duration) when there is none, renews it, and takes it over from another
// identity (a previous agent pod) saying when.
func TestHeartbeatRenew(t *testing.T) {
	for _, tc := range []struct {
		name     string
		existing *coordinationv1.Lease // nil: none
		want     *coordinationv1.Lease
	}{
		{name: "creates the lease when there is none",
			want: agentLease("agent-pod-a", t0, t0)},
		{name: "renews its own lease, acquired earlier",
			existing: agentLease("agent-pod-a", t0.Add(-time.Hour), t0.Add(-10*time.Second)),
			want:     agentLease("agent-pod-a", t0.Add(-time.Hour), t0)},
		{name: "takes over the lease of another identity",
			existing: agentLease("agent-pod-old", t0.Add(-time.Hour), t0.Add(-time.Minute)),
			want:     agentLease("agent-pod-a", t0, t0)},
		{name: "restores a duration changed by someone else",
			existing: func() *coordinationv1.Lease {
				l := agentLease("agent-pod-a", t0.Add(-time.Hour), t0.Add(-10*time.Second))
				l.Spec.LeaseDurationSeconds = ptr.To[int32](5)
				return l
			}(),
			want: agentLease("agent-pod-a", t0.Add(-time.Hour), t0)},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var objs []runtime.Object
			if tc.existing != nil {
				objs = append(objs, tc.existing)
			}
			kube := kubefake.NewClientset(objs...)
			h := &Heartbeat{Kube: kube, Namespace: agentNamespace, Node: testNode, Identity: "agent-pod-a", Clock: clocktesting.NewFakeClock(t0)}

			require.NoError(t, h.Renew(context.Background()))
			require.Equal(t, tc.want, getAgentLease(t, kube))
		})
	}
}

// A lease that cannot be read, created or written is an error that says
// which.
func TestHeartbeatRenewErrors(t *testing.T) {
	for _, tc := range []struct {
		name     string
		existing bool
		verb     string
		wantErr  string
	}{
		{name: "the lease cannot be read", existing: true, verb: "get", wantErr: "reading lease lull-agent-n1: no"},
		{name: "the lease cannot be created", verb: "create", wantErr: "creating lease lull-agent-n1: no"},
		{name: "the lease cannot be renewed", existing: true, verb: "update", wantErr: "renewing lease lull-agent-n1: no"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var objs []runtime.Object
			if tc.existing {
				objs = append(objs, agentLease("agent-pod-a", t0, t0))
			}
			kube := kubefake.NewClientset(objs...)
			kube.PrependReactor(tc.verb, "leases", func(k8stesting.Action) (bool, runtime.Object, error) {
				return true, nil, errors.New("no")
			})
			h := &Heartbeat{Kube: kube, Namespace: agentNamespace, Node: testNode, Identity: "agent-pod-a", Clock: clocktesting.NewFakeClock(t0)}

			require.EqualError(t, h.Renew(context.Background()), tc.wantErr)
		})
	}
}

// Start renews the lease at once and then every RenewEvery on its clock,
// until its context ends; every agent renews its own (no leader
// election).
func TestHeartbeatStart(t *testing.T) {
	kube := kubefake.NewClientset()
	clk := clocktesting.NewFakeClock(t0)
	h := &Heartbeat{Kube: kube, Namespace: agentNamespace, Node: testNode, Identity: "agent-pod-a", Clock: clk}
	require.False(t, h.NeedLeaderElection())

	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	done := make(chan error, 1)
	go func() { done <- h.Start(ctx) }()

	renewedAt := func(at time.Time) func() bool {
		return func() bool {
			l, err := kube.CoordinationV1().Leases(agentNamespace).Get(ctx, agentlease.Name(testNode), metav1.GetOptions{})
			return err == nil && l.Spec.RenewTime.Time.Equal(at)
		}
	}
	require.Eventually(t, renewedAt(t0), waitLimit, time.Millisecond, "renewed at once")
	require.True(t, clk.HasWaiters(), "the ticker waits")
	clk.Step(agentlease.RenewEvery)
	require.Eventually(t, renewedAt(t0.Add(agentlease.RenewEvery)), waitLimit, time.Millisecond, "renewed on the tick")

	cancel()
	select {
	case err := <-done:
		require.NoError(t, err)
	case <-time.After(waitLimit):
		t.Fatal("Start did not return when its context ended")
	}
	require.Equal(t, agentLease("agent-pod-a", t0, t0.Add(agentlease.RenewEvery)), getAgentLease(t, kube))
}

// A simulated power-off stops the heartbeat for good: the last write
// claims one second, so the agent counts as gone a second later (what a
// machine switched off shows a heartbeat's duration later), and later
// renewals write nothing.
func TestHeartbeatOff(t *testing.T) {
	kube := kubefake.NewClientset(agentLease("agent-pod-a", t0, t0))
	clk := clocktesting.NewFakeClock(t0.Add(5 * time.Second))
	h := &Heartbeat{Kube: kube, Namespace: agentNamespace, Node: testNode, Identity: "agent-pod-a", Clock: clk}
	require.NoError(t, h.Off(context.Background()))
	l := getAgentLease(t, kube)
	require.Equal(t, int32(1), *l.Spec.LeaseDurationSeconds)
	require.True(t, agentlease.Alive(l, clk.Now()))
	require.False(t, agentlease.Alive(l, clk.Now().Add(time.Second)), "gone a second later")

	clk.Step(agentlease.RenewEvery)
	require.NoError(t, h.Renew(context.Background()))
	require.Equal(t, l, getAgentLease(t, kube), "no renewal after the power-off")
}
