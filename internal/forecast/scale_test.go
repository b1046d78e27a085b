package forecast

import (
	"fmt"
	"runtime"
	"testing"
	"time"

	coordinationv1 "k8s.io/api/coordination/v1"
	v1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"
	testingclock "k8s.io/utils/clock/testing"

	lullv1alpha1 "lull.dev/lull/api/v1alpha1"
	"lull.dev/lull/internal/settings"
)

// The scale fixture: a cluster of scaleNodes nodes in five zones, each
// zone in its own IANA time zone, and scaleWindows MaintenanceWindows:
//   - one weekend window per zone (1,000 nodes each, with a holiday freeze),
//   - one daily rrule window per pool of 100 nodes (GPU nodes excluded),
//   - one window per rack of 10 nodes (daily, weekly or monthly),
//   - one weekly window per host for half the hosts,
//   - and the rest selecting teams that have no nodes in this cluster (one
//     set of windows deployed to many clusters).
//
// A node is selected by 3-4 windows. Every 5th node is requested (the
// maintenance label; every 25th also has a NodeMaintenance), every 20th is
// leased, and three DisruptionPolicies decide the classes.
const (
	scaleNodes   = 5000
	scaleWindows = 10000

	// Targets (issue 16).
	nodeEventTarget   = 50 * time.Microsecond
	leaseEventTarget  = 50 * time.Microsecond
	windowEventTarget = 50 * time.Millisecond
)

var scaleZones = []string{"Europe/Berlin", "America/New_York", "Asia/Tokyo", "Australia/Sydney", "America/Sao_Paulo"}

// fixtureKind varies the windows to measure the window engine's known
// slow paths at this scale.
type fixtureKind int

const (
	// production: the mix described above.
	production fixtureKind = iota
	// neverClosing: the zone windows are open around the clock (a daily
	// 24 h schedule), so combined periods run for as long as the others.
	neverClosing
	// longMinRemaining: every pool window asks for a minTimeRemaining
	// longer than any of its periods, the misconfiguration that makes the
	// forecast look ahead up to 400 periods.
	longMinRemaining
)

func (k fixtureKind) String() string {
	return [...]string{"production", "never-closing", "long-minTimeRemaining"}[k]
}

type scaleFixture struct {
	nodes      []*v1.Node // as listed
	relabelled []*v1.Node // the same nodes with the maintenance label toggled
	windows    []*lullv1alpha1.MaintenanceWindow
	moved      []*lullv1alpha1.MaintenanceWindow // the same windows an hour later
	leases     [][2]*coordinationv1.Lease        // two renewals of each lease
	nms        []*lullv1alpha1.NodeMaintenance
	policies   []*lullv1alpha1.DisruptionPolicy
	requested  []string
	leased     []string
}

func scaleNodeName(i int) string { return fmt.Sprintf("node-%04d", i) }

