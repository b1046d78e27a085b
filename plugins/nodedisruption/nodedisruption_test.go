package nodedisruption

import (
	"context"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	coordinationv1 "k8s.io/api/coordination/v1"
	v1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/klog/v2"
	"k8s.io/klog/v2/ktesting"
	fwk "k8s.io/kube-scheduler/framework"
	"k8s.io/kubernetes/pkg/scheduler/backend/cache"
	"k8s.io/kubernetes/pkg/scheduler/framework"
	testingclock "k8s.io/utils/clock/testing"
	"k8s.io/utils/ptr"

	lullv1alpha1 "lull.dev/lull/api/v1alpha1"
	"lull.dev/lull/internal/forecast"
	"lull.dev/lull/internal/settings"
	"lull.dev/lull/plugins/nodedisruption/apis/config"
)

var t0 = time.Date(2026, 11, 21, 10, 0, 0, 0, time.UTC)

func defaultArgs() config.NodeDisruptionArgs {
	s := settings.Defaults()
	s.LeaseNamespace = "lull-system"
	return config.NodeDisruptionArgs{
		Settings: s, ExpectedRuntimeAnnotation: lullv1alpha1.ExpectedRuntimeAnnotation,
		Horizon: metav1.Duration{Duration: 24 * time.Hour},
	}
}

// fakeHandle provides the two handle methods the plugin uses outside
// scheduling cycles; anything else panics (nil embedded interface).
type fakeHandle struct {
	fwk.Handle
	snapshot *cache.Snapshot
	mu       sync.Mutex
	active   map[string]*v1.Pod
}

func (h *fakeHandle) Activate(_ klog.Logger, pods map[string]*v1.Pod) {
	h.mu.Lock()
	defer h.mu.Unlock()
	for k, p := range pods {
		h.active[k] = p
	}
}

func (h *fakeHandle) SnapshotSharedLister() fwk.SharedLister { return h.snapshot }

type fixture struct {
	pl    *NodeDisruption
	f     *forecast.Forecast
	clock *testingclock.FakeClock
	h     *fakeHandle
}

func newFixture(t testing.TB, args config.NodeDisruptionArgs, nodes ...*v1.Node) *fixture {
	t.Helper()
	clk := testingclock.NewFakeClock(t0)
	f := forecast.New(forecast.Options{Settings: args.Settings, Clock: clk})
	t.Cleanup(f.Stop)
	f.SetSynced()
	h := &fakeHandle{snapshot: cache.NewSnapshot(nil, nodes), active: map[string]*v1.Pod{}}
	for _, n := range nodes {
		f.SetNode(n)
	}
	return &fixture{pl: newPlugin(args, h, f, clk), f: f, clock: clk, h: h}
}

func mkNode(name string, lbls map[string]string) *v1.Node {
	return &v1.Node{ObjectMeta: metav1.ObjectMeta{Name: name, Labels: lbls}}
}

func mkLease(node, holder string) *coordinationv1.Lease {
	return &coordinationv1.Lease{
		ObjectMeta: metav1.ObjectMeta{Name: "node-" + node, Namespace: "lull-system", ResourceVersion: "1",
			Annotations: map[string]string{"lull.dev/operation": "reboot"}},
		Spec: coordinationv1.LeaseSpec{HolderIdentity: ptr.To(holder), LeaseDurationSeconds: ptr.To[int32](60)},
	}
}

// window opening at 12:00 UTC for 2h daily, selecting pool=<pool>.
func mkWindow(name, pool, start string) *lullv1alpha1.MaintenanceWindow {
	return &lullv1alpha1.MaintenanceWindow{
		ObjectMeta: metav1.ObjectMeta{Name: name, Generation: 1},
		Spec: lullv1alpha1.MaintenanceWindowSpec{
			NodeSelector: &metav1.LabelSelector{MatchLabels: map[string]string{"pool": pool}},
			Strategy:     lullv1alpha1.StrategySchedule,
			Schedule: &lullv1alpha1.Schedule{TimeZone: "UTC", Recurrence: &lullv1alpha1.Recurrence{Frequency: lullv1alpha1.Daily},
				StartTime: start, Duration: lullv1alpha1.Duration{Duration: 2 * time.Hour}},
		},
	}
}

