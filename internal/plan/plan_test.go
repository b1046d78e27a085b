package plan

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	coordinationv1 "k8s.io/api/coordination/v1"
	corev1 "k8s.io/api/core/v1"
	policyv1 "k8s.io/api/policy/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/util/intstr"
	"k8s.io/client-go/kubernetes/fake"
	clocktesting "k8s.io/utils/clock/testing"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"
	crfake "sigs.k8s.io/controller-runtime/pkg/client/fake"

	lullv1alpha1 "lull.dev/lull/api/v1alpha1"
	"lull.dev/lull/internal/agentlease"
	"lull.dev/lull/internal/lullscheme"
	"lull.dev/lull/internal/policy"
	"lull.dev/lull/lease"
)

// Saturday 2026-11-21 10:00 UTC.
var t0 = time.Date(2026, 11, 21, 10, 0, 0, 0, time.UTC)

func node(name string, lbls map[string]string) *corev1.Node {
	return &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: name, Labels: lbls}}
}

func pod(name, nodeName, app string, grace int64) *corev1.Pod {
	return &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: "default", Labels: map[string]string{"app": app},
			OwnerReferences: []metav1.OwnerReference{{APIVersion: "apps/v1", Kind: "ReplicaSet", Name: app, UID: "u", Controller: ptr.To(true)}}},
		Spec:   corev1.PodSpec{NodeName: nodeName, TerminationGracePeriodSeconds: ptr.To(grace)},
		Status: corev1.PodStatus{Phase: corev1.PodRunning},
	}
}

func pdb(name, app string, allowed int32) *policyv1.PodDisruptionBudget {
	return &policyv1.PodDisruptionBudget{ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: "default"},
		Spec:   policyv1.PodDisruptionBudgetSpec{Selector: &metav1.LabelSelector{MatchLabels: map[string]string{"app": app}}},
		Status: policyv1.PodDisruptionBudgetStatus{DisruptionsAllowed: allowed}}
}

func shippedPolicy(t *testing.T) *lullv1alpha1.DisruptionPolicy {
	p, err := policy.Shipped()
	require.NoError(t, err)
	return p
}

// preview runs Preview over objs. The fake clientset ignores field
// selectors, so pods are listed for every node: give pods to one node only.
func preview(t *testing.T, req Request, objs ...runtime.Object) *Result {
	t.Helper()
	return previewWith(t, DefaultOptions(), req, objs...)
}

// previewWith is preview with options o (its clock: t0).
func previewWith(t *testing.T, o Options, req Request, objs ...runtime.Object) *Result {
	t.Helper()
	var crObjs []client.Object
	var pods []runtime.Object
	for _, o := range objs {
		if p, ok := o.(*corev1.Pod); ok {
			pods = append(pods, p)
			continue
		}
		crObjs = append(crObjs, o.(client.Object))
	}
	c := crfake.NewClientBuilder().WithScheme(lullscheme.New()).WithObjects(crObjs...).Build()
	o.Clock = clocktesting.NewFakeClock(t0)
	res, err := Preview(context.Background(), c, fake.NewClientset(pods...), o, req)
	require.NoError(t, err)
	return res
}

func TestPreviewNoneCompletesAtOnce(t *testing.T) {
	res := preview(t, Request{Nodes: []string{"n1"}, Classes: []string{"ssh-keys"}}, node("n1", nil), shippedPolicy(t), pod("web-0", "n1", "web", 30))
	require.Len(t, res.Nodes, 1)
	n := res.Nodes[0]
	require.Equal(t, lullv1alpha1.ActionNone, n.Action)
	require.Equal(t, "default/ssh-keys", n.Rule)
	require.Equal(t, StartImmediately, n.Start)
	require.Empty(t, n.Evict, "None evicts nothing")
}

