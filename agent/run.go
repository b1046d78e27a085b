package agent

import (
	"context"
	"fmt"
	"strings"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/klog/v2"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/reconcile"

	lullv1alpha1 "lull.dev/lull/api/v1alpha1"
)

// run records step i Running (a write the API server orders against the
// drainer's: a conflict means start over from the newer request), carries
// it out and records how it ended.
func (a *Agent) run(ctx context.Context, logger klog.Logger, nm *lullv1alpha1.NodeMaintenance, i int) (reconcile.Result, error) {
	now := a.Clock.Now()
	if ok, res, err := a.claim(ctx, logger, nm, i, now); !ok {
		return res, err
	}
	st := &nm.Status.Actions[i]
	r, err := a.execute(ctx, logger, nm, st, a.stepDeadline(st, now))
	if err != nil {
		return reconcile.Result{}, err
	}
	return a.conclude(ctx, logger, nm, i, r)
}

// claim makes step i this run's: a pending step is recorded Running
// (start), a Running one is run again only when it should be (resume).
// Unless ok, the reconcile ends there with res and err.
func (a *Agent) claim(ctx context.Context, logger klog.Logger, nm *lullv1alpha1.NodeMaintenance, i int, now time.Time) (ok bool, res reconcile.Result, err error) {
	if nm.Status.Actions[i].State == lullv1alpha1.ActionPending {
		return a.start(ctx, nm, i, now)
	}
	ok, err = a.resume(ctx, logger, nm, &nm.Status.Actions[i])
	if !ok || err != nil || nm.Status.Actions[i].Type != lullv1alpha1.StepWriteFiles {
		return ok, reconcile.Result{}, err
	}
	return a.restartWrite(ctx, nm, i, now)
}

// restartWrite starts again a WriteFiles an earlier agent did not finish,
// with its whole timeout: the drainer held it while the agent was away (a
// set may be half on disk until recovery rolled it back or forward), and
// the new start, recorded before anything is written, says what recovery
// did. One resumed already, whose agent died in it again before the set
// was written (a crashloop in the write itself: OOM, a hang the liveness
// probe kills), fails instead — a third start would reset its timeout
// forever — with the node's files as recovery put them back.
func (a *Agent) restartWrite(ctx context.Context, nm *lullv1alpha1.NodeMaintenance, i int, now time.Time) (bool, reconcile.Result, error) {
	st := &nm.Status.Actions[i]
	recovered, rolledForward := a.resumedWrite()
	if strings.HasPrefix(st.Message, resumedPrefix) && !rolledForward {
		res, err := a.record(ctx, nm, i, lullv1alpha1.ActionFailed, fmt.Sprintf(
			"lull-agent died during this WriteFiles again after it was resumed once (%s); %s: the node's files are as they were", st.Message, recovered))
		return false, res, err
	}
	st.StartedAt, st.Message = &metav1.Time{Time: now}, recovered
	return a.saveStart(ctx, nm, st, "lull-agent "+st.Message+": "+st.Label()+" starts again")
}

// start records pending step i Running, with its start (now) and, for a
// reboot, the node's boot ID, by which the drainer sees the node come
// back. A reboot of a node that reports no boot ID fails instead; a write
// that conflicts with the drainer's starts over from the newer request.
func (a *Agent) start(ctx context.Context, nm *lullv1alpha1.NodeMaintenance, i int, now time.Time) (bool, reconcile.Result, error) {
	st := &nm.Status.Actions[i]
	st.State, st.StartedAt = lullv1alpha1.ActionRunning, &metav1.Time{Time: now}
	if st.Type == lullv1alpha1.StepReboot {
		var node corev1.Node
		if err := a.Client.Get(ctx, types.NamespacedName{Name: a.Node}, &node); err != nil {
			return false, reconcile.Result{}, fmt.Errorf("reading node %s: %w", a.Node, err)
		}
		st.BootID = node.Status.NodeInfo.BootID
		if st.BootID == "" {
			// Without a boot ID nobody can tell the node came back:
			// a reboot would stay Running until its timeout.
			res, err := a.record(ctx, nm, i, lullv1alpha1.ActionFailed,
				fmt.Sprintf("node %s reports no boot ID (status.nodeInfo.bootID), so its return after a reboot cannot be seen; not rebooting", a.Node))
			return false, res, err
		}
	}
	return a.saveStart(ctx, nm, st, "lull-agent started "+st.Label())
}

// saveStart records step st's start (a write the API server orders
// against the drainer's: a conflict starts over from the newer request)
// and raises event.
func (a *Agent) saveStart(ctx context.Context, nm *lullv1alpha1.NodeMaintenance, st *lullv1alpha1.ActionStatus, event string) (bool, reconcile.Result, error) {
	if err := a.Client.Status().Update(ctx, nm); err != nil {
		if apierrors.IsConflict(err) {
			return false, reconcile.Result{Requeue: true}, nil //nolint:staticcheck // SA1019: retried with the queue's rate-limited backoff, which RequeueAfter (a fixed delay) does not give
		}
		return false, reconcile.Result{}, fmt.Errorf("recording %s started: %w", st.Label(), err)
	}
	a.event(nm, corev1.EventTypeNormal, ReasonActionStarted, event)
	return true, reconcile.Result{}, nil
}

