package agent

import (
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	clocktesting "k8s.io/utils/clock/testing"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/client/fake"

	"lull.dev/lull/agent/agenttest"
	lullv1alpha1 "lull.dev/lull/api/v1alpha1"
	"lull.dev/lull/internal/lullscheme"
)

// Commands run as /bin/sh -c <command> with the unit and the step in the
// environment (and nothing else of the agent's), from /; host root "/"
// runs them without a chroot. The output is the last line printed.
func TestCommandsRun(t *testing.T) {
	t.Setenv("LULL_TEST_AGENT_SECRET", "from-the-agent")
	chronyd := lullv1alpha1.ActionStatus{Type: lullv1alpha1.StepRestartService, Unit: "chronyd"}
	reboot := lullv1alpha1.ActionStatus{Type: lullv1alpha1.StepReboot}
	bump, state := fakeUnit(t)
	for _, tc := range []struct {
		name     string
		commands Commands
		step     lullv1alpha1.ActionStatus
		want     string
		wantErr  string // "": none
	}{
		{name: "a restart runs its command with the unit in $LULL_UNIT",
			commands: Commands{HostRoot: "/", Restart: "echo restarted $LULL_UNIT; " + bump, UnitState: state}, step: chronyd,
			want: "restarted chronyd; unit chronyd restarted (InvocationID 2, was 1) and active"},
		{name: "a reboot runs the reboot command, the step in $LULL_STEP",
			commands: Commands{HostRoot: "/", Restart: "echo wrong", Reboot: "echo $LULL_STEP now", PowerOff: "echo wrong"},
			step:     lullv1alpha1.ActionStatus{Type: lullv1alpha1.StepReboot}, want: "Reboot now"},
		{name: "a power-off runs the power-off command",
			commands: Commands{HostRoot: "/", Restart: "echo wrong", Reboot: "echo wrong", PowerOff: "echo $LULL_STEP now"},
			step:     lullv1alpha1.ActionStatus{Type: lullv1alpha1.StepPowerOff}, want: "PowerOff now"},
		{name: "the output is the last line printed, on stdout or stderr",
			commands: Commands{HostRoot: "/", Reboot: `echo one; echo two >&2; printf '\n\n'`}, step: reboot, want: "two"},
		{name: "a command that prints nothing has no output",
			commands: Commands{HostRoot: "/", Reboot: "true"}, step: reboot, want: ""},
		{name: "the unit is never spliced into the command",
			commands: Commands{HostRoot: "/", Reboot: `echo "$LULL_UNIT"`},
			step:     lullv1alpha1.ActionStatus{Type: lullv1alpha1.StepReboot, Unit: "x; echo spliced"}, want: "x; echo spliced"},
		{name: "the agent's own environment is not passed on",
			commands: Commands{HostRoot: "/", Reboot: `echo "${LULL_TEST_AGENT_SECRET:-unset}"`}, step: reboot, want: "unset"},
		{name: "systemctl is told it is not in a chroot, whatever /proc/1/root says",
			commands: Commands{HostRoot: "/", Reboot: `echo "SYSTEMD_IGNORE_CHROOT=$SYSTEMD_IGNORE_CHROOT"`}, step: reboot, want: "SYSTEMD_IGNORE_CHROOT=1"},
		{name: "commands run from /",
			commands: Commands{HostRoot: "/", Reboot: "pwd"}, step: reboot, want: "/"},
		{name: "an empty host root runs without a chroot too",
			commands: Commands{Reboot: "echo rebooting"}, step: reboot, want: "rebooting"},
		{name: "an empty command: the step is disabled on this agent",
			commands: Commands{HostRoot: "/", Restart: "echo restarted"}, step: lullv1alpha1.ActionStatus{Type: lullv1alpha1.StepReboot},
			wantErr: "Reboot is disabled on this agent (its command is empty)"},
		{name: "WriteFiles is not the commands' to carry out",
			commands: Commands{HostRoot: "/", Restart: "echo restarted"}, step: lullv1alpha1.ActionStatus{Type: lullv1alpha1.StepWriteFiles},
			wantErr: "WriteFiles is carried out by the agent's writer"},
		{name: "a step the agent does not do",
			commands: Commands{HostRoot: "/", Restart: "echo restarted"}, step: lullv1alpha1.ActionStatus{Type: lullv1alpha1.ActionDrain},
			wantErr: `lull-agent does not know the step "Drain"`},
		{name: "a non-zero exit fails, and the last line printed is still the output",
			commands: Commands{HostRoot: "/", Restart: `echo "restarting $LULL_UNIT"; echo "Unit $LULL_UNIT.service not found." >&2; exit 5`, UnitState: state},
			step:     chronyd, want: "Unit chronyd.service not found.", wantErr: "exit status 5"},
		{name: "a host root that cannot be entered fails",
			commands: Commands{HostRoot: "/nonexistent-lull-agent-test-root", Reboot: "echo rebooting"}, step: reboot,
			wantErr: "echo rebooting: "},
	} {
		t.Run(tc.name, func(t *testing.T) {
			out, err := tc.commands.Run(context.Background(), Step{Action: tc.step})
			require.Equal(t, tc.want, out)
			if tc.wantErr == "" {
				require.NoError(t, err)
				return
			}
			require.ErrorContains(t, err, tc.wantErr)
		})
	}
}

// A failed command's step message carries the error and its last line.
func TestCommandsFailureMessage(t *testing.T) {
	_, state := fakeUnit(t)
	c := Commands{HostRoot: "/", Restart: `echo "Job for $LULL_UNIT.service failed."; exit 1`, UnitState: state}
	out, err := c.Run(context.Background(), Step{Action: lullv1alpha1.ActionStatus{Type: lullv1alpha1.StepRestartService, Unit: "chronyd"}})
	require.Error(t, err)
	require.Equal(t, lullv1alpha1.ActionFailed, outcome(context.Background(), lullv1alpha1.StepRestartService, err))
	require.Equal(t, `echo "Job for $LULL_UNIT.service failed."; exit 1: exit status 1; last output: Job for chronyd.service failed.`,
		message(out, err, lullv1alpha1.ActionFailed, time.Minute))
}

