package forecast

import (
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	coordinationv1 "k8s.io/api/coordination/v1"
	v1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/client-go/tools/cache"
	testingclock "k8s.io/utils/clock/testing"
	"k8s.io/utils/ptr"

	lullv1alpha1 "lull.dev/lull/api/v1alpha1"
	"lull.dev/lull/internal/settings"
	"lull.dev/lull/internal/window"
	"lull.dev/lull/lease"
)

// Saturday 2026-11-21 10:00 UTC.
var t0 = time.Date(2026, 11, 21, 10, 0, 0, 0, time.UTC)

func node(name string, lbls map[string]string) *v1.Node {
	return &v1.Node{ObjectMeta: metav1.ObjectMeta{Name: name, Labels: lbls}}
}

func leaseFor(nodeName, holder string, rv string) *coordinationv1.Lease {
	return &coordinationv1.Lease{
		ObjectMeta: metav1.ObjectMeta{Name: "node-" + nodeName, Namespace: lease.DefaultNamespace, ResourceVersion: rv,
			Annotations: map[string]string{"lull.dev/operation": "reboot"}},
		Spec: coordinationv1.LeaseSpec{HolderIdentity: ptr.To(holder), LeaseDurationSeconds: ptr.To[int32](60)},
	}
}

// daily 12:00-14:00 UTC window selecting pool=a.
func dailyWindow(name string) *lullv1alpha1.MaintenanceWindow {
	return &lullv1alpha1.MaintenanceWindow{
		ObjectMeta: metav1.ObjectMeta{Name: name, Generation: 1},
		Spec: lullv1alpha1.MaintenanceWindowSpec{
			NodeSelector: &metav1.LabelSelector{MatchLabels: map[string]string{"pool": "a"}},
			Strategy:     lullv1alpha1.StrategySchedule,
			Schedule: &lullv1alpha1.Schedule{
				TimeZone:   "UTC",
				Recurrence: &lullv1alpha1.Recurrence{Frequency: lullv1alpha1.Daily},
				StartTime:  "12:00",
				Duration:   lullv1alpha1.Duration{Duration: 2 * time.Hour},
			},
		},
	}
}

type recorder struct {
	mu      sync.Mutex
	changes []Change
}

func (r *recorder) record(c []Change) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.changes = append(r.changes, c...)
}

func (r *recorder) take() []Change {
	r.mu.Lock()
	defer r.mu.Unlock()
	c := r.changes
	r.changes = nil
	return c
}

func newForecast(t *testing.T, noWindowPermits bool) (*Forecast, *testingclock.FakeClock, *recorder) {
	t.Helper()
	clk := testingclock.NewFakeClock(t0)
	policy := settings.NoWindowRestrictive
	if noWindowPermits {
		policy = settings.NoWindowPermissive
	}
	f := New(Options{Settings: settings.Settings{NodesWithoutWindow: policy}, Clock: clk})
	rec := &recorder{}
	f.OnChange(rec.record)
	f.SetSynced()
	t.Cleanup(f.Stop)
	return f, clk, rec
}

