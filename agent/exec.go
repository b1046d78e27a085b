package agent

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"os/exec"
	"strconv"
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

// Step is a host step to carry out, with what of its request it needs.
type Step struct {
	Action lullv1alpha1.ActionStatus
	// Units are the units the request changes (its decision's changes of
	// kind unit): a DaemonReload is done only when none of them needs a
	// daemon-reload any more.
	Units []string
}

// Commands carries host steps out with shell commands run in the host's
// root file system (chroot into HostRoot): systemctl reaches systemd over
// its socket in the host's /run. The unit reaches a command only as
// $LULL_UNIT (the CRD's pattern allows no shell syntax in it, and it is
// never spliced into the command).
//
// A command exiting 0 is not taken for its effect. systemctl answers
// restart, reload, daemon-reload, reboot and poweroff with "Running in
// chroot, ignoring command" and exit 0 whenever it judges itself in a
// chroot (/proc/1/root is not /, which is how a chroot into the host's
// root looks from inside), so every command runs with
// SYSTEMD_IGNORE_CHROOT=1; and a step on systemd is done only when its
// effect is seen in systemd's state (UnitState, ManagerState): a
// RestartService when the unit's InvocationID changed and it is active
// again; a ReloadService when the unit went through reloading
// (StateChangeTimestampMonotonic advanced), its ReloadResult is success
// and it is active with the same InvocationID; a DaemonReload when
// systemd's UnitsLoadTimestampMonotonic advanced and none of the
// request's changed units reports NeedDaemonReload=yes. A reboot is done
// when the node reports a new boot ID and is Ready, which the drainer
// judges.
type Commands struct {
	// HostRoot is where the host's / is mounted; "/" runs commands in the
	// agent's own root (no chroot).
	HostRoot string
	// DaemonReload, Reload, Restart, Reboot and PowerOff are the
	// commands; an empty one makes such a step fail, saying it is
	// disabled on this agent.
	DaemonReload, Reload, Restart, Reboot, PowerOff string
	// UnitState prints properties of the unit $LULL_UNIT as `systemctl
	// show` does (KEY=value lines, in any order): InvocationID and
	// ActiveState, which every step on a unit reads; NeedDaemonReload,
	// which a DaemonReload reads of each changed unit;
	// StateChangeTimestampMonotonic and ReloadResult, which a
	// ReloadService reads (ReloadResult only if printed: older systemd
	// has none). It runs before and after the command; empty makes
	// RestartService and ReloadService steps fail, and DaemonReload steps
	// of requests that change units, since their effect could not be
	// seen.
	UnitState string
	// ManagerState prints systemd's UnitsLoadTimestampMonotonic (when it
	// last loaded its units) as `systemctl show` does. It runs before and
	// after a DaemonReload; empty makes DaemonReload steps fail.
	ManagerState string
	// Settle is how long after its command a step's effect may take to
	// show (a command that queues the job without waiting for it); 10s
	// if zero.
	Settle time.Duration
	// Clock paces the wait for the effect (real time if nil).
	Clock clock.WithTicker
}

// Run runs the step's command until it exits or ctx ends; a step on
// systemd is verified (restart, reload, daemonReload).
func (c *Commands) Run(ctx context.Context, s Step) (string, error) {
	a := s.Action
	var command string
	switch a.Type {
	case lullv1alpha1.StepDaemonReload:
		return c.daemonReload(ctx, a, s.Units)
	case lullv1alpha1.StepReloadService:
		return c.reload(ctx, a)
	case lullv1alpha1.StepRestartService:
		return c.restart(ctx, a)
	case lullv1alpha1.StepWriteFiles:
		return "", errors.New("WriteFiles is carried out by the agent's writer")
	case lullv1alpha1.StepReboot:
		command = c.Reboot
	case lullv1alpha1.StepPowerOff:
		command = c.PowerOff
	default:
		return "", fmt.Errorf("lull-agent does not know the step %q", a.Type)
	}
	return c.run(ctx, a, command)
}

// Property keys of `systemctl show` the steps read.
const (
	propInvocationID     = "InvocationID"
	propActiveState      = "ActiveState"
	propNeedDaemonReload = "NeedDaemonReload"
	propReloadResult     = "ReloadResult"
	propStateChange      = "StateChangeTimestampMonotonic"
	propUnitsLoad        = "UnitsLoadTimestampMonotonic"
)

// props is what a state command printed: `systemctl show`'s KEY=value
// lines, by key.
type props map[string]string

func parseProps(out string) props {
	p := props{}
	for _, line := range strings.Split(out, "\n") {
		if k, v, ok := strings.Cut(strings.TrimSpace(line), "="); ok {
			p[k] = v
		}
	}
	return p
}

