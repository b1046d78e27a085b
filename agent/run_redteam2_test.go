package agent

import (
	"errors"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	lullv1alpha1 "lull.dev/lull/api/v1alpha1"
	"lull.dev/lull/internal/hostfiles"
)

// Red team 2: "a step never runs forever unnoticed". Every fresh agent
// that finds a WriteFiles Running resets its StartedAt to now, with no
// bound and no memory of earlier resumes (the message is overwritten).
// An agent that dies in the write itself (OOM-killed on a large set, a
// liveness kill while a write hangs, a panic) crashloops: each new pod
// rolls the set back, claims the step with a whole new timeout and dies
// again. While CrashLoopBackOff (at most 5 min) is shorter than the
// step's timeout, the drainer only ever sees "lull-agent runs WriteFiles
// (since <a minute ago>)": never past its timeout, never AgentAway, the
// node cordoned, leased and holding its budget slot forever. A step
// already resumed once whose agent died again should end (Failed, saying
// so), not start a third time.
func TestRedteam2ResumedWriteFilesResumedForever(t *testing.T) {
	running := started(step(lullv1alpha1.StepWriteFiles, "", 10*time.Minute, lullv1alpha1.ActionRunning), t0.Add(-time.Minute), "")
	running.Message = "resumed by a new lull-agent, which found set died unfinished: rolled back (/etc/chrony.conf)"
	e := newEnv(t, request(running), drainerLease(), node(bootID))
	e.a.filesRecovered = true
	e.a.recovered = &hostfiles.Recovery{ID: "died-again", State: hostfiles.JournalRolledBack, Files: []string{"/etc/chrony.conf"}}
	e.failStatusWritesAfter(1, errors.New("the agent dies again in the write")) // keep what the claim stored
	_, _ = e.reconcile(e.ctx, testNode)
	a := e.actions()[0]
	require.False(t, a.State == lullv1alpha1.ActionRunning && a.StartedAt.Time.Equal(t0),
		"a WriteFiles whose resumed run died again starts a third time with a whole new timeout (%s): a crashlooping agent is never timed out", a.Message)
}
