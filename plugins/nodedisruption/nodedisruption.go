// Package nodedisruption is the NodeDisruption scheduler plugin: it keeps
// pods off nodes that are leased for disruption or under maintenance, and
// prefers nodes whose next disruption is furthest away. It reads the shared
// forecast (internal/forecast), the same one lull-drainer acts on.
package nodedisruption

import (
	"context"
	"fmt"
	"os"
	"strconv"
	"time"

	v1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/client-go/dynamic"
	"k8s.io/klog/v2"
	fwk "k8s.io/kube-scheduler/framework"
	"k8s.io/kubernetes/pkg/scheduler/framework/plugins/helper"
	"k8s.io/utils/clock"

	"lull.dev/lull/internal/forecast"
	"lull.dev/lull/internal/settings"
	"lull.dev/lull/plugins/nodedisruption/apis/config"
	_ "lull.dev/lull/plugins/nodedisruption/apis/config/scheme" // installs the args into the scheduler's scheme
)

// Name is the plugin's name in the scheduler configuration.
const Name = "NodeDisruption"

const (
	preFilterStateKey = "PreFilter" + Name
	preScoreStateKey  = "PreScore" + Name
)

// NodeDisruption is the plugin.
type NodeDisruption struct {
	args     config.NodeDisruptionArgs
	handle   fwk.Handle
	forecast *forecast.Forecast
	clock    clock.PassiveClock
	rejected *rejections
	// lookups remembers the forecast's answer per node object and
	// snapshot: the hot path (Filter, Score) is one probe of it.
	lookups *forecast.LookupCache
}

var _ fwk.PreFilterPlugin = &NodeDisruption{}
var _ fwk.FilterPlugin = &NodeDisruption{}
var _ fwk.PostFilterPlugin = &NodeDisruption{}
var _ fwk.PreScorePlugin = &NodeDisruption{}
var _ fwk.ScorePlugin = &NodeDisruption{}
var _ fwk.ScoreExtensions = &NodeDisruption{}
var _ fwk.EnqueueExtensions = &NodeDisruption{}
var _ fwk.SignPlugin = &NodeDisruption{}

// Forecast returns the forecast the plugin schedules by (for tests and
// diagnostics).
func (pl *NodeDisruption) Forecast() *forecast.Forecast { return pl.forecast }

// Name returns the plugin's name.
func (pl *NodeDisruption) Name() string { return Name }

// New is the plugin factory for the scheduler's registry.
func New(ctx context.Context, obj runtime.Object, h fwk.Handle) (fwk.Plugin, error) {
	return NewWithClock(clock.RealClock{})(ctx, obj, h)
}

// NewWithClock returns a plugin factory whose forecast runs on the given
// clock (tests pass a fake one).
func NewWithClock(c clock.WithTickerAndDelayedExecution) func(context.Context, runtime.Object, fwk.Handle) (fwk.Plugin, error) {
	return func(ctx context.Context, obj runtime.Object, h fwk.Handle) (fwk.Plugin, error) {
		args, err := getArgs(obj)
		if err != nil {
			return nil, err
		}
		if err := config.ValidateNodeDisruptionArgs(nil, args); err != nil {
			return nil, err
		}
		f := forecast.New(forecast.Options{Settings: args.Settings, Clock: c, AdmissionNamespace: admissionNamespace()})
		pl := newPlugin(*args, h, f, c)
		dyn, err := dynamic.NewForConfig(h.KubeConfig())
		if err != nil {
			return nil, fmt.Errorf("%s: dynamic client: %w", Name, err)
		}
		// The forecast's own informers watch leases in the lease namespace
		// only; the scheduler's node informer is shared. The plugin does
		// not wait for our CRDs here: until MaintenanceWindows are known a
		// labelled node counts as open for maintenance (filtered).
		go func() {
			if err := f.Run(ctx, forecast.Sources{Client: h.ClientSet(), Dynamic: dyn,
				Nodes: h.SharedInformerFactory().Core().V1().Nodes().Informer()}); err != nil {
				klog.FromContext(ctx).Error(err, "NodeDisruption forecast did not start")
				return
			}
			pl.activateWaiting()
		}()
		return pl, nil
	}
}

// newPlugin wires a plugin to a forecast; unit tests feed the forecast
// directly.
func newPlugin(args config.NodeDisruptionArgs, h fwk.Handle, f *forecast.Forecast, c clock.PassiveClock) *NodeDisruption {
	pl := &NodeDisruption{args: args, handle: h, forecast: f, clock: c, rejected: newRejections(), lookups: forecast.NewLookupCache()}
	f.OnChange(pl.onForecastChange)
	return pl
}