func TestPreviewWaitsForWindowAndNamesBlockers(t *testing.T) {
	noon := &lullv1alpha1.MaintenanceWindow{ObjectMeta: metav1.ObjectMeta{Name: "noon"}, Spec: lullv1alpha1.MaintenanceWindowSpec{
		Strategy: lullv1alpha1.StrategySchedule,
		Schedule: &lullv1alpha1.Schedule{TimeZone: "Europe/Berlin", StartTime: "13:00", Duration: lullv1alpha1.Duration{Duration: 2 * time.Hour},
			Recurrence: &lullv1alpha1.Recurrence{Frequency: lullv1alpha1.Daily}}}}
	res := preview(t, Request{Nodes: []string{"n1"}, Classes: []string{"kernel-update"}}, node("n1", nil), noon, shippedPolicy(t),
		pod("db-0", "n1", "db", 30), pod("db-1", "n1", "db", 30), pod("web-0", "n1", "web", 60), pdb("db", "db", 1))
	n := res.Nodes[0]
	require.Equal(t, lullv1alpha1.ActionDrain, n.Action)
	require.Equal(t, "default/kernel-update", n.Rule)
	require.Equal(t, StartWindow, n.Start)
	require.Equal(t, time.Date(2026, 11, 21, 12, 0, 0, 0, time.UTC), *n.StartAt, "13:00 in Berlin")
	require.Equal(t, []string{"noon"}, n.Windows.Names)
	// The budget allows one: the first db pod goes, the second is blocked,
	// exactly as a drain round counts it down.
	require.Equal(t, []string{"default/db-0", "default/web-0"}, n.Evict)
	require.Equal(t, []lullv1alpha1.Blocker{{PodDisruptionBudget: "default/db", Pods: []string{"default/db-1"}}}, n.Blockers)
	require.Equal(t, 65*time.Second, n.DrainEstimate.Duration)
	require.Contains(t, n.Warnings[0], "PodDisruptionBudget default/db allows no more disruption now")
}

// A budget that still counts a running pod as evicted (an eviction that
// did not finish) is named in the preview's warnings, with when it frees
// the disruption, as the drainer's Blocked condition says it.
func TestPreviewNamesUnfinishedEvictions(t *testing.T) {
	at := time.Date(2026, 11, 21, 9, 59, 0, 0, time.UTC)
	db := pdb("db", "db", 0)
	db.Status.DisruptedPods = map[string]metav1.Time{"db-0": {Time: at}}
	res := preview(t, Request{Nodes: []string{"n1"}, Classes: []string{"kernel-update"}}, node("n1", nil), shippedPolicy(t),
		pod("db-0", "n1", "db", 30), pod("db-1", "n1", "db", 30), db)
	require.Contains(t, res.Nodes[0].Warnings, "PodDisruptionBudget default/db still counts pod default/db-0 as evicted by a request that did not finish (the pod was not deleted), until 2026-11-21T10:01:00Z")
}

func TestPreviewBudgetAcrossPlannedNodes(t *testing.T) {
	pool := &lullv1alpha1.MaintenanceWindow{ObjectMeta: metav1.ObjectMeta{Name: "pool-b"}, Spec: lullv1alpha1.MaintenanceWindowSpec{
		Strategy: lullv1alpha1.StrategyPermissive, MaxUnavailable: ptr.To(intstr.FromInt32(1)),
		NodeSelector: &metav1.LabelSelector{MatchLabels: map[string]string{"pool": "b"}}}}
	b := map[string]string{"pool": "b"}
	res := preview(t, Request{Nodes: []string{"b2", "b1"}, Classes: []string{"hardware"}}, node("b1", b), node("b2", b), pool)
	require.Equal(t, StartNow, res.Nodes[0].Start)
	require.Equal(t, "b1", res.Nodes[0].Node)
	require.Equal(t, StartBudget, res.Nodes[1].Start)
	require.Equal(t, "window pool-b allows 1 node(s) disrupted at once; 1 in use", res.Nodes[1].WaitingFor)
	require.Equal(t, []string{"b1"}, res.Nodes[1].HeldBy)
	require.Equal(t, lullv1alpha1.DefaultRuleName, res.Nodes[0].Rule, "no policy: the default drains")
}

