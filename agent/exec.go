package agent

import (
	"bytes"
	"context"
	"fmt"
	"os/exec"
	"strings"
	"syscall"
	"time"

	"k8s.io/utils/clock"

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
	// UnitJournal prints the entries systemd (PID 1) wrote in its journal
	// of the unit $LULL_UNIT, as `journalctl --output=json` does (a JSON
	// object a line, with INVOCATION_ID, MESSAGE_ID, JOB_RESULT). It runs
	// before and after restarting a oneshot service, which systemd
	// unloads once it ran (a `systemctl show` of it then prints a unit
	// that never ran): the restart is done when an entry of a new
	// invocation says it succeeded. Empty makes such restarts fail unless
	// the unit's state shows the run.
	UnitJournal string
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
	run, ok := runners[s.Action.Type]
	switch {
	case s.Action.Type == lullv1alpha1.StepWriteFiles:
		return "", fmt.Errorf("%s is carried out by the agent's writer", s.Action.Type)
	case !ok:
		return "", fmt.Errorf("lull-agent does not know the step %q", s.Action.Type)
	}
	return run(ctx, c, s)
}

// runners carry out each host step kind (api/v1alpha1's catalog) but
// WriteFiles, which the agent's writer does (run.go):
// TestEveryHostStepKindHasARunner holds them equal.
var runners = map[lullv1alpha1.DisruptionAction]func(context.Context, *Commands, Step) (string, error){
	lullv1alpha1.StepDaemonReload: func(ctx context.Context, c *Commands, s Step) (string, error) {
		return c.daemonReload(ctx, s.Action, s.Units)
	},
	lullv1alpha1.StepReloadService: func(ctx context.Context, c *Commands, s Step) (string, error) {
		return c.reload(ctx, s.Action)
	},
	lullv1alpha1.StepRestartService: func(ctx context.Context, c *Commands, s Step) (string, error) {
		return c.restart(ctx, s.Action, s.Units)
	},
	lullv1alpha1.StepReboot: func(ctx context.Context, c *Commands, s Step) (string, error) {
		return c.run(ctx, s.Action, c.Reboot)
	},
	lullv1alpha1.StepPowerOff: func(ctx context.Context, c *Commands, s Step) (string, error) {
		return c.run(ctx, s.Action, c.PowerOff)
	},
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
	cmd := exec.CommandContext(ctx, "/bin/sh", "-c", command) //nolint:gosec // G204: command is the agent's own flag (the node admin's), never a request's; the unit goes in $LULL_UNIT, not the command line
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