// timestamp is the monotonic timestamp key (microseconds since boot) in
// what command printed.
func (p props) timestamp(command, key string) (uint64, error) {
	v, ok := p[key]
	if !ok {
		return 0, fmt.Errorf("%s printed no %s", command, key)
	}
	n, err := strconv.ParseUint(v, 10, 64)
	if err != nil {
		return 0, fmt.Errorf("%s printed %s=%q, not a number", command, key, v)
	}
	return n, nil
}

// verifiable says why a step with command, whose effect the state command
// named flag reads, is not run: its command is empty (disabled), or the
// state command is (its effect could not be seen).
func verifiable(a lullv1alpha1.ActionStatus, command, flag, state string) error {
	if command == "" {
		return disabled(a)
	}
	if state == "" {
		return fmt.Errorf("%s cannot be verified on this agent (%s is empty), so it is not run", a.Type, flag)
	}
	return nil
}

// restart restarts the unit and sees that it happened: the unit's
// InvocationID, read before and after the command, changed, and the unit
// is active. A command that exits 0 without restarting the unit (a
// systemctl that ignored it, a wrapper that did nothing) fails the step,
// and the usual fallback applies.
func (c *Commands) restart(ctx context.Context, a lullv1alpha1.ActionStatus) (string, error) {
	if err := verifiable(a, c.Restart, "--unit-state-command", c.UnitState); err != nil {
		return "", err
	}
	before, err := c.unitState(ctx, a, a.Unit)
	if err != nil {
		return "", fmt.Errorf("reading the state of unit %s before restarting it: %w", a.Unit, err)
	}
	out, err := c.run(ctx, a, c.Restart)
	if err != nil {
		return out, err
	}
	was := before[propInvocationID]
	msg, err := settle(ctx, c, func() (props, error) {
		after, err := c.unitState(ctx, a, a.Unit)
		if err != nil {
			return nil, fmt.Errorf("reading the state of unit %s after restarting it: %w", a.Unit, err)
		}
		return after, nil
	}, func(after props, final bool) (string, error) {
		id, active := after[propInvocationID], after[propActiveState]
		restarted := id != "" && id != was
		switch {
		case restarted && active == "active":
			return fmt.Sprintf("unit %s restarted (InvocationID %s, was %s) and active", a.Unit, id, orNone(was)), nil
		case restarted && active == "failed":
			return "", fmt.Errorf("unit %s was restarted (InvocationID %s) but failed", a.Unit, id)
		case !final:
			return "", nil
		case !restarted:
			return "", fmt.Errorf("%s exited 0 but did not restart unit %s: its InvocationID is still %s (%s); %s",
				c.Restart, a.Unit, orNone(id), active, chrootHint)
		}
		return "", fmt.Errorf("unit %s was restarted (InvocationID %s) but is %s, not active, %s after the command", a.Unit, id, active, c.settle())
	})
	return verified(out, msg, err)
}

// reload reloads the unit and sees that it happened: the unit went
// through reloading (its StateChangeTimestampMonotonic, read before and
// after the command, advanced), the reload succeeded (ReloadResult, when
// systemd reports it) and the unit is active again under the same
// InvocationID. A new InvocationID is a restart, not a reload (a reload
// command that restarts, or the unit restarted meanwhile): the step fails
// and says so, since what the reload was for (a unit that keeps running
// while it takes its new configuration) did not happen.
func (c *Commands) reload(ctx context.Context, a lullv1alpha1.ActionStatus) (string, error) {
	if err := verifiable(a, c.Reload, "--unit-state-command", c.UnitState); err != nil {
		return "", err
	}
	before, err := c.unitState(ctx, a, a.Unit)
	if err != nil {
		return "", fmt.Errorf("reading the state of unit %s before reloading it: %w", a.Unit, err)
	}
	since, err := before.timestamp(c.UnitState, propStateChange)
	if err != nil {
		return "", fmt.Errorf("reading the state of unit %s before reloading it: %w (a reload is seen by the unit's state changing)", a.Unit, err)
	}
	was := before[propInvocationID]
	out, err := c.run(ctx, a, c.Reload)
	if err != nil {
		return out, err
	}
	type seen struct {
		p       props
		changed uint64
	}
	msg, err := settle(ctx, c, func() (seen, error) {
		after, err := c.unitState(ctx, a, a.Unit)
		if err != nil {
			return seen{}, fmt.Errorf("reading the state of unit %s after reloading it: %w", a.Unit, err)
		}
		changed, err := after.timestamp(c.UnitState, propStateChange)
		if err != nil {
			return seen{}, fmt.Errorf("reading the state of unit %s after reloading it: %w", a.Unit, err)
		}
		return seen{after, changed}, nil
	}, func(s seen, final bool) (string, error) {
		id, active := s.p[propInvocationID], s.p[propActiveState]
		result, hasResult := s.p[propReloadResult]
		reloaded := s.changed > since
		switch {
		case id != was:
			return "", fmt.Errorf("unit %s was restarted, not reloaded: its InvocationID is %s, was %s (%s)", a.Unit, orNone(id), orNone(was), active)
		case reloaded && active == "failed":
			return "", fmt.Errorf("unit %s failed while reloading (ActiveState failed)", a.Unit)
		case reloaded && active == "active" && hasResult && result != "success":
			return "", fmt.Errorf("unit %s went through a reload that failed: ReloadResult=%s (the unit is still active, InvocationID %s)", a.Unit, result, orNone(id))
		case reloaded && active == "active":
			how := "ReloadResult success"
			if !hasResult {
				how = "no ReloadResult reported"
			}
			return fmt.Sprintf("unit %s reloaded (%s, InvocationID %s unchanged) and active", a.Unit, how, orNone(id)), nil
		case !final:
			return "", nil
		case !reloaded:
			return "", fmt.Errorf("%s exited 0 but did not reload unit %s: it never went through reloading (%s still %d, ActiveState %s); %s",
				c.Reload, a.Unit, propStateChange, s.changed, active, chrootHint)
		}
		return "", fmt.Errorf("unit %s went through a reload but is %s, not active, %s after the command", a.Unit, active, c.settle())
	})
	return verified(out, msg, err)
}

