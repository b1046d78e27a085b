package cli

import (
	"bytes"
	"flag"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/intstr"
	"k8s.io/utils/ptr"

	lullv1alpha1 "lull.dev/lull/api/v1alpha1"
	"lull.dev/lull/internal/plan"
)

var update = flag.Bool("update", false, "rewrite the golden files in testdata/")

// Saturday 2026-11-21 10:00 UTC.
var now = time.Date(2026, 11, 21, 10, 0, 0, 0, time.UTC)

func golden(t *testing.T, name string, got []byte) {
	t.Helper()
	path := filepath.Join("testdata", name+".golden")
	if *update {
		require.NoError(t, os.MkdirAll("testdata", 0o755))
		require.NoError(t, os.WriteFile(path, got, 0o644))
	}
	want, err := os.ReadFile(path)
	require.NoError(t, err, "run go test ./cli -update to create %s", path)
	require.Equal(t, string(want), string(got), "output differs from %s (go test ./cli -update rewrites it)", path)
}

// kernelDrains is how the shipped default policy decides kernel-update:
// its rule drains, and the plan cordons first.
var (
	kernelDrains = []lullv1alpha1.ClassDecision{{Class: "kernel-update", Policy: "default", Rule: "kernel-update", Steps: []string{"Drain"}}}
	cordonDrain  = []lullv1alpha1.PlannedStep{{Type: lullv1alpha1.ActionCordon, Classes: []string{"kernel-update"}},
		{Type: lullv1alpha1.ActionDrain, Classes: []string{"kernel-update"}}}
)

// planFixture is a plan of four nodes: one starts now, one waits for the
// budget, one for its window, one for another lease holder.
func planFixture() *plan.Result {
	noon := time.Date(2026, 11, 21, 12, 0, 0, 0, time.UTC)
	res := &plan.Result{At: now, Class: "kernel-update", Nodes: []plan.Node{
		{Node: "n1", Action: lullv1alpha1.ActionDrain, Rule: "default/kernel-update", Start: plan.StartNow, StartAt: &now,
			Windows: &plan.Windows{Permitted: true, NextStart: &now, Message: "no MaintenanceWindow selects the node; the default permits"},
			Evict:   []string{"shop/db-0", "shop/web-0"}, Blockers: []lullv1alpha1.Blocker{{PodDisruptionBudget: "shop/db", Pods: []string{"shop/db-1"}}},
			DrainEstimate: metav1.Duration{Duration: 35 * time.Second}, DrainEstimateBasis: "longest grace period + eviction rounds",
			Warnings: []string{"PodDisruptionBudget shop/db allows no more disruption now; it would block shop/db-1"}},
		{Node: "n2", Action: lullv1alpha1.ActionDrain, Rule: "default/kernel-update", Start: plan.StartBudget,
			WaitingFor: "the default budget for nodes without a window allows 1 at once; 1 in use", HeldBy: []string{"n1"},
			Windows: &plan.Windows{Permitted: true, Message: "no MaintenanceWindow selects the node; the default permits"}},
		{Node: "n3", Action: lullv1alpha1.ActionDrain, Rule: "default/kernel-update", Start: plan.StartWindow, StartAt: &noon,
			WaitingFor: "window(s) noon closed; next opens at 2026-11-21T12:00:00Z",
			Windows:    &plan.Windows{Names: []string{"noon"}, NextStart: &noon}, Evict: []string{"shop/web-1"},
			DrainEstimate: metav1.Duration{Duration: 15*time.Minute + 5*time.Second}, DrainEstimateBasis: "median of 3 drain(s) recorded in NodeMaintenances",
			Warnings: []string{"the window noon lasts 10m0s from when the drain would start (2026-11-21T12:00:00Z), less than the drain estimate 15m5s: the drain would run past its end"}},
		{Node: "n4", Action: lullv1alpha1.ActionDrain, Rule: "default/kernel-update", Start: plan.StartHolder, LeaseHolder: "fw-updater",
			WaitingFor: `node n4 is leased by "fw-updater" for reboot (firmware 2.1) since 2026-11-21T09:00:00Z`,
			Warnings:   []string{"node is leased by fw-updater for reboot (firmware 2.1)"}},
	}}
	for i := range res.Nodes {
		res.Nodes[i].Classes, res.Nodes[i].Steps = kernelDrains, cordonDrain
	}
	return res
}

