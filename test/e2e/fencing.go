package e2e

import (
	"context"
	"fmt"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	coordinationv1 "k8s.io/api/coordination/v1"
	"k8s.io/client-go/rest"
	toolscache "k8s.io/client-go/tools/cache"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/cache"
	"sigs.k8s.io/controller-runtime/pkg/client"

	lullv1alpha1 "lull.dev/lull/api/v1alpha1"
	"lull.dev/lull/internal/lullscheme"
	"lull.dev/lull/lease"
)

// StepFencing is the invariant "no host step without lull's lease": a host
// step (lull-agent's RestartService, Reboot, PowerOff) may start only while
// its node's disruption lease is held by lull's drainer and is the lease
// the request's fencing token names. It is fed every write of the watched
// nodes' leases and requests, and judges each step's start against the
// lease as it was at that moment.
type StepFencing struct {
	mine map[string]bool

	mu sync.Mutex
	// leases is every state of each watched node's lease, as written;
	// starts every host step's start as its request recorded it.
	leases  map[string][]leaseState
	starts  []stepStart
	started map[string]bool // request UID/step/start time
}

// leaseState is a node lease as written at resourceVersion rv (deleted:
// gone from then on).
type leaseState struct {
	rv          uint64
	deleted     bool
	uid         string
	holder      string
	transitions int32
}

// stepStart is a host step recorded Running at resourceVersion rv of its
// request, with the fencing token the request carried.
type stepStart struct {
	node, step string
	rv         uint64
	fencing    *lullv1alpha1.Fencing
}

// NewStepFencing judges the steps on nodes; feed it with Lease and Request.
func NewStepFencing(nodes ...string) *StepFencing {
	f := &StepFencing{mine: map[string]bool{}, leases: map[string][]leaseState{}, started: map[string]bool{}}
	for _, n := range nodes {
		f.mine[n] = true
	}
	return f
}

// WatchStepFencing starts informers on the node leases and the requests
// of nodes until the end of the test, feeding a new StepFencing.
func WatchStepFencing(t testing.TB, cfg *rest.Config, nodes ...string) *StepFencing {
	t.Helper()
	f := NewStepFencing(nodes...)
	handlers := f.Handlers()
	handlers[&lullv1alpha1.NodeMaintenance{}] = toolscache.ResourceEventHandlerFuncs{
		AddFunc: func(o any) { f.Request(o) }, UpdateFunc: func(_, o any) { f.Request(o) },
	}
	Watch(t, cfg, handlers)
	return f
}

// Handlers feed f the node leases' writes (requests go through Request).
func (f *StepFencing) Handlers() map[client.Object]toolscache.ResourceEventHandler {
	return map[client.Object]toolscache.ResourceEventHandler{
		&coordinationv1.Lease{}: toolscache.ResourceEventHandlerFuncs{
			AddFunc: func(o any) { f.Lease(o, false) }, UpdateFunc: func(_, o any) { f.Lease(o, false) },
			DeleteFunc: func(o any) { f.Lease(o, true) },
		},
	}
}

// Watch runs an informer per object kind of handlers, with each handler,
// until the end of the test, and waits for them to sync. Leases are
// watched in the lease namespace only (kubelet heartbeats are not ours).
func Watch(t testing.TB, cfg *rest.Config, handlers map[client.Object]toolscache.ResourceEventHandler) {
	t.Helper()
	c, err := cache.New(cfg, cache.Options{Scheme: lullscheme.New(), ByObject: map[client.Object]cache.ByObject{
		&coordinationv1.Lease{}: {Namespaces: map[string]cache.Config{lease.DefaultNamespace: {}}},
	}})
	require.NoError(t, err)
	ctx, cancel := context.WithCancel(context.Background())
	t.Cleanup(cancel)
	for obj, h := range handlers {
		inf, err := c.GetInformer(ctx, obj)
		require.NoError(t, err)
		_, err = inf.AddEventHandler(h)
		require.NoError(t, err)
	}
	go func() { _ = c.Start(ctx) }()
	syncCtx, done := context.WithTimeout(ctx, time.Minute)
	defer done()
	require.True(t, c.WaitForCacheSync(syncCtx), "watchers did not sync")
}

