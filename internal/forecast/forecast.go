// Package forecast keeps, per node, the disruption forecast both halves of
// lull act on: who leases the node, which maintenance is requested and in
// what phase, whether its windows permit, and so when the node is expected
// to be disrupted. lull-scheduler and lull-drainer feed it from their
// informers and read immutable snapshots, so they cannot disagree.
package forecast

import (
	"sync"
	"sync/atomic"
	"time"

	"k8s.io/utils/clock"

	lullv1alpha1 "lull.dev/lull/api/v1alpha1"
	"lull.dev/lull/internal/policy"
	"lull.dev/lull/internal/settings"
	"lull.dev/lull/lease"
)

// Forecast is the shared, event-driven store. Feed it with the handlers
// from Handlers; read it with Snapshot.
type Forecast struct {
	opts  Options
	clock clock.WithTickerAndDelayedExecution

	mu     sync.Mutex
	labels map[string]map[string]string // node -> labels (from informer objects, not copied)
	leases map[string]*observedLease    // node -> lease
	// observer judges lease expiry (the protocol's one rule).
	observer *lease.Observer
	nms      map[string]*lullv1alpha1.NodeMaintenance
	windows  map[string]*compiledWindow
	// index finds the windows that may select a node from its labels.
	index windowIndex
	// policies decide which requested classes disrupt nothing (action None).
	policies map[string]lullv1alpha1.DisruptionPolicy
	rules    *policy.Set
	// critical are the admission guard's criticalUnits, which the rules
	// plan with (nil: internal/policy's default).
	critical []string
	nodes    *nodeMap // nodes with something to forecast, as published
	// requested are the nodes whose forecast has a maintenance: the only
	// ones whose forecast depends on windows.
	requested map[string]struct{}
	// due orders the nodes by validUntil for the transition timer.
	due     dueHeap
	timer   clock.Timer
	timerAt time.Time
	stopped bool
	// windowsSynced is set once the MaintenanceWindows have been listed.
	windowsSynced bool
	synced        atomic.Bool

	snap      atomic.Pointer[Snapshot]
	snapGen   uint64 // the last snapshot's gen, under mu
	listeners []func([]Change)

	work work
}

// Options configure a Forecast.
type Options struct {
	// Settings every component forecasting disruptions must share: the
	// maintenance label, the lease namespace, the policy for nodes no
	// window selects and the window search horizon. Unset fields take
	// the defaults.
	settings.Settings
	// Clock for lease expiry by observation and timed transitions.
	Clock clock.WithTickerAndDelayedExecution
	// AdmissionNamespace is where the admission guard's ConfigMap
	// (settings.AdmissionConfigMap) is: its criticalUnits are the units
	// whose restart the forecast plans behind a drain. Empty: no
	// ConfigMap is the guard's (the shipped list applies).
	AdmissionNamespace string
}

// work counts what events cost, in units that must not grow with the
// cluster, so tests can hold an event to what it affects.
type work struct {
	computed     int // node forecasts computed
	windowsTried int // window selectors matched against a node's labels
	copied       int // node entries copied to publish a snapshot
	scanned      int // node entries visited to find transitions
}

// New returns an empty Forecast.
func New(opts Options) *Forecast {
	opts.Settings = opts.Settings.WithDefaults()
	if opts.Clock == nil {
		opts.Clock = clock.RealClock{}
	}
	f := &Forecast{
		opts: opts, clock: opts.Clock,
		labels: map[string]map[string]string{}, leases: map[string]*observedLease{}, observer: lease.NewObserver(opts.Clock),
		nms: map[string]*lullv1alpha1.NodeMaintenance{}, windows: map[string]*compiledWindow{}, index: newWindowIndex(),
		nodes: &nodeMap{}, requested: map[string]struct{}{}, due: newDueHeap(),
		policies: map[string]lullv1alpha1.DisruptionPolicy{}, rules: policy.Merge(nil),
	}
	f.snap.Store(&Snapshot{f: f, nodes: f.nodes})
	return f
}

// Options returns the options the forecast runs with.
func (f *Forecast) Options() Options { return f.opts }

// OnChange registers fn to be called, outside the forecast's lock and in
// order, with the nodes whose forecast changed. Register before feeding.
func (f *Forecast) OnChange(fn func([]Change)) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.listeners = append(f.listeners, fn)
}

// Change is a node whose forecast changed; Old or New is nil when the node
// had or has nothing to forecast.
type Change struct {
	Node     string
	Old, New *Node
}

// Eased reports whether the change may let pods onto the node again: it is
// no longer leased, disrupting, or requested with an open window.
func (c Change) Eased() bool {
	return restriction(c.Old) > restriction(c.New)
}

func restriction(n *Node) int {
	switch {
	case n == nil:
		return 0
	case n.Certain:
		return 3
	case n.WindowOpen:
		return 2
	case n.Maintenance != nil:
		return 1
	}
	return 0
}

// Stop cancels the pending transition timer.
func (f *Forecast) Stop() {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.stopped = true
	if f.timer != nil {
		f.timer.Stop()
	}
}

// Snapshot returns the current immutable snapshot.
func (f *Forecast) Snapshot() *Snapshot { return f.snap.Load() }