func mkPod(name string, mut ...func(*v1.Pod)) *v1.Pod {
	p := &v1.Pod{ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: "default"}, Spec: v1.PodSpec{SchedulerName: "lull-scheduler"}}
	for _, m := range mut {
		m(p)
	}
	return p
}

func nodeInfo(n *v1.Node) fwk.NodeInfo {
	ni := framework.NewNodeInfo()
	ni.SetNode(n)
	return ni
}

const maint = lullv1alpha1.MaintenanceLabel

func TestPreFilterSkipsTolerantPods(t *testing.T) {
	fx := newFixture(t, defaultArgs())
	for name, tc := range map[string]struct {
		tolerations []v1.Toleration
		wantSkip    bool
	}{
		"no tolerations":      {nil, false},
		"our key":             {[]v1.Toleration{{Key: "lull.dev/disruption", Operator: v1.TolerationOpExists}}, true},
		"our key with value":  {[]v1.Toleration{{Key: "lull.dev/disruption", Operator: v1.TolerationOpEqual, Value: "yes"}}, true},
		"tolerates all":       {[]v1.Toleration{{Operator: v1.TolerationOpExists}}, true},
		"unrelated key":       {[]v1.Toleration{{Key: "node.kubernetes.io/unreachable", Operator: v1.TolerationOpExists}}, false},
		"empty key, equality": {[]v1.Toleration{{Operator: v1.TolerationOpEqual}}, false},
	} {
		t.Run(name, func(t *testing.T) {
			cs := framework.NewCycleState()
			_, st := fx.pl.PreFilter(context.Background(), cs, mkPod("p", func(p *v1.Pod) { p.Spec.Tolerations = tc.tolerations }), nil)
			if got := st.IsSkip(); got != tc.wantSkip {
				t.Errorf("skip = %v, want %v (status %v)", got, tc.wantSkip, st)
			}
			if !tc.wantSkip {
				if _, err := getPreFilterState(cs); err != nil {
					t.Errorf("no prefilter state: %v", err)
				}
			}
		})
	}
}

