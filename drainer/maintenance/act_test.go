package maintenance

import (
	"context"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	coordinationv1 "k8s.io/api/coordination/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	kubefake "k8s.io/client-go/kubernetes/fake"
	"k8s.io/klog/v2"
	clocktesting "k8s.io/utils/clock/testing"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/client/fake"

	lullv1alpha1 "lull.dev/lull/api/v1alpha1"
	"lull.dev/lull/internal/agentlease"
	"lull.dev/lull/internal/lullscheme"
	"lull.dev/lull/internal/plan"
)

// The drainer's agent gate and kubectl lull plan's are one judgement
// (internal/agentlease) on the same leases: the drainer reads its client (the
// cache), the preview its snapshot, and both say the same.
func TestAgentGateAgreesWithPlan(t *testing.T) {
	now := t0()
	lease := func(node, ns string, renewed time.Time) *coordinationv1.Lease {
		return agentHeartbeat(node, ns, "lull-agent-pod", renewed)
	}
	reboot := &lullv1alpha1.DisruptionPolicy{ObjectMeta: metav1.ObjectMeta{Name: "site"}, Spec: lullv1alpha1.DisruptionPolicySpec{Rules: []lullv1alpha1.DisruptionRule{
		{Name: "kernel", Class: "kernel-update", Steps: []lullv1alpha1.Step{{Type: lullv1alpha1.ActionDrain}, {Type: lullv1alpha1.StepReboot}}}}}}
	for name, tc := range map[string]struct {
		agent *coordinationv1.Lease
		alive bool
	}{
		"fresh":             {lease("n1", "agents", now.Add(-10*time.Second)), true},
		"expired":           {lease("n1", "agents", now.Add(-time.Minute)), false},
		"none":              {nil, false},
		"another namespace": {lease("n1", "lull-system", now), false},
	} {
		t.Run(name, func(t *testing.T) {
			objs := []client.Object{&corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: "n1"}}, reboot}
			if tc.agent != nil {
				objs = append(objs, tc.agent)
			}
			c := fake.NewClientBuilder().WithScheme(lullscheme.New()).WithObjects(objs...).Build()
			r := &Reconciler{Client: c, Options: Options{AgentNamespace: "agents"}}
			s := &step{r: r, logger: klog.Background(), now: now, node: &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: "n1"}}}
			ctx := context.Background()
			alive, why, err := s.agentAlive(ctx)
			require.NoError(t, err)
			require.Equal(t, tc.alive, alive)

			o := plan.DefaultOptions()
			o.AgentNamespace, o.Clock = "agents", clocktesting.NewFakeClock(now)
			res, err := plan.Preview(context.Background(), c, kubefake.NewClientset(), o, plan.Request{Nodes: []string{"n1"}, Classes: []string{"kernel-update"}})
			require.NoError(t, err)
			p := res.Nodes[0]
			if alive {
				require.Equal(t, plan.StartNow, p.Start, p.WaitingFor)
				return
			}
			require.Equal(t, plan.StartAgent, p.Start)
			require.Equal(t, "the plan (Cordon, Drain, Reboot) has steps lull-agent carries out on the node: "+why, p.WaitingFor)
		})
	}
}

// agentHeartbeat is lull-agent's heartbeat lease of node in namespace ns,
// held by holder (its pod) and last renewed at renewed, for 40 s.
func agentHeartbeat(node, ns, holder string, renewed time.Time) *coordinationv1.Lease {
	return &coordinationv1.Lease{ObjectMeta: metav1.ObjectMeta{Name: agentlease.Name(node), Namespace: ns,
		Labels: map[string]string{agentlease.ComponentLabel: agentlease.Component}},
		Spec: coordinationv1.LeaseSpec{HolderIdentity: ptr.To(holder), LeaseDurationSeconds: ptr.To[int32](40),
			RenewTime: &metav1.MicroTime{Time: renewed}}}
}