// daemonReload has systemd load its unit files again and sees that it
// happened: systemd's UnitsLoadTimestampMonotonic, read before and after
// the command, advanced, and none of units (the request's changed units)
// reports NeedDaemonReload=yes, that is, systemd runs them from their
// unit files as they are on disk now.
func (c *Commands) daemonReload(ctx context.Context, a lullv1alpha1.ActionStatus, units []string) (string, error) {
	if err := verifiable(a, c.DaemonReload, "--manager-state-command", c.ManagerState); err != nil {
		return "", err
	}
	if len(units) > 0 && c.UnitState == "" {
		return "", fmt.Errorf("%s cannot be verified on this agent (--unit-state-command is empty: it says whether the changed units %s still need a daemon-reload), so it is not run",
			a.Type, listUnits(units))
	}
	before, err := c.managerState(ctx, a)
	if err != nil {
		return "", fmt.Errorf("reading systemd's state before the daemon-reload: %w", err)
	}
	out, err := c.run(ctx, a, c.DaemonReload)
	if err != nil {
		return out, err
	}
	// pending are the units not yet seen to need no daemon-reload since
	// systemd reloaded, with what they said last.
	pending := units
	type seen struct {
		loaded  uint64
		pending []string
		need    map[string]string
	}
	msg, err := settle(ctx, c, func() (seen, error) {
		loaded, err := c.managerState(ctx, a)
		if err != nil {
			return seen{}, fmt.Errorf("reading systemd's state after the daemon-reload: %w", err)
		}
		s := seen{loaded: loaded, pending: pending, need: map[string]string{}}
		if loaded <= before {
			return s, nil
		}
		s.pending = nil
		for _, u := range pending {
			p, err := c.unitState(ctx, a, u)
			if err != nil {
				return s, fmt.Errorf("reading the state of unit %s after the daemon-reload: %w", u, err)
			}
			need, ok := p[propNeedDaemonReload]
			if !ok {
				return s, fmt.Errorf("%s printed no %s for unit %s, so whether it still needs a daemon-reload cannot be seen", c.UnitState, propNeedDaemonReload, u)
			}
			if need != "no" {
				s.pending, s.need[u] = append(s.pending, u), need
			}
		}
		pending = s.pending
		return s, nil
	}, func(s seen, final bool) (string, error) {
		reloaded := s.loaded > before
		switch {
		case reloaded && len(s.pending) == 0:
			msg := fmt.Sprintf("systemd reloaded its units (%s %d, was %d)", propUnitsLoad, s.loaded, before)
			if len(units) == 0 {
				return msg + "; the request changes no unit", nil
			}
			return fmt.Sprintf("%s; no changed unit needs a daemon-reload (%s)", msg, listUnits(units)), nil
		case !final:
			return "", nil
		case !reloaded:
			return "", fmt.Errorf("%s exited 0 but systemd did not reload its units: %s is %d, was %d before the command; %s",
				c.DaemonReload, propUnitsLoad, s.loaded, before, chrootHint)
		}
		still := make([]string, len(s.pending))
		for i, u := range s.pending {
			still[i] = fmt.Sprintf("%s (%s=%s)", u, propNeedDaemonReload, orNone(s.need[u]))
		}
		return "", fmt.Errorf("systemd reloaded its units (%s %d, was %d), but %s after the command these still need a daemon-reload: %s (a unit file changed again after the reload?)",
			propUnitsLoad, s.loaded, before, c.settle(), listUnits(still))
	})
	return verified(out, msg, err)
}

