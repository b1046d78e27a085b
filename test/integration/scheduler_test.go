package integration

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	v1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/client-go/dynamic"
	"k8s.io/client-go/dynamic/dynamicinformer"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/tools/events"
	fwk "k8s.io/kube-scheduler/framework"
	"k8s.io/kubernetes/pkg/scheduler"
	kubeschedulerconfig "k8s.io/kubernetes/pkg/scheduler/apis/config"
	kubeschedulerscheme "k8s.io/kubernetes/pkg/scheduler/apis/config/scheme"
	frameworkruntime "k8s.io/kubernetes/pkg/scheduler/framework/runtime"
	"k8s.io/kubernetes/pkg/scheduler/profile"
	clocktesting "k8s.io/utils/clock/testing"
	"k8s.io/utils/ptr"

	lullv1alpha1 "lull.dev/lull/api/v1alpha1"
	"lull.dev/lull/internal/forecast"
	"lull.dev/lull/lease"
	"lull.dev/lull/plugins/nodedisruption"
	"lull.dev/lull/test/framework"
)

const schedulerName = "lull-scheduler"

// schedEnv is lull-scheduler running in-process against the shared API
// server, configured from the shipped manifests/scheduler/config.yaml.
type schedEnv struct {
	t      *testing.T
	ctx    context.Context
	cs     kubernetes.Interface
	clock  *clocktesting.FakeClock
	ns     string
	plugin *nodedisruption.NodeDisruption
	sched  *scheduler.Scheduler
}

// forecastShows waits until the plugin's forecast satisfies cond.
func (e *schedEnv) forecastShows(what string, cond func(*forecast.Snapshot) bool) {
	e.t.Helper()
	require.NoError(e.t, wait.PollUntilContextTimeout(e.ctx, 5*time.Millisecond, 10*time.Second, true, func(context.Context) (bool, error) {
		return cond(e.plugin.Forecast().Snapshot()), nil
	}), "forecast never showed %s", what)
}

// Saturday 2026-11-21 10:00 UTC: forecast time in these tests.
var schedT0 = time.Date(2026, 11, 21, 10, 0, 0, 0, time.UTC)

// newSchedEnv prepares a clean cluster (no nodes, no lull objects) and a
// namespace for the test's pods; start runs the scheduler.
func newSchedEnv(t *testing.T) *schedEnv {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	t.Cleanup(cancel)
	cfg := cp.Config
	cs := kubernetes.NewForConfigOrDie(cfg)
	e := &schedEnv{t: t, ctx: ctx, cs: cs, clock: clocktesting.NewFakeClock(schedT0)}

	// Nodes are cluster-wide: start from none, and leave none behind.
	deleteAllNodes(t, cs)
	t.Cleanup(func() { deleteAllNodes(t, cs) })
	e.ns = strings.ToLower(strings.ReplaceAll(t.Name(), "/", "-"))
	_, err := cs.CoreV1().Namespaces().Create(ctx, &v1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: e.ns}}, metav1.CreateOptions{})
	require.NoError(t, err)
	t.Cleanup(func() { _ = cs.CoreV1().Namespaces().Delete(context.Background(), e.ns, metav1.DeleteOptions{}) })
	if _, err := cs.CoreV1().Namespaces().Create(ctx, &v1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: lease.DefaultNamespace}}, metav1.CreateOptions{}); err != nil && !apierrors.IsAlreadyExists(err) {
		require.NoError(t, err)
	}
	return e
}