func TestCompute(t *testing.T) {
	w := NamedWindow{Name: "daily", Window: mustWindow(t, dailyWindow("daily"))}
	lbl := map[string]string{"pool": "a", lullv1alpha1.MaintenanceLabel: "kernel-update"}
	nm := func(phase lullv1alpha1.MaintenancePhase, deadline *time.Time, complete bool) *lullv1alpha1.NodeMaintenance {
		m := &lullv1alpha1.NodeMaintenance{ObjectMeta: metav1.ObjectMeta{Name: "n1"},
			Spec:   lullv1alpha1.NodeMaintenanceSpec{NodeName: "n1", Classes: []string{"hardware"}, Complete: complete},
			Status: lullv1alpha1.NodeMaintenanceStatus{Phase: phase}}
		if deadline != nil {
			m.Spec.Deadline = &metav1.Time{Time: *deadline}
		}
		return m
	}
	lease := &Lease{Holder: "tool", Operation: "reboot", Expires: t0.Add(time.Minute)}
	for name, tc := range map[string]struct {
		now        time.Time
		in         Input
		wantNil    bool
		certain    bool
		open       bool
		disruption time.Time
		reason     string
		validUntil time.Time
	}{
		"nothing": {now: t0, in: Input{Labels: map[string]string{"pool": "a"}}, wantNil: true},
		"leased": {now: t0, in: Input{Lease: lease}, certain: true, disruption: t0,
			reason: `leased for disruption by "tool" for reboot`, validUntil: t0.Add(time.Minute)},
		"lease expired by observation": {now: t0.Add(time.Minute), in: Input{Lease: lease}, wantNil: true},
		"label, window closed": {now: t0, in: Input{Labels: lbl, Windows: []NamedWindow{w}},
			disruption: t0.Add(2 * time.Hour), reason: "from 2026-11-21T12:00:00Z", validUntil: t0.Add(2 * time.Hour)},
		"label, window open": {now: t0.Add(150 * time.Minute), in: Input{Labels: lbl, Windows: []NamedWindow{w}},
			open: true, disruption: t0.Add(150 * time.Minute), reason: "and its window is open", validUntil: t0.Add(4 * time.Hour)},
		"label, no window, permissive default": {now: t0, in: Input{Labels: lbl, NoWindowOK: true},
			open: true, disruption: t0, reason: "and its window is open"},
		"label, no window, restrictive default": {now: t0, in: Input{Labels: lbl},
			reason: "no window opens within the horizon"},
		"label, windows not read yet": {now: t0, in: Input{Labels: lbl, WindowsUnknown: true},
			open: true, disruption: t0, reason: "not read yet"},
		"object draining": {now: t0, in: Input{NM: nm(lullv1alpha1.PhaseDraining, nil, false), Windows: []NamedWindow{w}},
			certain: true, disruption: t0, reason: "under maintenance n1 (class hardware, phase Draining)", validUntil: t0.Add(2 * time.Hour)},
		"deadline before window": {now: t0, in: Input{NM: nm(lullv1alpha1.PhaseWaitingForWindow, ptr.To(t0.Add(time.Hour)), false), Windows: []NamedWindow{w}},
			disruption: t0.Add(time.Hour), reason: "from 2026-11-21T11:00:00Z", validUntil: t0.Add(time.Hour)},
		"deadline passed": {now: t0.Add(time.Hour), in: Input{NM: nm(lullv1alpha1.PhaseWaitingForWindow, ptr.To(t0), false), Windows: []NamedWindow{w}},
			open: true, disruption: t0.Add(time.Hour), reason: "and its deadline has passed", validUntil: t0.Add(2 * time.Hour)},
		"completed object, label gone": {now: t0, in: Input{NM: nm(lullv1alpha1.PhaseCompleted, nil, false)}, wantNil: true},
		"completed object, new label": {now: t0, in: Input{Labels: lbl, NM: nm(lullv1alpha1.PhaseCompleted, nil, false), NoWindowOK: true},
			open: true, disruption: t0, reason: "(class kernel-update) and its window is open"},
		"marked complete, label lingers": {now: t0, in: Input{Labels: lbl, NM: nm(lullv1alpha1.PhaseDrained, nil, true)}, wantNil: true},
	} {
		t.Run(name, func(t *testing.T) {
			tc.in.Name, tc.in.LabelKey = "n1", lullv1alpha1.MaintenanceLabel
			n := Compute(tc.now, tc.in)
			if tc.wantNil {
				if n.Lease != nil || n.Maintenance != nil {
					t.Fatalf("want nothing forecast, got %+v", n)
				}
				return
			}
			if n.Certain != tc.certain || n.WindowOpen != tc.open || !n.Disruption.Equal(tc.disruption) {
				t.Errorf("certain=%v open=%v disruption=%v, want %v %v %v", n.Certain, n.WindowOpen, n.Disruption, tc.certain, tc.open, tc.disruption)
			}
			if !strings.Contains(n.Reason, tc.reason) {
				t.Errorf("reason %q does not contain %q", n.Reason, tc.reason)
			}
			if !n.ValidUntil().Equal(tc.validUntil) {
				t.Errorf("valid until %v, want %v", n.ValidUntil(), tc.validUntil)
			}
		})
	}
}

func mustWindow(t *testing.T, mw *lullv1alpha1.MaintenanceWindow) *window.Window {
	t.Helper()
	f := New(Options{})
	f.SetWindow(mw)
	return f.windows[mw.Name].window
}