// Issue 45: a node Karpenter disrupts is held by Karpenter in the
// preview as in the drainer, and uses a slot of its window: the other
// node waits for the budget, naming it.
func TestPreviewOtherDisruptor(t *testing.T) {
	pool := &lullv1alpha1.MaintenanceWindow{ObjectMeta: metav1.ObjectMeta{Name: "pool-b"}, Spec: lullv1alpha1.MaintenanceWindowSpec{
		Strategy: lullv1alpha1.StrategyPermissive, MaxUnavailable: ptr.To(intstr.FromInt32(1)),
		NodeSelector: &metav1.LabelSelector{MatchLabels: map[string]string{"pool": "b"}}}}
	b := map[string]string{"pool": "b"}
	k := node("b2", b)
	k.Spec.Taints = []corev1.Taint{{Key: "karpenter.sh/disrupted", Effect: corev1.TaintEffectNoSchedule}}
	res := preview(t, Request{Nodes: []string{"b1", "b2"}, Classes: []string{"hardware"}}, node("b1", b), k, pool)
	require.Equal(t, StartBudget, res.Nodes[0].Start)
	require.Equal(t, []string{"b2"}, res.Nodes[0].HeldBy)
	require.Equal(t, StartHolder, res.Nodes[1].Start)
	require.Contains(t, res.Nodes[1].WaitingFor, `leased by "karpenter" for disruption`)
}

func TestPreviewForeignLeaseAndShortWindow(t *testing.T) {
	held := &coordinationv1.Lease{ObjectMeta: metav1.ObjectMeta{Name: lease.Name("n1"), Namespace: lease.DefaultNamespace},
		Spec: coordinationv1.LeaseSpec{HolderIdentity: ptr.To("fw-updater"), LeaseDurationSeconds: ptr.To[int32](600),
			AcquireTime: &metav1.MicroTime{Time: t0}, RenewTime: &metav1.MicroTime{Time: t0}}}
	short := &lullv1alpha1.MaintenanceWindow{ObjectMeta: metav1.ObjectMeta{Name: "short"}, Spec: lullv1alpha1.MaintenanceWindowSpec{
		Strategy: lullv1alpha1.StrategySchedule,
		Schedule: &lullv1alpha1.Schedule{TimeZone: "UTC", StartTime: "09:55", Duration: lullv1alpha1.Duration{Duration: 10 * time.Minute},
			Recurrence: &lullv1alpha1.Recurrence{Frequency: lullv1alpha1.Daily}}}}
	res := preview(t, Request{Nodes: []string{"n1"}, Classes: []string{"kernel-update"}}, node("n1", nil), held, short, pod("slow-0", "n1", "slow", 900))
	n := res.Nodes[0]
	require.Equal(t, StartHolder, n.Start)
	require.True(t, n.ForeignLease)
	require.Equal(t, "fw-updater", n.LeaseHolder)
	require.Contains(t, n.Warnings[0], "node is leased by fw-updater")
	require.Contains(t, n.Warnings[1], "the window short lasts 5m0s")
	require.Contains(t, n.Warnings[1], "less than the drain estimate 15m5s")
}

func TestPreviewUnknownNode(t *testing.T) {
	c := crfake.NewClientBuilder().WithScheme(lullscheme.New()).Build()
	_, err := Preview(context.Background(), c, fake.NewClientset(), DefaultOptions(), Request{Nodes: []string{"nope"}, Classes: []string{"x"}})
	require.ErrorContains(t, err, `node "nope" not found`)
}

func TestPreviewWarnsWhenAWindowsBudgetIsShared(t *testing.T) {
	night := &lullv1alpha1.MaintenanceWindow{ObjectMeta: metav1.ObjectMeta{Name: "night"}, Spec: lullv1alpha1.MaintenanceWindowSpec{
		Strategy: lullv1alpha1.StrategySchedule, MaxUnavailable: ptr.To(intstr.FromInt32(1)),
		Schedule: &lullv1alpha1.Schedule{TimeZone: "UTC", StartTime: "01:00", Duration: lullv1alpha1.Duration{Duration: 2 * time.Hour},
			Recurrence: &lullv1alpha1.Recurrence{Frequency: lullv1alpha1.Daily}}}}
	res := preview(t, Request{Nodes: []string{"a", "b"}, Classes: []string{"hardware"}}, node("a", nil), node("b", nil), node("c", nil), night)
	for _, n := range res.Nodes {
		require.Equal(t, StartWindow, n.Start)
		require.Equal(t, []string{"2 of the planned nodes wait for window night, which allows 1 disrupted at once: they start one after another as its budget frees, not all when it opens"}, n.Warnings)
	}
	res = preview(t, Request{Nodes: []string{"a"}, Classes: []string{"hardware"}}, node("a", nil), night)
	require.Empty(t, res.Nodes[0].Warnings)
}