// start runs lull-scheduler in-process with the shipped configuration,
// optionally edited, and returns once its caches (and the forecast's) have
// synced, so the state the test set up before is what it schedules by.
func (e *schedEnv) start(mutate func(string) string) *schedEnv {
	t, cs, cfg := e.t, e.cs, cp.Config
	t.Helper()
	// Stop the scheduler before the test's namespace goes.
	ctx, cancel := context.WithCancel(e.ctx)
	t.Cleanup(cancel)
	data, err := os.ReadFile(filepath.Join(framework.RepoRoot(), "manifests", "scheduler", "config.yaml"))
	require.NoError(t, err)
	yaml := string(data)
	if mutate != nil {
		yaml = mutate(yaml)
	}
	obj, _, err := kubeschedulerscheme.Codecs.UniversalDecoder().Decode([]byte(yaml), nil, nil)
	require.NoError(t, err)
	schedCfg := obj.(*kubeschedulerconfig.KubeSchedulerConfiguration)

	informerFactory := scheduler.NewInformerFactory(cs, 0, nil)
	dynFactory := dynamicinformer.NewDynamicSharedInformerFactory(dynamic.NewForConfigOrDie(cfg), 0)
	broadcaster := events.NewBroadcaster(&events.EventSinkImpl{Interface: cs.EventsV1()})
	broadcaster.StartRecordingToSink(ctx.Done())
	t.Cleanup(broadcaster.Shutdown)
	sched, err := scheduler.New(ctx, cs, informerFactory, dynFactory, profile.NewRecorderFactory(broadcaster),
		scheduler.WithKubeConfig(cfg),
		scheduler.WithProfiles(schedCfg.Profiles...),
		scheduler.WithPodInitialBackoffSeconds(1),
		scheduler.WithPodMaxBackoffSeconds(1),
		scheduler.WithFrameworkOutOfTreeRegistry(frameworkruntime.Registry{
			nodedisruption.Name: func(ctx context.Context, obj runtime.Object, h fwk.Handle) (fwk.Plugin, error) {
				p, err := nodedisruption.NewWithClock(e.clock)(ctx, obj, h)
				if err == nil {
					e.plugin = p.(*nodedisruption.NodeDisruption)
				}
				return p, err
			},
		}))
	require.NoError(t, err)
	e.sched = sched
	informerFactory.Start(ctx.Done())
	dynFactory.Start(ctx.Done())
	informerFactory.WaitForCacheSync(ctx.Done())
	dynFactory.WaitForCacheSync(ctx.Done())
	require.NoError(t, sched.WaitForHandlersSync(ctx))
	go sched.Run(ctx)
	require.NoError(t, wait.PollUntilContextTimeout(ctx, 10*time.Millisecond, 30*time.Second, true, func(context.Context) (bool, error) {
		return e.plugin != nil && e.plugin.Forecast().Synced(), nil
	}), "the forecast did not sync")
	return e
}

func deleteAllNodes(t *testing.T, cs kubernetes.Interface) {
	t.Helper()
	ctx := context.Background()
	require.NoError(t, cs.CoreV1().Nodes().DeleteCollection(ctx, metav1.DeleteOptions{}, metav1.ListOptions{}))
	// Without a namespace controller, pods of earlier tests would stay
	// bound to node names a later test reuses.
	pods, err := cs.CoreV1().Pods(metav1.NamespaceAll).List(ctx, metav1.ListOptions{})
	require.NoError(t, err)
	for _, p := range pods.Items {
		_ = cs.CoreV1().Pods(p.Namespace).Delete(ctx, p.Name, metav1.DeleteOptions{GracePeriodSeconds: ptr.To[int64](0)})
	}
	leases, err := cs.CoordinationV1().Leases(lease.DefaultNamespace).List(ctx, metav1.ListOptions{})
	require.NoError(t, err)
	for _, l := range leases.Items {
		_ = cs.CoordinationV1().Leases(lease.DefaultNamespace).Delete(ctx, l.Name, metav1.DeleteOptions{})
	}
	require.NoError(t, cp.Client.DeleteAllOf(ctx, &lullv1alpha1.MaintenanceWindow{}))
	// No controller may be left to run finalizers: drop them first.
	var nms lullv1alpha1.NodeMaintenanceList
	require.NoError(t, cp.Client.List(ctx, &nms))
	for i := range nms.Items {
		if len(nms.Items[i].Finalizers) > 0 {
			nms.Items[i].Finalizers = nil
			_ = cp.Client.Update(ctx, &nms.Items[i])
		}
	}
	require.NoError(t, cp.Client.DeleteAllOf(ctx, &lullv1alpha1.NodeMaintenance{}))
}

