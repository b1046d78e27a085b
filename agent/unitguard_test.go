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

	lullv1alpha1 "lull.dev/lull/api/v1alpha1"
)

// A restart or reload is judged by what systemd says the unit is and does
// (issue 43, finding 1): an alias of a reboot, a unit that reboots or
// powers off when it succeeds, fails or times out, one that pulls in a
// shutdown target or a power-off service, are refused; so is a unit the
// state command does not name. An ordinary unit (whose Conflicts=
// shutdown.target every service has) is not.
func TestGuardUnit(t *testing.T) {
	restart := lullv1alpha1.ActionStatus{Type: lullv1alpha1.StepRestartService, Unit: "chronyd"}
	ok := "Id=chronyd.service\nNames=chronyd.service\nSuccessAction=none\nFailureAction=none\nJobTimeoutAction=none\nStartLimitAction=none\n" +
		"Requires=sysinit.target system.slice\nWants=network-online.target\nConflicts=shutdown.target\n"
	require.NoError(t, guardUnit(restart, parseProps(ok)))
	for name, tc := range map[string]struct{ state, want string }{
		"no Id":                       {"InvocationID=1\nActiveState=active\n", "printed no Id"},
		"the reboot service by alias": {"Id=systemd-reboot.service\nNames=systemd-reboot.service\n", "it is systemd-reboot.service"},
		"an alias of a target":        {"Id=lull-x.service\nNames=lull-x.service ctrl-alt-del.target\n", "it is ctrl-alt-del.target"},
		"exit":                        {"Id=systemd-exit.service\n", "it is systemd-exit.service"},
		"reboot on success":           {"Id=x.service\nSuccessAction=reboot-force\n", "SuccessAction is reboot-force"},
		"power off on failure":        {"Id=x.service\nFailureAction=poweroff\n", "FailureAction is poweroff"},
		"reboot on a timeout":         {"Id=x.service\nJobTimeoutAction=reboot\n", "JobTimeoutAction is reboot"},
		"requires shutdown":           {"Id=x.service\nRequires=shutdown.target umount.target\n", "its Requires names shutdown.target"},
		"wants a suspend":             {"Id=x.service\nWants=systemd-suspend.service\n", "its Wants names systemd-suspend.service"},
		"on failure, power off":       {"Id=x.service\nOnFailure=poweroff.target\n", "its OnFailure names poweroff.target"},
	} {
		t.Run(name, func(t *testing.T) {
			err := guardUnit(restart, parseProps(tc.state))
			require.ErrorContains(t, err, tc.want)
			require.ErrorContains(t, err, "refusing to restart unit chronyd")
		})
	}
}

// The refusal comes before the command: the unit is never restarted.
func TestRestartRefusedBeforeTheCommand(t *testing.T) {
	ran := filepath.Join(t.TempDir(), "ran")
	c := Commands{HostRoot: "/", Restart: "touch " + ran,
		UnitState: `echo "Id=$LULL_UNIT"; echo InvocationID=1; echo ActiveState=active; echo SuccessAction=reboot-force`}
	_, err := c.Run(context.Background(), Step{Action: lullv1alpha1.ActionStatus{Type: lullv1alpha1.StepRestartService, Unit: "lull-sneaky.service"}})
	require.ErrorContains(t, err, "SuccessAction is reboot-force")
	require.NoFileExists(t, ran, "restarted anyway")
}

// The shipped unit-state command prints every property the guard reads,
// in the agent's defaults, the install's DaemonSet and the chart alike: a
// property left out would silently not be checked.
func TestUnitStateCommandPrintsTheGuardsProperties(t *testing.T) {
	def := NewOptions().Commands.UnitState
	for _, f := range []string{"../manifests/agent/daemonset.yaml", "../charts/lull/values.yaml"} {
		b, err := os.ReadFile(f)
		require.NoError(t, err)
		require.Contains(t, string(b), def, "%s ships the agent's default unit-state command", f)
		require.Contains(t, string(b), NewOptions().Commands.UnitJournal, "%s ships the agent's default unit-journal command", f)
	}
	props := strings.TrimPrefix(strings.Fields(def)[2], "--property=")
	for _, p := range UnitGuardProperties {
		require.Contains(t, strings.Split(props, ","), p, "the default unit-state command prints %s", p)
	}
}