// countingReader counts List and Get calls by type.
type countingReader struct {
	client.Reader
	lists, gets map[string]int
}

func (c *countingReader) List(ctx context.Context, list client.ObjectList, opts ...client.ListOption) error {
	c.lists[fmt.Sprintf("%T", list)]++
	return c.Reader.List(ctx, list, opts...)
}

func (c *countingReader) Get(ctx context.Context, key client.ObjectKey, obj client.Object, opts ...client.GetOption) error {
	c.gets[fmt.Sprintf("%T", obj)]++
	return c.Reader.Get(ctx, key, obj, opts...)
}

// A preview of many nodes reads each kind once: the gates answer from the
// state read at the start (one consistent view), whatever the node count.
func TestPreviewReadsEachKindOnce(t *testing.T) {
	pool := &lullv1alpha1.MaintenanceWindow{ObjectMeta: metav1.ObjectMeta{Name: "pool"}, Spec: lullv1alpha1.MaintenanceWindowSpec{
		Strategy: lullv1alpha1.StrategyPermissive, MaxUnavailable: ptr.To(intstr.FromString("10%"))}}
	objs := []client.Object{pool}
	var names []string
	for i := 0; i < 40; i++ {
		n := fmt.Sprintf("n%02d", i)
		names = append(names, n)
		objs = append(objs, node(n, nil))
	}
	objs = append(objs, pdb("db", "db", 1))
	c := &countingReader{Reader: crfake.NewClientBuilder().WithScheme(lullscheme.New()).WithObjects(objs...).Build(), lists: map[string]int{}, gets: map[string]int{}}
	o := DefaultOptions()
	o.Clock = clocktesting.NewFakeClock(t0)
	res, err := Preview(context.Background(), c, fake.NewClientset(pod("db-0", "n00", "db", 30)), o, Request{Nodes: names, Classes: []string{"kernel-update"}})
	require.NoError(t, err)
	starts := map[Start]int{}
	for _, n := range res.Nodes {
		starts[n.Start]++
	}
	require.Equal(t, map[Start]int{StartNow: 4, StartBudget: 36}, starts, "10% of 40 nodes start now")
	require.Equal(t, map[string]int{
		"*v1.NodeList": 1, "*v1alpha1.NodeMaintenanceList": 1, "*v1alpha1.MaintenanceWindowList": 1,
		"*v1alpha1.DisruptionPolicyList": 1, "*v1.PodDisruptionBudgetList": 1,
		"*v1.LeaseList": 2, // the node leases, and lull-agent's in its own namespace
	}, c.lists)
	require.Equal(t, map[string]int{"*v1.ConfigMap": 1}, c.gets, "the guard's criticalUnits, once")
}

// The drain estimate uses the cluster's recorded drains when they took
// longer than the lower bound.
func TestPreviewDrainEstimateFromHistory(t *testing.T) {
	done := func(name string, took time.Duration) *lullv1alpha1.NodeMaintenance {
		return &lullv1alpha1.NodeMaintenance{ObjectMeta: metav1.ObjectMeta{Name: name}, Spec: lullv1alpha1.NodeMaintenanceSpec{NodeName: name, Classes: []string{"x"}},
			Status: lullv1alpha1.NodeMaintenanceStatus{Phase: lullv1alpha1.PhaseCompleted,
				StartedAt: &metav1.Time{Time: t0.Add(-time.Hour)}, DrainedAt: &metav1.Time{Time: t0.Add(-time.Hour + took)}}}
	}
	res := preview(t, Request{Nodes: []string{"n1"}, Classes: []string{"kernel-update"}}, node("n1", nil), pod("web-0", "n1", "web", 30),
		done("h1", 10*time.Minute), done("h2", 20*time.Minute), done("h3", 30*time.Minute))
	require.Equal(t, 20*time.Minute, res.Nodes[0].DrainEstimate.Duration)
	require.Equal(t, "median of 3 drain(s) recorded in NodeMaintenances", res.Nodes[0].DrainEstimateBasis)
	res = preview(t, Request{Nodes: []string{"n1"}, Classes: []string{"kernel-update"}}, node("n1", nil), pod("web-0", "n1", "web", 30))
	require.Equal(t, 35*time.Second, res.Nodes[0].DrainEstimate.Duration)
}