func (e *schedEnv) node(name string, lbls map[string]string) *v1.Node {
	e.t.Helper()
	n := &v1.Node{
		ObjectMeta: metav1.ObjectMeta{Name: name, Labels: lbls},
		Status: v1.NodeStatus{
			Allocatable: v1.ResourceList{v1.ResourceCPU: resource.MustParse("4"), v1.ResourceMemory: resource.MustParse("8Gi"), v1.ResourcePods: resource.MustParse("110")},
			Capacity:    v1.ResourceList{v1.ResourceCPU: resource.MustParse("4"), v1.ResourceMemory: resource.MustParse("8Gi"), v1.ResourcePods: resource.MustParse("110")},
			Conditions:  []v1.NodeCondition{{Type: v1.NodeReady, Status: v1.ConditionTrue}},
		},
	}
	created, err := e.cs.CoreV1().Nodes().Create(e.ctx, n, metav1.CreateOptions{})
	require.NoError(e.t, err)
	// The API server taints new nodes not-ready; without a node lifecycle
	// controller here, the test plays its part.
	created.Spec.Taints = nil
	created, err = e.cs.CoreV1().Nodes().Update(e.ctx, created, metav1.UpdateOptions{})
	require.NoError(e.t, err)
	created.Status = n.Status
	created, err = e.cs.CoreV1().Nodes().UpdateStatus(e.ctx, created, metav1.UpdateOptions{})
	require.NoError(e.t, err)
	return created
}

func (e *schedEnv) pod(name string, mut ...func(*v1.Pod)) *v1.Pod {
	e.t.Helper()
	p := &v1.Pod{
		ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: e.ns},
		Spec: v1.PodSpec{SchedulerName: schedulerName, Containers: []v1.Container{{Name: "c", Image: "pause",
			Resources: v1.ResourceRequirements{Requests: v1.ResourceList{v1.ResourceCPU: resource.MustParse("100m")}}}}},
	}
	for _, m := range mut {
		m(p)
	}
	created, err := e.cs.CoreV1().Pods(e.ns).Create(e.ctx, p, metav1.CreateOptions{})
	require.NoError(e.t, err)
	return created
}

// boundNode waits for the pod to be bound and returns its node.
func (e *schedEnv) boundNode(name string) string {
	e.t.Helper()
	var last *v1.Pod
	err := wait.PollUntilContextTimeout(e.ctx, 20*time.Millisecond, 30*time.Second, true, func(ctx context.Context) (bool, error) {
		p, err := e.cs.CoreV1().Pods(e.ns).Get(ctx, name, metav1.GetOptions{})
		if err != nil {
			return false, err
		}
		last = p
		return p.Spec.NodeName != "", nil
	})
	require.NoError(e.t, err, "pod %s not bound; last seen: %+v", name, last.Status.Conditions)
	return last.Spec.NodeName
}

// unschedulableMessage waits until the scheduler reports the pod
// unschedulable and returns its message.
func (e *schedEnv) unschedulableMessage(name string) string {
	e.t.Helper()
	var msg string
	err := wait.PollUntilContextTimeout(e.ctx, 20*time.Millisecond, 30*time.Second, true, func(ctx context.Context) (bool, error) {
		p, err := e.cs.CoreV1().Pods(e.ns).Get(ctx, name, metav1.GetOptions{})
		if err != nil {
			return false, err
		}
		require.Empty(e.t, p.Spec.NodeName, "pod %s was bound", name)
		for _, c := range p.Status.Conditions {
			if c.Type == v1.PodScheduled && c.Status == v1.ConditionFalse && c.Reason == v1.PodReasonUnschedulable {
				msg = c.Message
				return true, nil
			}
		}
		return false, nil
	})
	require.NoError(e.t, err, "pod %s never reported unschedulable", name)
	return msg
}

