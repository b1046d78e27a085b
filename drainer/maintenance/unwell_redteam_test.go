package maintenance

import (
	"context"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/klog/v2"
	"sigs.k8s.io/controller-runtime/pkg/client/fake"

	lullv1alpha1 "lull.dev/lull/api/v1alpha1"
	"lull.dev/lull/internal/lullscheme"
)

// Red team (promise 7): a Reboot whose command "fails" because the
// shutdown it started killed it (systemctl reboot gets SIGTERM, or its
// bus connection drops, while lull-agent can still write the step's
// state) is judged "up" from signals that lag the shutdown by design:
// the node stays Ready for the node-monitor grace period (40 s), the
// boot ID is the old one until the node is back, and the agent's last
// heartbeat, renewed before the failure, stays fresh for its lease
// duration. takenDown says the node is up, so act() ends the request
// Failed (lull's cordon undone, lease and budget slot released) while the
// node is going down: the next node of the window may start.
func TestRedteamRebootFailedAsTheNodeGoesDown(t *testing.T) {
	now := t0()
	heartbeat := agentHeartbeat("n1", "agents", "lull-agent-pod", now.Add(-5*time.Second)) // before the reboot was issued
	c := fake.NewClientBuilder().WithScheme(lullscheme.New()).WithObjects(heartbeat).Build()
	node := &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: "n1"},
		Status: corev1.NodeStatus{NodeInfo: corev1.NodeSystemInfo{BootID: "boot-1"},
			Conditions: []corev1.NodeCondition{{Type: corev1.NodeReady, Status: corev1.ConditionTrue}}}}
	a := lullv1alpha1.ActionStatus{Type: lullv1alpha1.StepReboot, State: lullv1alpha1.ActionFailed, BootID: "boot-1",
		StartedAt: &metav1.Time{Time: now.Add(-3 * time.Second)}, FinishedAt: &metav1.Time{Time: now.Add(-2 * time.Second)},
		Timeout: lullv1alpha1.Duration{Duration: 15 * time.Minute}, Message: "signal: terminated"}
	st := &lullv1alpha1.NodeMaintenanceStatus{Actions: []lullv1alpha1.ActionStatus{a}}
	s := &step{r: &Reconciler{Client: c, Options: Options{AgentNamespace: "agents"}}, logger: klog.Background(), now: now, node: node, status: st}
	require.True(t, s.takenDown(context.Background(), &st.Actions[0]),
		"a Reboot that failed 2s ago is judged up from a Ready condition, a boot ID and a heartbeat that all predate it: nothing has been seen of the node since the failure")
}

// Red team (promise 7, the fix in progress): "a heartbeat renewed after
// the failure" compares the heartbeat's RenewTime (microseconds) with the
// step's FinishedAt, which the API stores to the second. A heartbeat
// renewed 0.5 s *before* the failure, in the same second, reads as after
// it: the node going down is judged up, and the request ends Failed,
// uncordoned, its slot freed.
func TestRedteamRebootFailedHeartbeatSameSecond(t *testing.T) {
	failedAt := t0().Add(900 * time.Millisecond)                                                  // when the agent saw systemctl fail
	stored := metav1.NewTime(failedAt).Rfc3339Copy()                                              // what the API server keeps
	heartbeat := agentHeartbeat("n1", "agents", "lull-agent-pod", t0().Add(400*time.Millisecond)) // before the failure
	c := fake.NewClientBuilder().WithScheme(lullscheme.New()).WithObjects(heartbeat).Build()
	node := &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: "n1"},
		Status: corev1.NodeStatus{NodeInfo: corev1.NodeSystemInfo{BootID: "boot-1"},
			Conditions: []corev1.NodeCondition{{Type: corev1.NodeReady, Status: corev1.ConditionTrue}}}}
	a := lullv1alpha1.ActionStatus{Type: lullv1alpha1.StepReboot, State: lullv1alpha1.ActionFailed, BootID: "boot-1",
		StartedAt: &metav1.Time{Time: t0().Add(-time.Second)}, FinishedAt: &stored,
		Timeout: lullv1alpha1.Duration{Duration: 15 * time.Minute}, Message: "signal: terminated"}
	st := &lullv1alpha1.NodeMaintenanceStatus{Actions: []lullv1alpha1.ActionStatus{a}}
	s := &step{r: &Reconciler{Client: c, Options: Options{AgentNamespace: "agents"}}, logger: klog.Background(), now: t0().Add(2 * time.Second), node: node, status: st}
	require.True(t, s.takenDown(context.Background(), &st.Actions[0]),
		"a heartbeat renewed at %s, before the failure at %s, counts as after it (FinishedAt stored as %s)",
		heartbeat.Spec.RenewTime.Format(time.RFC3339Nano), failedAt.Format(time.RFC3339Nano), stored.Format(time.RFC3339Nano))
}
