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
// root file system (chroot into HostRoot): systemctl reaches systemd over
// its socket in the host's /run. The unit reaches a command only as
// $LULL_UNIT (the CRD's pattern allows no shell syntax in it, and it is
// never spliced into the command).
//
// A command exiting 0 is not taken for its effect. systemctl answers
// restart, reboot and poweroff with "Running in chroot, ignoring command"
// and exit 0 whenever it judges itself in a chroot (/proc/1/root is not
// /, which is how a chroot into the host's root looks from inside), so
// every command runs with SYSTEMD_IGNORE_CHROOT=1; and a RestartService is
// done only when the unit's InvocationID changed and it is active again
// (UnitState). A reboot is done when the node reports a new boot ID and
// is Ready, which the drainer judges.
type Commands struct {
	// HostRoot is where the host's / is mounted; "/" runs commands in the
	// agent's own root (no chroot).
	HostRoot string
	// Restart, Reboot and PowerOff are the commands; an empty one makes
	// such a step fail, saying it is disabled on this agent.
	Restart, Reboot, PowerOff string
	// UnitState prints the unit $LULL_UNIT's properties InvocationID and
	// ActiveState as `systemctl show` does (KEY=value lines, in any
	// order). It runs before and after the restart command; empty makes
	// RestartService steps fail, since their effect could not be seen.
	UnitState string
	// Settle is how long after the restart command the unit may take to
	// show a new InvocationID and become active (a command that queues
	// the restart without waiting for it); 10s if zero.
	Settle time.Duration
	// Clock paces the wait for the unit to settle (real time if nil).
	Clock clock.WithTicker
}

// Run runs the step's command until it exits or ctx ends; a service
// restart is verified (restart).
func (c *Commands) Run(ctx context.Context, a lullv1alpha1.ActionStatus) (string, error) {
	var command string
	switch a.Type {
	case lullv1alpha1.StepRestartService:
		return c.restart(ctx, a)
	case lullv1alpha1.StepReboot:
		command = c.Reboot
	case lullv1alpha1.StepPowerOff:
		command = c.PowerOff
	default:
		return "", fmt.Errorf("lull-agent does not know the step %q", a.Type)
	}
	return c.run(ctx, a, command)
}

// unitState is what UnitState printed of a unit.
type unitState struct{ invocation, active string }

// restart restarts the unit and sees that it happened: the unit's
// InvocationID, read before and after the command, changed, and the unit
// is active. A command that exits 0 without restarting the unit (a
// systemctl that ignored it, a wrapper that did nothing) fails the step,
// and the usual fallback applies.
func (c *Commands) restart(ctx context.Context, a lullv1alpha1.ActionStatus) (string, error) {
	if c.Restart == "" {
		return "", disabled(a)
	}
	if c.UnitState == "" {
		return "", fmt.Errorf("%s cannot be verified on this agent (--unit-state-command is empty), so it is not run", a.Type)
	}
	before, err := c.unitState(ctx, a)
	if err != nil {
		return "", fmt.Errorf("reading the state of unit %s before restarting it: %w", a.Unit, err)
	}
	out, err := c.run(ctx, a, c.Restart)
	if err != nil {
		return out, err
	}
	settle := c.Settle
	if settle <= 0 {
		settle = 10 * time.Second
	}
	clk := c.Clock
	if clk == nil {
		clk = clock.RealClock{}
	}
	tick := clk.NewTicker(200 * time.Millisecond)
	defer tick.Stop()
	until := clk.Now().Add(settle)
	for {
		after, err := c.unitState(ctx, a)
		if err != nil {
			return out, fmt.Errorf("reading the state of unit %s after restarting it: %w", a.Unit, err)
		}
		restarted := after.invocation != "" && after.invocation != before.invocation
		switch {
		case restarted && after.active == "active":
			msg := fmt.Sprintf("unit %s restarted (InvocationID %s, was %s) and active", a.Unit, after.invocation, orNone(before.invocation))
			if out != "" {
				msg = out + "; " + msg
			}
			return msg, nil
		case restarted && after.active == "failed":
			return out, fmt.Errorf("unit %s was restarted (InvocationID %s) but failed", a.Unit, after.invocation)
		case !clk.Now().Before(until):
			if !restarted {
				return out, fmt.Errorf("%s exited 0 but did not restart unit %s: its InvocationID is still %s (%s); a systemctl that takes itself for being in a chroot ignores the command and exits 0",
					c.Restart, a.Unit, orNone(after.invocation), after.active)
			}
			return out, fmt.Errorf("unit %s was restarted (InvocationID %s) but is %s, not active, %s after the command", a.Unit, after.invocation, after.active, settle)
		}
		select {
		case <-ctx.Done():
			return out, ctx.Err()
		case <-tick.C():
		}
	}
}