// resume says whether step st, found Running, is to be run again: not a
// reboot or power-off this process issued, nor a reboot that has happened,
// nor a step whose end the cache has not caught up with yet.
func (a *Agent) resume(ctx context.Context, logger klog.Logger, nm *lullv1alpha1.NodeMaintenance, st *lullv1alpha1.ActionStatus) (bool, error) {
	if st.Type.TakesNodeDown() && a.wasIssued(issueKey(nm, st)) {
		// Issued by this process: the node is going down, or back.
		return false, nil
	}
	if st.Type == lullv1alpha1.StepReboot && st.BootID != "" {
		// A reboot stays Running until the drainer sees the node back:
		// one whose node reports another boot ID has happened, and
		// issuing it again would reboot the node that just came back.
		var node corev1.Node
		if err := a.Client.Get(ctx, types.NamespacedName{Name: a.Node}, &node); err != nil {
			return false, fmt.Errorf("reading node %s: %w", a.Node, err)
		}
		if node.Status.NodeInfo.BootID != st.BootID {
			logger.Info("The node has rebooted: the drainer judges its return", "bootID", node.Status.NodeInfo.BootID, "was", st.BootID)
			return false, nil
		}
	}
	// Running in the cache: an agent that stopped mid-step, or this
	// agent's own step, ended a moment ago, whose end the cache has
	// not caught up with yet. Only the API server can tell: a step
	// run again here would restart a unit twice.
	fresh := &lullv1alpha1.NodeMaintenance{}
	if err := a.Live.Get(ctx, types.NamespacedName{Name: nm.Name}, fresh); err != nil {
		return false, client.IgnoreNotFound(err)
	}
	if fresh.ResourceVersion != nm.ResourceVersion {
		// The cache is behind; its update brings the request back.
		return false, nil
	}
	logger.Info("Resuming a step that was running when the agent stopped", "step", st.Label())
	return true, nil
}

// stepDeadline is when step st must have ended: its start plus its
// timeout or, when its plan gives none, now plus the agent's default.
func (a *Agent) stepDeadline(st *lullv1alpha1.ActionStatus, now time.Time) time.Time {
	if st.Timeout.Duration <= 0 {
		return now.Add(a.defaultStepTimeout())
	}
	return st.StartedAt.Add(st.Timeout.Duration)
}

// timeoutOf is the time step st is given: its plan's timeout, or the
// agent's default when the plan gives none.
func (a *Agent) timeoutOf(st *lullv1alpha1.ActionStatus) time.Duration {
	if st.Timeout.Duration <= 0 {
		return a.defaultStepTimeout()
	}
	return st.Timeout.Duration
}

// defaultStepTimeout is a.DefaultStepTimeout, or DefaultStepTimeout when
// that is not set.
func (a *Agent) defaultStepTimeout() time.Duration {
	if a.DefaultStepTimeout <= 0 {
		return DefaultStepTimeout
	}
	return a.DefaultStepTimeout
}

// ran is how a step's run ended: what it printed last, its error, and the
// state that leaves the step in.
type ran struct {
	out    string
	err    error
	result lullv1alpha1.ActionState
}

// execute runs step st of nm until it returns or its deadline passes, and
// counts its result. An error is the agent stopping (ctx ending, not the
// step's deadline): the step stays Running, and the next agent on the node
// runs it again.
func (a *Agent) execute(ctx context.Context, logger klog.Logger, nm *lullv1alpha1.NodeMaintenance, st *lullv1alpha1.ActionStatus, deadline time.Time) (ran, error) {
	runCtx, cancel := a.deadline(ctx, deadline)
	defer cancel()
	logger.Info("Running", "step", st.Label(), "deadline", deadline)
	started := a.Clock.Now()
	var r ran
	if st.Type == lullv1alpha1.StepWriteFiles {
		r.out, r.err = a.writeFiles(runCtx, nm)
	} else {
		r.out, r.err = a.Exec.Run(runCtx, Step{Action: *st, Units: changedUnits(nm)})
	}
	if ctx.Err() != nil {
		return ran{}, ctx.Err()
	}
	r.result = outcome(runCtx, st.Type, r.err)
	if a.Metrics != nil {
		a.Metrics.observe(st.Type, r.result, a.Clock.Since(started))
	}
	return r, nil
}

// conclude records how step i's run ended; a reboot or power-off issued
// stays Running, remembered as issued by this process: the drainer sees
// the node come back, or stay down.
func (a *Agent) conclude(ctx context.Context, logger klog.Logger, nm *lullv1alpha1.NodeMaintenance, i int, r ran) (reconcile.Result, error) {
	st := &nm.Status.Actions[i]
	if r.result == lullv1alpha1.ActionRunning {
		a.markIssued(issueKey(nm, st))
		logger.Info("Issued", "step", st.Label(), "output", r.out)
		return reconcile.Result{}, nil
	}
	return a.record(ctx, nm, i, r.result, message(r.out, r.err, r.result, a.timeoutOf(st)))
}

// changedUnits are the units nm changes (its decision's changes of kind
// unit), each once: a DaemonReload is done when none needs one any more.
func changedUnits(nm *lullv1alpha1.NodeMaintenance) []string {
	if nm.Status.Decision == nil {
		return nil
	}
	var units []string
	seen := map[string]bool{}
	for _, c := range nm.Status.Decision.Changes {
		if c.Kind == lullv1alpha1.ChangeUnit && c.Name != "" && !seen[c.Name] {
			seen[c.Name] = true
			units = append(units, c.Name)
		}
	}
	return units
}

// deadline bounds a step by the agent's clock: the context ends when the
// step's timeout has passed.
func (a *Agent) deadline(ctx context.Context, at time.Time) (context.Context, context.CancelFunc) {
	ctx, cancel := context.WithCancel(ctx)
	left := at.Sub(a.Clock.Now())
	if left <= 0 {
		cancel()
		return ctx, cancel
	}
	t := a.Clock.NewTimer(left)
	go func() {
		select {
		case <-t.C():
			cancel()
		case <-ctx.Done():
			t.Stop()
		}
	}()
	return ctx, cancel
}