// A command still running when its context ends (the step's deadline) is
// killed: Run returns at once, and the step has timed out.
func TestCommandsKilledAtTheDeadline(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 200*time.Millisecond)
	defer cancel()
	// exec: the shell becomes sleep, so the kill reaches the process that
	// holds the output (a child left holding it is cut off only after
	// cmd.WaitDelay, 5 s).
	_, state := fakeUnit(t)
	c := Commands{HostRoot: "/", Restart: "echo started; exec sleep 30", UnitState: state}
	began := time.Now()
	out, err := c.Run(ctx, Step{Action: lullv1alpha1.ActionStatus{Type: lullv1alpha1.StepRestartService, Unit: "chronyd"}})
	took := time.Since(began)

	require.Error(t, err)
	require.Less(t, took, 2*time.Second, "killed, not waited for")
	require.Equal(t, "started", out)
	require.Equal(t, lullv1alpha1.ActionTimedOut, outcome(ctx, lullv1alpha1.StepRestartService, err))
	require.Equal(t, "did not finish within 2m0s; last output: started", message(out, err, lullv1alpha1.ActionTimedOut, 2*time.Minute))
}

func TestLastLine(t *testing.T) {
	long := strings.Repeat("a", 300) + strings.Repeat("b", 300)
	for _, tc := range []struct {
		name, out, want string
	}{
		{name: "no output", out: "", want: ""},
		{name: "only blank lines", out: "\n \n\t\n", want: ""},
		{name: "one line without a newline", out: "restarted", want: "restarted"},
		{name: "the last of several lines", out: "one\ntwo\nthree\n", want: "three"},
		{name: "trailing blank lines are not the last line", out: "one\ntwo\n\n  \n", want: "two"},
		{name: "a blank line in the middle does not matter", out: "one\n\ntwo", want: "two"},
		{name: "surrounding space is trimmed", out: "one\n   two  \n", want: "two"},
		{name: "CRLF line ends", out: "one\r\ntwo\r\n", want: "two"},
		{name: "a line of exactly 512 bytes is kept", out: "x\n" + long[:512], want: long[:512]},
		{name: "a longer line keeps its last 512 bytes", out: "x\n" + long + "\n", want: long[len(long)-512:]},
	} {
		t.Run(tc.name, func(t *testing.T) {
			require.Equal(t, tc.want, lastLine(tc.out))
		})
	}
}

// simEnv is a SimulatedPower for node n1 (Ready, boot ID boot-1) on a
// fake client and a fake clock.
type simEnv struct {
	c     client.Client
	clock *clocktesting.FakeClock
	s     *SimulatedPower
}

func newSimEnv(t *testing.T, objs ...client.Object) *simEnv {
	t.Helper()
	c := fake.NewClientBuilder().WithScheme(lullscheme.New()).WithObjects(objs...).Build()
	clk := clocktesting.NewFakeClock(t0)
	bump, state := fakeUnit(t)
	return &simEnv{c: c, clock: clk, s: &SimulatedPower{Client: c, Node: testNode, BootTime: 30 * time.Second, Clock: clk,
		Commands: &Commands{HostRoot: "/", Restart: "echo restarted $LULL_UNIT; " + bump, UnitState: state}}}
}

func (e *simEnv) node(t *testing.T) *corev1.Node {
	t.Helper()
	n := &corev1.Node{}
	require.NoError(t, e.c.Get(context.Background(), types.NamespacedName{Name: testNode}, n))
	return n
}

// ready is the node's Ready condition, its times in UTC.
func ready(t *testing.T, n *corev1.Node) corev1.NodeCondition {
	t.Helper()
	var found []corev1.NodeCondition
	for _, c := range n.Status.Conditions {
		if c.Type == corev1.NodeReady {
			c.LastHeartbeatTime, c.LastTransitionTime = metav1.NewTime(c.LastHeartbeatTime.UTC()), metav1.NewTime(c.LastTransitionTime.UTC())
			found = append(found, c)
		}
	}
	require.Len(t, found, 1, "one Ready condition")
	return found[0]
}

func simulated(status corev1.ConditionStatus, at time.Time) corev1.NodeCondition {
	return corev1.NodeCondition{Type: corev1.NodeReady, Status: status, Reason: "SimulatedByLullAgent",
		LastHeartbeatTime: metav1.NewTime(at), LastTransitionTime: metav1.NewTime(at)}
}

type runResult struct {
	out string
	err error
}

// A simulated reboot makes the node NotReady with a new boot ID at once,
// and Ready again (the same new boot ID) after BootTime on its clock.
func TestSimulatedReboot(t *testing.T) {
	e := newSimEnv(t, node(bootID))
	done := make(chan runResult, 1)
	go func() {
		out, err := e.s.Run(context.Background(), Step{Action: lullv1alpha1.ActionStatus{Type: lullv1alpha1.StepReboot}})
		done <- runResult{out, err}
	}()
	require.Eventually(t, e.clock.HasWaiters, waitLimit, time.Millisecond, "the reboot waits for its boot time")

	n := e.node(t)
	newBoot := n.Status.NodeInfo.BootID
	require.NotEmpty(t, newBoot)
	require.NotEqual(t, bootID, newBoot, "a new boot ID")
	require.Equal(t, simulated(corev1.ConditionFalse, t0), ready(t, n), "NotReady while it boots")

	e.clock.Step(e.s.BootTime - time.Second)
	select {
	case r := <-done:
		t.Fatalf("the reboot ended before its boot time: %+v", r)
	default:
	}
	e.clock.Step(time.Second)
	var r runResult
	select {
	case r = <-done:
	case <-time.After(waitLimit):
		t.Fatal("the reboot did not end after its boot time")
	}
	require.NoError(t, r.err)
	require.Equal(t, "simulated reboot: boot ID "+newBoot, r.out)
	n = e.node(t)
	require.Equal(t, newBoot, n.Status.NodeInfo.BootID, "the boot ID of the new boot stays")
	require.Equal(t, simulated(corev1.ConditionTrue, t0.Add(30*time.Second)), ready(t, n), "Ready again")
}