// A power-off is done when the machine is seen down: its node NotReady
// and its lull-agent's heartbeat gone. A NotReady node whose agent still
// renews its heartbeat is a machine still running (a power-off command
// that did nothing, a network partition): the step stays Running until it
// times out.
func TestPowerOffDoneWhenMachineDown(t *testing.T) {
	now := t0()
	heartbeat := agentHeartbeat("n1", "agents", "lull-agent-pod", now.Add(-5*time.Second))
	for name, tc := range map[string]struct {
		ready, heartbeat bool
		started          time.Duration // before now
		want             lullv1alpha1.ActionState
	}{
		"NotReady, heartbeat gone: down":               {ready: false, heartbeat: false, started: time.Minute, want: lullv1alpha1.ActionSucceeded},
		"NotReady, the agent still beats: not yet":     {ready: false, heartbeat: true, started: time.Minute, want: lullv1alpha1.ActionRunning},
		"Ready, heartbeat gone: not yet":               {ready: true, heartbeat: false, started: time.Minute, want: lullv1alpha1.ActionRunning},
		"still up at the step's timeout: it timed out": {ready: true, heartbeat: true, started: 5 * time.Minute, want: lullv1alpha1.ActionTimedOut},
	} {
		t.Run(name, func(t *testing.T) {
			objs := []client.Object{}
			if tc.heartbeat {
				objs = append(objs, heartbeat)
			}
			c := fake.NewClientBuilder().WithScheme(lullscheme.New()).WithObjects(objs...).Build()
			status := corev1.ConditionTrue
			if !tc.ready {
				status = corev1.ConditionFalse
			}
			node := &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: "n1"},
				Status: corev1.NodeStatus{Conditions: []corev1.NodeCondition{{Type: corev1.NodeReady, Status: status}}}}
			st := &lullv1alpha1.NodeMaintenanceStatus{Actions: []lullv1alpha1.ActionStatus{{Type: lullv1alpha1.StepPowerOff,
				State: lullv1alpha1.ActionRunning, StartedAt: &metav1.Time{Time: now.Add(-tc.started)}, Timeout: lullv1alpha1.Duration{Duration: 5 * time.Minute}}}}
			s := &step{r: &Reconciler{Client: c, Options: Options{AgentNamespace: "agents"}}, logger: klog.Background(),
				now: now, node: node, status: st}
			ctx := context.Background()
			s.follow(ctx)
			require.Equal(t, tc.want, st.Actions[0].State, st.Actions[0].Message)
		})
	}
}

// A WriteFiles past its timeout is not timed out while the node's
// lull-agent is away (issue 41, finding 2): the set may be half on disk,
// and only the agent, when it starts again, rolls it back or forward and
// runs the step anew. The request holds and says why; an agent that is
// there and did not finish times out as before.
func TestWriteFilesHeldWhileAgentAway(t *testing.T) {
	now := t0()
	heartbeat := agentHeartbeat("n1", "agents", "lull-agent-pod", now.Add(-5*time.Second))
	for name, tc := range map[string]struct {
		heartbeat bool
		started   time.Duration // before now
		want      lullv1alpha1.ActionState
		waiting   string
	}{
		"the agent away past the timeout: held":     {heartbeat: false, started: 10 * time.Minute, want: lullv1alpha1.ActionRunning, waiting: "but lull-agent is away"},
		"the agent there past the timeout: timeout": {heartbeat: true, started: 10 * time.Minute, want: lullv1alpha1.ActionTimedOut},
		"the agent away within the timeout: runs":   {heartbeat: false, started: time.Minute, want: lullv1alpha1.ActionRunning, waiting: "lull-agent runs WriteFiles"},
	} {
		t.Run(name, func(t *testing.T) {
			nm := &lullv1alpha1.NodeMaintenance{ObjectMeta: metav1.ObjectMeta{Name: "n1", UID: "u1"}}
			objs := []client.Object{nm}
			if tc.heartbeat {
				objs = append(objs, heartbeat)
			}
			c := fake.NewClientBuilder().WithScheme(lullscheme.New()).WithObjects(objs...).WithStatusSubresource(nm).Build()
			st := &lullv1alpha1.NodeMaintenanceStatus{Actions: []lullv1alpha1.ActionStatus{{Type: lullv1alpha1.StepWriteFiles,
				State: lullv1alpha1.ActionRunning, StartedAt: &metav1.Time{Time: now.Add(-tc.started)}, Timeout: lullv1alpha1.Duration{Duration: 5 * time.Minute}}}}
			s := &step{r: &Reconciler{Client: c, Options: Options{AgentNamespace: "agents", LeaseDuration: 30 * time.Second}}, logger: klog.Background(),
				now: now, node: &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: "n1"}}, status: st, nm: nm}
			ctx := context.Background()
			s.follow(ctx)
			require.Equal(t, tc.want, st.Actions[0].State, st.Actions[0].Message)
			if tc.want != lullv1alpha1.ActionRunning {
				return
			}
			require.Equal(t, 0, lullv1alpha1.NextAction(st.Actions))
			res, _ := s.awaitAgent(ctx, &st.Actions[0])
			require.Contains(t, st.WaitingFor, tc.waiting)
			require.Greater(t, res.RequeueAfter, time.Duration(0), "looked at again later, never in a loop")
		})
	}
}