// A foreign lease its holder stopped renewing is named as such: the
// drainer will take it over after watching it unrenewed for its duration.
func TestPreviewNamesAStaleForeignLease(t *testing.T) {
	stale := &coordinationv1.Lease{ObjectMeta: metav1.ObjectMeta{Name: lease.Name("n1"), Namespace: lease.DefaultNamespace},
		Spec: coordinationv1.LeaseSpec{HolderIdentity: ptr.To("crashed-tool"), LeaseDurationSeconds: ptr.To[int32](60),
			AcquireTime: &metav1.MicroTime{Time: t0.Add(-time.Hour)}, RenewTime: &metav1.MicroTime{Time: t0.Add(-time.Hour)}}}
	res := preview(t, Request{Nodes: []string{"n1"}, Classes: []string{"kernel-update"}}, node("n1", nil), stale)
	n := res.Nodes[0]
	require.Equal(t, StartHolder, n.Start)
	require.Equal(t, "node is leased by crashed-tool; its holder last renewed it at 2026-11-21T09:00:00Z, more than its duration (1m0s) ago: unless it renews, the drainer takes the lease over after seeing it unrenewed for 1m0s", n.Warnings[0])
}

// maxUnavailable 0 (or 0%) is a freeze, and the preview says so.
func TestPreviewFrozenWindow(t *testing.T) {
	for _, v := range []intstr.IntOrString{intstr.FromInt32(0), intstr.FromString("0%")} {
		frozen := &lullv1alpha1.MaintenanceWindow{ObjectMeta: metav1.ObjectMeta{Name: "freeze"}, Spec: lullv1alpha1.MaintenanceWindowSpec{
			Strategy: lullv1alpha1.StrategyPermissive, MaxUnavailable: ptr.To(v)}}
		res := preview(t, Request{Nodes: []string{"n1"}, Classes: []string{"hardware"}}, node("n1", nil), frozen)
		require.Equal(t, StartBudget, res.Nodes[0].Start)
		require.Equal(t, "window freeze is frozen: maxUnavailable "+v.String()+" allows no node to be disrupted", res.Nodes[0].WaitingFor)
	}
}

// A request of several classes is previewed with the drainer's merged
// plan (internal/policy): each class's rule, the steps in the canonical order
// with the classes that need them, and what the Reboot covers. The drain
// a Reboot needs is previewed like any drain.
func TestPreviewMergesClasses(t *testing.T) {
	site := &lullv1alpha1.DisruptionPolicy{ObjectMeta: metav1.ObjectMeta{Name: "site"}, Spec: lullv1alpha1.DisruptionPolicySpec{Rules: []lullv1alpha1.DisruptionRule{
		{Name: "ssh-keys", Class: "ssh-keys", Action: lullv1alpha1.ActionNone},
		{Name: "chrony", Class: "chrony-config", Steps: []lullv1alpha1.Step{{Type: lullv1alpha1.StepRestartService, Unit: "chronyd"}}},
		{Name: "kernel", Class: "kernel-update", Steps: []lullv1alpha1.Step{{Type: lullv1alpha1.ActionDrain}, {Type: lullv1alpha1.StepReboot}}},
	}}}
	classes := []string{"ssh-keys", "chrony-config", "kernel-update"}
	for name, req := range map[string]Request{
		"classes": {Nodes: []string{"n1"}, Classes: classes},
	} {
		t.Run(name, func(t *testing.T) {
			res := preview(t, req, node("n1", nil), site, pod("web-0", "n1", "web", 30), agentLease("n1", agentlease.DefaultNamespace, t0.Add(-5*time.Second)))
			require.Equal(t, "ssh-keys,chrony-config,kernel-update", res.Class)
			require.Equal(t, classes, res.Classes)
			n := res.Nodes[0]
			require.Equal(t, lullv1alpha1.StepReboot, n.Action)
			require.Equal(t, "site/kernel", n.Rule)
			require.Equal(t, StartNow, n.Start)
			k := []string{"kernel-update"}
			require.Equal(t, []lullv1alpha1.PlannedStep{{Type: lullv1alpha1.ActionCordon, Classes: k}, {Type: lullv1alpha1.ActionDrain, Classes: k},
				{Type: lullv1alpha1.StepReboot, Classes: k, Timeout: &lullv1alpha1.Duration{Duration: 15 * time.Minute},
					Covers: []string{"RestartService chronyd (chrony-config)"}}}, n.Steps)
			require.Equal(t, []lullv1alpha1.ClassDecision{
				{Class: "ssh-keys", Policy: "site", Rule: "ssh-keys", Steps: []string{"None"}},
				{Class: "chrony-config", Policy: "site", Rule: "chrony", Steps: []string{"RestartService chronyd"}},
				{Class: "kernel-update", Policy: "site", Rule: "kernel", Steps: []string{"Drain", "Reboot"}},
			}, n.Classes)
			require.Equal(t, []string{"default/web-0"}, n.Evict, "the Reboot's drain is previewed")
		})
	}
}