func newScaleFixture(kind fixtureKind) *scaleFixture {
	fx := &scaleFixture{}
	classes := []string{"kernel-update", "hardware", "ssh-keys", "firmware"}
	for i := 0; i < scaleNodes; i++ {
		name := scaleNodeName(i)
		lbls := map[string]string{
			"kubernetes.io/hostname":           name,
			"kubernetes.io/os":                 "linux",
			"kubernetes.io/arch":               "amd64",
			"topology.kubernetes.io/zone":      fmt.Sprintf("zone-%d", i/1000),
			"node.kubernetes.io/instance-type": []string{"m5.xlarge", "m5.2xlarge", "c5.xlarge", "gpu"}[i%4],
			"lull.dev/pool":                    fmt.Sprintf("pool-%d", i/100),
			"lull.dev/rack":                    fmt.Sprintf("rack-%d", i/10),
		}
		toggled := map[string]string{}
		for k, v := range lbls {
			toggled[k] = v
		}
		requested := i%5 == 0
		if requested {
			lbls[lullv1alpha1.MaintenanceLabel] = classes[(i/5)%len(classes)]
			fx.requested = append(fx.requested, name)
		} else {
			toggled[lullv1alpha1.MaintenanceLabel] = classes[(i/5)%len(classes)]
		}
		fx.nodes = append(fx.nodes, node(name, lbls))
		fx.relabelled = append(fx.relabelled, node(name, toggled))
		if i%25 == 0 {
			fx.nms = append(fx.nms, scaleMaintenance(name, i, classes[(i/5)%len(classes)]))
		}
		if i%20 == 7 || i%100 == 0 {
			l1, l2 := leaseFor(name, "tool", "1"), leaseFor(name, "tool", "2")
			fx.leases = append(fx.leases, [2]*coordinationv1.Lease{l1, l2})
			fx.leased = append(fx.leased, name)
		}
	}
	for j := 0; j < scaleWindows; j++ {
		w := scaleWindow(j, kind)
		m := w.DeepCopy()
		if s := m.Spec.Schedule; s != nil {
			h, mm, _ := parseHM(s.StartTime)
			s.StartTime = fmt.Sprintf("%02d:%02d", (h+1)%24, mm)
		}
		fx.windows, fx.moved = append(fx.windows, w), append(fx.moved, m)
	}
	fx.policies = []*lullv1alpha1.DisruptionPolicy{
		scalePolicy("ssh", lullv1alpha1.DisruptionRule{Name: "keys", Class: "ssh-keys", Action: lullv1alpha1.ActionNone}),
		scalePolicy("hw", lullv1alpha1.DisruptionRule{Name: "hw", Class: "hardware", Action: lullv1alpha1.ActionDrain}),
		scalePolicy("fw", lullv1alpha1.DisruptionRule{Name: "fw", ClassPattern: "firm*", Action: lullv1alpha1.ActionDrain}),
	}
	return fx
}

func parseHM(s string) (int, int, error) {
	var h, m int
	_, err := fmt.Sscanf(s, "%d:%d", &h, &m)
	return h, m, err
}

func scaleMaintenance(name string, i int, class string) *lullv1alpha1.NodeMaintenance {
	phases := []lullv1alpha1.MaintenancePhase{lullv1alpha1.PhaseWaitingForWindow, lullv1alpha1.PhasePending, lullv1alpha1.PhaseDraining}
	nm := &lullv1alpha1.NodeMaintenance{ObjectMeta: metav1.ObjectMeta{Name: name},
		Spec:   lullv1alpha1.NodeMaintenanceSpec{NodeName: name, Classes: []string{class}},
		Status: lullv1alpha1.NodeMaintenanceStatus{Phase: phases[(i/25)%len(phases)]}}
	if i%50 == 0 {
		nm.Spec.Deadline = &metav1.Time{Time: t0.Add(14 * 24 * time.Hour)}
	}
	return nm
}

func scalePolicy(name string, rule lullv1alpha1.DisruptionRule) *lullv1alpha1.DisruptionPolicy {
	return &lullv1alpha1.DisruptionPolicy{ObjectMeta: metav1.ObjectMeta{Name: name},
		Spec: lullv1alpha1.DisruptionPolicySpec{Rules: []lullv1alpha1.DisruptionRule{rule}}}
}

// Window tiers by index.
const (
	zoneWindows  = 5
	poolWindows  = 50
	rackWindows  = 500
	hostWindows  = scaleNodes / 2
	firstPool    = zoneWindows
	firstRack    = firstPool + poolWindows
	firstHost    = firstRack + rackWindows
	firstForeign = firstHost + hostWindows
)