// A simulated reboot whose context ends while the node boots returns the
// context's error and leaves the node NotReady, as a machine that has not
// come back.
func TestSimulatedRebootCancelled(t *testing.T) {
	e := newSimEnv(t, node(bootID))
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	done := make(chan runResult, 1)
	go func() {
		out, err := e.s.Run(ctx, Step{Action: lullv1alpha1.ActionStatus{Type: lullv1alpha1.StepReboot}})
		done <- runResult{out, err}
	}()
	require.Eventually(t, e.clock.HasWaiters, waitLimit, time.Millisecond)
	cancel()
	var r runResult
	select {
	case r = <-done:
	case <-time.After(waitLimit):
		t.Fatal("the reboot did not end with its context")
	}
	require.ErrorIs(t, r.err, context.Canceled)
	n := e.node(t)
	require.NotEqual(t, bootID, n.Status.NodeInfo.BootID)
	require.Equal(t, corev1.ConditionFalse, ready(t, n).Status)
}

func TestSimulatedPower(t *testing.T) {
	noReady := node(bootID)
	noReady.Status.Conditions = nil
	for _, tc := range []struct {
		name      string
		node      *corev1.Node // nil: none
		step      lullv1alpha1.ActionStatus
		want      string
		wantErr   string
		wantReady *corev1.NodeCondition // nil: as it was
	}{
		{name: "a power-off leaves the node NotReady, its boot ID as it was", node: node(bootID),
			step: lullv1alpha1.ActionStatus{Type: lullv1alpha1.StepPowerOff}, want: "simulated power off",
			wantReady: ptr.To(simulated(corev1.ConditionFalse, t0))},
		{name: "a node without a Ready condition gets one", node: noReady,
			step: lullv1alpha1.ActionStatus{Type: lullv1alpha1.StepPowerOff}, want: "simulated power off",
			wantReady: ptr.To(simulated(corev1.ConditionFalse, t0))},
		{name: "a service restart runs its command", node: node(bootID),
			step: lullv1alpha1.ActionStatus{Type: lullv1alpha1.StepRestartService, Unit: "chronyd"},
			want: "restarted chronyd; unit chronyd restarted (InvocationID 2, was 1) and active"},
		{name: "a node that does not exist", step: lullv1alpha1.ActionStatus{Type: lullv1alpha1.StepPowerOff},
			want: "simulated power off", wantErr: "reading node n1"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var objs []client.Object
			if tc.node != nil {
				objs = append(objs, tc.node)
			}
			e := newSimEnv(t, objs...)
			offs := 0
			e.s.Off = func(context.Context) error { offs++; return nil }

			out, err := e.s.Run(context.Background(), Step{Action: tc.step})
			require.Equal(t, tc.want, out)
			if tc.wantErr != "" {
				require.ErrorContains(t, err, tc.wantErr)
				return
			}
			require.NoError(t, err)
			n := e.node(t)
			require.Equal(t, bootID, n.Status.NodeInfo.BootID)
			if tc.wantReady == nil {
				require.Equal(t, tc.node.Status.Conditions, n.Status.Conditions)
				require.Zero(t, offs)
				return
			}
			require.Equal(t, *tc.wantReady, ready(t, n))
			// A power-off: the heartbeat stops, and the node is marked
			// so that kwok leaves it NotReady.
			require.Equal(t, 1, offs)
			var off *corev1.NodeCondition
			for i := range n.Status.Conditions {
				if n.Status.Conditions[i].Type == ConditionSimulatedPowerOff {
					off = &n.Status.Conditions[i]
				}
			}
			require.NotNil(t, off)
			require.Equal(t, corev1.ConditionTrue, off.Status)
		})
	}
}

// A simulated node without a boot ID (kwok's) gets one when the agent
// starts, as a kubelet reports one; one it has is kept.
func TestSimulatedPowerGivesABootID(t *testing.T) {
	e := newSimEnv(t, node(""))
	require.NoError(t, e.s.Start(context.Background()))
	first := e.node(t).Status.NodeInfo.BootID
	require.NotEmpty(t, first)
	require.NoError(t, e.s.Start(context.Background()))
	require.Equal(t, first, e.node(t).Status.NodeInfo.BootID, "kept")
}

// fakeUnit is agenttest.FakeUnit in a directory of the test's.
func fakeUnit(t *testing.T) (bump, state string) { return agenttest.FakeUnit(t.TempDir()) }