// What "restarted" means by the kind of unit (issue 44, finding 6): a
// oneshot service without RemainAfterExit is inactive once it ran, so
// running again with success is its restart; a unit whose file was
// removed, and that no longer runs, has nothing to restart. Neither falls
// back to a reboot.
func TestRestartOneshotAndRemovedUnits(t *testing.T) {
	dir := t.TempDir()
	n := filepath.Join(dir, "n")
	require.NoError(t, os.WriteFile(n, []byte("1"), 0o644))
	oneshot := Commands{HostRoot: "/", Restart: "echo 2 > " + n,
		// systemd clears a finished oneshot's InvocationID: its state
		// change time is what moves.
		UnitState: `echo "Id=$LULL_UNIT"; echo Type=oneshot; echo InvocationID=; echo "StateChangeTimestampMonotonic=$(cat ` + n + `)"; echo ActiveState=inactive; echo Result=success; echo LoadState=loaded`}
	msg, err := oneshot.Run(context.Background(), Step{Action: lullv1alpha1.ActionStatus{Type: lullv1alpha1.StepRestartService, Unit: "lull-once.service"}})
	require.NoError(t, err)
	require.Contains(t, msg, "oneshot unit lull-once.service ran again (state changed at 2, was 1) and succeeded")

	failed := oneshot
	failed.Restart = "echo 3 > " + n
	failed.UnitState = `echo "Id=$LULL_UNIT"; echo Type=oneshot; echo "InvocationID=$(cat ` + n + `)"; echo "StateChangeTimestampMonotonic=$(cat ` + n + `)"; echo ActiveState=failed; echo Result=exit-code; echo LoadState=loaded`
	_, err = failed.Run(context.Background(), Step{Action: lullv1alpha1.ActionStatus{Type: lullv1alpha1.StepRestartService, Unit: "lull-once.service"}})
	require.ErrorContains(t, err, "but failed", "a oneshot that failed is a failed restart")

	ran := filepath.Join(dir, "ran")
	removed := Commands{HostRoot: "/", Restart: "touch " + ran, Settle: 300 * time.Millisecond,
		UnitState: `echo "Id=$LULL_UNIT"; echo InvocationID=; echo ActiveState=inactive; echo LoadState=not-found`}
	msg, err = removed.Run(context.Background(), Step{Action: lullv1alpha1.ActionStatus{Type: lullv1alpha1.StepRestartService, Unit: "lull-gone.service"},
		Units: []string{"lull-gone.service"}})
	require.NoError(t, err)
	require.Contains(t, msg, "unit lull-gone.service is gone (LoadState=not-found) and not running: nothing to restart")
	require.NoFileExists(t, ran, "nothing restarted")
	_, err = removed.Run(context.Background(), Step{Action: lullv1alpha1.ActionStatus{Type: lullv1alpha1.StepRestartService, Unit: "lull-gone.service"}})
	require.Error(t, err, "a unit the request did not remove and that does not exist: a failed restart (a rule naming a unit the node lacks)")
}

