// Package agent is lull-agent: one per node, it carries out the host steps
// (the host kinds of api/v1alpha1's step catalog, stepkinds.go: WriteFiles,
// DaemonReload, ReloadService, RestartService, Reboot, PowerOff) of the
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
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/tools/events"
	"k8s.io/klog/v2"
	"k8s.io/utils/clock"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/reconcile"

	lullv1alpha1 "lull.dev/lull/api/v1alpha1"
	"lull.dev/lull/internal/hostfiles"
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

// DefaultStepTimeout is the deadline of a step whose plan gives no
// timeout, counted from when the agent runs it, unless
// Agent.DefaultStepTimeout says otherwise.
const DefaultStepTimeout = time.Minute

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
	// DefaultStepTimeout is the deadline of a step whose plan gives no
	// timeout, counted from when the agent runs it; zero (or less):
	// DefaultStepTimeout.
	DefaultStepTimeout time.Duration

	// issued remembers the reboots this process issued (request UID and
	// the step's start): a reboot stays Running until the drainer sees the
	// node come back, and every wake-up before that (a lease renewal, the
	// node going NotReady) must not issue it again. A new process, on the
	// rebooted node or after a crash before the reboot, starts empty.
	mu            sync.Mutex
	issued        map[string]bool
	leaseObserver *lease.Observer
	// refusals is the last reason each request (by UID) was refused a
	// step for (fencing): the Fenced event is raised when it changes, not
	// on every look.
	refusals map[types.UID]string
	// filesRecovered: this process finished what an earlier one left of
	// a WriteFiles (recoverFiles), or found nothing to finish.
	filesRecovered bool
	// recovered is what that recovery did (nil: there was nothing to
	// finish), which a WriteFiles step this process resumes records.
	recovered *hostfiles.Recovery
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
	if err := a.recoverFiles(logger); err != nil {
		return reconcile.Result{}, err
	}
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
			if a.refusedAgain(nm.UID, why) {
				a.event(nm, corev1.EventTypeWarning, ReasonFenced, fencedMessage(lullv1alpha1.NextAction(nm.Status.Actions), nm, why))
			}
		}
		// The lease watch is not ours to have: look again in a while.
		return reconcile.Result{RequeueAfter: 10 * time.Second}, err
	}
	a.acting(nm.UID)
	return a.run(ctx, logger, nm, i)
}

// refusedAgain records that request uid was refused a step for why, and
// reports whether that is news (the first refusal, or another reason).
func (a *Agent) refusedAgain(uid types.UID, why string) bool {
	a.mu.Lock()
	defer a.mu.Unlock()
	if a.refusals == nil {
		a.refusals = map[types.UID]string{}
	}
	if a.refusals[uid] == why {
		return false
	}
	a.refusals[uid] = why
	return true
}

// acting forgets why request uid was last refused: it may act now, and a
// refusal after this one is news again (and the map does not keep a
// request that will not be refused again).
func (a *Agent) acting(uid types.UID) {
	a.mu.Lock()
	defer a.mu.Unlock()
	delete(a.refusals, uid)
}

// fencedMessage says which step the agent refused to run and why.
func fencedMessage(i int, nm *lullv1alpha1.NodeMaintenance, why string) string {
	return fmt.Sprintf("lull-agent does not run %s: %s; it runs when the drainer holds the node's lease the request names (status.fencing)",
		nm.Status.Actions[i].Label(), why)
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
