package maintenance

import (
	"context"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/klog/v2"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/client/fake"

	lullv1alpha1 "lull.dev/lull/api/v1alpha1"
	"lull.dev/lull/internal/lullscheme"
)

// Red team 2: a WriteFiles held while its agent was away (AgentAway) must
// be run again by the agent that comes back, as awaitAgent promises ("the
// agent rolls the set back or forward when it starts and runs the step
// again"). But the first thing a new lull-agent does is renew its
// heartbeat (a manager runnable, before its controller's cache has synced
// and before recoverFiles and claim reset the step's StartedAt), and the
// new pod's holder identity is exactly the lease change that wakes the
// request (leaseChanged). The drainer then sees a step past its timeout
// with a live agent and times it out: the held request ends Failed (cordon
// undone, lease released) instead of resuming, possibly before the agent
// has rolled the half-written set back.
func TestRedteam2HeldWriteFilesTimedOutWhenAgentComesBack(t *testing.T) {
	now := t0()
	// The new agent pod's heartbeat: renewed a moment ago, new holder.
	heartbeat := agentHeartbeat("n1", "agents", "lull-agent-newpod", now.Add(-100*time.Millisecond))
	nm := &lullv1alpha1.NodeMaintenance{ObjectMeta: metav1.ObjectMeta{Name: "n1", UID: "u1"}}
	c := fake.NewClientBuilder().WithScheme(lullscheme.New()).WithObjects([]client.Object{nm, heartbeat}...).WithStatusSubresource(nm).Build()
	// The request as the drainer left it while the agent was away: the
	// step past its timeout, held, AgentReady False with reason AgentAway.
	st := &lullv1alpha1.NodeMaintenanceStatus{
		Actions: []lullv1alpha1.ActionStatus{{Type: lullv1alpha1.StepWriteFiles, State: lullv1alpha1.ActionRunning,
			StartedAt: &metav1.Time{Time: now.Add(-10 * time.Minute)}, Timeout: lullv1alpha1.Duration{Duration: 5 * time.Minute}}},
		Conditions: []metav1.Condition{{Type: ConditionAgentReady, Status: metav1.ConditionFalse, Reason: ReasonAgentAway,
			LastTransitionTime: metav1.Time{Time: now.Add(-5 * time.Minute)}, Message: "WriteFiles is past its timeout 5m0s, but lull-agent is away"}},
	}
	s := &step{r: &Reconciler{Client: c, Options: Options{AgentNamespace: "agents", LeaseDuration: 30 * time.Second}}, logger: klog.Background(),
		now: now, node: &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: "n1"}}, status: st, nm: nm}
	s.follow(context.Background())
	require.Equal(t, lullv1alpha1.ActionRunning, st.Actions[0].State,
		"a held WriteFiles is timed out the moment its agent comes back, before that agent could recover and resume it: %s", st.Actions[0].Message)
}