// The guard walks what a start pulls in, through targets and inactive
// units, and refuses what takes the node down anywhere on the way; an
// active unit is not started again, so the walk stops there; more units
// than it reads is refused (red-team findings).
func TestGuardDepsWalk(t *testing.T) {
	run := func(t *testing.T, states map[string]string) error {
		t.Helper()
		var cases strings.Builder
		for unit, st := range states {
			cases.WriteString(unit + ") printf '" + strings.ReplaceAll(st, "\n", `\n`) + "' ;;\n")
		}
		c := Commands{HostRoot: "/", Restart: "exit 3",
			UnitState: "echo \"Id=$LULL_UNIT\"; echo InvocationID=1\ncase \"$LULL_UNIT\" in\n" + cases.String() + "*) echo ActiveState=inactive ;;\nesac"}
		_, err := c.Run(context.Background(), Step{Action: lullv1alpha1.ActionStatus{Type: lullv1alpha1.StepRestartService, Unit: "app.service"}})
		return err
	}
	err := run(t, map[string]string{
		"app.service": "ActiveState=active\nWants=app.target\n",
		"app.target":  "ActiveState=inactive\nWants=a.service\n",
		"a.service":   "ActiveState=inactive\nRequires=b.service\n",
		"b.service":   "ActiveState=inactive\nFailureAction=poweroff-force\n",
	})
	require.ErrorContains(t, err, "FailureAction is poweroff-force")
	require.ErrorContains(t, err, "app.service Wants=app.target Wants=a.service Requires=b.service")

	err = run(t, map[string]string{
		"app.service": "ActiveState=active\nWants=a.service\n",
		"a.service":   "ActiveState=active\nRequires=b.service\n",
		"b.service":   "ActiveState=inactive\nFailureAction=poweroff-force\n",
	})
	require.ErrorContains(t, err, "exit 3", "a.service is active: starting it is no job, b.service is not pulled in; the restart runs")

	many := map[string]string{"app.service": "ActiveState=active\nWants=" + func() string {
		var ws []string
		for i := range 70 {
			ws = append(ws, fmt.Sprintf("u%d.service", i))
		}
		return strings.Join(ws, " ")
	}() + "\n"}
	require.ErrorContains(t, run(t, many), "more than 64 units", "fail closed past the bound")
}

// Command words that take the machine down, however quoted.
func TestDownWord(t *testing.T) {
	for cmd, want := range map[string]string{
		`{ path=/bin/sh ; argv[]=/bin/sh -c "systemctl reboot" ; }`:                     `reboot`,
		`{ path=/usr/bin/systemctl ; argv[]=/usr/bin/systemctl start reboot.target ; }`: "reboot.target",
		`{ path=/bin/sh ; argv[]=/bin/sh -c "echo b > /proc/sysrq-trigger" ; }`:         "/proc/sysrq-trigger",
		`{ path=/usr/sbin/chronyd ; argv[]=/usr/sbin/chronyd -F 2 ; }`:                  "",
	} {
		require.Equal(t, want, downWord(cmd), cmd)
	}
}

// Targets and slices a restart reaches run nothing: a unit that
// multi-user.target requires, or that conflicts with shutdown.target, is
// restarted; one that the kubelet is part of is not.
func TestGuardUnitReach(t *testing.T) {
	restart := lullv1alpha1.ActionStatus{Type: lullv1alpha1.StepRestartService, Unit: "x"}
	require.NoError(t, guardUnit(restart, parseProps("Id=x.service\nRequiredBy=multi-user.target\nConflicts=shutdown.target\nBoundBy=x.slice\n")))
	require.ErrorContains(t, guardUnit(restart, parseProps("Id=x.service\nConsistsOf=kubelet.service\n")), "ConsistsOf names kubelet.service")
}

// journalRun is what `journalctl --output=json _PID=1 UNIT=…` printed of
// one run of a oneshot on systemd 252 (Debian 12), shortened to the fields
// lull reads: starting, deactivated successfully, start job done.
func journalRun(id string) string {
	return `{"MESSAGE":"Starting lull-once.service...","MESSAGE_ID":"7d4958e842da4a758f6c1cdc7b36dcc5","INVOCATION_ID":"` + id + `","JOB_TYPE":"start","JOB_ID":"94"}
{"MESSAGE":"lull-once.service: Deactivated successfully.","MESSAGE_ID":"7ad2d189f7e94e70a38c781354912448","INVOCATION_ID":"` + id + `"}
{"MESSAGE":"Finished lull-once.service.","MESSAGE_ID":"39f53479d3a045ac8e11786248231fbf","INVOCATION_ID":"` + id + `","JOB_TYPE":"start","JOB_RESULT":"done","JOB_ID":"94"}
`
}