func TestFilter(t *testing.T) {
	plain := mkNode("plain", map[string]string{"pool": "a"})
	leased := mkNode("leased", map[string]string{"pool": "a"})
	openW := mkNode("open", map[string]string{"pool": "open", maint: "kernel-update"})
	closedW := mkNode("closed", map[string]string{"pool": "a", maint: "kernel-update"})
	draining := mkNode("draining", map[string]string{"pool": "a"})
	for name, tc := range map[string]struct {
		filterClosed bool
		node         *v1.Node
		wantCode     fwk.Code
		wantReason   string
	}{
		"plain node":                         {node: plain, wantCode: fwk.Success},
		"leased":                             {node: leased, wantCode: fwk.UnschedulableAndUnresolvable, wantReason: `node is leased for disruption by "fw-updater" for reboot`},
		"requested, window open":             {node: openW, wantCode: fwk.UnschedulableAndUnresolvable, wantReason: "node awaits maintenance (class kernel-update) and its window is open"},
		"requested, window closed":           {node: closedW, wantCode: fwk.Success},
		"requested, window closed, filtered": {filterClosed: true, node: closedW, wantCode: fwk.UnschedulableAndUnresolvable, wantReason: "from 2026-11-21T12:00:00Z"},
		"draining":                           {node: draining, wantCode: fwk.UnschedulableAndUnresolvable, wantReason: "under maintenance draining (class hardware, phase Draining)"},
		"unseen node registering labelled":   {node: mkNode("fresh", map[string]string{maint: "hardware"}), wantCode: fwk.UnschedulableAndUnresolvable, wantReason: "(class hardware) and its window is open"},
	} {
		t.Run(name, func(t *testing.T) {
			args := defaultArgs()
			args.FilterRequestedOutsideWindow = tc.filterClosed
			fx := newFixture(t, args, plain, leased, openW, closedW, draining)
			fx.f.SetWindow(mkWindow("daily", "a", "12:00"))
			fx.f.SetWindow(mkWindow("now", "open", "09:00"))
			fx.f.SetLease(mkLease("leased", "fw-updater"))
			fx.f.SetMaintenance(&lullv1alpha1.NodeMaintenance{ObjectMeta: metav1.ObjectMeta{Name: "draining"},
				Spec:   lullv1alpha1.NodeMaintenanceSpec{NodeName: "draining", Classes: []string{"hardware"}},
				Status: lullv1alpha1.NodeMaintenanceStatus{Phase: lullv1alpha1.PhaseDraining}})
			cs := framework.NewCycleState()
			pod := mkPod("p")
			if _, st := fx.pl.PreFilter(context.Background(), cs, pod, nil); !st.IsSuccess() {
				t.Fatalf("prefilter: %v", st)
			}
			st := fx.pl.Filter(context.Background(), cs, pod, nodeInfo(tc.node))
			if st.Code() != tc.wantCode {
				t.Fatalf("code %v, want %v (%v)", st.Code(), tc.wantCode, st.Reasons())
			}
			if tc.wantReason != "" && !strings.Contains(strings.Join(st.Reasons(), ";"), tc.wantReason) {
				t.Errorf("reasons %q do not contain %q", st.Reasons(), tc.wantReason)
			}
		})
	}
}

func TestFilterWithoutPreFilterState(t *testing.T) {
	fx := newFixture(t, defaultArgs())
	st := fx.pl.Filter(context.Background(), framework.NewCycleState(), mkPod("p"), nodeInfo(mkNode("n", nil)))
	if st.Code() != fwk.Error {
		t.Fatalf("want Error without prefilter state, got %v", st)
	}
}