func TestEventsAndTransitions(t *testing.T) {
	f, clk, rec := newForecast(t, true)
	f.SetWindow(dailyWindow("daily"))
	f.SetNode(node("n1", map[string]string{"pool": "a"}))
	f.SetNode(node("n2", map[string]string{"pool": "b"}))
	if got := rec.take(); len(got) != 0 {
		t.Fatalf("unlabelled nodes changed the forecast: %+v", got)
	}
	if f.Snapshot().Len() != 0 {
		t.Fatalf("snapshot not empty")
	}

	// Labelling n1 requests maintenance; its window opens at 12:00.
	f.SetNode(node("n1", map[string]string{"pool": "a", lullv1alpha1.MaintenanceLabel: "kernel-update"}))
	snap := f.Snapshot()
	n1 := snap.Get("n1")
	if !n1.Requested() || n1.WindowOpen || !n1.Disruption.Equal(t0.Add(2*time.Hour)) {
		t.Fatalf("n1 after label: %+v", n1)
	}
	if c := rec.take(); len(c) != 1 || c[0].Old != nil || c[0].Eased() {
		t.Fatalf("changes after label: %+v", c)
	}
	// A heartbeat (same labels) changes nothing.
	f.SetNode(node("n1", map[string]string{"pool": "a", lullv1alpha1.MaintenanceLabel: "kernel-update"}))
	if f.Snapshot() != snap && len(rec.take()) != 0 {
		t.Fatalf("a heartbeat changed the forecast")
	}

	// At 12:00 the timer fires and the window is open.
	clk.Step(2 * time.Hour)
	waitFor(t, func() bool { n := f.Snapshot().Get("n1"); return n != nil && n.WindowOpen })
	if c := rec.take(); len(c) != 1 || c[0].Eased() {
		t.Fatalf("changes at window open: %+v", c)
	}
	// At 14:00 it closes again: that eases the node.
	clk.Step(2 * time.Hour)
	waitFor(t, func() bool { n := f.Snapshot().Get("n1"); return n != nil && !n.WindowOpen })
	if c := rec.take(); len(c) != 1 || !c[0].Eased() {
		t.Fatalf("changes at window close: %+v", c)
	}

	// A lease on n2 (unselected by any window) makes it certain; it expires
	// by observation after its 60 s duration without renewal.
	f.SetLease(leaseFor("n2", "tool", "1"))
	if n := f.Snapshot().Get("n2"); !n.Leased() || !n.Certain {
		t.Fatalf("n2 leased: %+v", n)
	}
	rec.take()
	clk.Step(30 * time.Second)
	f.SetLease(leaseFor("n2", "tool", "2")) // renewal resets the observation
	clk.Step(45 * time.Second)
	if n := f.Snapshot().Get("n2"); !n.Leased() {
		t.Fatalf("renewed lease expired early")
	}
	clk.Step(20 * time.Second)
	waitFor(t, func() bool { return f.Snapshot().Get("n2") == nil })
	if c := rec.take(); len(c) != 1 || !c[0].Eased() || c[0].Node != "n2" {
		t.Fatalf("changes at expiry: %+v", c)
	}

	// Leases outside the lease namespace or not named node-* are ignored.
	other := leaseFor("n2", "kubelet", "3")
	other.Namespace = "kube-node-lease"
	f.SetLease(other)
	f.SetLease(&coordinationv1.Lease{ObjectMeta: metav1.ObjectMeta{Name: "lull-drainer", Namespace: lease.DefaultNamespace}})
	if f.Snapshot().Get("n2") != nil {
		t.Fatalf("foreign lease counted")
	}

	// Removing the label eases n1; deleting a window re-evaluates.
	f.SetNode(node("n1", map[string]string{"pool": "a"}))
	if f.Snapshot().Get("n1") != nil {
		t.Fatalf("n1 still forecast after label removal")
	}
}