func scaleWindow(j int, kind fixtureKind) *lullv1alpha1.MaintenanceWindow {
	mw := &lullv1alpha1.MaintenanceWindow{ObjectMeta: metav1.ObjectMeta{Name: fmt.Sprintf("w-%05d", j), Generation: 1},
		Spec: lullv1alpha1.MaintenanceWindowSpec{Strategy: lullv1alpha1.StrategySchedule}}
	sel := func(k, v string) *metav1.LabelSelector {
		return &metav1.LabelSelector{MatchLabels: map[string]string{k: v}}
	}
	sched := func(zone int, start string, d time.Duration) *lullv1alpha1.Schedule {
		return &lullv1alpha1.Schedule{TimeZone: scaleZones[zone%len(scaleZones)], StartTime: start,
			Duration: lullv1alpha1.Duration{Duration: d}}
	}
	weekend := &lullv1alpha1.Recurrence{Frequency: lullv1alpha1.Weekly,
		DaysOfWeek: []lullv1alpha1.Weekday{lullv1alpha1.Saturday, lullv1alpha1.Sunday}}
	switch {
	case j < firstPool:
		mw.Spec.NodeSelector = sel("topology.kubernetes.io/zone", fmt.Sprintf("zone-%d", j))
		mw.Spec.Schedule = sched(j, "00:00", 24*time.Hour)
		mw.Spec.Schedule.Recurrence = weekend
		if kind == neverClosing {
			mw.Spec.Schedule.Recurrence = &lullv1alpha1.Recurrence{Frequency: lullv1alpha1.Daily}
		}
		mw.Spec.Schedule.Exclude = []lullv1alpha1.Exclusion{{StartDate: "2026-12-19", EndDate: "2027-01-03", Reason: "freeze"}}
	case j < firstRack:
		k := j - firstPool
		mw.Spec.NodeSelector = &metav1.LabelSelector{
			MatchLabels: map[string]string{"lull.dev/pool": fmt.Sprintf("pool-%d", k)},
			MatchExpressions: []metav1.LabelSelectorRequirement{{Key: "node.kubernetes.io/instance-type",
				Operator: metav1.LabelSelectorOpNotIn, Values: []string{"gpu"}}}}
		mw.Spec.Schedule = sched(k/10, "01:00", 6*time.Hour)
		mw.Spec.Schedule.RRule = "FREQ=DAILY"
		if k%2 == 0 {
			mw.Spec.MinTimeRemaining = lullv1alpha1.NewDuration(time.Hour)
		}
		if kind == longMinRemaining {
			mw.Spec.MinTimeRemaining = lullv1alpha1.NewDuration(7 * time.Hour)
		}
	case j < firstHost:
		k := j - firstRack
		mw.Spec.NodeSelector = sel("lull.dev/rack", fmt.Sprintf("rack-%d", k))
		mw.Spec.Schedule = sched(k/100, "00:00", 12*time.Hour)
		mw.Spec.Schedule.RRule = []string{"FREQ=DAILY", "FREQ=WEEKLY;BYDAY=SA,SU", "FREQ=MONTHLY;BYDAY=1SA,3SA"}[k%3]
	case j < firstForeign:
		k := j - firstHost
		mw.Spec.NodeSelector = &metav1.LabelSelector{MatchExpressions: []metav1.LabelSelectorRequirement{{
			Key: "kubernetes.io/hostname", Operator: metav1.LabelSelectorOpIn, Values: []string{scaleNodeName(2 * k)}}}}
		mw.Spec.Schedule = sched(2*k/1000, "02:00", 4*time.Hour)
		mw.Spec.Schedule.Recurrence = &lullv1alpha1.Recurrence{Frequency: lullv1alpha1.Weekly,
			DaysOfWeek: []lullv1alpha1.Weekday{lullv1alpha1.Saturday, lullv1alpha1.Sunday}}
	default:
		k := j - firstForeign
		mw.Spec.NodeSelector = sel("example.com/team", fmt.Sprintf("team-%d", k))
		mw.Spec.Schedule = sched(k, fmt.Sprintf("%02d:00", k%24), time.Duration(1+k%8)*time.Hour)
		mw.Spec.Schedule.RRule = []string{"FREQ=DAILY", "FREQ=WEEKLY;BYDAY=TU,TH", "FREQ=MONTHLY;BYMONTHDAY=1,15"}[k%3]
	}
	return mw
}