func TestScore(t *testing.T) {
	in2h := mkNode("in2h", map[string]string{"pool": "a", maint: "x"})   // window at 12:00
	in8h := mkNode("in8h", map[string]string{"pool": "b", maint: "x"})   // window at 18:00
	in30h := mkNode("in30h", map[string]string{"pool": "c", maint: "x"}) // beyond the 24h horizon (16:00 tomorrow)
	free := mkNode("free", map[string]string{"pool": "a"})
	for name, tc := range map[string]struct {
		pod  *v1.Pod
		want map[string]int64
	}{
		"no runtime: later is better": {pod: mkPod("p"), want: map[string]int64{"in2h": 8, "in8h": 33, "in30h": 100, "free": 100}},
		"runtime fits before the 2h window": {
			pod:  mkPod("p", func(p *v1.Pod) { p.Spec.ActiveDeadlineSeconds = ptr.To[int64](3600) }),
			want: map[string]int64{"in2h": 100, "in8h": 100, "in30h": 100, "free": 100}},
		"annotated runtime longer than 2h": {
			pod:  mkPod("p", func(p *v1.Pod) { p.Annotations = map[string]string{lullv1alpha1.ExpectedRuntimeAnnotation: "3h"} }),
			want: map[string]int64{"in2h": 8, "in8h": 100, "in30h": 100, "free": 100}},
		"shorter of annotation and deadline wins": {
			pod: mkPod("p", func(p *v1.Pod) {
				p.Annotations = map[string]string{lullv1alpha1.ExpectedRuntimeAnnotation: "90m"}
				p.Spec.ActiveDeadlineSeconds = ptr.To[int64](5 * 3600)
			}),
			want: map[string]int64{"in2h": 100, "in8h": 100, "in30h": 100, "free": 100}},
		"unparsable annotation is ignored": {
			pod:  mkPod("p", func(p *v1.Pod) { p.Annotations = map[string]string{lullv1alpha1.ExpectedRuntimeAnnotation: "soon"} }),
			want: map[string]int64{"in2h": 8, "in8h": 33, "in30h": 100, "free": 100}},
	} {
		t.Run(name, func(t *testing.T) {
			fx := newFixture(t, defaultArgs(), in2h, in8h, in30h, free)
			fx.f.SetWindow(mkWindow("a", "a", "12:00"))
			fx.f.SetWindow(mkWindow("b", "b", "18:00"))
			w := mkWindow("c", "c", "16:00")
			w.Spec.Schedule.Exclude = []lullv1alpha1.Exclusion{{StartDate: "2026-11-21", EndDate: "2026-11-21"}}
			fx.f.SetWindow(w)
			cs := framework.NewCycleState()
			candidates := []fwk.NodeInfo{nodeInfo(in2h), nodeInfo(in8h), nodeInfo(in30h), nodeInfo(free)}
			if st := fx.pl.PreScore(context.Background(), cs, tc.pod, candidates); !st.IsSuccess() {
				t.Fatalf("prescore: %v", st)
			}
			got := map[string]int64{}
			for _, n := range []*v1.Node{in2h, in8h, in30h, free} {
				s, st := fx.pl.Score(context.Background(), cs, tc.pod, nodeInfo(n))
				if !st.IsSuccess() {
					t.Fatalf("score %s: %v", n.Name, st)
				}
				got[n.Name] = s
			}
			if diff := cmp.Diff(tc.want, got); diff != "" {
				t.Errorf("scores (-want,+got):\n%s", diff)
			}
		})
	}
}

func TestPreScoreSkipsWhenNothingForecast(t *testing.T) {
	fx := newFixture(t, defaultArgs(), mkNode("n", nil))
	if st := fx.pl.PreScore(context.Background(), framework.NewCycleState(), mkPod("p"), nil); !st.IsSkip() {
		t.Fatalf("want Skip, got %v", st)
	}
}

// PreScore skips when no candidate node has anything forecast, though
// other nodes (filtered out, say) do: every candidate would score the
// maximum. A candidate with a forecast is scored.
func TestPreScoreSkipsWhenNoCandidateHasAForecast(t *testing.T) {
	plain, soon := mkNode("plain", map[string]string{"pool": "a"}), mkNode("soon", map[string]string{"pool": "a", lullv1alpha1.MaintenanceLabel: "kernel-update"})
	fx := newFixture(t, defaultArgs(), plain, soon)
	fx.f.SetWindow(mkWindow("daily", "a", "12:00"))
	if fx.f.Snapshot().Len() == 0 {
		t.Fatal("the fixture forecasts nothing")
	}
	if st := fx.pl.PreScore(context.Background(), framework.NewCycleState(), mkPod("p"), []fwk.NodeInfo{nodeInfo(plain)}); !st.IsSkip() {
		t.Fatalf("candidates without a forecast: want Skip, got %v", st)
	}
	if st := fx.pl.PreScore(context.Background(), framework.NewCycleState(), mkPod("p"), []fwk.NodeInfo{nodeInfo(plain), nodeInfo(soon)}); !st.IsSuccess() {
		t.Fatalf("a candidate with a forecast: want Success, got %v", st)
	}
}

func TestNormalizeScore(t *testing.T) {
	fx := newFixture(t, defaultArgs())
	scores := fwk.NodeScoreList{{Name: "a", Score: 10}, {Name: "b", Score: 20}}
	if st := fx.pl.NormalizeScore(context.Background(), nil, nil, scores); !st.IsSuccess() {
		t.Fatal(st)
	}
	if scores[0].Score != 50 || scores[1].Score != 100 {
		t.Errorf("normalized %+v", scores)
	}
}