func TestLookupSeesLabelBeforeForecast(t *testing.T) {
	f, _, _ := newForecast(t, true)
	// The scheduler's informer delivers a node that registers already
	// labelled before the forecast's handler has run.
	n := node("fresh", map[string]string{lullv1alpha1.MaintenanceLabel: "hardware"})
	got := f.Snapshot().Lookup(n)
	if got == nil || !got.WindowOpen {
		t.Fatalf("lookup of a labelled unseen node: %+v", got)
	}
	// And a label removal the forecast has not seen eases at once.
	f.SetNode(n)
	if got := f.Snapshot().Lookup(node("fresh", nil)); got != nil {
		t.Fatalf("lookup after unseen label removal: %+v", got)
	}
}

// Lookup computes a node the snapshot disagrees with once per snapshot:
// the scheduler calls it per pod and per node, and a computation takes
// the forecast's lock. The remembered result still follows the caller's
// label and runs out with time.
func TestLookupKeepsLabelledQuietNodes(t *testing.T) {
	f, _, _ := newForecast(t, false)
	f.SetPolicy(&lullv1alpha1.DisruptionPolicy{ObjectMeta: metav1.ObjectMeta{Name: "p"}, Spec: lullv1alpha1.DisruptionPolicySpec{
		Rules: []lullv1alpha1.DisruptionRule{{Name: "keys", Class: "ssh-keys", Action: lullv1alpha1.ActionNone}}}})
	f.SetWindow(dailyWindow("daily"))
	done := node("done", map[string]string{lullv1alpha1.MaintenanceLabel: "ssh-keys", "pool": "a"})
	f.SetNode(done)
	snap := f.Snapshot()
	require.Nil(t, snap.Lookup(done), "ssh-keys needs nothing")
	require.Nil(t, snap.Get("done"))
	require.Zero(t, snap.Len(), "a quiet node is not counted")
	require.Empty(t, snap.Nodes())
	require.Zero(t, testing.AllocsPerRun(100, func() { snap.Lookup(done) }), "a labelled node with nothing forecast is not computed again")

	// The caller's label changed before the forecast saw it: computed anew.
	kernel := node("done", map[string]string{lullv1alpha1.MaintenanceLabel: "kernel-update", "pool": "a"})
	got := snap.Lookup(kernel)
	require.NotNil(t, got)
	require.False(t, got.WindowOpen, "the daily window opens at 12:00")

	// Once the forecast has seen it, the lookup is the stored forecast.
	f.SetNode(kernel)
	snap = f.Snapshot()
	require.Same(t, snap.Get("done"), snap.Lookup(kernel))
	require.Equal(t, 1, snap.Len())

	// The label goes: nothing is kept.
	f.SetNode(node("done", map[string]string{"pool": "a"}))
	require.Nil(t, f.Snapshot().Lookup(done), "the caller's stale label is computed: ssh-keys needs nothing")
	require.Nil(t, f.Snapshot().nodes.entry("done"))
}

func TestWindowsUnknownUntilSynced(t *testing.T) {
	clk := testingclock.NewFakeClock(t0)
	f := New(Options{Settings: settings.Settings{NodesWithoutWindow: settings.NoWindowRestrictive}, Clock: clk})
	defer f.Stop()
	f.SetNode(node("n1", map[string]string{lullv1alpha1.MaintenanceLabel: "x"}))
	if n := f.Snapshot().Get("n1"); !n.WindowOpen {
		t.Fatalf("before sync a requested node must count as open: %+v", n)
	}
	f.SetSynced()
	if n := f.Snapshot().Get("n1"); n.WindowOpen {
		t.Fatalf("after sync the restrictive default applies: %+v", n)
	}
}

func TestInvalidWindowFailsClosed(t *testing.T) {
	f, _, _ := newForecast(t, true)
	bad := dailyWindow("bad")
	bad.Spec.Schedule.TimeZone = "Mars/Olympus"
	f.SetWindow(bad)
	f.SetNode(node("n1", map[string]string{"pool": "a", lullv1alpha1.MaintenanceLabel: "x"}))
	n := f.Snapshot().Get("n1")
	if n.WindowOpen || n.Windows == nil || n.Windows.Permitted {
		t.Fatalf("invalid window permitted: %+v", n.Windows)
	}
}

