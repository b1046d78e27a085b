package agent

import (
	"bytes"
	"context"
	"fmt"
	"os/exec"
	"strings"
	"syscall"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/uuid"
	"k8s.io/utils/clock"
	"sigs.k8s.io/controller-runtime/pkg/client"

	lullv1alpha1 "lull.dev/lull/api/v1alpha1"
)

// Commands carries host steps out with shell commands run in the host's
// root file system (chroot into HostRoot), as kured does with nsenter:
// systemctl reaches systemd over its socket in the host's /run. The unit
// reaches a RestartService command only as $LULL_UNIT (the CRD's pattern
// allows no shell syntax in it, and it is never spliced into the command).
type Commands struct {
	// HostRoot is where the host's / is mounted; "/" runs commands in the
	// agent's own root (no chroot).
	HostRoot string
	// Restart, Reboot and PowerOff are the commands; an empty one makes
	// such a step fail, saying it is disabled on this agent.
	Restart, Reboot, PowerOff string
}

// Run runs the step's command until it exits or ctx ends.
func (c *Commands) Run(ctx context.Context, a lullv1alpha1.ActionStatus) (string, error) {
	var command string
	switch a.Type {
	case lullv1alpha1.StepRestartService:
		command = c.Restart
	case lullv1alpha1.StepReboot:
		command = c.Reboot
	case lullv1alpha1.StepPowerOff:
		command = c.PowerOff
	default:
		return "", fmt.Errorf("lull-agent does not know the step %q", a.Type)
	}
	if command == "" {
		return "", fmt.Errorf("%s is disabled on this agent (its command is empty)", a.Type)
	}
	cmd := exec.CommandContext(ctx, "/bin/sh", "-c", command)
	cmd.Env = []string{"PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin", "LULL_UNIT=" + a.Unit, "LULL_STEP=" + string(a.Type)}
	cmd.Dir = "/"
	if c.HostRoot != "" && c.HostRoot != "/" {
		cmd.SysProcAttr = &syscall.SysProcAttr{Chroot: c.HostRoot}
	}
	// A command that leaves children holding its output must not outlive
	// its deadline.
	cmd.WaitDelay = 5 * time.Second
	var out bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &out
	err := cmd.Run()
	last := lastLine(out.String())
	if err != nil {
		return last, fmt.Errorf("%s: %w", command, err)
	}
	return last, nil
}

// lastLine is the last non-empty line of out, at most 512 bytes.
func lastLine(out string) string {
	lines := strings.Split(strings.TrimSpace(out), "\n")
	l := strings.TrimSpace(lines[len(lines)-1])
	if len(l) > 512 {
		l = l[len(l)-512:]
	}
	return l
}

// SimulatedPower reboots and powers off a node at the API level only, for
// kwok nodes, which have no machine: a reboot makes the node NotReady,
// gives it a new boot ID, and after BootTime makes it Ready again; a power
// off makes it NotReady and leaves it. The drainer's "came back" judgement
// is the production one. Service restarts go to Commands.
type SimulatedPower struct {
	Client   client.Client
	Node     string
	BootTime time.Duration
	Clock    clock.Clock
	Commands *Commands
}

// Run carries the step out.
func (s *SimulatedPower) Run(ctx context.Context, a lullv1alpha1.ActionStatus) (string, error) {
	switch a.Type {
	case lullv1alpha1.StepReboot:
		boot := string(uuid.NewUUID())
		if err := s.setNode(ctx, corev1.ConditionFalse, boot); err != nil {
			return "", err
		}
		select {
		case <-s.Clock.After(s.BootTime):
		case <-ctx.Done():
			return "", ctx.Err()
		}
		if err := s.setNode(ctx, corev1.ConditionTrue, ""); err != nil {
			return "", err
		}
		return "simulated reboot: boot ID " + boot, nil
	case lullv1alpha1.StepPowerOff:
		return "simulated power off", s.setNode(ctx, corev1.ConditionFalse, "")
	}
	return s.Commands.Run(ctx, a)
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

// setNode sets the node's Ready condition and, if given, its boot ID.
func (s *SimulatedPower) setNode(ctx context.Context, ready corev1.ConditionStatus, bootID string) error {
	var node corev1.Node
	if err := s.Client.Get(ctx, types.NamespacedName{Name: s.Node}, &node); err != nil {
		return fmt.Errorf("reading node %s: %w", s.Node, err)
	}
	orig := node.DeepCopy()
	now := metav1.Time{Time: s.Clock.Now()}
	found := false
	for i := range node.Status.Conditions {
		c := &node.Status.Conditions[i]
		if c.Type == corev1.NodeReady {
			found = true
			c.Status, c.Reason, c.LastTransitionTime, c.LastHeartbeatTime = ready, "SimulatedByLullAgent", now, now
		}
	}
	if !found {
		node.Status.Conditions = append(node.Status.Conditions, corev1.NodeCondition{Type: corev1.NodeReady, Status: ready,
			Reason: "SimulatedByLullAgent", LastTransitionTime: now, LastHeartbeatTime: now})
	}
	if bootID != "" {
		node.Status.NodeInfo.BootID = bootID
	}
	if err := s.Client.Status().Patch(ctx, &node, client.MergeFrom(orig)); err != nil {
		return fmt.Errorf("simulating on node %s: %w", s.Node, err)
	}
	return nil
}