// A RestartService is done when the unit's InvocationID changed and it is
// active again, not when the command exits 0 (issue 29).
func TestCommandsRestartVerified(t *testing.T) {
	chronyd := lullv1alpha1.ActionStatus{Type: lullv1alpha1.StepRestartService, Unit: "chronyd"}
	for _, tc := range []struct {
		name    string
		c       func(t *testing.T) Commands
		want    string
		wantErr string
	}{
		{name: "a new InvocationID and active: done", c: func(t *testing.T) Commands {
			bump, state := fakeUnit(t)
			return Commands{HostRoot: "/", Restart: bump, UnitState: state}
		}, want: "unit chronyd restarted (InvocationID 2, was 1) and active"},
		{name: "a command that exits 0 and restarts nothing fails the step", c: func(t *testing.T) Commands {
			_, state := fakeUnit(t)
			return Commands{HostRoot: "/", Restart: `echo "Running in chroot, ignoring command 'restart'"`, UnitState: state, Settle: time.Nanosecond}
		}, want: "Running in chroot, ignoring command 'restart'",
			wantErr: "did not restart unit chronyd: its InvocationID is still 1 (active); a systemctl that takes itself for being in a chroot ignores the command and exits 0"},
		{name: "a unit never started before gets its first InvocationID", c: func(t *testing.T) Commands {
			f := file(t, "id", "")
			return Commands{HostRoot: "/", Restart: "echo abc > " + f,
				UnitState: fmt.Sprintf(`echo "Id=$LULL_UNIT"; echo "InvocationID=$(cat %s)"; echo ActiveState=$(test -s %[1]s && echo active || echo inactive)`, f)}
		}, want: "unit chronyd restarted (InvocationID abc, was none) and active"},
		{name: "a unit-state command that prints only InvocationID and ActiveState (the old default) still does for a restart", c: func(t *testing.T) Commands {
			f := file(t, "id", "1")
			return Commands{HostRoot: "/", Restart: "echo 2 > " + f, UnitState: fmt.Sprintf(`echo "Id=$LULL_UNIT"; echo "InvocationID=$(cat %s)"; echo ActiveState=active`, f)}
		}, want: "unit chronyd restarted (InvocationID 2, was 1) and active"},
		{name: "restarted but failed", c: func(t *testing.T) Commands {
			f := file(t, "id", "1")
			return Commands{HostRoot: "/", Restart: "echo 2 > " + f,
				UnitState: fmt.Sprintf(`echo "Id=$LULL_UNIT"; echo "InvocationID=$(cat %s)"; test "$(cat %[1]s)" = 1 && echo ActiveState=active || echo ActiveState=failed`, f)}
		}, wantErr: "unit chronyd was restarted (InvocationID 2) but failed"},
		{name: "restarted but not active within the settle time", c: func(t *testing.T) Commands {
			f := file(t, "id", "1")
			return Commands{HostRoot: "/", Restart: "echo 2 > " + f, Settle: time.Nanosecond,
				UnitState: fmt.Sprintf(`echo "Id=$LULL_UNIT"; echo "InvocationID=$(cat %s)"; test "$(cat %[1]s)" = 1 && echo ActiveState=active || echo ActiveState=activating`, f)}
		}, wantErr: "unit chronyd was restarted (InvocationID 2) but is activating, not active"},
		{name: "no state command: not run, since it could not be verified", c: func(t *testing.T) Commands {
			return Commands{HostRoot: "/", Restart: "echo restarted"}
		}, wantErr: "RestartService cannot be verified on this agent (--unit-state-command is empty), so it is not run"},
		{name: "a state command that prints no ActiveState", c: func(t *testing.T) Commands {
			return Commands{HostRoot: "/", Restart: "echo restarted", UnitState: "echo hello"}
		}, wantErr: `reading the state of unit chronyd before restarting it: echo hello printed no ActiveState`},
		{name: "a state command that fails", c: func(t *testing.T) Commands {
			return Commands{HostRoot: "/", Restart: "echo restarted", UnitState: "echo no bus >&2; exit 1"}
		}, wantErr: "reading the state of unit chronyd before restarting it: echo no bus >&2; exit 1: exit status 1"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			c := tc.c(t)
			out, err := c.Run(context.Background(), Step{Action: chronyd})
			require.Equal(t, tc.want, out)
			if tc.wantErr == "" {
				require.NoError(t, err)
				return
			}
			require.ErrorContains(t, err, tc.wantErr)
		})
	}
}

// A restart the command only queues (systemctl --no-block): the unit
// shows its new InvocationID, and becomes active, a moment later; the
// agent looks again on its clock until Settle has passed.
func TestCommandsRestartSettles(t *testing.T) {
	// The unit as systemd shows it, read by read: before the restart and
	// just after it the old InvocationID, then the new one activating,
	// then active. The reads, not the test's timing, advance it.
	reads := filepath.Join(t.TempDir(), "reads")
	state := fmt.Sprintf(`n=$(( $(cat %[1]s 2>/dev/null || echo 0) + 1 )); echo $n > %[1]s
case $n in 1|2) echo "Id=$LULL_UNIT"; echo InvocationID=1; echo ActiveState=active;; 3) echo "Id=$LULL_UNIT"; echo InvocationID=2; echo ActiveState=activating;; *) echo "Id=$LULL_UNIT"; echo InvocationID=2; echo ActiveState=active;; esac`, reads)
	clk := clocktesting.NewFakeClock(t0)
	c := Commands{HostRoot: "/", Restart: "true", UnitState: state, Clock: clk, Settle: time.Minute}
	type result struct {
		out string
		err error
	}
	done := make(chan result, 1)
	go func() {
		out, err := c.Run(context.Background(), Step{Action: lullv1alpha1.ActionStatus{Type: lullv1alpha1.StepRestartService, Unit: "chronyd"}})
		done <- result{out, err}
	}()
	limit := time.After(10 * time.Second)
	for {
		select {
		case r := <-done:
			require.NoError(t, r.err)
			require.Equal(t, "unit chronyd restarted (InvocationID 2, was 1) and active", r.out)
			n, err := os.ReadFile(reads)
			require.NoError(t, err)
			require.Equal(t, "4", strings.TrimSpace(string(n)), "read again through the old ID and activating, until active")
			require.Less(t, clk.Since(t0), c.Settle, "within the settle time")
			return
		case <-limit:
			t.Fatal("the restart was not seen")
		case <-time.After(time.Millisecond):
			if clk.HasWaiters() {
				clk.Step(200 * time.Millisecond)
			}
		}
	}
}