func TestHandlersAcceptTypedUnstructuredAndTombstones(t *testing.T) {
	f, _, _ := newForecast(t, true)
	h := f.Handlers()
	nm := &lullv1alpha1.NodeMaintenance{
		TypeMeta:   metav1.TypeMeta{APIVersion: "lull.dev/v1alpha1", Kind: "NodeMaintenance"},
		ObjectMeta: metav1.ObjectMeta{Name: "n1"},
		Spec:       lullv1alpha1.NodeMaintenanceSpec{NodeName: "n1", Classes: []string{"hardware"}},
		Status:     lullv1alpha1.NodeMaintenanceStatus{Phase: lullv1alpha1.PhaseDraining},
	}
	raw, err := runtime.DefaultUnstructuredConverter.ToUnstructured(nm)
	if err != nil {
		t.Fatal(err)
	}
	h.Maintenances.OnAdd(&unstructured.Unstructured{Object: raw}, false)
	if n := f.Snapshot().Get("n1"); !n.Certain {
		t.Fatalf("unstructured NodeMaintenance not applied: %+v", n)
	}
	h.Maintenances.OnDelete(cache.DeletedFinalStateUnknown{Key: "n1", Obj: nm})
	if n := f.Snapshot().Get("n1"); n != nil {
		t.Fatalf("tombstone not applied: %+v", n)
	}
	// Wrong types are dropped, not a panic.
	h.Nodes.OnAdd(nm, false)
	h.Leases.OnUpdate(nil, "not an object")
	h.Windows.OnDelete(42)
}

func waitFor(t *testing.T, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(5 * time.Second)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatal("condition not met within 5s")
		}
		time.Sleep(time.Millisecond)
	}
}

// A requested class whose DisruptionPolicy action is None disrupts
// nothing: the node has nothing to forecast, for the scheduler as for the
// drainer, until a policy change makes the class disruptive (which eases
// nothing and restricts the node again), or the request has started.
func TestPolicyNoneIsNoDisruption(t *testing.T) {
	f, _, rec := newForecast(t, true)
	none := &lullv1alpha1.DisruptionPolicy{ObjectMeta: metav1.ObjectMeta{Name: "p"}, Spec: lullv1alpha1.DisruptionPolicySpec{
		Rules: []lullv1alpha1.DisruptionRule{{Name: "keys", Class: "ssh-keys", Action: lullv1alpha1.ActionNone}}}}
	f.SetPolicy(none)
	f.SetNode(node("n1", map[string]string{lullv1alpha1.MaintenanceLabel: "ssh-keys"}))
	f.SetNode(node("n2", map[string]string{lullv1alpha1.MaintenanceLabel: "kernel-update"}))
	require.Nil(t, f.Snapshot().Get("n1"), "ssh-keys needs nothing")
	require.True(t, f.Snapshot().Get("n2").WindowOpen, "kernel-update drains")
	rec.take()

	drain := none.DeepCopy()
	drain.Spec.Rules[0].Action = lullv1alpha1.ActionDrain
	f.SetPolicy(drain)
	require.True(t, f.Snapshot().Get("n1").WindowOpen, "the policy now drains ssh-keys")
	ch := rec.take()
	require.Len(t, ch, 1)
	require.False(t, ch[0].Eased())

	f.DeletePolicy("p")
	require.NotNil(t, f.Snapshot().Get("n1"), "without policies every class drains")
	// The rule that decides changed (p/keys to the default): news for the
	// drainer, which records the decision, but nothing eased.
	ch = rec.take()
	require.Len(t, ch, 1)
	require.Equal(t, lullv1alpha1.DefaultRuleName, ch[0].New.Maintenance.Decision.Rule)
	require.False(t, ch[0].Eased())
	f.SetPolicy(none)
	require.Nil(t, f.Snapshot().Get("n1"))
	require.True(t, rec.take()[0].Eased(), "a class becoming None eases the node")

	// A request that has started stays a disruption whatever the policy
	// says now.
	f.SetMaintenance(&lullv1alpha1.NodeMaintenance{ObjectMeta: metav1.ObjectMeta{Name: "n1"},
		Spec:   lullv1alpha1.NodeMaintenanceSpec{NodeName: "n1", Classes: []string{"ssh-keys"}},
		Status: lullv1alpha1.NodeMaintenanceStatus{Phase: lullv1alpha1.PhaseWaitingForLease, StartedAt: &metav1.Time{Time: t0}}})
	require.NotNil(t, f.Snapshot().Get("n1").Maintenance)
}