func TestPlanTable(t *testing.T) {
	res := planFixture()
	var buf bytes.Buffer
	require.NoError(t, renderPlan(&buf, res, true, humanOptions{}))
	golden(t, "plan", buf.Bytes())

	none := &plan.Result{At: now, Class: "ssh-keys", Nodes: []plan.Node{{Node: "n1", Action: lullv1alpha1.ActionNone, Rule: "default/ssh-keys",
		Classes: []lullv1alpha1.ClassDecision{{Class: "ssh-keys", Policy: "default", Rule: "ssh-keys", Steps: []string{"None"}}},
		Start:   plan.StartImmediately, StartAt: &now, WaitingFor: "class ssh-keys needs no disruption (rule default/ssh-keys): completes at once, without lease, window or budget"}}}
	buf.Reset()
	require.NoError(t, renderPlan(&buf, none, false, humanOptions{}))
	golden(t, "plan-none", buf.Bytes())
}

// statusFixture: a node draining, one waiting for its window, one leased
// by another actor.
func statusFixture() []NodeStatus {
	noon := time.Date(2026, 11, 21, 12, 0, 0, 0, time.UTC)
	end := time.Date(2026, 11, 21, 11, 0, 0, 0, time.UTC)
	return []NodeStatus{
		{Node: "n1", Class: "kernel-update", Classes: []string{"kernel-update"}, Action: lullv1alpha1.ActionDrain, Rule: "default/kernel-update",
			Steps: cordonDrain, Phase: lullv1alpha1.PhaseDraining,
			Lease: &LeaseState{Holder: "lull-drainer", Operation: "drain"}, Windows: &plan.Windows{Names: []string{"morning"}, Permitted: true, NextStart: &now, NextEnd: &end},
			Pods:       &lullv1alpha1.PodCounts{Total: 3, Evicted: 1, Pending: 2},
			Blockers:   []lullv1alpha1.Blocker{{PodDisruptionBudget: "shop/db", Pods: []string{"shop/db-0", "shop/db-1"}, Since: metav1.Time{Time: now.Add(-7 * time.Minute)}}},
			WaitingFor: "draining: 2 of 3 pod(s) left", Cordoned: true},
		{Node: "n2", Class: "kernel-update", Classes: []string{"kernel-update"}, Action: lullv1alpha1.ActionDrain, Rule: "default/kernel-update",
			Steps: cordonDrain, Phase: lullv1alpha1.PhaseWaitingForWindow,
			Windows:    &plan.Windows{Names: []string{"noon"}, NextStart: &noon},
			WaitingFor: "window(s) noon closed; next opens at 2026-11-21T12:00:00Z"},
		{Node: "n3", Lease: &LeaseState{Holder: "fw-updater", Operation: "reboot"}, Windows: &plan.Windows{Permitted: true}},
		actingStatus(),
	}
}

// actingStatus is a request of three classes whose plan (Cordon, Drain,
// Reboot) has drained the node and whose Reboot lull-agent has been
// running for 2 minutes.
func actingStatus() NodeStatus {
	classes := []string{"ssh-keys", "chrony-config", "kernel-update"}
	return NodeStatus{Node: "n4", Class: "ssh-keys,chrony-config,kernel-update", Classes: classes, Action: lullv1alpha1.StepReboot, Rule: "site/kernel",
		Steps:   acceptancePlan(),
		Phase:   lullv1alpha1.PhaseActing,
		Actions: []lullv1alpha1.ActionStatus{{Type: lullv1alpha1.StepReboot, Timeout: lullv1alpha1.Duration{Duration: 15 * time.Minute}, State: lullv1alpha1.ActionRunning, StartedAt: &metav1.Time{Time: now.Add(-2 * time.Minute)}, BootID: "boot-1"}},
		Lease:   &LeaseState{Holder: "lull-drainer", Operation: "drain"}, Windows: &plan.Windows{Permitted: true},
		Pods: &lullv1alpha1.PodCounts{Total: 3, Evicted: 3}, WaitingFor: "lull-agent runs Reboot (since 2026-11-21T09:58:00Z)", Cordoned: true}
}

// acceptancePlan is the plan of docs/actions.md's worked example: classes
// ssh-keys (None), chrony-config (RestartService chronyd) and
// kernel-update (Drain, Reboot) plan Cordon, Drain, Reboot, the restart
// covered by the reboot.
func acceptancePlan() []lullv1alpha1.PlannedStep {
	k := []string{"kernel-update"}
	return []lullv1alpha1.PlannedStep{{Type: lullv1alpha1.ActionCordon, Classes: k}, {Type: lullv1alpha1.ActionDrain, Classes: k},
		{Type: lullv1alpha1.StepReboot, Timeout: &lullv1alpha1.Duration{Duration: 15 * time.Minute}, Classes: k, Covers: []string{"RestartService chronyd (chrony-config)"}}}
}