// sh runs command as the agent's commands run, for a test's setup.
func sh(t *testing.T, command string) {
	t.Helper()
	out, err := exec.Command("/bin/sh", "-c", command).CombinedOutput()
	require.NoError(t, err, "%s: %s", command, out)
}

// file is a file of the test's holding content.
func file(t *testing.T, name, content string) string {
	t.Helper()
	p := filepath.Join(t.TempDir(), name)
	require.NoError(t, os.WriteFile(p, []byte(content), 0o644))
	return p
}

// A ReloadService is done when the unit went through reloading (its
// StateChangeTimestampMonotonic advanced), the reload succeeded
// (ReloadResult, when reported) and the unit is active under the same
// InvocationID; not when the command exits 0.
func TestCommandsReloadVerified(t *testing.T) {
	chronyd := lullv1alpha1.ActionStatus{Type: lullv1alpha1.StepReloadService, Unit: "chronyd"}
	// unit is a unit whose StateChangeTimestampMonotonic is in changed
	// (1 at first, as the reload command leaves it) and which prints
	// extra after it.
	unit := func(t *testing.T, extra string) (changed, state string) {
		changed = file(t, "changed", "1")
		return changed, fmt.Sprintf(`echo "Id=$LULL_UNIT"; echo InvocationID=7; echo "StateChangeTimestampMonotonic=$(cat %s)"; `, changed) + extra
	}
	for _, tc := range []struct {
		name    string
		c       func(t *testing.T) Commands
		want    string
		wantErr string
	}{
		{name: "through reloading, ReloadResult success, the same InvocationID and active: done", c: func(t *testing.T) Commands {
			u := agenttest.NewUnit(t.TempDir())
			return Commands{HostRoot: "/", Reload: `echo "reloading $LULL_UNIT"; ` + u.Reload, UnitState: u.State}
		}, want: "reloading chronyd; unit chronyd reloaded (ReloadResult success, InvocationID 1 unchanged) and active"},
		{name: "a systemd that reports no ReloadResult: the state change and the InvocationID tell", c: func(t *testing.T) Commands {
			changed, state := unit(t, "echo ActiveState=active")
			return Commands{HostRoot: "/", Reload: "echo 5 > " + changed, UnitState: state}
		}, want: "unit chronyd reloaded (no ReloadResult reported, InvocationID 7 unchanged) and active"},
		{name: "a command that exits 0 and reloads nothing fails the step, saying what was seen", c: func(t *testing.T) Commands {
			u := agenttest.NewUnit(t.TempDir())
			return Commands{HostRoot: "/", Reload: `echo "Running in chroot, ignoring command 'reload'"`, UnitState: u.State, Settle: time.Nanosecond}
		}, want: "Running in chroot, ignoring command 'reload'",
			wantErr: "exited 0 but did not reload unit chronyd: it never went through reloading (StateChangeTimestampMonotonic still 1, ActiveState active); " +
				"a systemctl that takes itself for being in a chroot ignores the command and exits 0"},
		{name: "a reload that failed, by its ReloadResult, fails the step, though the unit is still active", c: func(t *testing.T) Commands {
			changed, state := unit(t, "echo ActiveState=active; ")
			return Commands{HostRoot: "/", Reload: "echo 2 > " + changed,
				UnitState: state + fmt.Sprintf(`test "$(cat %s)" = 1 && echo ReloadResult=success || echo ReloadResult=exit-code`, changed)}
		}, wantErr: "unit chronyd went through a reload that failed: ReloadResult=exit-code (the unit is still active, InvocationID 7)"},
		{name: "a new InvocationID is a restart, not a reload: the step fails, saying so", c: func(t *testing.T) Commands {
			u := agenttest.NewUnit(t.TempDir())
			return Commands{HostRoot: "/", Reload: u.Restart, UnitState: u.State}
		}, wantErr: "unit chronyd was restarted, not reloaded: its InvocationID is 2, was 1 (active)"},
		{name: "a unit that failed while reloading", c: func(t *testing.T) Commands {
			changed, state := unit(t, "")
			return Commands{HostRoot: "/", Reload: "echo 2 > " + changed,
				UnitState: state + fmt.Sprintf(`test "$(cat %s)" = 1 && echo ActiveState=active || echo ActiveState=failed`, changed)}
		}, wantErr: "unit chronyd failed while reloading (ActiveState failed)"},
		{name: "still reloading when the settle time has passed", c: func(t *testing.T) Commands {
			changed, state := unit(t, "")
			return Commands{HostRoot: "/", Reload: "echo 2 > " + changed, Settle: time.Nanosecond,
				UnitState: state + fmt.Sprintf(`test "$(cat %s)" = 1 && echo ActiveState=active || echo ActiveState=reloading`, changed)}
		}, wantErr: "unit chronyd went through a reload but is reloading, not active, 1ns after the command"},
		{name: "a reload command that fails fails the step with its last output", c: func(t *testing.T) Commands {
			u := agenttest.NewUnit(t.TempDir())
			return Commands{HostRoot: "/", Reload: `echo "Failed to reload $LULL_UNIT.service: Job type reload is not applicable for unit $LULL_UNIT.service." >&2; exit 1`, UnitState: u.State}
		}, want: "Failed to reload chronyd.service: Job type reload is not applicable for unit chronyd.service.", wantErr: "exit status 1"},
		{name: "no reload command: the step is disabled", c: func(t *testing.T) Commands {
			u := agenttest.NewUnit(t.TempDir())
			return Commands{HostRoot: "/", Restart: u.Restart, UnitState: u.State}
		}, wantErr: "ReloadService is disabled on this agent (its command is empty)"},
		{name: "no state command: not run, since it could not be verified", c: func(t *testing.T) Commands {
			return Commands{HostRoot: "/", Reload: "echo reloaded"}
		}, wantErr: "ReloadService cannot be verified on this agent (--unit-state-command is empty), so it is not run"},
		{name: "a unit-state command without StateChangeTimestampMonotonic (the old default) cannot show a reload: not run", c: func(t *testing.T) Commands {
			return Commands{HostRoot: "/", Reload: "echo reloaded", UnitState: "echo Id=chronyd.service; echo InvocationID=1; echo ActiveState=active"}
		}, wantErr: "reading the state of unit chronyd before reloading it: echo Id=chronyd.service; echo InvocationID=1; echo ActiveState=active printed no StateChangeTimestampMonotonic " +
			"(a reload is seen by the unit's state changing)"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			c := tc.c(t)
			out, err := c.Run(context.Background(), Step{Action: chronyd})
			require.Equal(t, tc.want, out)
			if tc.wantErr == "" {
				require.NoError(t, err)
				return
			}
			require.ErrorContains(t, err, tc.wantErr)
		})
	}
}

