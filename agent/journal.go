package agent

import (
	"context"
	"encoding/json"
	"fmt"
	"sort"
	"strings"

	lullv1alpha1 "lull.dev/lull/api/v1alpha1"
)

// What systemd's journal says of a unit's runs, read with the UnitJournal
// command (`journalctl --output=json _PID=1 UNIT=…`). systemd unloads a
// oneshot service that ran to its end and that nothing references: a
// `systemctl show` after its restart loads it afresh and prints a unit that
// never ran (no InvocationID, every timestamp 0, Result=success). Its run is
// seen only in the entries systemd (PID 1) wrote of it, each tagged with
// the run's INVOCATION_ID.

// Message IDs of the entries systemd writes of a unit's run
// (systemd/sd-messages.h).
const (
	msgUnitSuccess       = "7ad2d189f7e94e70a38c781354912448" // SD_MESSAGE_UNIT_SUCCESS: "Deactivated successfully."
	msgUnitFailureResult = "d9b373ed55a64feb8242e02dbe79a49c" // SD_MESSAGE_UNIT_FAILURE_RESULT: "Failed with result …"
	msgUnitStarted       = "39f53479d3a045ac8e11786248231fbf" // SD_MESSAGE_UNIT_STARTED: "Finished …" (JOB_RESULT=done)
	msgUnitFailed        = "be02cf6855d2428ba40df7e9d022f03d" // SD_MESSAGE_UNIT_FAILED: "Failed to start …" (JOB_RESULT=failed)
)

// unitRun is what the journal says of one run of a unit.
type unitRun struct {
	// succeeded: systemd wrote that the run ended successfully, or that
	// its start job is done (for a oneshot, that its ExecStart exited 0).
	succeeded bool
	// failed is what systemd wrote of a run that failed; empty if none.
	failed string
}

// unitRuns are a unit's runs the journal mentions, by INVOCATION_ID.
type unitRuns map[string]unitRun

// parseJournal reads journalctl's --output=json lines (one object per
// entry). Lines that are not such an object are skipped: what cannot be
// read proves no run.
func parseJournal(out string) unitRuns {
	runs := unitRuns{}
	for _, line := range strings.Split(out, "\n") {
		var e map[string]any
		if json.Unmarshal([]byte(strings.TrimSpace(line)), &e) != nil {
			continue
		}
		field := func(k string) string { s, _ := e[k].(string); return s }
		id := field("INVOCATION_ID")
		if id == "" {
			continue
		}
		r := runs[id]
		switch msg := field("MESSAGE_ID"); {
		case msg == msgUnitSuccess, msg == msgUnitStarted && field("JOB_RESULT") == "done":
			r.succeeded = true
		case msg == msgUnitFailureResult, msg == msgUnitFailed, field("JOB_RESULT") != "" && field("JOB_RESULT") != "done":
			r.failed = field("MESSAGE")
			if r.failed == "" {
				r.failed = "JOB_RESULT=" + field("JOB_RESULT")
			}
		}
		runs[id] = r
	}
	return runs
}

// since are the runs in runs that were not in before: the runs that
// started after before was read, in the order of their IDs.
func (runs unitRuns) since(before unitRuns) []string {
	var ids []string
	for id := range runs {
		if _, ok := before[id]; !ok {
			ids = append(ids, id)
		}
	}
	sort.Strings(ids)
	return ids
}

// ranAgain judges a oneshot's restart from its runs in the journal: a run
// that was not there before and that failed is an error; one that
// succeeded is the restart done (its message); neither is not yet.
func (runs unitRuns) ranAgain(unit string, before unitRuns) (string, error) {
	var done string
	for _, id := range runs.since(before) {
		r := runs[id]
		if r.failed != "" {
			return "", fmt.Errorf("oneshot unit %s ran again (invocation %s) but failed: %s", unit, id, r.failed)
		}
		if r.succeeded && done == "" {
			done = fmt.Sprintf("oneshot unit %s ran again (invocation %s, in systemd's journal) and succeeded", unit, id)
		}
	}
	return done, nil
}

// unitJournal runs UnitJournal for unit and reads its output; nil when
// the agent has no such command.
func (c *Commands) unitJournal(ctx context.Context, a lullv1alpha1.ActionStatus, unit string) (unitRuns, error) {
	if c.UnitJournal == "" {
		return nil, nil
	}
	out, err := c.output(ctx, a.Type, unit, c.UnitJournal)
	if err != nil {
		return nil, fmt.Errorf("reading what systemd's journal says of unit %s: %w", unit, err)
	}
	return parseJournal(out), nil
}