func TestStatusTable(t *testing.T) {
	rows := statusFixture()
	var buf bytes.Buffer
	require.NoError(t, renderStatus(&buf, rows, now, humanOptions{}))
	golden(t, "status", buf.Bytes())
	buf.Reset()
	require.NoError(t, renderStatus(&buf, nil, now, humanOptions{}))
	require.Equal(t, "No node is under maintenance or leased.\n", buf.String())
}

func TestWhyOutput(t *testing.T) {
	var buf bytes.Buffer
	require.NoError(t, renderWhy(&buf, &Why{Pod: "shop/web-x", SchedulerName: "lull-scheduler", Nodes: 3,
		Scheduler: "0/3 nodes are available: 2 node(s) didn't match NodeDisruption, 1 Insufficient cpu.",
		Rejected: []Rejection{{Node: "n1", Reason: `node is leased for disruption by "fw-updater" for reboot`},
			{Node: "n2", Reason: "node awaits maintenance (class kernel-update) and its window is open"}}}, humanOptions{}))
	golden(t, "why", buf.Bytes())
	buf.Reset()
	require.NoError(t, renderWhy(&buf, &Why{Pod: "shop/batch", SchedulerName: "lull-scheduler", Tolerates: true}, humanOptions{}))
	require.Contains(t, buf.String(), "tolerates lull.dev/disruption")
}

// Windows in a real zone across the end of daylight saving time: local
// times and UTC differ by the zone's offset of each period.
func TestWindowsTable(t *testing.T) {
	weekend := lullv1alpha1.MaintenanceWindow{ObjectMeta: metav1.ObjectMeta{Name: "weekend"}, Spec: lullv1alpha1.MaintenanceWindowSpec{
		Strategy:       lullv1alpha1.StrategySchedule,
		NodeSelector:   &metav1.LabelSelector{MatchLabels: map[string]string{"pool": "general"}},
		MaxUnavailable: ptr.To(intstr.FromString("50%")),
		Schedule: &lullv1alpha1.Schedule{TimeZone: "Europe/Berlin", StartTime: "02:00", Duration: lullv1alpha1.Duration{Duration: 4 * time.Hour},
			Recurrence: &lullv1alpha1.Recurrence{Frequency: lullv1alpha1.Weekly, DaysOfWeek: []lullv1alpha1.Weekday{lullv1alpha1.Saturday, lullv1alpha1.Sunday}}}}}
	// Always open; the window controller saw it open on Tuesday.
	always := lullv1alpha1.MaintenanceWindow{ObjectMeta: metav1.ObjectMeta{Name: "canary", Generation: 2}, Spec: lullv1alpha1.MaintenanceWindowSpec{Strategy: lullv1alpha1.StrategyPermissive},
		Status: lullv1alpha1.MaintenanceWindowStatus{Conditions: []metav1.Condition{{Type: lullv1alpha1.WindowConditionPermitted, Status: metav1.ConditionTrue,
			ObservedGeneration: 2, LastTransitionTime: metav1.NewTime(time.Date(2026, 10, 20, 8, 0, 0, 0, time.UTC))}}}}
	nodes := []corev1.Node{
		{ObjectMeta: metav1.ObjectMeta{Name: "a", Labels: map[string]string{"pool": "general"}}},
		{ObjectMeta: metav1.ObjectMeta{Name: "b", Labels: map[string]string{"pool": "general"}}},
		{ObjectMeta: metav1.ObjectMeta{Name: "c"}},
	}
	// Saturday 2026-10-24 10:00 UTC: the next weekend crosses the switch
	// from CEST (UTC+2) to CET (UTC+1) on Sunday 2026-10-25.
	at := time.Date(2026, 10, 24, 10, 0, 0, 0, time.UTC)
	views := windowViews([]lullv1alpha1.MaintenanceWindow{weekend, always}, nodes, at, 3)
	var buf bytes.Buffer
	require.NoError(t, renderWindows(&buf, views, humanOptions{}))
	golden(t, "windows", buf.Bytes())
	require.Equal(t, time.Date(2026, 10, 25, 0, 0, 0, 0, time.UTC), views[1].Periods[0].Start, "02:00 happens twice that night; the window takes the first (CEST)")
	later := windowViews([]lullv1alpha1.MaintenanceWindow{weekend, always}, nodes, at.Add(time.Hour), 3)
	require.Equal(t, time.Date(2026, 10, 20, 8, 0, 0, 0, time.UTC), later[0].Periods[0].Start, "an always-open window starts when it opened, not now")
	require.Nil(t, later[0].Periods[0].End)
}

