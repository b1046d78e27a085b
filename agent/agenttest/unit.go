// Package agenttest has what tests of lull-agent's host steps share.
package agenttest

import (
	"fmt"
	"path/filepath"
	"strings"
)

// Unit stands in for systemd where there is none, with shell commands
// for lull-agent's flags: one unit, and the manager, whose state lives in
// files under a directory, so that the agent's checks of a step's effect
// see it happen or not. Every unit name ($LULL_UNIT) is the same unit:
// one unit per directory.
type Unit struct {
	// Restart restarts the unit: its InvocationID (1 at first) goes up by
	// one, and so does its StateChangeTimestampMonotonic (1 at first).
	Restart string
	// Reload reloads it: its StateChangeTimestampMonotonic goes up by
	// one (it went through reloading), its InvocationID stays, and its
	// ReloadResult is success.
	Reload string
	// DaemonReload has systemd load its units again: the manager's
	// UnitsLoadTimestampMonotonic (1 at first) goes up by one and the unit
	// no longer needs a daemon-reload.
	DaemonReload string
	// EditUnitFile changes the unit's file on disk: it needs a
	// daemon-reload (NeedDaemonReload=yes) until the next DaemonReload.
	EditUnitFile string
	// State prints the unit's Id ($LULL_UNIT), InvocationID, ActiveState (always active),
	// NeedDaemonReload, ReloadResult and StateChangeTimestampMonotonic
	// as `systemctl show` does, for --unit-state-command.
	State string
	// ManagerState prints the manager's UnitsLoadTimestampMonotonic as
	// `systemctl show` does, for --manager-state-command.
	ManagerState string
}

// NewUnit is a Unit whose state lives under dir.
func NewUnit(dir string) Unit {
	invocation, changed := filepath.Join(dir, "invocation"), filepath.Join(dir, "state-change")
	loaded, stale := filepath.Join(dir, "units-load"), filepath.Join(dir, "need-daemon-reload")
	read := func(f string) string { return fmt.Sprintf(`$(cat %s 2>/dev/null || echo 1)`, quote(f)) }
	bump := func(f string) string { return fmt.Sprintf(`echo $(( %s + 1 )) > %s`, read(f), quote(f)) }
	return Unit{
		Restart:      bump(invocation) + "; " + bump(changed),
		Reload:       bump(changed),
		DaemonReload: bump(loaded) + "; rm -f " + quote(stale),
		EditUnitFile: "touch " + quote(stale),
		State: fmt.Sprintf(`echo "Id=$LULL_UNIT"; echo "InvocationID=%s"; echo ActiveState=active; echo "NeedDaemonReload=$(test -e %s && echo yes || echo no)"; `+
			`echo ReloadResult=success; echo "StateChangeTimestampMonotonic=%s"`, read(invocation), quote(stale), read(changed)),
		ManagerState: fmt.Sprintf(`echo "UnitsLoadTimestampMonotonic=%s"`, read(loaded)),
	}
}

// quote is path as one shell word (a test's directory may hold any
// character but a NUL).
func quote(path string) string { return "'" + strings.ReplaceAll(path, "'", `'\''`) + "'" }

// FakeUnit is NewUnit(dir)'s Restart and State: a unit whose
// InvocationID, which lull-agent checks after a RestartService, changes
// only when restart restarts it.
func FakeUnit(dir string) (restart, state string) {
	u := NewUnit(dir)
	return u.Restart, u.State
}