// A request writes its classes, in the order given.
func TestRequestSpec(t *testing.T) {
	deadline := t0.Add(time.Hour)
	one := Request{Classes: []string{"kernel-update"}, Deadline: &deadline}.Spec("n1")
	require.Equal(t, lullv1alpha1.NodeMaintenanceSpec{NodeName: "n1", Classes: []string{"kernel-update"}, Deadline: &metav1.Time{Time: deadline}}, one)
	two := Request{Classes: []string{"a", "b"}}.Spec("n1")
	require.Equal(t, lullv1alpha1.NodeMaintenanceSpec{NodeName: "n1", Classes: []string{"a", "b"}}, two)
	none := Request{Changes: &lullv1alpha1.Changes{}}.Spec("n1")
	require.Nil(t, none.Classes, "no classes: none written (the API admits no empty list)")
}

// agentLease is lull-agent's lease of node in namespace, last renewed at
// renewed (zero: never), lasting agentlease.Duration.
func agentLease(node, namespace string, renewed time.Time) *coordinationv1.Lease {
	l := &coordinationv1.Lease{ObjectMeta: metav1.ObjectMeta{Name: agentlease.Name(node), Namespace: namespace,
		Labels: map[string]string{agentlease.ComponentLabel: agentlease.Component}},
		Spec: coordinationv1.LeaseSpec{HolderIdentity: ptr.To("lull-agent-pod"), LeaseDurationSeconds: ptr.To(int32(agentlease.Duration / time.Second))}}
	if !renewed.IsZero() {
		l.Spec.RenewTime = &metav1.MicroTime{Time: renewed}
	}
	return l
}