// The CLI checks classes with the API's rule, which is the CRDs' pattern:
// a class the drainer accepts (with '_' or '.') is never refused here.
func TestClassRuleMatchesTheCRDs(t *testing.T) {
	for _, crd := range []string{"lull.dev_nodemaintenances.yaml", "lull.dev_disruptionpolicies.yaml"} {
		b, err := os.ReadFile(filepath.Join("..", "manifests", "crds", crd))
		require.NoError(t, err)
		require.Contains(t, string(b), "pattern: "+lullv1alpha1.ClassPattern+"\n", crd)
	}
	for class, ok := range map[string]bool{"kernel-update": true, "fw_2.1": true, "a": true, "Kernel": false, "-x": false, "x-": false, "": false} {
		_, err := buildRequest([]string{"n1"}, "", []string{class}, nil, "", nil)
		require.Equal(t, ok, err == nil, "class %q: %v", class, err)
	}
}

// The RRULE forms of issue 28 as kubectl lull windows shows them, on
// Saturday 2026-10-24 10:00 UTC: BYSETPOS (the last weekday of the month),
// BYDAY limiting BYMONTHDAY (Friday the 13th), a rule whose UNTIL ends it
// within the periods asked for, one whose COUNT has run out, and one lull
// refuses (sub-daily), which is invalid and so closed.
func TestWindowsRRuleForms(t *testing.T) {
	mw := func(name, tz, start string, d time.Duration, anchor, rrule string) lullv1alpha1.MaintenanceWindow {
		return lullv1alpha1.MaintenanceWindow{ObjectMeta: metav1.ObjectMeta{Name: name}, Spec: lullv1alpha1.MaintenanceWindowSpec{
			Strategy: lullv1alpha1.StrategySchedule,
			Schedule: &lullv1alpha1.Schedule{TimeZone: tz, StartTime: start, Duration: lullv1alpha1.Duration{Duration: d}, Anchor: anchor, RRule: rrule}}}
	}
	ws := []lullv1alpha1.MaintenanceWindow{
		mw("month-end", "Europe/Berlin", "22:00", 4*time.Hour, "", "FREQ=MONTHLY;BYDAY=MO,TU,WE,TH,FR;BYSETPOS=-1"),
		mw("friday-13th", "UTC", "09:00", time.Hour, "", "FREQ=MONTHLY;BYDAY=FR;BYMONTHDAY=13"),
		mw("until-tuesday", "UTC", "02:00", 4*time.Hour, "2026-10-01", "FREQ=DAILY;UNTIL=20261027"),
		mw("migration", "UTC", "02:00", 4*time.Hour, "2026-10-01", "FREQ=WEEKLY;BYDAY=SA;COUNT=3"),
		mw("weekno", "UTC", "00:00", 30*time.Minute, "", "FREQ=MONTHLY;BYWEEKNO=1"),
	}
	at := time.Date(2026, 10, 24, 10, 0, 0, 0, time.UTC)
	views := windowViews(ws, nil, at, 4)
	var buf bytes.Buffer
	require.NoError(t, renderWindows(&buf, views, humanOptions{}))
	golden(t, "windows-rrule", buf.Bytes())

	byName := map[string]WindowView{}
	for _, v := range views {
		byName[v.Name] = v
	}
	require.Len(t, byName["until-tuesday"].Periods, 3, "UNTIL=20261027: 25, 26 and 27 October, then no more")
	require.False(t, byName["until-tuesday"].Ended, "it has not ended yet")
	require.True(t, byName["migration"].Ended, "COUNT=3 from Thursday 1 October: the 3rd, 10th and 17th")
	require.Empty(t, byName["migration"].Periods)
	require.False(t, byName["weekno"].Ended, "an invalid window has not ended; it is closed until fixed")
	obj, err := windowsObject(views, false)
	require.NoError(t, err)
	require.Equal(t, "migration", printAs(t, []string{"-o", "jsonpath={.items[?(@.ended)].name}"}, obj, nil))
}