func (e *schedEnv) window(name, pool, start string) {
	e.t.Helper()
	w := &lullv1alpha1.MaintenanceWindow{
		ObjectMeta: metav1.ObjectMeta{Name: name},
		Spec: lullv1alpha1.MaintenanceWindowSpec{
			NodeSelector: &metav1.LabelSelector{MatchLabels: map[string]string{"pool": pool}},
			Schedule: &lullv1alpha1.Schedule{TimeZone: "UTC", StartTime: start, Duration: lullv1alpha1.Duration{Duration: 2 * time.Hour},
				Recurrence: &lullv1alpha1.Recurrence{Frequency: lullv1alpha1.Daily}},
		},
	}
	require.NoError(e.t, cp.Client.Create(e.ctx, w))
}

func TestSchedulerLeasedNodeNeverChosen(t *testing.T) {
	e := newSchedEnv(t)
	e.node("leased", nil)
	e.node("free-1", nil)
	e.node("free-2", nil)
	_, err := lease.New(e.cs, lease.Options{}).Acquire(e.ctx, "leased", "fw-updater", "reboot", "firmware 2.1", time.Hour)
	require.NoError(t, err)
	e.start(nil)
	// The shipped configuration filters with NodeDisruption first: a
	// leased node is rejected by one lookup, before the resource and
	// affinity filters spend anything on it.
	filters := e.sched.Profiles[schedulerName].ListPlugins().Filter.Enabled
	require.NotEmpty(t, filters)
	require.Equal(t, nodedisruption.Name, filters[0].Name, "filter order: %v", filters)
	for i := 0; i < 20; i++ {
		e.pod(fmt.Sprintf("p%d", i))
	}
	for i := 0; i < 20; i++ {
		require.NotEqual(t, "leased", e.boundNode(fmt.Sprintf("p%d", i)))
	}
}

// A pod rejected only because of a lease is bound promptly once the lease
// is released: the plugin activates it; no backoff or flush timeout is
// involved.
func TestSchedulerLeaseReleaseRequeuesPromptly(t *testing.T) {
	e := newSchedEnv(t)
	e.node("only", nil)
	lc := lease.New(e.cs, lease.Options{})
	e.start(nil)
	_, err := lc.Acquire(e.ctx, "only", "fw-updater", "reboot", "firmware 2.1", time.Hour)
	require.NoError(t, err)
	e.forecastShows("the lease", func(s *forecast.Snapshot) bool { return s.Get("only").Leased() })
	e.pod("waiting")
	msg := e.unschedulableMessage("waiting")
	require.Contains(t, msg, `leased for disruption by "fw-updater" for reboot`)
	t.Logf("rejection reported to the user: %s", msg)

	var latencies []time.Duration
	for round := 0; round < 5; round++ {
		name := fmt.Sprintf("round-%d", round)
		if round > 0 {
			_, err := lc.Acquire(e.ctx, "only", "fw-updater", "reboot", "firmware 2.1", time.Hour)
			require.NoError(t, err)
			e.forecastShows("the lease", func(s *forecast.Snapshot) bool { return s.Get("only").Leased() })
			e.pod(name)
			e.unschedulableMessage(name)
		} else {
			name = "waiting"
		}
		start := time.Now()
		require.NoError(t, lc.Release(e.ctx, "only", "fw-updater"))
		require.Equal(t, "only", e.boundNode(name))
		latencies = append(latencies, time.Since(start))
	}
	t.Logf("lease release -> pod bound, 5 rounds: %v", latencies)
	fmt.Printf("METRIC lease-release-to-bound %v\n", latencies)
}

func TestSchedulerMaintenanceLabelStopsPlacement(t *testing.T) {
	e := newSchedEnv(t)
	n := e.node("maint", nil)
	e.node("other", nil)
	e.start(nil)
	for i := 0; i < 4; i++ {
		e.pod(fmt.Sprintf("before-%d", i))
		e.boundNode(fmt.Sprintf("before-%d", i))
	}
	n.Labels = map[string]string{lullv1alpha1.MaintenanceLabel: "kernel-update"}
	_, err := e.cs.CoreV1().Nodes().Update(e.ctx, n, metav1.UpdateOptions{})
	require.NoError(t, err)
	e.forecastShows("the request", func(s *forecast.Snapshot) bool { return s.Get("maint").Requested() })
	// No window selects the node: the default (Permissive) means the
	// maintenance may start now, so the node takes no new pods.
	for i := 0; i < 10; i++ {
		e.pod(fmt.Sprintf("p%d", i))
	}
	for i := 0; i < 10; i++ {
		require.Equal(t, "other", e.boundNode(fmt.Sprintf("p%d", i)))
	}
}