// A plan with host steps waits for lull-agent where none runs, with the
// drainer's own judgement (internal/agentlease) and message (internal/gate); a plan
// without host steps never asks; with an agent the plan starts as before.
func TestPreviewWaitsForAgent(t *testing.T) {
	site := &lullv1alpha1.DisruptionPolicy{ObjectMeta: metav1.ObjectMeta{Name: "site"}, Spec: lullv1alpha1.DisruptionPolicySpec{Rules: []lullv1alpha1.DisruptionRule{
		{Name: "kernel", Class: "kernel-update", Steps: []lullv1alpha1.Step{{Type: lullv1alpha1.ActionDrain}, {Type: lullv1alpha1.StepReboot}}},
		{Name: "chrony", Class: "chrony-config", Steps: []lullv1alpha1.Step{{Type: lullv1alpha1.StepRestartService, Unit: "chronyd"}}},
		{Name: "drain", Class: "drain-only", Action: lullv1alpha1.ActionDrain},
	}}}
	const ns = agentlease.DefaultNamespace
	const noAgent = "no lull-agent runs on node n1 (no Lease lull-system/lull-agent-n1): is the lull-agent DaemonSet installed, and its pod running on the node?"
	unlabelled := agentLease("n1", ns, t0)
	unlabelled.Labels = nil
	for _, tc := range []struct {
		name       string
		class      string
		agent      *coordinationv1.Lease
		opts       func(*Options)
		start      Start
		waitingFor string
	}{
		{name: "fresh agent lease: starts now", class: "kernel-update", agent: agentLease("n1", ns, t0.Add(-39*time.Second)), start: StartNow},
		{name: "no agent lease", class: "kernel-update", start: StartAgent,
			waitingFor: "the plan (Cordon, Drain, Reboot) has steps lull-agent carries out on the node: " + noAgent},
		{name: "a service restart alone needs an agent too", class: "chrony-config", start: StartAgent,
			waitingFor: "the plan (RestartService chronyd) has steps lull-agent carries out on the node: " + noAgent},
		{name: "expired agent lease", class: "kernel-update", agent: agentLease("n1", ns, t0.Add(-40*time.Second)), start: StartAgent,
			waitingFor: "the plan (Cordon, Drain, Reboot) has steps lull-agent carries out on the node: lull-agent on node n1 stopped renewing its lease lull-system/lull-agent-n1 (last renewed 2026-11-21T09:59:20Z, by lull-agent-pod)"},
		{name: "agent lease never renewed", class: "kernel-update", agent: agentLease("n1", ns, time.Time{}), start: StartAgent,
			waitingFor: "the plan (Cordon, Drain, Reboot) has steps lull-agent carries out on the node: lull-agent on node n1 stopped renewing its lease lull-system/lull-agent-n1 (last renewed never, by lull-agent-pod)"},
		{name: "another node's agent", class: "kernel-update", agent: agentLease("n2", ns, t0), start: StartAgent,
			waitingFor: "the plan (Cordon, Drain, Reboot) has steps lull-agent carries out on the node: " + noAgent},
		{name: "an agent lease in another namespace", class: "kernel-update", agent: agentLease("n1", "elsewhere", t0), start: StartAgent,
			waitingFor: "the plan (Cordon, Drain, Reboot) has steps lull-agent carries out on the node: " + noAgent},
		{name: "--agent-namespace names where the agents are", class: "kernel-update", agent: agentLease("n1", "elsewhere", t0),
			opts: func(o *Options) { o.AgentNamespace = "elsewhere" }, start: StartNow},
		{name: "an unlabelled lease is no agent's (the drainer's cache does not hold it)", class: "kernel-update", agent: unlabelled, start: StartAgent,
			waitingFor: "the plan (Cordon, Drain, Reboot) has steps lull-agent carries out on the node: " + noAgent},
		{name: "agents in the lease namespace: one list holds both", class: "kernel-update", agent: agentLease("n1", lease.DefaultNamespace, t0),
			opts: func(o *Options) { o.AgentNamespace = lease.DefaultNamespace }, start: StartNow},
		{name: "no host steps: no agent needed", class: "drain-only", start: StartNow},
		{name: "no host steps, a stale agent: no agent needed", class: "drain-only", agent: agentLease("n1", ns, t0.Add(-time.Hour)), start: StartNow},
	} {
		t.Run(tc.name, func(t *testing.T) {
			o := DefaultOptions()
			if tc.opts != nil {
				tc.opts(&o)
			}
			objs := []runtime.Object{node("n1", nil), site, pod("web-0", "n1", "web", 30)}
			if tc.agent != nil {
				objs = append(objs, tc.agent)
			}
			n := previewWith(t, o, Request{Nodes: []string{"n1"}, Classes: []string{tc.class}}, objs...).Nodes[0]
			require.Equal(t, tc.start, n.Start, n.WaitingFor)
			if tc.start == StartAgent {
				require.Equal(t, tc.waitingFor, n.WaitingFor)
				require.Nil(t, n.StartAt, "no time is known")
			} else {
				require.Equal(t, ptr.To(t0), n.StartAt)
			}
			if tc.class != "chrony-config" {
				require.Equal(t, []string{"default/web-0"}, n.Evict, "the drain is previewed either way")
			}
		})
	}
}