// minTimeRemaining is decided here, once, for the scheduler, the drainer
// and the preview: a request does not start with less than it left of the
// permitted period, and is expected at the next period long enough.
func TestComputeMinTimeRemaining(t *testing.T) {
	daily := mustWindow(t, dailyWindow("daily")) // 12:00-14:00 UTC
	always := mustWindow(t, &lullv1alpha1.MaintenanceWindow{ObjectMeta: metav1.ObjectMeta{Name: "always"},
		Spec: lullv1alpha1.MaintenanceWindowSpec{Strategy: lullv1alpha1.StrategyPermissive}})
	lbl := map[string]string{"pool": "a", lullv1alpha1.MaintenanceLabel: "kernel-update"}
	started := &lullv1alpha1.NodeMaintenance{ObjectMeta: metav1.ObjectMeta{Name: "n1"},
		Spec:   lullv1alpha1.NodeMaintenanceSpec{NodeName: "n1", Classes: []string{"kernel-update"}},
		Status: lullv1alpha1.NodeMaintenanceStatus{Phase: lullv1alpha1.PhaseWaitingForLease, StartedAt: &metav1.Time{Time: t0}}}
	pastDeadline := &lullv1alpha1.NodeMaintenance{ObjectMeta: metav1.ObjectMeta{Name: "n1"},
		Spec: lullv1alpha1.NodeMaintenanceSpec{NodeName: "n1", Classes: []string{"kernel-update"}, Deadline: &metav1.Time{Time: t0}}}
	at := func(h, m int) time.Time { return time.Date(2026, 11, 21, h, m, 0, 0, time.UTC) }
	tomorrowNoon := at(12, 0).Add(24 * time.Hour)
	for name, tc := range map[string]struct {
		now        time.Time
		nm         *lullv1alpha1.NodeMaintenance
		windows    []NamedWindow
		open       bool
		disruption time.Time
		reason     string
		validUntil time.Time
		left       time.Duration
	}{
		"enough left: open until the time left drops below the minimum": {now: at(12, 30),
			windows: []NamedWindow{{Name: "daily", Window: daily, MinTimeRemaining: 30 * time.Minute}},
			open:    true, disruption: at(12, 30), reason: "and its window is open", validUntil: at(13, 30).Add(time.Nanosecond), left: 90 * time.Minute},
		"exactly the minimum left is enough": {now: at(13, 30),
			windows: []NamedWindow{{Name: "daily", Window: daily, MinTimeRemaining: 30 * time.Minute}},
			open:    true, disruption: at(13, 30), reason: "and its window is open", validUntil: at(13, 30).Add(time.Nanosecond), left: 30 * time.Minute},
		"10m left, minTimeRemaining 30m: the next window": {now: at(13, 50),
			windows: []NamedWindow{{Name: "daily", Window: daily, MinTimeRemaining: 30 * time.Minute}},
			open:    false, disruption: tomorrowNoon, validUntil: at(14, 0), left: 10 * time.Minute,
			reason: "but only 10m0s is left in window daily; minTimeRemaining is 30m0s; next opens at 2026-11-22T12:00:00Z"},
		"the largest minimum of the windows decides, and is named": {now: at(13, 40),
			windows: []NamedWindow{{Name: "always", Window: always, MinTimeRemaining: 10 * time.Minute},
				{Name: "daily", Window: daily, MinTimeRemaining: 30 * time.Minute}},
			open: false, disruption: tomorrowNoon, validUntil: at(14, 0), left: 20 * time.Minute,
			reason: "only 20m0s is left in window daily; minTimeRemaining is 30m0s"},
		"a period that never closes always has enough": {now: at(13, 50),
			windows: []NamedWindow{{Name: "always", Window: always, MinTimeRemaining: 744 * time.Hour}},
			open:    true, disruption: at(13, 50), reason: "and its window is open"},
		"a started request continues": {now: at(13, 50), nm: started,
			windows: []NamedWindow{{Name: "daily", Window: daily, MinTimeRemaining: 30 * time.Minute}},
			open:    true, disruption: at(13, 50), reason: "and its window is open", validUntil: at(14, 0), left: 10 * time.Minute},
		"a passed deadline ignores windows": {now: at(13, 50), nm: pastDeadline,
			windows: []NamedWindow{{Name: "daily", Window: daily, MinTimeRemaining: 30 * time.Minute}},
			open:    true, disruption: at(13, 50), reason: "its deadline has passed", validUntil: at(14, 0), left: 10 * time.Minute},
		"closed: no period is as long as the minimum": {now: at(10, 0),
			windows: []NamedWindow{{Name: "daily", Window: daily, MinTimeRemaining: 3 * time.Hour},
				{Name: "always", Window: always}},
			open: false, reason: "but no window period ahead is as long as minTimeRemaining 3h0m0s (window daily)", validUntil: at(12, 0)},
	} {
		t.Run(name, func(t *testing.T) {
			in := Input{Name: "n1", Labels: lbl, LabelKey: lullv1alpha1.MaintenanceLabel, NM: tc.nm, Windows: tc.windows}
			n := Compute(tc.now, in)
			require.Equal(t, tc.open, n.WindowOpen, "may start now")
			require.Equal(t, tc.disruption, n.Disruption, "expected disruption")
			require.Contains(t, n.Reason, tc.reason)
			require.Equal(t, tc.validUntil, n.ValidUntil(), "valid until")
			if tc.left != 0 {
				require.Equal(t, tc.left, n.Windows.Left)
			}
			if !tc.open {
				require.Equal(t, !tc.disruption.IsZero(), n.Windows.HasStart)
				require.Equal(t, tc.disruption, n.Windows.Start.Start, "Windows.Start is when it is expected")
			}
		})
	}
}