// chrootHint is why a systemctl that exited 0 may have done nothing.
const chrootHint = "a systemctl that takes itself for being in a chroot ignores the command and exits 0"

// settle reads a step's effect after its command until judge says it is
// done (a message) or failed (an error): at once, then every 200ms on c's
// clock, since a command may queue the job without waiting for it
// (systemctl --no-block). judge is told when the read is the last one, at
// least Settle after the first (final): it must then decide. A read that
// fails, and ctx ending, end the wait.
func settle[S any](ctx context.Context, c *Commands, read func() (S, error), judge func(s S, final bool) (string, error)) (string, error) {
	clk := c.Clock
	if clk == nil {
		clk = clock.RealClock{}
	}
	tick := clk.NewTicker(200 * time.Millisecond)
	defer tick.Stop()
	until := clk.Now().Add(c.settle())
	for {
		s, err := read()
		if err != nil {
			if ctx.Err() != nil {
				return "", ctx.Err() // the read was killed at the deadline
			}
			return "", err
		}
		final := !clk.Now().Before(until)
		msg, err := judge(s, final)
		switch {
		case err != nil || msg != "":
			return msg, err
		case final:
			return "", fmt.Errorf("the step's effect was not seen within %s", c.settle())
		}
		select {
		case <-ctx.Done():
			return "", ctx.Err()
		case <-tick.C():
		}
	}
}

func (c *Commands) settle() time.Duration {
	if c.Settle <= 0 {
		return 10 * time.Second
	}
	return c.Settle
}

// verified is a verified step's output: what its command printed last,
// then what was seen of its effect.
func verified(out, msg string, err error) (string, error) {
	if err != nil {
		return out, err
	}
	if out != "" {
		msg = out + "; " + msg
	}
	return msg, nil
}

func orNone(s string) string {
	if s == "" {
		return "none"
	}
	return s
}

// listUnits names units for a message: the first five, then how many
// more.
func listUnits(units []string) string {
	const max = 5
	if len(units) <= max {
		return strings.Join(units, ", ")
	}
	return fmt.Sprintf("%s and %d more", strings.Join(units[:max], ", "), len(units)-max)
}

// unitState runs UnitState for unit and reads its output.
func (c *Commands) unitState(ctx context.Context, a lullv1alpha1.ActionStatus, unit string) (props, error) {
	out, err := c.output(ctx, a.Type, unit, c.UnitState)
	if err != nil {
		return nil, err
	}
	p := parseProps(out)
	if p[propActiveState] == "" {
		return p, fmt.Errorf("%s printed no ActiveState (want KEY=value lines with InvocationID and ActiveState, as systemctl show prints them): %q", c.UnitState, lastLine(out))
	}
	return p, nil
}

// managerState runs ManagerState and reads systemd's
// UnitsLoadTimestampMonotonic from its output.
func (c *Commands) managerState(ctx context.Context, a lullv1alpha1.ActionStatus) (uint64, error) {
	out, err := c.output(ctx, a.Type, a.Unit, c.ManagerState)
	if err != nil {
		return 0, err
	}
	n, err := parseProps(out).timestamp(c.ManagerState, propUnitsLoad)
	if err != nil {
		return 0, fmt.Errorf("%w (want a KEY=value line, as systemctl show prints it): %q", err, lastLine(out))
	}
	return n, nil
}

// run runs command and returns the last line it printed.
func (c *Commands) run(ctx context.Context, a lullv1alpha1.ActionStatus, command string) (string, error) {
	if command == "" {
		return "", disabled(a)
	}
	out, err := c.output(ctx, a.Type, a.Unit, command)
	return lastLine(out), err
}

func disabled(a lullv1alpha1.ActionStatus) error {
	return fmt.Errorf("%s is disabled on this agent (its command is empty)", a.Type)
}

// output runs command as /bin/sh -c in the host's root, for the step and
// the unit (which it finds in $LULL_STEP and $LULL_UNIT), and returns all
// it printed, on stdout and stderr.
func (c *Commands) output(ctx context.Context, step lullv1alpha1.DisruptionAction, unit, command string) (string, error) {
	cmd := exec.CommandContext(ctx, "/bin/sh", "-c", command)
	cmd.Env = []string{"PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin", "LULL_UNIT=" + unit, "LULL_STEP=" + string(step),
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