// Request records the host steps a request shows Running for the first
// time. Every status write passes through the watch, so the write that
// recorded a step Running is seen with its own resourceVersion.
func (f *StepFencing) Request(o any) {
	if d, ok := o.(toolscache.DeletedFinalStateUnknown); ok {
		o = d.Obj
	}
	nm, ok := o.(*lullv1alpha1.NodeMaintenance)
	if !ok || !f.mine[nm.Spec.NodeName] {
		return
	}
	rv, err := strconv.ParseUint(nm.ResourceVersion, 10, 64)
	if err != nil {
		return
	}
	f.mu.Lock()
	defer f.mu.Unlock()
	for _, a := range nm.Status.Actions {
		if a.State != lullv1alpha1.ActionRunning || a.StartedAt == nil {
			continue
		}
		key := fmt.Sprintf("%s/%s/%s", nm.UID, a.Label(), a.StartedAt.UTC().Format(time.RFC3339Nano))
		if f.started[key] {
			continue
		}
		f.started[key] = true
		f.starts = append(f.starts, stepStart{node: nm.Spec.NodeName, step: a.Label(), rv: rv, fencing: nm.Status.Fencing.DeepCopy()})
	}
}

// Lease records a state of a watched node's disruption lease.
func (f *StepFencing) Lease(o any, deleted bool) {
	if d, ok := o.(toolscache.DeletedFinalStateUnknown); ok {
		o = d.Obj
	}
	l, ok := o.(*coordinationv1.Lease)
	if !ok {
		return
	}
	node, ok := strings.CutPrefix(l.Name, "node-")
	if !ok || !f.mine[node] {
		return
	}
	rv, err := strconv.ParseUint(l.ResourceVersion, 10, 64)
	if err != nil {
		return
	}
	f.mu.Lock()
	defer f.mu.Unlock()
	f.leases[node] = append(f.leases[node], leaseState{rv: rv, deleted: deleted, uid: string(l.UID),
		holder: ptr.Deref(l.Spec.HolderIdentity, ""), transitions: ptr.Deref(l.Spec.LeaseTransitions, 0)})
}

// Starts is how many host steps were seen to start.
func (f *StepFencing) Starts() int {
	f.mu.Lock()
	defer f.mu.Unlock()
	return len(f.starts)
}

// Violations lists the host steps that started while the node's lease was
// not lull's or not the one their fencing token named. The lease's state
// at a step's start is its last write before the request's write that
// recorded the start: both come from the test cluster's single etcd, whose
// resourceVersions are one sequence across resources (a client of an
// arbitrary API server may not compare them; here it is exact).
func (f *StepFencing) Violations() []string {
	f.mu.Lock()
	defer f.mu.Unlock()
	var out []string
	for _, s := range f.starts {
		var at *leaseState
		for i := range f.leases[s.node] {
			if l := &f.leases[s.node][i]; l.rv < s.rv && (at == nil || l.rv > at.rv) {
				at = l
			}
		}
		tok := s.fencing
		switch {
		case at == nil || at.deleted:
			out = append(out, fmt.Sprintf("%s on %s started (resourceVersion %d) with no lease held", s.step, s.node, s.rv))
		case !lease.SameFamily(at.holder, "lull-drainer"):
			out = append(out, fmt.Sprintf("%s on %s started while %q held the lease", s.step, s.node, at.holder))
		case tok == nil || string(tok.LeaseUID) != at.uid || tok.LeaseTransitions != at.transitions:
			out = append(out, fmt.Sprintf("%s on %s started under a stale fencing token %+v (lease %s, transitions %d)", s.step, s.node, tok, at.uid, at.transitions))
		}
	}
	return out
}
