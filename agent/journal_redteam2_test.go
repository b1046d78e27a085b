package agent

import (
	"context"
	"os"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	lullv1alpha1 "lull.dev/lull/api/v1alpha1"
)

// Red team 2: the journal is queried with UNIT="$LULL_UNIT", the step's
// unit as the policy or the request spelled it. The API documents a unit
// without its type suffix ("chronyd" is chronyd.service, steps.go), and
// systemctl resolves it, but systemd writes UNIT=<its Id> in the journal,
// and a journalctl field match is exact: the journal of "lull-once" is
// empty before and after, so a oneshot named without ".service" (or by an
// alias, Names=) that ran again and succeeded is reported "did not run
// again", and the request falls back to a drain and a reboot of the node.
// The Id that systemctl show printed (Id=lull-once.service) is what the
// journal must be asked about.
func TestRedteam2OneshotJournalByUnitWithoutSuffix(t *testing.T) {
	_, journal, again := oneshotJournal(t)
	// systemctl show resolves the name; journalctl UNIT= matches the field
	// exactly, as systemd wrote it (the unit's Id).
	unloaded := `echo "Id=${LULL_UNIT%.service}.service"; ` + unloadedOneshot
	c := Commands{HostRoot: "/", Settle: 300 * time.Millisecond, UnitState: unloaded,
		UnitJournal: `if [ "$LULL_UNIT" = lull-once.service ]; then cat ` + journal + `; fi`,
		Restart:     "cat " + again + " >> " + journal}

	msg, err := c.Run(context.Background(), Step{Action: lullv1alpha1.ActionStatus{Type: lullv1alpha1.StepRestartService, Unit: "lull-once.service"}})
	require.NoError(t, err, "spelled with its suffix: seen")
	require.Contains(t, msg, "ran again")

	require.NoError(t, os.WriteFile(again, []byte(journalRun("0a0b0c0d0e0f40a0b0c0d0e0f0a0b0c0")), 0o644))
	msg, err = c.Run(context.Background(), Step{Action: lullv1alpha1.ActionStatus{Type: lullv1alpha1.StepRestartService, Unit: "lull-once"}})
	require.NoError(t, err, "the same unit spelled as the API allows (\"chronyd\"): its new, successful run is in the journal under UNIT=lull-once.service")
	require.Contains(t, msg, "ran again")
}
