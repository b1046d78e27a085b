// Package agenttest has what tests of lull-agent's host steps share.
package agenttest

import (
	"fmt"
	"path/filepath"
)

// FakeUnit stands in for systemd where there is none: a unit whose
// InvocationID (1 at first) lives in a file under dir, so that a
// RestartService, which lull-agent checks by the unit's InvocationID, can
// be seen to happen or not. Restart is a command that restarts it (the ID
// goes up by one); State prints its InvocationID and ActiveState as
// `systemctl show` does, for --unit-state-command. Every unit shares the
// file: one unit per dir.
func FakeUnit(dir string) (restart, state string) {
	f := filepath.Join(dir, "invocation")
	return fmt.Sprintf(`echo $(( $(cat %[1]s 2>/dev/null || echo 1) + 1 )) > %[1]s`, f),
		fmt.Sprintf(`echo "InvocationID=$(cat %[1]s 2>/dev/null || echo 1)"; echo ActiveState=active`, f)
}