func TestSignPod(t *testing.T) {
	fx := newFixture(t, defaultArgs())
	sign := func(p *v1.Pod) any {
		fr, st := fx.pl.SignPod(context.Background(), p)
		if !st.IsSuccess() || len(fr) != 1 {
			t.Fatalf("sign: %v %v", fr, st)
		}
		return fr[0].Value
	}
	a := sign(mkPod("a"))
	if b := sign(mkPod("b")); a != b {
		t.Errorf("same pods signed differently: %v %v", a, b)
	}
	if c := sign(mkPod("c", func(p *v1.Pod) { p.Spec.ActiveDeadlineSeconds = ptr.To[int64](60) })); a == c {
		t.Errorf("runtime not part of the signature")
	}
	if d := sign(mkPod("d", func(p *v1.Pod) {
		p.Spec.Tolerations = []v1.Toleration{{Key: "lull.dev/disruption", Operator: v1.TolerationOpExists}}
	})); a == d {
		t.Errorf("toleration not part of the signature")
	}
}

// The pod a leased node rejected is activated when the lease goes, and
// only then; a pod rejected elsewhere is not.
func TestPostFilterAndActivationOnEase(t *testing.T) {
	leased := mkNode("leased", nil)
	other := mkNode("other", nil)
	fx := newFixture(t, defaultArgs(), leased, other)
	fx.f.SetLease(mkLease("leased", "tool"))
	pod := mkPod("p")
	m := framework.NewDefaultNodeToStatus()
	m.Set("leased", fwk.NewStatus(fwk.UnschedulableAndUnresolvable, "leased").WithPlugin(Name))
	m.Set("other", fwk.NewStatus(fwk.UnschedulableAndUnresolvable, "taint").WithPlugin("TaintToleration"))
	if _, st := fx.pl.PostFilter(context.Background(), framework.NewCycleState(), pod, m); st.Code() != fwk.Unschedulable {
		t.Fatalf("postfilter status %v", st)
	}
	if !fx.pl.rejected.rejectedBy(pod, "leased") || fx.pl.rejected.rejectedBy(pod, "other") {
		t.Fatalf("rejections not recorded per node")
	}
	// Lease renewed: nothing eases.
	l := mkLease("leased", "tool")
	l.ResourceVersion = "2"
	fx.f.SetLease(l)
	if len(fx.h.active) != 0 {
		t.Fatalf("activated on renewal: %v", fx.h.active)
	}
	// Lease released: the pod is activated once.
	fx.f.DeleteLease("lull-system", "node-leased")
	if _, ok := fx.h.active["default/p"]; !ok || len(fx.h.active) != 1 {
		t.Fatalf("activated %v, want default/p", fx.h.active)
	}
	if fx.pl.rejected.rejectedBy(pod, "leased") {
		t.Errorf("rejection kept after activation")
	}
}

func TestActivationOnLeaseExpiry(t *testing.T) {
	fx := newFixture(t, defaultArgs(), mkNode("leased", nil))
	fx.f.SetLease(mkLease("leased", "tool"))
	pod := mkPod("p")
	fx.pl.rejected.add(pod, []string{"leased"})
	fx.clock.Step(61 * time.Second) // never renewed: expires by observation
	deadline := time.Now().Add(5 * time.Second)
	for {
		fx.h.mu.Lock()
		_, ok := fx.h.active["default/p"]
		fx.h.mu.Unlock()
		if ok {
			break
		}
		if time.Now().After(deadline) {
			t.Fatal("pod not activated after the lease expired")
		}
		time.Sleep(time.Millisecond)
	}
}