// A node that registers already labelled never receives a pod, even when a
// pod is pending and the labelled node is the only one that exists.
func TestSchedulerNodeJoiningLabelledNeverReceivesPods(t *testing.T) {
	e := newSchedEnv(t).start(nil)
	e.pod("pending")
	e.unschedulableMessage("pending") // no nodes at all
	e.node("joins-labelled", map[string]string{lullv1alpha1.MaintenanceLabel: "hardware"})
	require.NoError(t, wait.PollUntilContextTimeout(e.ctx, 20*time.Millisecond, 30*time.Second, true, func(ctx context.Context) (bool, error) {
		p, err := e.cs.CoreV1().Pods(e.ns).Get(ctx, "pending", metav1.GetOptions{})
		require.NoError(t, err)
		require.Empty(t, p.Spec.NodeName, "pod bound to the labelled node")
		for _, c := range p.Status.Conditions {
			if c.Type == v1.PodScheduled && strings.Contains(c.Message, "(class hardware) and its window is open") {
				t.Logf("with only the labelled node: %s", c.Message)
				return true, nil
			}
		}
		return false, nil
	}))
	e.node("joins-clean", nil)
	require.Equal(t, "joins-clean", e.boundNode("pending"))
	for i := 0; i < 10; i++ {
		e.pod(fmt.Sprintf("p%d", i))
	}
	for i := 0; i < 10; i++ {
		require.Equal(t, "joins-clean", e.boundNode(fmt.Sprintf("p%d", i)))
	}
}

// Both nodes await maintenance with their windows closed; the pod goes to
// the one whose window opens later. A pod that finishes before the earlier
// window loses nothing there, and other plugins (here: the emptier node)
// decide.
func TestSchedulerScorePrefersLaterWindowUnlessPodFinishesFirst(t *testing.T) {
	e := newSchedEnv(t)
	e.window("soon", "soon", "12:00") // opens in 2h
	e.window("late", "late", "20:00") // opens in 10h
	e.node("soon", map[string]string{"pool": "soon", lullv1alpha1.MaintenanceLabel: "kernel-update"})
	e.node("late", map[string]string{"pool": "late", lullv1alpha1.MaintenanceLabel: "kernel-update"})
	// Make "late" the fuller node, so resource scoring alone prefers "soon".
	_, err := e.cs.CoreV1().Pods(e.ns).Create(e.ctx, &v1.Pod{
		ObjectMeta: metav1.ObjectMeta{Name: "filler", Namespace: e.ns},
		Spec: v1.PodSpec{NodeName: "late", Containers: []v1.Container{{Name: "c", Image: "pause",
			Resources: v1.ResourceRequirements{Requests: v1.ResourceList{v1.ResourceCPU: resource.MustParse("2"), v1.ResourceMemory: resource.MustParse("4Gi")}}}}},
	}, metav1.CreateOptions{})
	require.NoError(t, err)
	e.start(nil)

	for i := 0; i < 5; i++ {
		e.pod(fmt.Sprintf("long-%d", i))
		require.Equal(t, "late", e.boundNode(fmt.Sprintf("long-%d", i)), "a pod of unknown runtime goes where the disruption is furthest away")
	}
	for i := 0; i < 3; i++ {
		e.pod(fmt.Sprintf("short-%d", i), func(p *v1.Pod) { p.Spec.ActiveDeadlineSeconds = ptr.To[int64](3600) })
		require.Equal(t, "soon", e.boundNode(fmt.Sprintf("short-%d", i)), "a 1h pod fits before the 2h window")
	}
	e.pod("annotated", func(p *v1.Pod) { p.Annotations = map[string]string{lullv1alpha1.ExpectedRuntimeAnnotation: "90m"} })
	require.Equal(t, "soon", e.boundNode("annotated"))

	// When the earlier window opens (fake clock), "soon" is filtered.
	e.clock.Step(2*time.Hour + time.Second)
	e.forecastShows("the open window", func(s *forecast.Snapshot) bool { return s.Get("soon").WindowOpen })
	for i := 0; i < 3; i++ {
		e.pod(fmt.Sprintf("after-%d", i), func(p *v1.Pod) { p.Spec.ActiveDeadlineSeconds = ptr.To[int64](600) })
		require.Equal(t, "late", e.boundNode(fmt.Sprintf("after-%d", i)))
	}
}