// The forecast's own timer turns an open window into "too little left" at
// the moment the time left drops below minTimeRemaining, and that eases
// the node for the scheduler.
func TestMinTimeRemainingTransition(t *testing.T) {
	f, clk, rec := newForecast(t, true)
	w := dailyWindow("daily")
	w.Spec.MinTimeRemaining = lullv1alpha1.NewDuration(30 * time.Minute)
	f.SetWindow(w)
	clk.Step(150 * time.Minute) // 12:30, inside the window
	f.SetNode(node("n1", map[string]string{"pool": "a", lullv1alpha1.MaintenanceLabel: "kernel-update"}))
	require.True(t, f.Snapshot().Get("n1").WindowOpen)
	rec.take()

	clk.Step(59 * time.Minute) // 13:29: 31m left
	require.True(t, f.Snapshot().Get("n1").WindowOpen)
	clk.Step(time.Minute) // 13:30: exactly the minimum left is enough
	require.True(t, f.Snapshot().Get("n1").WindowOpen)
	clk.Step(time.Second) // the timer fires at the first instant with less
	waitFor(t, func() bool { return !f.Snapshot().Get("n1").WindowOpen })
	n1 := f.Snapshot().Get("n1")
	require.Equal(t, t0.Add(26*time.Hour), n1.Disruption, "expected at the next window")
	require.Contains(t, n1.Reason, "only 29m59s is left")
	ch := rec.take()
	require.Len(t, ch, 1)
	require.True(t, ch[0].Eased(), "the scheduler may place pods again")
}

// tooShort answers at once that no period can last minTimeRemaining, only
// from a window whose periods are all shorter.
func TestTooShort(t *testing.T) {
	daily := mustWindow(t, dailyWindow("daily")) // 2h periods
	always := mustWindow(t, &lullv1alpha1.MaintenanceWindow{ObjectMeta: metav1.ObjectMeta{Name: "always"},
		Spec: lullv1alpha1.MaintenanceWindowSpec{Strategy: lullv1alpha1.StrategyPermissive}})
	aroundTheClock := dailyWindow("around-the-clock")
	aroundTheClock.Spec.Schedule.Duration = lullv1alpha1.Duration{Duration: 24 * time.Hour}
	merged := mustWindow(t, aroundTheClock)
	cases := []struct {
		name string
		ws   []*window.Window
		min  time.Duration
		want bool
	}{
		{"longer than every period", []*window.Window{daily}, 2*time.Hour + time.Nanosecond, true},
		{"as long as a period", []*window.Window{daily}, 2 * time.Hour, false},
		{"one window bounds all", []*window.Window{always, daily}, 3 * time.Hour, true},
		{"Permissive is not bounded", []*window.Window{always}, 744 * time.Hour, false},
		{"back-to-back periods are not bounded", []*window.Window{merged}, 744 * time.Hour, false},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			require.Equal(t, tc.want, tooShort(tc.ws, tc.min))
		})
	}
}