// A DaemonReload is done when systemd's UnitsLoadTimestampMonotonic
// advanced and none of the request's changed units needs a daemon-reload
// any more; not when the command exits 0.
func TestCommandsDaemonReloadVerified(t *testing.T) {
	reload := lullv1alpha1.ActionStatus{Type: lullv1alpha1.StepDaemonReload}
	changed := []string{"chronyd.service", "foo.service"}
	for _, tc := range []struct {
		name    string
		c       func(t *testing.T) Commands
		units   []string
		want    string
		wantErr string
	}{
		{name: "systemd reloaded and the changed units no longer need it: done", units: changed, c: func(t *testing.T) Commands {
			u := agenttest.NewUnit(t.TempDir())
			sh(t, u.EditUnitFile)
			return Commands{HostRoot: "/", DaemonReload: "echo reloading; " + u.DaemonReload, ManagerState: u.ManagerState, UnitState: u.State}
		}, want: "reloading; systemd reloaded its units (UnitsLoadTimestampMonotonic 2, was 1); no changed unit needs a daemon-reload (chronyd.service, foo.service)"},
		{name: "a request that changes no unit needs no unit-state command", c: func(t *testing.T) Commands {
			u := agenttest.NewUnit(t.TempDir())
			return Commands{HostRoot: "/", DaemonReload: u.DaemonReload, ManagerState: u.ManagerState}
		}, want: "systemd reloaded its units (UnitsLoadTimestampMonotonic 2, was 1); the request changes no unit"},
		{name: "a command that exits 0 and reloads nothing fails the step, saying what was seen", units: changed, c: func(t *testing.T) Commands {
			u := agenttest.NewUnit(t.TempDir())
			return Commands{HostRoot: "/", DaemonReload: `echo "Running in chroot, ignoring command 'daemon-reload'"`, ManagerState: u.ManagerState,
				UnitState: u.State, Settle: time.Nanosecond}
		}, want: "Running in chroot, ignoring command 'daemon-reload'",
			wantErr: "exited 0 but systemd did not reload its units: UnitsLoadTimestampMonotonic is 1, was 1 before the command; " +
				"a systemctl that takes itself for being in a chroot ignores the command and exits 0"},
		{name: "a changed unit that still needs a daemon-reload after it fails the step", units: changed, c: func(t *testing.T) Commands {
			u := agenttest.NewUnit(t.TempDir())
			return Commands{HostRoot: "/", DaemonReload: u.DaemonReload + "; " + u.EditUnitFile, ManagerState: u.ManagerState, UnitState: u.State,
				Settle: time.Nanosecond}
		}, wantErr: "systemd reloaded its units (UnitsLoadTimestampMonotonic 2, was 1), but 1ns after the command these still need a daemon-reload: " +
			"chronyd.service (NeedDaemonReload=yes), foo.service (NeedDaemonReload=yes) (a unit file changed again after the reload?)"},
		{name: "a daemon-reload command that fails fails the step with its last output", c: func(t *testing.T) Commands {
			u := agenttest.NewUnit(t.TempDir())
			return Commands{HostRoot: "/", DaemonReload: `echo "Failed to reload daemon: Access denied" >&2; exit 1`, ManagerState: u.ManagerState}
		}, want: "Failed to reload daemon: Access denied", wantErr: "exit status 1"},
		{name: "no daemon-reload command: the step is disabled", c: func(t *testing.T) Commands {
			u := agenttest.NewUnit(t.TempDir())
			return Commands{HostRoot: "/", ManagerState: u.ManagerState, UnitState: u.State}
		}, wantErr: "DaemonReload is disabled on this agent (its command is empty)"},
		{name: "no manager-state command: not run, since it could not be verified", c: func(t *testing.T) Commands {
			u := agenttest.NewUnit(t.TempDir())
			return Commands{HostRoot: "/", DaemonReload: u.DaemonReload, UnitState: u.State}
		}, wantErr: "DaemonReload cannot be verified on this agent (--manager-state-command is empty), so it is not run"},
		{name: "changed units and no unit-state command: not run", units: changed, c: func(t *testing.T) Commands {
			u := agenttest.NewUnit(t.TempDir())
			return Commands{HostRoot: "/", DaemonReload: u.DaemonReload, ManagerState: u.ManagerState}
		}, wantErr: "DaemonReload cannot be verified on this agent (--unit-state-command is empty: it says whether the changed units chronyd.service, foo.service " +
			"still need a daemon-reload), so it is not run"},
		{name: "a unit-state command without NeedDaemonReload (the old default) cannot tell: the step fails", units: changed, c: func(t *testing.T) Commands {
			u := agenttest.NewUnit(t.TempDir())
			return Commands{HostRoot: "/", DaemonReload: u.DaemonReload, ManagerState: u.ManagerState, UnitState: "echo InvocationID=1; echo ActiveState=active"}
		}, wantErr: "echo InvocationID=1; echo ActiveState=active printed no NeedDaemonReload " +
			"for unit chronyd.service, so whether it still needs a daemon-reload cannot be seen"},
		{name: "a manager-state command that prints no UnitsLoadTimestampMonotonic (a systemd without it)", c: func(t *testing.T) Commands {
			return Commands{HostRoot: "/", DaemonReload: "true", ManagerState: "echo hello"}
		}, wantErr: `reading systemd's state before the daemon-reload: echo hello printed no UnitsLoadTimestampMonotonic (want a KEY=value line, as systemctl show prints it): "hello"`},
		{name: "a manager-state command that prints no number", c: func(t *testing.T) Commands {
			return Commands{HostRoot: "/", DaemonReload: "true", ManagerState: "echo UnitsLoadTimestampMonotonic=[not set]"}
		}, wantErr: `printed UnitsLoadTimestampMonotonic="[not set]", not a number`},
	} {
		t.Run(tc.name, func(t *testing.T) {
			c := tc.c(t)
			out, err := c.Run(context.Background(), Step{Action: reload, Units: tc.units})
			require.Equal(t, tc.want, out)
			if tc.wantErr == "" {
				require.NoError(t, err)
				return
			}
			require.ErrorContains(t, err, tc.wantErr)
		})
	}
}

