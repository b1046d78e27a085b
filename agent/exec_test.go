package agent

import (
	"context"
	"fmt"
	"os"
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
	lullscheme "lull.dev/lull/pkg/scheme"
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
			out, err := tc.commands.Run(context.Background(), tc.step)
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
	out, err := c.Run(context.Background(), lullv1alpha1.ActionStatus{Type: lullv1alpha1.StepRestartService, Unit: "chronyd"})
	require.Error(t, err)
	require.Equal(t, lullv1alpha1.ActionFailed, outcome(lullv1alpha1.StepRestartService, context.Background(), err))
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
	out, err := c.Run(ctx, lullv1alpha1.ActionStatus{Type: lullv1alpha1.StepRestartService, Unit: "chronyd"})
	took := time.Since(began)

	require.Error(t, err)
	require.Less(t, took, 2*time.Second, "killed, not waited for")
	require.Equal(t, "started", out)
	require.Equal(t, lullv1alpha1.ActionTimedOut, outcome(lullv1alpha1.StepRestartService, ctx, err))
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
		out, err := e.s.Run(context.Background(), lullv1alpha1.ActionStatus{Type: lullv1alpha1.StepReboot})
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
		out, err := e.s.Run(ctx, lullv1alpha1.ActionStatus{Type: lullv1alpha1.StepReboot})
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

			out, err := e.s.Run(context.Background(), tc.step)
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
	file := func(t *testing.T, name, content string) string {
		p := filepath.Join(t.TempDir(), name)
		require.NoError(t, os.WriteFile(p, []byte(content), 0o644))
		return p
	}
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
				UnitState: fmt.Sprintf(`echo "InvocationID=$(cat %s)"; echo ActiveState=$(test -s %[1]s && echo active || echo inactive)`, f)}
		}, want: "unit chronyd restarted (InvocationID abc, was none) and active"},
		{name: "restarted but failed", c: func(t *testing.T) Commands {
			f := file(t, "id", "1")
			return Commands{HostRoot: "/", Restart: "echo 2 > " + f,
				UnitState: fmt.Sprintf(`echo "InvocationID=$(cat %s)"; test "$(cat %[1]s)" = 1 && echo ActiveState=active || echo ActiveState=failed`, f)}
		}, wantErr: "unit chronyd was restarted (InvocationID 2) but failed"},
		{name: "restarted but not active within the settle time", c: func(t *testing.T) Commands {
			f := file(t, "id", "1")
			return Commands{HostRoot: "/", Restart: "echo 2 > " + f, Settle: time.Nanosecond,
				UnitState: fmt.Sprintf(`echo "InvocationID=$(cat %s)"; test "$(cat %[1]s)" = 1 && echo ActiveState=active || echo ActiveState=activating`, f)}
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
			out, err := c.Run(context.Background(), chronyd)
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
case $n in 1|2) echo InvocationID=1; echo ActiveState=active;; 3) echo InvocationID=2; echo ActiveState=activating;; *) echo InvocationID=2; echo ActiveState=active;; esac`, reads)
	clk := clocktesting.NewFakeClock(t0)
	c := Commands{HostRoot: "/", Restart: "true", UnitState: state, Clock: clk, Settle: time.Minute}
	type result struct {
		out string
		err error
	}
	done := make(chan result, 1)
	go func() {
		out, err := c.Run(context.Background(), lullv1alpha1.ActionStatus{Type: lullv1alpha1.StepRestartService, Unit: "chronyd"})
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
