// Package agent is lull-agent: one per node, it carries out the host steps
// (DaemonReload, ReloadService, RestartService, Reboot, PowerOff) of the
// NodeMaintenance of its own node, only while the drainer has put the
// request in phase Acting and only while the node's disruption lease is
// the one the request's fencing token names (docs/actions.md,
// docs/agent.md). It records each step's start, end and result in the
// request's status; the drainer decides everything else.
package agent

import (
	"context"
	"fmt"
	"sync"
	"time"

	coordinationv1 "k8s.io/api/coordination/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/tools/events"
	"k8s.io/klog/v2"
	"k8s.io/utils/clock"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/reconcile"

	lullv1alpha1 "lull.dev/lull/api/v1alpha1"
	"lull.dev/lull/lease"
)

// Event reasons on the NodeMaintenance.
const (
	ReasonActionStarted   = "ActionStarted"
	ReasonActionSucceeded = "ActionSucceeded"
	ReasonActionFailed    = "ActionFailed"
	ReasonActionTimedOut  = "ActionTimedOut"
	ReasonFenced          = "Fenced"
)

// Executor carries a host step out on the node. Run returns the last line
// of what the step printed (and, for a step whose effect is verified,
// what was seen of it); ctx ends at the step's deadline.
type Executor interface {
	Run(ctx context.Context, s Step) (string, error)
}

// Agent reconciles its node's NodeMaintenance.
type Agent struct {
	// Client reads the cache (the node's request and its node) and
	// writes the request's status.
	Client client.Client
	// Live reads the API server: the fencing check never trusts a cache.
	Live client.Reader
	// Node is the node this agent runs on.
	Node string
	// LeaseNamespace holds the node disruption leases.
	LeaseNamespace string
	// DrainerIdentity is the holder family of lull's drainer.
	DrainerIdentity string
	Exec            Executor
	Clock           clock.Clock
	Recorder        events.EventRecorder
	Metrics         *Metrics
	// Files writes a request's NodeConfig (WriteFiles); nil: this agent
	// writes no files, and such a step fails saying so.
	Files *Files

	// issued remembers the reboots this process issued (request UID and
	// the step's start): a reboot stays Running until the drainer sees the
	// node come back, and every wake-up before that (a lease renewal, the
	// node going NotReady) must not issue it again. A new process, on the
	// rebooted node or after a crash before the reboot, starts empty.
	mu            sync.Mutex
	issued        map[string]bool
	leaseObserver *lease.Observer
}

func issueKey(nm *lullv1alpha1.NodeMaintenance, st *lullv1alpha1.ActionStatus) string {
	return string(nm.UID) + "/" + st.Label() + "/" + st.StartedAt.UTC().Format(time.RFC3339Nano)
}

func (a *Agent) wasIssued(key string) bool {
	a.mu.Lock()
	defer a.mu.Unlock()
	return a.issued[key]
}

func (a *Agent) markIssued(key string) {
	a.mu.Lock()
	defer a.mu.Unlock()
	if a.issued == nil {
		a.issued = map[string]bool{}
	}
	a.issued[key] = true
}

// Reconcile runs the request's next host step when the request and the
// lease allow it.
func (a *Agent) Reconcile(ctx context.Context, req reconcile.Request) (reconcile.Result, error) {
	if req.Name != a.Node {
		return reconcile.Result{}, nil
	}
	logger := klog.FromContext(ctx).WithValues("node", a.Node)
	nm := &lullv1alpha1.NodeMaintenance{}
	if err := a.Client.Get(ctx, req.NamespacedName, nm); err != nil {
		return reconcile.Result{}, client.IgnoreNotFound(err)
	}
	if nm.Status.Phase != lullv1alpha1.PhaseActing || nm.DeletionTimestamp != nil || nm.Spec.Complete {
		return reconcile.Result{}, nil
	}
	i := lullv1alpha1.NextAction(nm.Status.Actions)
	if i < 0 || lullv1alpha1.UnhandledFailure(nm.Status.Actions) >= 0 {
		// All done, or a step failed: the drainer decides what follows
		// (a fallback reboot, or the request fails), never the next step.
		return reconcile.Result{}, nil
	}
	if why, err := a.fenced(ctx, nm); err != nil || why != "" {
		if why != "" {
			logger.Info("Not acting: the lease does not match the request's fencing token", "why", why)
		}
		// The lease watch is not ours to have: look again in a while.
		return reconcile.Result{RequeueAfter: 10 * time.Second}, err
	}
	return a.run(ctx, logger, nm, i)
}