// A DaemonReload reads each changed unit's state with the unit in
// $LULL_UNIT, and systemd's without one.
func TestCommandsDaemonReloadReadsEachUnit(t *testing.T) {
	u := agenttest.NewUnit(t.TempDir())
	log := filepath.Join(t.TempDir(), "log")
	c := Commands{HostRoot: "/", DaemonReload: u.DaemonReload,
		ManagerState: fmt.Sprintf(`echo "manager $LULL_STEP [$LULL_UNIT]" >> %s; %s`, log, u.ManagerState),
		UnitState:    fmt.Sprintf(`echo "unit $LULL_STEP [$LULL_UNIT]" >> %s; %s`, log, u.State)}
	_, err := c.Run(context.Background(), Step{Action: lullv1alpha1.ActionStatus{Type: lullv1alpha1.StepDaemonReload}, Units: []string{"a.service", "b.socket"}})
	require.NoError(t, err)
	got, err := os.ReadFile(log)
	require.NoError(t, err)
	require.Equal(t, "manager DaemonReload []\nmanager DaemonReload []\nunit DaemonReload [a.service]\nunit DaemonReload [b.socket]\n", string(got))
}

// runOnClock runs step with c on its fake clock clk, stepping the clock
// whenever the run waits on it, until the run ends or stop says to stop
// stepping (nil: never).
func runOnClock(t *testing.T, ctx context.Context, c *Commands, clk *clocktesting.FakeClock, step Step, stop func() bool) runResult {
	t.Helper()
	done := make(chan runResult, 1)
	go func() {
		out, err := c.Run(ctx, step)
		done <- runResult{out, err}
	}()
	limit := time.After(10 * time.Second)
	for {
		select {
		case r := <-done:
			return r
		case <-limit:
			t.Fatal("the step did not end")
		case <-time.After(time.Millisecond):
			if clk.HasWaiters() && (stop == nil || !stop()) {
				clk.Step(200 * time.Millisecond)
			}
		}
	}
}

// A reload or a daemon-reload the command only queues (systemctl
// --no-block) shows a moment later: the agent looks again on its clock
// until Settle has passed. The reads, not the test's timing, advance the
// stand-in's state.
func TestCommandsReloadsSettle(t *testing.T) {
	for _, tc := range []struct {
		name      string
		step      Step
		c         func(reads string) Commands
		want      string
		wantReads string
	}{
		{name: "a reload: the unit goes through reloading, then is active",
			step: Step{Action: lullv1alpha1.ActionStatus{Type: lullv1alpha1.StepReloadService, Unit: "chronyd"}},
			c: func(reads string) Commands {
				// Read 1 before the command, 2 just after it (nothing
				// yet), 3 reloading, 4 active after the reload.
				return Commands{UnitState: fmt.Sprintf(`n=$(( $(cat %[1]s 2>/dev/null || echo 0) + 1 )); echo $n > %[1]s; echo "Id=$LULL_UNIT"; echo InvocationID=1
case $n in 1|2) echo StateChangeTimestampMonotonic=100; echo ActiveState=active;; 3) echo StateChangeTimestampMonotonic=200; echo ActiveState=reloading;;
*) echo StateChangeTimestampMonotonic=300; echo ActiveState=active; echo ReloadResult=success;; esac`, reads)}
			},
			want: "unit chronyd reloaded (ReloadResult success, InvocationID 1 unchanged) and active", wantReads: "4"},
		{name: "a daemon-reload: systemd reloads, then the unit no longer needs it",
			step: Step{Action: lullv1alpha1.ActionStatus{Type: lullv1alpha1.StepDaemonReload}, Units: []string{"chronyd.service"}},
			c: func(reads string) Commands {
				// Manager read 1 before the command, 2 just after it
				// (not yet), 3 and on reloaded; the unit needs the
				// reload at its first read, not at its second.
				return Commands{
					ManagerState: fmt.Sprintf(`n=$(( $(cat %[1]s 2>/dev/null || echo 0) + 1 )); echo $n > %[1]s
test $n -le 2 && echo UnitsLoadTimestampMonotonic=100 || echo UnitsLoadTimestampMonotonic=200`, reads),
					UnitState: fmt.Sprintf(`n=$(( $(cat %[1]s.unit 2>/dev/null || echo 0) + 1 )); echo $n > %[1]s.unit; echo ActiveState=active
test $n = 1 && echo NeedDaemonReload=yes || echo NeedDaemonReload=no`, reads)}
			},
			want: "systemd reloaded its units (UnitsLoadTimestampMonotonic 200, was 100); no changed unit needs a daemon-reload (chronyd.service)", wantReads: "4"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			reads := filepath.Join(t.TempDir(), "reads")
			clk := clocktesting.NewFakeClock(t0)
			c := tc.c(reads)
			c.HostRoot, c.Reload, c.DaemonReload, c.Clock, c.Settle = "/", "true", "true", clk, time.Minute
			r := runOnClock(t, context.Background(), &c, clk, tc.step, nil)
			require.NoError(t, r.err)
			require.Equal(t, tc.want, r.out)
			n, err := os.ReadFile(reads)
			require.NoError(t, err)
			require.Equal(t, tc.wantReads, strings.TrimSpace(string(n)), "read again until the effect showed")
			require.Less(t, clk.Since(t0), c.Settle, "within the settle time")
		})
	}
}