func TestQueueingHints(t *testing.T) {
	logger, _ := ktesting.NewTestContext(t)
	fx := newFixture(t, defaultArgs())
	pod := mkPod("p")
	fx.pl.rejected.add(pod, []string{"n1"})
	labelled := mkNode("n1", map[string]string{maint: "x"})
	unlabelled := mkNode("n1", map[string]string{})
	otherUnlabelled := mkNode("n2", map[string]string{})
	otherLabelled := mkNode("n2", map[string]string{maint: "x"})
	nm := func(node string, phase lullv1alpha1.MaintenancePhase, complete bool) *lullv1alpha1.NodeMaintenance {
		return &lullv1alpha1.NodeMaintenance{ObjectMeta: metav1.ObjectMeta{Name: node},
			Spec: lullv1alpha1.NodeMaintenanceSpec{NodeName: node, Classes: []string{"x"}, Complete: complete}, Status: lullv1alpha1.NodeMaintenanceStatus{Phase: phase}}
	}
	unstr := func(obj runtime.Object) *unstructured.Unstructured {
		raw, err := runtime.DefaultUnstructuredConverter.ToUnstructured(obj)
		if err != nil {
			t.Fatal(err)
		}
		return &unstructured.Unstructured{Object: raw}
	}
	w1 := mkWindow("w", "a", "12:00")
	w1status := w1.DeepCopy()
	w1status.Status.SelectedNodes = 3
	w2 := w1.DeepCopy()
	w2.Generation = 2

	for name, tc := range map[string]struct {
		fn       fwk.QueueingHintFn
		old, new interface{}
		want     fwk.QueueingHint
		wantErr  bool
	}{
		"node added without label":          {fn: fx.pl.isSchedulableAfterNodeChange, new: otherUnlabelled, want: fwk.Queue},
		"node added with label":             {fn: fx.pl.isSchedulableAfterNodeChange, new: otherLabelled, want: fwk.QueueSkip},
		"label removed from rejecting node": {fn: fx.pl.isSchedulableAfterNodeChange, old: labelled, new: unlabelled, want: fwk.Queue},
		"label removed elsewhere":           {fn: fx.pl.isSchedulableAfterNodeChange, old: otherLabelled, new: otherUnlabelled, want: fwk.QueueSkip},
		"label added":                       {fn: fx.pl.isSchedulableAfterNodeChange, old: unlabelled, new: labelled, want: fwk.QueueSkip},
		"node wrong type":                   {fn: fx.pl.isSchedulableAfterNodeChange, old: labelled, new: pod, want: fwk.Queue, wantErr: true},
		"maintenance completed":             {fn: fx.pl.isSchedulableAfterMaintenanceChange, old: nm("n1", lullv1alpha1.PhaseDrained, false), new: nm("n1", lullv1alpha1.PhaseCompleted, false), want: fwk.Queue},
		"maintenance uncordoning":           {fn: fx.pl.isSchedulableAfterMaintenanceChange, old: nm("n1", lullv1alpha1.PhaseDrained, false), new: nm("n1", lullv1alpha1.PhaseUncordoning, false), want: fwk.Queue},
		"maintenance marked complete":       {fn: fx.pl.isSchedulableAfterMaintenanceChange, old: nm("n1", lullv1alpha1.PhaseDrained, false), new: unstr(nm("n1", lullv1alpha1.PhaseDrained, true)), want: fwk.Queue},
		"maintenance deleted":               {fn: fx.pl.isSchedulableAfterMaintenanceChange, old: unstr(nm("n1", lullv1alpha1.PhaseDrained, false)), want: fwk.Queue},
		"maintenance progressing":           {fn: fx.pl.isSchedulableAfterMaintenanceChange, old: nm("n1", lullv1alpha1.PhaseCordoning, false), new: nm("n1", lullv1alpha1.PhaseDraining, false), want: fwk.QueueSkip},
		"maintenance completed elsewhere":   {fn: fx.pl.isSchedulableAfterMaintenanceChange, old: nm("n2", lullv1alpha1.PhaseDrained, false), new: nm("n2", lullv1alpha1.PhaseCompleted, false), want: fwk.QueueSkip},
		"maintenance wrong type":            {fn: fx.pl.isSchedulableAfterMaintenanceChange, old: nil, new: labelled, want: fwk.Queue, wantErr: true},
		"window spec changed":               {fn: fx.pl.isSchedulableAfterWindowChange, old: w1, new: unstr(w2), want: fwk.Queue},
		"window status only":                {fn: fx.pl.isSchedulableAfterWindowChange, old: w1, new: w1status, want: fwk.QueueSkip},
		"window deleted":                    {fn: fx.pl.isSchedulableAfterWindowChange, old: w1, want: fwk.Queue},
		"window added":                      {fn: fx.pl.isSchedulableAfterWindowChange, new: w1, want: fwk.Queue},
		"window wrong type":                 {fn: fx.pl.isSchedulableAfterWindowChange, old: w1, new: labelled, want: fwk.Queue, wantErr: true},
	} {
		t.Run(name, func(t *testing.T) {
			got, err := tc.fn(logger, pod, tc.old, tc.new)
			if (err != nil) != tc.wantErr {
				t.Fatalf("err = %v, wantErr %v", err, tc.wantErr)
			}
			if got != tc.want {
				t.Errorf("hint %v, want %v", got, tc.want)
			}
		})
	}
}