// filterRequestedOutsideWindow makes a requested node with a closed window
// unschedulable too; removing the label lets the pending pod through.
func TestSchedulerFilterRequestedOutsideWindow(t *testing.T) {
	e := newSchedEnv(t)
	e.window("soon", "soon", "12:00")
	e.node("soon", map[string]string{"pool": "soon", lullv1alpha1.MaintenanceLabel: "kernel-update"})
	e.start(func(cfg string) string {
		return strings.Replace(cfg, "filterRequestedOutsideWindow: false", "filterRequestedOutsideWindow: true", 1)
	})
	e.pod("p")
	msg := e.unschedulableMessage("p")
	require.Contains(t, msg, "from 2026-11-21T12:00:00Z")
	n, err := e.cs.CoreV1().Nodes().Get(e.ctx, "soon", metav1.GetOptions{})
	require.NoError(t, err)
	delete(n.Labels, lullv1alpha1.MaintenanceLabel)
	start := time.Now()
	_, err = e.cs.CoreV1().Nodes().Update(e.ctx, n, metav1.UpdateOptions{})
	require.NoError(t, err)
	require.Equal(t, "soon", e.boundNode("p"))
	t.Logf("label removed -> pod bound: %v", time.Since(start))
}

// A class the DisruptionPolicies say needs nothing (None) does not keep
// pods off its node: the scheduler decides with the same rules as the
// drainer. A policy making the class disruptive restricts the node; the
// policy going away again lets the waiting pod in at once.
func TestSchedulerFollowsDisruptionPolicy(t *testing.T) {
	e := newSchedEnv(t)
	e.node("keys", map[string]string{lullv1alpha1.MaintenanceLabel: "ssh-keys"})
	p := &lullv1alpha1.DisruptionPolicy{ObjectMeta: metav1.ObjectMeta{Name: "keys"}, Spec: lullv1alpha1.DisruptionPolicySpec{
		Rules: []lullv1alpha1.DisruptionRule{{Name: "keys", Class: "ssh-keys", Action: lullv1alpha1.ActionNone}}}}
	require.NoError(t, cp.Client.Create(e.ctx, p))
	t.Cleanup(func() { _ = cp.Client.Delete(context.Background(), p) })
	e.start(nil)
	e.pod("first")
	require.Equal(t, "keys", e.boundNode("first"), "ssh-keys disrupts nothing")

	strict := &lullv1alpha1.DisruptionPolicy{ObjectMeta: metav1.ObjectMeta{Name: "strict"}, Spec: lullv1alpha1.DisruptionPolicySpec{Priority: 10,
		Rules: []lullv1alpha1.DisruptionRule{{Name: "keys-drain", Class: "ssh-keys", Action: lullv1alpha1.ActionDrain}}}}
	require.NoError(t, cp.Client.Create(e.ctx, strict))
	e.forecastShows("the request", func(s *forecast.Snapshot) bool { return s.Get("keys").Requested() })
	e.pod("second")
	require.Contains(t, e.unschedulableMessage("second"), "node awaits maintenance (class ssh-keys)")
	require.NoError(t, cp.Client.Delete(e.ctx, strict))
	require.Equal(t, "keys", e.boundNode("second"), "activated when the policy eased the node")
}
