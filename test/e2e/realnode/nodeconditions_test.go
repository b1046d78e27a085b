package realnode

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"

	lullv1alpha1 "lull.dev/lull/api/v1alpha1"
)

func nodeCondition(n *corev1.Node, t corev1.NodeConditionType) *corev1.NodeCondition {
	for i := range n.Status.Conditions {
		if n.Status.Conditions[i].Type == t {
			return &n.Status.Conditions[i]
		}
	}
	return nil
}

// Issue 45: lull-drainer (installed as pods) writes MaintenancePlanned on
// the real node while its request waits for a closed window, and the
// kubelet's own status reports keep it (and another tool's condition);
// the request withdrawn, lull's condition goes and the other tool's
// stays.
func TestNodeConditionsSurviveTheKubelet(t *testing.T) {
	ctx := t.Context()
	cs := cluster.Clientset
	start := time.Now().UTC().Add(12 * time.Hour).Format("15:04")
	w := &lullv1alpha1.MaintenanceWindow{ObjectMeta: metav1.ObjectMeta{Name: "e2e-conditions"}, Spec: lullv1alpha1.MaintenanceWindowSpec{
		NodeSelector: &metav1.LabelSelector{MatchLabels: map[string]string{corev1.LabelHostname: realNode}},
		Strategy:     lullv1alpha1.StrategySchedule,
		Schedule: &lullv1alpha1.Schedule{TimeZone: "UTC", StartTime: start, Duration: lullv1alpha1.Duration{Duration: time.Hour},
			Recurrence: &lullv1alpha1.Recurrence{Frequency: lullv1alpha1.Daily}},
	}}
	require.NoError(t, c.Create(ctx, w))
	t.Cleanup(func() { _ = c.Delete(context.Background(), w) })
	// Another tool's maintenance condition.
	_, err := cs.CoreV1().Nodes().PatchStatus(ctx, realNode, []byte(
		`{"status":{"conditions":[{"type":"DrainInProgress","status":"False","reason":"FirmwareTool","message":"theirs"}]}}`))
	require.NoError(t, err)
	t.Cleanup(func() {
		_, _ = cs.CoreV1().Nodes().PatchStatus(context.Background(), realNode, []byte(`{"status":{"conditions":[{"type":"DrainInProgress","$patch":"delete"}]}}`))
	})
	nm := &lullv1alpha1.NodeMaintenance{ObjectMeta: metav1.ObjectMeta{Name: realNode},
		Spec: lullv1alpha1.NodeMaintenanceSpec{NodeName: realNode, Classes: []string{"e2e-conditions"}, Reason: "e2e: node conditions"}}
	require.NoError(t, c.Create(ctx, nm))
	t.Cleanup(func() { _ = c.Delete(context.Background(), nm) })
	waitNM(t, realNode, lullv1alpha1.PhaseWaitingForWindow, time.Minute)
	var planned corev1.NodeCondition
	poll(t, "MaintenancePlanned on the node", time.Minute, func(ctx context.Context) (bool, string) {
		n, err := cs.CoreV1().Nodes().Get(ctx, realNode, metav1.GetOptions{})
		if err != nil {
			return false, err.Error()
		}
		if c := nodeCondition(n, corev1.NodeMaintenancePlanned); c != nil {
			planned = *c
			return true, ""
		}
		return false, fmt.Sprint(n.Status.Conditions)
	})
	require.Equal(t, "LullWaitingForWindow", planned.Reason)
	require.Contains(t, planned.Message, "next start")
	t.Logf("MaintenancePlanned: %s", planned.Message)

	// The kubelet reports its status (Ready's heartbeat moves) twice.
	n, err := cs.CoreV1().Nodes().Get(ctx, realNode, metav1.GetOptions{})
	require.NoError(t, err)
	beat := nodeCondition(n, corev1.NodeReady).LastHeartbeatTime
	for i := 0; i < 2; i++ {
		poll(t, "a status report of the kubelet", 2*time.Minute, func(ctx context.Context) (bool, string) {
			n, err = cs.CoreV1().Nodes().Get(ctx, realNode, metav1.GetOptions{})
			if err != nil {
				return false, err.Error()
			}
			now := nodeCondition(n, corev1.NodeReady).LastHeartbeatTime
			return now.After(beat.Time), now.String()
		})
		beat = nodeCondition(n, corev1.NodeReady).LastHeartbeatTime
		got := nodeCondition(n, corev1.NodeMaintenancePlanned)
		require.NotNil(t, got, "the kubelet's status report took lull's condition away")
		require.Equal(t, planned.Message, got.Message)
		require.NotNil(t, nodeCondition(n, corev1.NodeDrainInProgress), "the kubelet's status report took the other tool's condition away")
		t.Logf("kubelet reported at %s: lull's and the other tool's conditions kept", beat.UTC().Format(time.RFC3339))
	}

	// Withdrawn: lull's condition goes, the other tool's stays.
	require.NoError(t, c.Delete(ctx, nm))
	poll(t, "MaintenancePlanned gone", time.Minute, func(ctx context.Context) (bool, string) {
		n, err = cs.CoreV1().Nodes().Get(ctx, realNode, metav1.GetOptions{})
		if err != nil {
			return false, err.Error()
		}
		return nodeCondition(n, corev1.NodeMaintenancePlanned) == nil && c.Get(ctx, client.ObjectKey{Name: realNode}, &lullv1alpha1.NodeMaintenance{}) != nil, ""
	})
	require.Equal(t, "FirmwareTool", ptr.Deref(nodeCondition(n, corev1.NodeDrainInProgress), corev1.NodeCondition{}).Reason)
}