// A node waiting for lull-agent takes no budget: the next node starts.
func TestPreviewNodeWaitingForAgentTakesNoBudget(t *testing.T) {
	site := &lullv1alpha1.DisruptionPolicy{ObjectMeta: metav1.ObjectMeta{Name: "site"}, Spec: lullv1alpha1.DisruptionPolicySpec{Rules: []lullv1alpha1.DisruptionRule{
		{Name: "kernel", Class: "kernel-update", Steps: []lullv1alpha1.Step{{Type: lullv1alpha1.ActionDrain}, {Type: lullv1alpha1.StepReboot}}},
	}}}
	res := preview(t, Request{Nodes: []string{"n1", "n2", "n3"}, Classes: []string{"kernel-update"}}, node("n1", nil), node("n2", nil), node("n3", nil), site,
		agentLease("n2", agentlease.DefaultNamespace, t0), agentLease("n3", agentlease.DefaultNamespace, t0))
	var starts []Start
	for _, n := range res.Nodes {
		starts = append(starts, n.Start)
	}
	require.Equal(t, []Start{StartAgent, StartNow, StartBudget}, starts, "the default budget is 1: n1 waits for an agent, n2 starts, n3 waits for n2")
}

// Many nodes with host steps: the agent gate answers from the one list of
// agent leases, never a GET per node.
func TestPreviewReadsAgentLeasesOnce(t *testing.T) {
	site := &lullv1alpha1.DisruptionPolicy{ObjectMeta: metav1.ObjectMeta{Name: "site"}, Spec: lullv1alpha1.DisruptionPolicySpec{Rules: []lullv1alpha1.DisruptionRule{
		{Name: "chrony", Class: "chrony-config", Steps: []lullv1alpha1.Step{{Type: lullv1alpha1.StepRestartService, Unit: "chronyd"}}},
	}}}
	objs := []client.Object{site}
	var names []string
	for i := 0; i < 20; i++ {
		n := fmt.Sprintf("n%02d", i)
		names = append(names, n)
		objs = append(objs, node(n, nil))
		if i%2 == 0 {
			objs = append(objs, agentLease(n, agentlease.DefaultNamespace, t0))
		}
	}
	c := &countingReader{Reader: crfake.NewClientBuilder().WithScheme(lullscheme.New()).WithObjects(objs...).Build(), lists: map[string]int{}, gets: map[string]int{}}
	o := DefaultOptions()
	o.Clock = clocktesting.NewFakeClock(t0)
	res, err := Preview(context.Background(), c, fake.NewClientset(), o, Request{Nodes: names, Classes: []string{"chrony-config"}})
	require.NoError(t, err)
	starts := map[Start]int{}
	for _, n := range res.Nodes {
		starts[n.Start]++
	}
	require.Equal(t, map[Start]int{StartNow: 1, StartBudget: 9, StartAgent: 10}, starts)
	require.Equal(t, 2, c.lists["*v1.LeaseList"])
	require.Equal(t, map[string]int{"*v1.ConfigMap": 1}, c.gets, "the guard's criticalUnits, once")
}

// The preview plans with the guard's criticalUnits, as the drainer does
// (issue 41, finding 5): a unit the admin added there is previewed behind
// a cordon and drain.
func TestPreviewReadsTheGuardsCriticalUnits(t *testing.T) {
	policy := &lullv1alpha1.DisruptionPolicy{ObjectMeta: metav1.ObjectMeta{Name: "site"}, Spec: lullv1alpha1.DisruptionPolicySpec{Rules: []lullv1alpha1.DisruptionRule{
		{Name: "units", Units: []string{"*"}, Steps: []lullv1alpha1.Step{{Type: lullv1alpha1.StepDaemonReload}, {Type: lullv1alpha1.StepRestartService}}}}}}
	guard := &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Name: "lull-admission", Namespace: "lull-system"},
		Data: map[string]string{"criticalUnits": "kubelet.service,k3s.service"}}
	for name, objs := range map[string][]client.Object{
		"without the guard's ConfigMap: the shipped list": {node("n1", nil), policy},
		"with it: its list": {node("n1", nil), policy, guard},
	} {
		t.Run(name, func(t *testing.T) {
			c := crfake.NewClientBuilder().WithScheme(lullscheme.New()).WithObjects(objs...).Build()
			o := DefaultOptions()
			o.Clock = clocktesting.NewFakeClock(t0)
			res, err := Preview(context.Background(), c, fake.NewClientset(), o, Request{Nodes: []string{"n1"},
				Changes: &lullv1alpha1.Changes{Units: []string{"k3s.service"}}})
			require.NoError(t, err)
			drains := len(objs) == 3
			require.Equal(t, drains, res.Nodes[0].Steps[0].Type == lullv1alpha1.ActionCordon, "%+v", res.Nodes[0].Steps)
		})
	}
}