// fenced says why the agent may not act for nm now ("" if it may): the
// node's lease, read from the API server, must be the one the request's
// fencing token names, held by lull's drainer and not expired.
func (a *Agent) fenced(ctx context.Context, nm *lullv1alpha1.NodeMaintenance) (string, error) {
	f := nm.Status.Fencing
	if f == nil {
		return "the request carries no fencing token", nil
	}
	var l coordinationv1.Lease
	err := a.Live.Get(ctx, types.NamespacedName{Namespace: a.LeaseNamespace, Name: lease.Name(a.Node)}, &l)
	if apierrors.IsNotFound(err) {
		return "the node's lease does not exist", nil
	}
	if err != nil {
		return "", fmt.Errorf("reading the lease of node %s: %w", a.Node, err)
	}
	return a.observer().Fenced(&l, lease.Token{UID: f.LeaseUID, Transitions: f.LeaseTransitions}, a.DrainerIdentity), nil
}

// observer judges the node lease's expiry by observation, the protocol's
// one rule (lease.Observer): the drainer's renewals are seen as new
// versions, and a version left unchanged for its duration on this
// agent's clock has expired, whatever the timestamps in it say.
func (a *Agent) observer() *lease.Observer {
	a.mu.Lock()
	defer a.mu.Unlock()
	if a.leaseObserver == nil {
		a.leaseObserver = lease.NewObserver(a.Clock)
	}
	return a.leaseObserver
}

