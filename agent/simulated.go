package agent

import (
	"context"
	"fmt"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/uuid"
	"k8s.io/utils/clock"
	"sigs.k8s.io/controller-runtime/pkg/client"

	lullv1alpha1 "lull.dev/lull/api/v1alpha1"
)

// SimulatedPower reboots and powers off a node at the API level only, for
// kwok nodes, which have no machine: a reboot makes the node NotReady
// (marked with ConditionSimulatedPowerOff meanwhile, so that kwok leaves
// it down), gives it a new boot ID, and after BootTime makes it Ready
// again; a power
// off stops the agent's heartbeat (Off) and makes the node NotReady with
// the condition ConditionSimulatedPowerOff, which the local cluster's kwok
// leaves alone, so the node stays NotReady as a machine switched off
// would. The drainer's judgements ("came back", "stays down") are the
// production ones. Steps on systemd go to Commands.
type SimulatedPower struct {
	Client   client.Client
	Node     string
	BootTime time.Duration
	Clock    clock.Clock
	Commands *Commands
	// Off is called on a power-off before the node goes NotReady: what a
	// machine switched off stops (the agent's heartbeat).
	Off func(context.Context) error
}

// ConditionSimulatedPowerOff marks a node a simulated agent powered off;
// kwok, which plays the kubelet of simulated nodes, is configured
// (hack/lib/cluster.sh) to leave such a node NotReady.
const ConditionSimulatedPowerOff corev1.NodeConditionType = "LullSimulatedPowerOff"

// Run carries the step out.
func (s *SimulatedPower) Run(ctx context.Context, step Step) (string, error) {
	switch step.Action.Type {
	case lullv1alpha1.StepReboot:
		boot := string(uuid.NewUUID())
		// Down for the boot time, as a machine rebooting is: kwok would
		// make a NotReady node Ready again at once.
		if err := s.setNode(ctx, corev1.ConditionFalse, boot, true); err != nil {
			return "", err
		}
		select {
		case <-s.Clock.After(s.BootTime):
		case <-ctx.Done():
			// Left NotReady, as a machine that has not come back, but no
			// longer held down: kwok plays its kubelet again (a simulated
			// node is not left down for good by an agent that stopped).
			_ = s.setNode(context.WithoutCancel(ctx), corev1.ConditionFalse, "", false)
			return "", ctx.Err()
		}
		if err := s.setNode(ctx, corev1.ConditionTrue, "", false); err != nil {
			return "", err
		}
		return "simulated reboot: boot ID " + boot, nil
	case lullv1alpha1.StepPowerOff:
		if s.Off != nil {
			if err := s.Off(ctx); err != nil {
				return "", fmt.Errorf("simulated power off: %w", err)
			}
		}
		return "simulated power off", s.setNode(ctx, corev1.ConditionFalse, "", true)
	}
	return s.Commands.Run(ctx, step)
}

// Start gives a simulated node a boot ID if it has none, as a kubelet
// reports one from its first status (kwok's nodes have none): a reboot's
// return is judged by its change. It runs once when the agent starts (a
// manager.Runnable).
func (s *SimulatedPower) Start(ctx context.Context) error {
	var node corev1.Node
	if err := s.Client.Get(ctx, types.NamespacedName{Name: s.Node}, &node); err != nil {
		return fmt.Errorf("reading node %s: %w", s.Node, err)
	}
	if node.Status.NodeInfo.BootID != "" {
		return nil
	}
	orig := node.DeepCopy()
	node.Status.NodeInfo.BootID = string(uuid.NewUUID())
	if err := s.Client.Status().Patch(ctx, &node, client.MergeFrom(orig)); err != nil {
		return fmt.Errorf("giving simulated node %s a boot ID: %w", s.Node, err)
	}
	return nil
}

// NeedLeaderElection: every agent has its own node.
func (s *SimulatedPower) NeedLeaderElection() bool { return false }

// setNode sets the node's Ready condition, whether it is powered off
// (ConditionSimulatedPowerOff) and, if given, its boot ID.
func (s *SimulatedPower) setNode(ctx context.Context, ready corev1.ConditionStatus, bootID string, off bool) error {
	var node corev1.Node
	if err := s.Client.Get(ctx, types.NamespacedName{Name: s.Node}, &node); err != nil {
		return fmt.Errorf("reading node %s: %w", s.Node, err)
	}
	orig := node.DeepCopy()
	now := metav1.Time{Time: s.Clock.Now()}
	setCondition(&node, corev1.NodeReady, ready, now)
	offStatus := corev1.ConditionFalse
	if off {
		offStatus = corev1.ConditionTrue // it stays down
	}
	setCondition(&node, ConditionSimulatedPowerOff, offStatus, now)
	if bootID != "" {
		node.Status.NodeInfo.BootID = bootID
	}
	if err := s.Client.Status().Patch(ctx, &node, client.MergeFrom(orig)); err != nil {
		return fmt.Errorf("simulating on node %s: %w", s.Node, err)
	}
	return nil
}

// setCondition sets node's condition typ to status; a condition the node
// does not have is added only when status is True.
func setCondition(node *corev1.Node, typ corev1.NodeConditionType, status corev1.ConditionStatus, now metav1.Time) {
	for i := range node.Status.Conditions {
		c := &node.Status.Conditions[i]
		if c.Type == typ {
			if c.Status != status {
				c.LastTransitionTime = now
			}
			c.Status, c.Reason, c.LastHeartbeatTime = status, "SimulatedByLullAgent", now
			return
		}
	}
	if typ == corev1.NodeReady || status == corev1.ConditionTrue {
		node.Status.Conditions = append(node.Status.Conditions, corev1.NodeCondition{Type: typ, Status: status,
			Reason: "SimulatedByLullAgent", LastTransitionTime: now, LastHeartbeatTime: now})
	}
}