// scaleClock is a clock whose Now the benchmark moves by hand, without
// firing the forecast's timer (a fake clock's Step runs timers), so lease
// renewals see time pass as in production.
type scaleClock struct {
	*testingclock.FakeClock
	now time.Time
}

func (c *scaleClock) Now() time.Time { return c.now }

// build feeds the fixture to a new forecast in informer order (policies,
// windows, nodes, requests, leases) and marks it synced.
func (fx *scaleFixture) build() (*Forecast, *scaleClock) {
	clk := &scaleClock{FakeClock: testingclock.NewFakeClock(t0), now: t0}
	f := New(Options{Settings: settings.Settings{NodesWithoutWindow: settings.NoWindowRestrictive}, Clock: clk})
	for _, p := range fx.policies {
		f.SetPolicy(p)
	}
	for _, w := range fx.windows {
		f.SetWindow(w)
	}
	for _, n := range fx.nodes {
		f.SetNode(n)
	}
	for _, nm := range fx.nms {
		f.SetMaintenance(nm)
	}
	for _, l := range fx.leases {
		f.SetLease(l[0])
	}
	f.SetSynced()
	return f, clk
}

// inputsOf are the inputs of the named nodes' forecasts, with their
// windows chosen.
func inputsOf(f *Forecast, names []string) []Input {
	out := make([]Input, len(names))
	for i, name := range names {
		out[i] = Input{Name: name, Labels: f.labels[name], LabelKey: f.opts.MaintenanceLabel, NM: f.nms[name],
			Policies: f.rules, Windows: f.windowsForLocked(f.labels[name], f.nms[name])}
		if o := f.leases[name]; o != nil {
			out[i].Lease = &Lease{Holder: *o.lease.Spec.HolderIdentity, Operation: "reboot",
				Expires: o.expires}
		}
	}
	return out
}

func reportAgainst(b *testing.B, perOp, target, baseline float64) {
	b.ReportMetric(perOp/target, "x-target")
	if baseline > 0 {
		b.ReportMetric(perOp/baseline, "x-baseline")
	}
}

func nsPerOp(b *testing.B) float64 { return float64(b.Elapsed().Nanoseconds()) / float64(b.N) }

// BenchmarkScaleNodeEvent toggles the maintenance label of one requested
// node after another, the node event that changes a forecast. Baseline:
// Compute for the same node with its windows already chosen.
func BenchmarkScaleNodeEvent(b *testing.B) {
	for _, kind := range []fixtureKind{production, neverClosing, longMinRemaining} {
		b.Run("fixture="+kind.String(), func(b *testing.B) {
			fx := newScaleFixture(kind)
			f, clk := fx.build()
			defer f.Stop()
			idx := make([]int, 0, len(fx.requested))
			for i := range fx.nodes {
				if i%5 == 0 {
					idx = append(idx, i)
				}
			}
			var baseline float64
			b.Run("baseline=compute", func(b *testing.B) {
				windows := make([][]NamedWindow, len(idx))
				for k, i := range idx {
					windows[k] = f.windowsForLocked(fx.nodes[i].Labels, nil)
				}
				b.ReportAllocs()
				b.ResetTimer()
				for n := 0; n < b.N; n++ {
					k := n % len(idx)
					name := fx.nodes[idx[k]].Name
					Compute(clk.now, Input{Name: name, Labels: fx.nodes[idx[k]].Labels, LabelKey: f.opts.MaintenanceLabel,
						NM: f.nms[name], Policies: f.rules, Windows: windows[k]})
				}
				baseline = nsPerOp(b)
			})
			b.Run("event=label", func(b *testing.B) {
				cur := make([]bool, len(idx)) // false: as listed
				b.ReportAllocs()
				b.ResetTimer()
				for n := 0; n < b.N; n++ {
					k := n % len(idx)
					if cur[k] {
						f.SetNode(fx.nodes[idx[k]])
					} else {
						f.SetNode(fx.relabelled[idx[k]])
					}
					cur[k] = !cur[k]
				}
				reportAgainst(b, nsPerOp(b), float64(nodeEventTarget), baseline)
			})
		})
	}
}