func TestEventsToRegister(t *testing.T) {
	fx := newFixture(t, defaultArgs())
	evs, err := fx.pl.EventsToRegister(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	var got []string
	for _, e := range evs {
		if e.QueueingHintFn == nil {
			t.Errorf("event %v without a hint", e.Event)
		}
		if strings.Contains(string(e.Event.Resource), "lease") {
			t.Errorf("Lease events registered with the framework: %v", e.Event)
		}
		got = append(got, string(e.Event.Resource))
	}
	want := []string{"Node", "nodemaintenances.v1alpha1.lull.dev", "maintenancewindows.v1alpha1.lull.dev"}
	if diff := cmp.Diff(want, got); diff != "" {
		t.Errorf("resources (-want,+got):\n%s", diff)
	}
}

func TestNewRejectsBadArgs(t *testing.T) {
	if _, err := New(context.Background(), &v1.Pod{}, nil); err == nil || !strings.Contains(err.Error(), "*v1.Pod") {
		t.Errorf("want a type error naming *v1.Pod, got %v", err)
	}
	bad := defaultArgs()
	bad.Horizon.Duration = 0
	if _, err := New(context.Background(), &bad, nil); err == nil || !strings.Contains(err.Error(), "horizon") {
		t.Errorf("want a validation error, got %v", err)
	}
}

// Until the forecast has synced, any node may be leased: PreFilter turns
// pods away and activates them once synced.
func TestPreFilterWaitsForSync(t *testing.T) {
	clk := testingclock.NewFakeClock(t0)
	f := forecast.New(forecast.Options{Settings: settings.Settings{NodesWithoutWindow: settings.NoWindowRestrictive}, Clock: clk})
	defer f.Stop()
	h := &fakeHandle{snapshot: cache.NewSnapshot(nil, nil), active: map[string]*v1.Pod{}}
	pl := newPlugin(defaultArgs(), h, f, clk)
	_, st := pl.PreFilter(context.Background(), framework.NewCycleState(), mkPod("early"), nil)
	if st.Code() != fwk.UnschedulableAndUnresolvable || !strings.Contains(st.Message(), "not yet read") {
		t.Fatalf("before sync: %v", st)
	}
	f.SetSynced()
	pl.activateWaiting()
	if _, ok := h.active["default/early"]; !ok {
		t.Fatalf("early pod not activated: %v", h.active)
	}
	if _, st := pl.PreFilter(context.Background(), framework.NewCycleState(), mkPod("late"), nil); !st.IsSuccess() {
		t.Fatalf("after sync: %v", st)
	}
}