// A reload or a daemon-reload whose effect has not shown when the step's
// context ends (its deadline) ends at once: the step has timed out.
func TestCommandsReloadsEndWithTheirContext(t *testing.T) {
	for _, tc := range []struct {
		name string
		step Step
		c    func(u agenttest.Unit) Commands
	}{
		{name: "a reload", step: Step{Action: lullv1alpha1.ActionStatus{Type: lullv1alpha1.StepReloadService, Unit: "chronyd"}},
			c: func(u agenttest.Unit) Commands { return Commands{Reload: "echo queued", UnitState: u.State} }},
		{name: "a daemon-reload", step: Step{Action: lullv1alpha1.ActionStatus{Type: lullv1alpha1.StepDaemonReload}, Units: []string{"chronyd.service"}},
			c: func(u agenttest.Unit) Commands {
				return Commands{DaemonReload: "echo queued", ManagerState: u.ManagerState, UnitState: u.State}
			}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			clk := clocktesting.NewFakeClock(t0)
			c := tc.c(agenttest.NewUnit(t.TempDir()))
			c.HostRoot, c.Clock, c.Settle = "/", clk, time.Hour
			ctx, cancel := context.WithCancel(context.Background())
			defer cancel()
			// The agent's deadline ends the context after a few looks.
			r := runOnClock(t, ctx, &c, clk, tc.step, func() bool {
				if clk.Since(t0) >= time.Second {
					cancel()
					return true
				}
				return false
			})
			require.ErrorIs(t, r.err, context.Canceled)
			require.Equal(t, "queued", r.out)
			require.Equal(t, lullv1alpha1.ActionTimedOut, outcome(ctx, tc.step.Action.Type, r.err))
		})
	}
}

// The agent hands a step the units its request changes (its decision's
// changes of kind unit, each once), and a DaemonReload or ReloadService
// that fails falls back to a reboot, as a RestartService does.
func TestReloadStepsOnTheAgent(t *testing.T) {
	for _, tc := range []struct {
		step      lullv1alpha1.ActionStatus
		wantEvent string
	}{
		{step: step(lullv1alpha1.StepDaemonReload, "", 5*time.Minute, lullv1alpha1.ActionPending),
			wantEvent: "Warning ActionFailed DaemonReload Failed: it did not; last output: out; lull falls back to a reboot"},
		{step: step(lullv1alpha1.StepReloadService, "chronyd.service", 5*time.Minute, lullv1alpha1.ActionPending),
			wantEvent: "Warning ActionFailed ReloadService chronyd.service Failed: it did not; last output: out; lull falls back to a reboot"},
	} {
		t.Run(string(tc.step.Type), func(t *testing.T) {
			nm := request(tc.step)
			nm.Status.Decision = &lullv1alpha1.Decision{Action: tc.step.Type, Changes: []lullv1alpha1.ChangeDecision{
				{Kind: lullv1alpha1.ChangeFile, Name: "/etc/systemd/system/chronyd.service.d/lull.conf", Rule: "r"},
				{Kind: lullv1alpha1.ChangeUnit, Name: "chronyd.service", Rule: "r"},
				{Kind: lullv1alpha1.ChangeUnit, Name: "foo.socket", Rule: "r"},
				{Kind: lullv1alpha1.ChangeUnit, Name: "chronyd.service", Rule: "other"},
			}}
			e := newEnv(t, nm, drainerLease(), node(bootID))
			e.exec.run = func(ctx context.Context, a lullv1alpha1.ActionStatus) (string, error) {
				return "out", errors.New("it did not")
			}

			_, err := e.reconcile(e.ctx, testNode)
			require.NoError(t, err)
			require.Len(t, e.exec.steps, 1)
			require.Equal(t, []string{"chronyd.service", "foo.socket"}, e.exec.steps[0].Units)
			require.Equal(t, []string{"Normal ActionStarted lull-agent started " + tc.step.Label(), tc.wantEvent}, e.events())
		})
	}
}

// Every host step kind of the catalog has a runner here, but WriteFiles,
// the writer's (run.go); no runner is for a kind the catalog does not
// call a host step.
func TestEveryHostStepKindHasARunner(t *testing.T) {
	for _, a := range lullv1alpha1.StepKinds() {
		_, ok := runners[a]
		switch {
		case a == lullv1alpha1.StepWriteFiles:
			require.False(t, ok, "WriteFiles is the writer's")
		case a.HostStep():
			require.True(t, ok, "host step %s has no runner in lull-agent (agent/exec.go: runners)", a)
		default:
			require.False(t, ok, "%s is not a host step", a)
		}
	}
	for a := range runners {
		_, ok := a.Kind()
		require.True(t, ok, "runner for %s, a kind not in the catalog", a)
	}
}