// run records step i Running (a write the API server orders against the
// drainer's: a conflict means start over from the newer request), carries
// it out and records how it ended.
func (a *Agent) run(ctx context.Context, logger klog.Logger, nm *lullv1alpha1.NodeMaintenance, i int) (reconcile.Result, error) {
	now := a.Clock.Now()
	st := &nm.Status.Actions[i]
	if st.State == lullv1alpha1.ActionPending {
		st.State, st.StartedAt = lullv1alpha1.ActionRunning, &metav1.Time{Time: now}
		if st.Type == lullv1alpha1.StepReboot {
			var node corev1.Node
			if err := a.Client.Get(ctx, types.NamespacedName{Name: a.Node}, &node); err != nil {
				return reconcile.Result{}, fmt.Errorf("reading node %s: %w", a.Node, err)
			}
			st.BootID = node.Status.NodeInfo.BootID
			if st.BootID == "" {
				// Without a boot ID nobody can tell the node came back:
				// a reboot would stay Running until its timeout.
				return a.record(ctx, nm, i, lullv1alpha1.ActionFailed,
					fmt.Sprintf("node %s reports no boot ID (status.nodeInfo.bootID), so its return after a reboot cannot be seen; not rebooting", a.Node))
			}
		}
		if err := a.Client.Status().Update(ctx, nm); err != nil {
			if apierrors.IsConflict(err) {
				return reconcile.Result{Requeue: true}, nil
			}
			return reconcile.Result{}, fmt.Errorf("recording %s started: %w", st.Label(), err)
		}
		a.event(nm, corev1.EventTypeNormal, ReasonActionStarted, "lull-agent started "+st.Label())
		st = &nm.Status.Actions[i]
	} else {
		if (st.Type == lullv1alpha1.StepReboot || st.Type == lullv1alpha1.StepPowerOff) && a.wasIssued(issueKey(nm, st)) {
			// Issued by this process: the node is going down, or back.
			return reconcile.Result{}, nil
		}
		if st.Type == lullv1alpha1.StepReboot && st.BootID != "" {
			// A reboot stays Running until the drainer sees the node back:
			// one whose node reports another boot ID has happened, and
			// issuing it again would reboot the node that just came back.
			var node corev1.Node
			if err := a.Client.Get(ctx, types.NamespacedName{Name: a.Node}, &node); err != nil {
				return reconcile.Result{}, fmt.Errorf("reading node %s: %w", a.Node, err)
			}
			if node.Status.NodeInfo.BootID != st.BootID {
				logger.Info("The node has rebooted: the drainer judges its return", "bootID", node.Status.NodeInfo.BootID, "was", st.BootID)
				return reconcile.Result{}, nil
			}
		}
		// Running in the cache: an agent that stopped mid-step, or this
		// agent's own step, ended a moment ago, whose end the cache has
		// not caught up with yet. Only the API server can tell: a step
		// run again here would restart a unit twice.
		fresh := &lullv1alpha1.NodeMaintenance{}
		if err := a.Live.Get(ctx, types.NamespacedName{Name: nm.Name}, fresh); err != nil {
			return reconcile.Result{}, client.IgnoreNotFound(err)
		}
		if fresh.ResourceVersion != nm.ResourceVersion {
			// The cache is behind; its update brings the request back.
			return reconcile.Result{}, nil
		}
		logger.Info("Resuming a step that was running when the agent stopped", "step", st.Label())
	}
	deadline := st.StartedAt.Add(st.Timeout.Duration)
	if st.Timeout.Duration <= 0 {
		deadline = now.Add(time.Minute)
	}
	runCtx, cancel := a.deadline(ctx, deadline)
	defer cancel()
	logger.Info("Running", "step", st.Label(), "deadline", deadline)
	started := a.Clock.Now()
	var out string
	var err error
	if st.Type == lullv1alpha1.StepWriteFiles {
		out, err = a.writeFiles(runCtx, nm)
	} else {
		out, err = a.Exec.Run(runCtx, Step{Action: *st, Units: changedUnits(nm)})
	}
	if ctx.Err() != nil {
		// The agent is stopping (not the step's deadline): the step stays
		// Running, and the next agent on the node runs it again.
		return reconcile.Result{}, ctx.Err()
	}
	result := outcome(st.Type, runCtx, err)
	if a.Metrics != nil {
		a.Metrics.observe(st.Type, result, a.Clock.Since(started))
	}
	if result == lullv1alpha1.ActionRunning {
		// A reboot or power-off issued: the drainer sees the node come
		// back, or stay down.
		a.markIssued(issueKey(nm, st))
		logger.Info("Issued", "step", st.Label(), "output", out)
		return reconcile.Result{}, nil
	}
	return a.record(ctx, nm, i, result, message(out, err, result, st.Timeout.Duration))
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

// outcome is the state a step's run leaves it in.
func outcome(t lullv1alpha1.DisruptionAction, ctx context.Context, err error) lullv1alpha1.ActionState {
	switch {
	case err != nil && ctx.Err() != nil:
		return lullv1alpha1.ActionTimedOut
	case err != nil:
		return lullv1alpha1.ActionFailed
	case t == lullv1alpha1.StepReboot || t == lullv1alpha1.StepPowerOff:
		// Issued: the drainer sees the node come back, or stay down.
		return lullv1alpha1.ActionRunning
	}
	return lullv1alpha1.ActionSucceeded
}

func message(out string, err error, state lullv1alpha1.ActionState, timeout time.Duration) string {
	msg := out
	switch {
	case state == lullv1alpha1.ActionTimedOut:
		msg = fmt.Sprintf("did not finish within %s", timeout)
		if out != "" {
			msg += "; last output: " + out
		}
	case err != nil:
		msg = err.Error()
		if out != "" {
			msg += "; last output: " + out
		}
	}
	if len(msg) > 1024 {
		msg = msg[:1021] + "..."
	}
	return msg
}

// record writes how step i ended, on the request as it is now (the
// drainer may have written since): only that step's fields change.
func (a *Agent) record(ctx context.Context, nm *lullv1alpha1.NodeMaintenance, i int, state lullv1alpha1.ActionState, msg string) (reconcile.Result, error) {
	label := nm.Status.Actions[i].Label()
	for attempt := 0; ; attempt++ {
		st := &nm.Status.Actions[i]
		if st.State.Done() {
			return reconcile.Result{}, nil // the drainer ended it (timed out) meanwhile
		}
		st.State, st.Message, st.FinishedAt = state, msg, &metav1.Time{Time: a.Clock.Now()}
		err := a.Client.Status().Update(ctx, nm)
		if err == nil {
			break
		}
		if !apierrors.IsConflict(err) || attempt >= 5 {
			return reconcile.Result{}, fmt.Errorf("recording %s %s: %w", label, state, err)
		}
		fresh := &lullv1alpha1.NodeMaintenance{}
		if err := a.Live.Get(ctx, types.NamespacedName{Name: nm.Name}, fresh); err != nil {
			return reconcile.Result{}, fmt.Errorf("re-reading NodeMaintenance %s: %w", nm.Name, err)
		}
		if fresh.UID != nm.UID || len(fresh.Status.Actions) <= i || fresh.Status.Actions[i].Label() != label {
			return reconcile.Result{}, nil
		}
		nm = fresh
	}
	switch state {
	case lullv1alpha1.ActionSucceeded:
		a.event(nm, corev1.EventTypeNormal, ReasonActionSucceeded, fmt.Sprintf("%s succeeded: %s", label, msg))
	case lullv1alpha1.ActionFailed, lullv1alpha1.ActionTimedOut:
		reason := ReasonActionFailed
		if state == lullv1alpha1.ActionTimedOut {
			reason = ReasonActionTimedOut
		}
		then := "; the request fails"
		if nm.Status.Actions[i].Type.FallsBack() {
			then = "; lull falls back to a reboot"
		}
		a.event(nm, corev1.EventTypeWarning, reason, fmt.Sprintf("%s %s: %s%s", label, state, msg, then))
	}
	return reconcile.Result{}, nil
}

func (a *Agent) event(nm *lullv1alpha1.NodeMaintenance, eventType, reason, msg string) {
	if a.Recorder != nil {
		a.Recorder.Eventf(nm, nil, eventType, reason, "Act", "%s", msg)
	}
}