func orNone(s string) string {
	if s == "" {
		return "none"
	}
	return s
}

// unitState runs UnitState for the step's unit and reads its output.
func (c *Commands) unitState(ctx context.Context, a lullv1alpha1.ActionStatus) (unitState, error) {
	out, err := c.output(ctx, a, c.UnitState)
	if err != nil {
		return unitState{}, err
	}
	var st unitState
	for _, line := range strings.Split(out, "\n") {
		k, v, _ := strings.Cut(strings.TrimSpace(line), "=")
		switch k {
		case "InvocationID":
			st.invocation = v
		case "ActiveState":
			st.active = v
		}
	}
	if st.active == "" {
		return st, fmt.Errorf("%s printed no ActiveState (want KEY=value lines with InvocationID and ActiveState, as systemctl show prints them): %q", c.UnitState, lastLine(out))
	}
	return st, nil
}

// run runs command and returns the last line it printed.
func (c *Commands) run(ctx context.Context, a lullv1alpha1.ActionStatus, command string) (string, error) {
	if command == "" {
		return "", disabled(a)
	}
	out, err := c.output(ctx, a, command)
	return lastLine(out), err
}

func disabled(a lullv1alpha1.ActionStatus) error {
	return fmt.Errorf("%s is disabled on this agent (its command is empty)", a.Type)
}

// output runs command as /bin/sh -c in the host's root and returns all it
// printed, on stdout and stderr.
func (c *Commands) output(ctx context.Context, a lullv1alpha1.ActionStatus, command string) (string, error) {
	cmd := exec.CommandContext(ctx, "/bin/sh", "-c", command)
	cmd.Env = []string{"PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin", "LULL_UNIT=" + a.Unit, "LULL_STEP=" + string(a.Type),
		"SYSTEMD_IGNORE_CHROOT=1"}
	cmd.Dir = "/"
	if c.HostRoot != "" && c.HostRoot != "/" {
		cmd.SysProcAttr = &syscall.SysProcAttr{Chroot: c.HostRoot}
	}
	// A command that leaves children holding its output must not outlive
	// its deadline.
	cmd.WaitDelay = 5 * time.Second
	var out bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &out
	if err := cmd.Run(); err != nil {
		return out.String(), fmt.Errorf("%s: %w", command, err)
	}
	return out.String(), nil
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
// off stops the agent's heartbeat (Off) and makes the node NotReady with
// the condition ConditionSimulatedPowerOff, which the local cluster's kwok
// leaves alone, so the node stays NotReady as a machine switched off
// would. The drainer's judgements ("came back", "stays down") are the
// production ones. Service restarts go to Commands.
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
func (s *SimulatedPower) Run(ctx context.Context, a lullv1alpha1.ActionStatus) (string, error) {
	switch a.Type {
	case lullv1alpha1.StepReboot:
		boot := string(uuid.NewUUID())
		if err := s.setNode(ctx, corev1.ConditionFalse, boot, false); err != nil {
			return "", err
		}
		select {
		case <-s.Clock.After(s.BootTime):
		case <-ctx.Done():
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