func getArgs(obj runtime.Object) (*config.NodeDisruptionArgs, error) {
	if obj == nil {
		return nil, fmt.Errorf("%s: no args; the scheduler applies defaults, so this is a programming error", Name)
	}
	args, ok := obj.(*config.NodeDisruptionArgs)
	if !ok {
		return nil, fmt.Errorf("want args to be of type NodeDisruptionArgs, got %T", obj)
	}
	return args, nil
}

// preFilterState is the forecast snapshot one scheduling cycle reads.
type preFilterState struct {
	snap *forecast.Snapshot
}

// Clone shares the snapshot: it is immutable.
func (s *preFilterState) Clone() fwk.StateData { return s }

func getPreFilterState(cs fwk.CycleState) (*preFilterState, error) {
	c, err := cs.Read(preFilterStateKey)
	if err != nil {
		return nil, fmt.Errorf("reading %q from cycleState: %w", preFilterStateKey, err)
	}
	s, ok := c.(*preFilterState)
	if !ok {
		return nil, fmt.Errorf("%+v convert to nodedisruption.preFilterState error", c)
	}
	return s, nil
}

// PreFilter takes the forecast snapshot the cycle filters with. A pod
// that tolerates disruption is skipped.
func (pl *NodeDisruption) PreFilter(_ context.Context, cs fwk.CycleState, pod *v1.Pod, nodes []fwk.NodeInfo) (*fwk.PreFilterResult, *fwk.Status) {
	if pl.tolerates(pod) {
		return nil, fwk.NewStatus(fwk.Skip)
	}
	if !pl.forecast.Synced() {
		// Until every lease and maintenance has been read, any node may be
		// leased: place nothing. The pod is activated once synced.
		pl.rejected.addWaiting(pod)
		return nil, fwk.NewStatus(fwk.UnschedulableAndUnresolvable, "lull-scheduler has not yet read the node leases and maintenance requests")
	}
	pl.lookups.SetNodes(len(nodes))
	cs.Write(preFilterStateKey, &preFilterState{snap: pl.forecast.Snapshot()})
	return nil, nil
}

// PreFilterExtensions: the plugin does not depend on other pods.
func (pl *NodeDisruption) PreFilterExtensions() fwk.PreFilterExtensions { return nil }

// Filter rejects nodes that are leased, under maintenance, or requested
// for maintenance while their window is open (or at all, if configured).
func (pl *NodeDisruption) Filter(_ context.Context, cs fwk.CycleState, _ *v1.Pod, nodeInfo fwk.NodeInfo) *fwk.Status {
	s, err := getPreFilterState(cs)
	if err != nil {
		return fwk.AsStatus(err)
	}
	node := nodeInfo.Node()
	if node == nil {
		return fwk.NewStatus(fwk.Error, "node not found")
	}
	if reason, blocked := pl.blocks(pl.lookups.Lookup(s.snap, node)); blocked {
		return fwk.NewStatus(fwk.UnschedulableAndUnresolvable, reason)
	}
	return nil
}

// blocks decides whether a forecast keeps pods off the node.
func (pl *NodeDisruption) blocks(n *forecast.Node) (string, bool) {
	return forecast.Blocks(n, pl.args.FilterRequestedOutsideWindow)
}

// PostFilter runs only for a pod no node fits. It records the nodes this
// plugin rejected, so the pod is activated as soon as one of them eases
// (lease released or expired, maintenance completed, label removed). It
// never nominates a node.
func (pl *NodeDisruption) PostFilter(_ context.Context, _ fwk.CycleState, pod *v1.Pod, m fwk.NodeToStatusReader) (*fwk.PostFilterResult, *fwk.Status) {
	nodes, err := m.NodesForStatusCode(pl.handle.SnapshotSharedLister().NodeInfos(), fwk.UnschedulableAndUnresolvable)
	if err != nil {
		return nil, fwk.AsStatus(err)
	}
	var ours []string
	for _, ni := range nodes {
		name := ni.Node().Name
		if st := m.Get(name); st != nil && st.Plugin() == Name {
			ours = append(ours, name)
		}
	}
	if len(ours) > 0 {
		pl.rejected.add(pod, ours)
	}
	return nil, fwk.NewStatus(fwk.Unschedulable)
}

// activateWaiting requeues the pods PreFilter turned away before the
// forecast synced.
func (pl *NodeDisruption) activateWaiting() {
	if pods := pl.rejected.takeWaiting(); len(pods) > 0 {
		pl.handle.Activate(klog.Background().WithName(Name), pods)
	}
}

// preScoreState holds what Score needs per pod.
type preScoreState struct {
	snap    *forecast.Snapshot
	now     time.Time
	runtime time.Duration // zero when unknown
}

func (s *preScoreState) Clone() fwk.StateData { return s }