// BenchmarkScaleLeaseEvent renews one held lease after another, a
// millisecond apart (each renewal moves the lease's expiry). Baseline:
// Compute for the same node.
func BenchmarkScaleLeaseEvent(b *testing.B) {
	fx := newScaleFixture(production)
	f, clk := fx.build()
	defer f.Stop()
	var baseline float64
	b.Run("baseline=compute", func(b *testing.B) {
		in := inputsOf(f, fx.leased)
		b.ReportAllocs()
		b.ResetTimer()
		for n := 0; n < b.N; n++ {
			Compute(clk.now, in[n%len(in)])
		}
		baseline = nsPerOp(b)
	})
	b.Run("event=renew", func(b *testing.B) {
		b.ReportAllocs()
		for n := 0; n < b.N; n++ {
			clk.now = clk.now.Add(time.Millisecond)
			f.SetLease(fx.leases[n%len(fx.leases)][(n/len(fx.leases)+1)%2])
		}
		reportAgainst(b, nsPerOp(b), float64(leaseEventTarget), baseline)
	})
}

// BenchmarkScaleWindowChange moves one window's start by an hour and back,
// for a window of each tier. Baseline: computing the requested nodes the
// window selects, each with its windows already chosen (measured once per
// run, before the first change).
func BenchmarkScaleWindowChange(b *testing.B) {
	for _, kind := range []fixtureKind{production, longMinRemaining} {
		fx := newScaleFixture(kind)
		f, clk := fx.build()
		for _, tier := range []struct {
			name string
			j    int
		}{{"zone", 0}, {"pool", firstPool + 1}, {"rack", firstRack + 1}, {"host", firstHost + 1}, {"foreign", firstForeign + 1}} {
			b.Run(fmt.Sprintf("fixture=%s/window=%s", kind, tier.name), func(b *testing.B) {
				sel := f.windows[fx.windows[tier.j].Name].selector
				var selected []string
				for _, name := range fx.requested {
					if sel.Matches(labels.Set(f.labels[name])) {
						selected = append(selected, name)
					}
				}
				in := inputsOf(f, selected)
				start := time.Now()
				for i := range in {
					Compute(clk.now, in[i])
				}
				baseline := float64(time.Since(start).Nanoseconds())
				b.ReportAllocs()
				b.ResetTimer()
				for n := 0; n < b.N; n++ {
					if n%2 == 0 {
						f.SetWindow(fx.moved[tier.j])
					} else {
						f.SetWindow(fx.windows[tier.j])
					}
				}
				b.StopTimer()
				f.SetWindow(fx.windows[tier.j]) // as listed for the next run
				b.ReportMetric(float64(len(selected)), "requested-nodes-selected")
				reportAgainst(b, nsPerOp(b), float64(windowEventTarget), baseline)
			})
		}
		f.Stop()
	}
}

// BenchmarkScaleBuild builds the forecast from the whole fixture (as after
// a restart) and reports the heap it holds per node: the heap in use after
// building, less before, over scaleNodes. The informer objects are
// allocated before and not counted (the forecast keeps references only).
func BenchmarkScaleBuild(b *testing.B) {
	fx := newScaleFixture(production)
	var perNode float64
	b.ReportAllocs()
	for n := 0; n < b.N; n++ {
		before := heapInUse()
		f, _ := fx.build()
		after := heapInUse()
		perNode = float64(after-before) / scaleNodes
		runtime.KeepAlive(f)
		f.Stop()
	}
	b.ReportMetric(perNode, "heap-bytes/node")
	b.ReportMetric(float64(len(fx.requested)), "requested")
	b.ReportMetric(float64(len(fx.leased)), "leased")
}

func heapInUse() int64 {
	runtime.GC()
	var m runtime.MemStats
	runtime.ReadMemStats(&m)
	return int64(m.HeapAlloc)
}