// unloadedOneshot is what `systemctl show` prints, after its Id, of a
// oneshot systemd unloaded once it ran: a unit that never ran.
const unloadedOneshot = `echo Type=oneshot; echo Result=success; echo LoadState=loaded; echo ActiveState=inactive; echo StateChangeTimestampMonotonic=0; echo InvocationID=`

// oneshotJournal writes, in a directory of its own, a journal holding
// one run of lull-once.service and, beside it, the entries of another
// run (again), which a restart command appends; it returns the three
// paths.
func oneshotJournal(t *testing.T) (dir, journal, again string) {
	t.Helper()
	dir = t.TempDir()
	journal, again = filepath.Join(dir, "journal"), filepath.Join(dir, "again")
	require.NoError(t, os.WriteFile(journal, []byte(journalRun("aea6aa64ac60427ca51dc15ccc4710da")), 0o644))
	require.NoError(t, os.WriteFile(again, []byte(journalRun("d10d1d3f7bfe48a3bf9cd0339521ffeb")), 0o644))
	return dir, journal, again
}

// systemd unloads a oneshot that ran to its end and that nothing
// references: `systemctl show` after its restart prints a unit that never
// ran (no InvocationID, every timestamp 0, Result=success), as on
// real-node-1's systemd 252. Its run is seen in the journal only: a new
// invocation that succeeded is the restart done, one that failed is a
// failed restart, none is a restart that did not happen — and without a
// journal command it cannot be seen at all.
func TestRestartOneshotSystemdUnloaded(t *testing.T) {
	dir, journal, again := oneshotJournal(t)
	unloaded := `echo "Id=$LULL_UNIT"; ` + unloadedOneshot
	step := Step{Action: lullv1alpha1.ActionStatus{Type: lullv1alpha1.StepRestartService, Unit: "lull-once.service"}}
	c := Commands{HostRoot: "/", Settle: 300 * time.Millisecond, UnitState: unloaded, UnitJournal: "cat " + journal,
		Restart: "cat " + again + " >> " + journal}

	msg, err := c.Run(context.Background(), step)
	require.NoError(t, err)
	require.Contains(t, msg, "oneshot unit lull-once.service ran again (invocation d10d1d3f7bfe48a3bf9cd0339521ffeb, in systemd's journal) and succeeded")

	// The journal as it was: the old run is not a new one.
	c.Restart = "true"
	_, err = c.Run(context.Background(), step)
	require.ErrorContains(t, err, "true exited 0 but oneshot unit lull-once.service did not run again: neither its state")

	failed := filepath.Join(dir, "failed")
	require.NoError(t, os.WriteFile(failed, []byte(`{"MESSAGE":"Starting lull-once.service...","MESSAGE_ID":"7d4958e842da4a758f6c1cdc7b36dcc5","INVOCATION_ID":"0f","JOB_TYPE":"start"}
not json at all
{"MESSAGE":"lull-once.service: Failed with result 'exit-code'.","MESSAGE_ID":"d9b373ed55a64feb8242e02dbe79a49c","INVOCATION_ID":"0f"}
`), 0o644))
	c.Restart = "cat " + failed + " >> " + journal
	_, err = c.Run(context.Background(), step)
	require.ErrorContains(t, err, "oneshot unit lull-once.service ran again (invocation 0f) but failed: lull-once.service: Failed with result 'exit-code'.")

	c.UnitJournal = ""
	c.Restart = "true"
	_, err = c.Run(context.Background(), step)
	require.ErrorContains(t, err, "its run is seen only in the journal, and --unit-journal-command is empty")

	c.UnitJournal = "exit 3"
	_, err = c.Run(context.Background(), step)
	require.ErrorContains(t, err, "before restarting oneshot unit lull-once.service: reading what systemd's journal says of unit lull-once.service: exit 3")
}