// A label change adds windows to a request, never removes one: a node
// relabelled out of a closed window's pool into an open one's keeps
// waiting for the closed window, and a change of the recorded window
// reaches the node though its labels no longer select it.
func TestRecordedWindowsGovern(t *testing.T) {
	f, clk, _ := newForecast(t, true)
	closed := dailyWindow("closed") // 12:00-14:00, selects pool=a; t0 is 10:00
	open := dailyWindow("open")
	open.Spec.NodeSelector.MatchLabels = map[string]string{"pool": "b"}
	open.Spec.Strategy, open.Spec.Schedule = lullv1alpha1.StrategyPermissive, nil
	f.SetWindow(closed)
	f.SetWindow(open)
	f.SetSynced()
	f.SetNode(node("n1", map[string]string{"pool": "a", "lull.dev/maintenance": "kernel-update"}))
	nm := &lullv1alpha1.NodeMaintenance{ObjectMeta: metav1.ObjectMeta{Name: "n1"},
		Spec:   lullv1alpha1.NodeMaintenanceSpec{NodeName: "n1", Classes: []string{"kernel-update"}},
		Status: lullv1alpha1.NodeMaintenanceStatus{Phase: lullv1alpha1.PhaseWaitingForWindow, Windows: []string{"closed"}}}
	f.SetMaintenance(nm)
	require.False(t, f.Snapshot().Get("n1").WindowOpen)

	inB := map[string]string{"pool": "b", "lull.dev/maintenance": "kernel-update"}
	f.SetNode(node("n1", inB))
	got := f.Compute("n1", inB) // the snapshot keeps an entry whose verdict did not change
	require.Equal(t, []string{"closed", "open"}, got.Windows.Names)
	require.False(t, got.WindowOpen, "relabelling into an open pool opens no gate: %s", got.Reason)

	clk.SetTime(t0.Add(2*time.Hour + time.Minute)) // 12:01: closed opens
	waitFor(t, func() bool { return f.Snapshot().Get("n1").WindowOpen })

	frozen := closed.DeepCopy()
	frozen.Spec.Strategy, frozen.Spec.Schedule = lullv1alpha1.StrategyRestrictive, nil
	f.SetWindow(frozen)
	require.False(t, f.Snapshot().Get("n1").WindowOpen, "a change of a recorded window reaches the node")

	f.DeleteWindow("closed")
	got = f.Compute("n1", inB)
	require.Equal(t, []string{"open"}, got.Windows.Names, "a deleted window no longer governs")
	require.True(t, got.WindowOpen)
}

// A request made while no window selected its node keeps needing the
// default's permission when a window selects it later.
func TestRecordedDefaultGoverns(t *testing.T) {
	f, _, _ := newForecast(t, false) // the default forbids
	open := dailyWindow("open")
	open.Spec.Strategy, open.Spec.Schedule = lullv1alpha1.StrategyPermissive, nil
	f.SetWindow(open)
	f.SetSynced()
	f.SetNode(node("n1", map[string]string{"pool": "z", "lull.dev/maintenance": "kernel-update"}))
	nm := &lullv1alpha1.NodeMaintenance{ObjectMeta: metav1.ObjectMeta{Name: "n1"},
		Spec:   lullv1alpha1.NodeMaintenanceSpec{NodeName: "n1", Classes: []string{"kernel-update"}},
		Status: lullv1alpha1.NodeMaintenanceStatus{Phase: lullv1alpha1.PhaseWaitingForWindow, DefaultBudget: true}}
	f.SetMaintenance(nm)
	require.True(t, f.Snapshot().Get("n1").Windows.Default)
	relabelled := map[string]string{"pool": "a", "lull.dev/maintenance": "kernel-update"}
	f.SetNode(node("n1", relabelled))
	got := f.Compute("n1", relabelled) // the snapshot keeps an entry whose verdict did not change
	require.Equal(t, []string{"open"}, got.Windows.Names)
	require.True(t, got.Windows.Default)
	require.False(t, got.WindowOpen, "the default forbids and still governs: %s", got.Reason)
}