// PreScore takes the snapshot and the pod's expected runtime once. It
// skips scoring when no candidate node has anything forecast (every score
// would be the maximum).
func (pl *NodeDisruption) PreScore(_ context.Context, cs fwk.CycleState, pod *v1.Pod, nodes []fwk.NodeInfo) *fwk.Status {
	if pl.tolerates(pod) {
		return fwk.NewStatus(fwk.Skip)
	}
	snap := pl.forecast.Snapshot()
	if snap.Len() == 0 {
		return fwk.NewStatus(fwk.Skip)
	}
	forecast := false
	for _, ni := range nodes {
		if node := ni.Node(); node != nil && pl.lookups.Lookup(snap, node) != nil {
			forecast = true
			break
		}
	}
	if !forecast {
		return fwk.NewStatus(fwk.Skip)
	}
	cs.Write(preScoreStateKey, &preScoreState{snap: snap, now: pl.clock.Now(), runtime: pl.expectedRuntime(pod)})
	return nil
}

// Score: within the horizon, the later the node's expected disruption the
// higher the score; a node the pod can finish on first loses nothing.
func (pl *NodeDisruption) Score(_ context.Context, cs fwk.CycleState, _ *v1.Pod, nodeInfo fwk.NodeInfo) (int64, *fwk.Status) {
	c, err := cs.Read(preScoreStateKey)
	if err != nil {
		return 0, fwk.AsStatus(fmt.Errorf("reading %q from cycleState: %w", preScoreStateKey, err))
	}
	s, ok := c.(*preScoreState)
	if !ok {
		return 0, fwk.AsStatus(fmt.Errorf("%+v convert to nodedisruption.preScoreState error", c))
	}
	return pl.score(s, pl.lookups.Lookup(s.snap, nodeInfo.Node())), nil
}

func (pl *NodeDisruption) score(s *preScoreState, n *forecast.Node) int64 {
	if n == nil || n.Disruption.IsZero() {
		return fwk.MaxScore
	}
	left := n.Disruption.Sub(s.now)
	horizon := pl.args.Horizon.Duration
	switch {
	case left <= 0:
		return 0
	case left >= horizon:
		return fwk.MaxScore
	case s.runtime > 0 && left >= s.runtime:
		return fwk.MaxScore
	}
	return int64(float64(fwk.MaxScore) * float64(left) / float64(horizon))
}

// ScoreExtensions returns the plugin itself for NormalizeScore.
func (pl *NodeDisruption) ScoreExtensions() fwk.ScoreExtensions { return pl }

// NormalizeScore scales scores so the node with the latest disruption gets
// the maximum: when every feasible node will be disrupted soon, the
// latest still wins clearly against other plugins' preferences.
func (pl *NodeDisruption) NormalizeScore(_ context.Context, _ fwk.CycleState, _ *v1.Pod, scores fwk.NodeScoreList) *fwk.Status {
	return helper.DefaultNormalizeScore(fwk.MaxScore, false, scores)
}

// SignPod keeps opportunistic batching on: pods with the same toleration
// of disruption and the same expected runtime get the same result.
func (pl *NodeDisruption) SignPod(_ context.Context, pod *v1.Pod) ([]fwk.SignFragment, *fwk.Status) {
	return []fwk.SignFragment{{
		Key:   "lull.dev/NodeDisruption.Tolerates()+ExpectedRuntime()",
		Value: strconv.FormatBool(pl.tolerates(pod)) + "/" + pl.expectedRuntime(pod).String(),
	}}, nil
}

// tolerates reports whether the pod tolerates disruption: a toleration for
// the configured key, or one that tolerates every taint.
func (pl *NodeDisruption) tolerates(pod *v1.Pod) bool {
	return forecast.Tolerates(pod, pl.args.TolerationKey)
}

// expectedRuntime is the pod's known runtime: activeDeadlineSeconds, or the
// expected-runtime annotation when shorter or the only one.
func (pl *NodeDisruption) expectedRuntime(pod *v1.Pod) time.Duration {
	var d time.Duration
	if s := pod.Spec.ActiveDeadlineSeconds; s != nil && *s > 0 {
		d = time.Duration(*s) * time.Second
	}
	if a, ok := pod.Annotations[pl.args.ExpectedRuntimeAnnotation]; ok {
		if v, err := time.ParseDuration(a); err == nil && v > 0 && (d == 0 || v < d) {
			d = v
		}
	}
	return d
}

// admissionNamespace is where the admission guard's ConfigMap is, whose
// criticalUnits the forecast plans restarts with: lull's namespace, which
// is the scheduler's own ($POD_NAMESPACE, set by the install from the
// downward API), or settings.Namespace.
func admissionNamespace() string {
	if ns := os.Getenv("POD_NAMESPACE"); ns != "" {
		return ns
	}
	return settings.Namespace
}
