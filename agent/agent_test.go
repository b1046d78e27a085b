package agent

import (
	"context"
	"errors"
	"reflect"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"
	"github.com/stretchr/testify/require"
	coordinationv1 "k8s.io/api/coordination/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/tools/events"
	clocktesting "k8s.io/utils/clock/testing"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/client/fake"
	"sigs.k8s.io/controller-runtime/pkg/client/interceptor"
	"sigs.k8s.io/controller-runtime/pkg/reconcile"

	lullv1alpha1 "lull.dev/lull/api/v1alpha1"
	"lull.dev/lull/internal/hostfiles"
	"lull.dev/lull/internal/lullscheme"
	"lull.dev/lull/lease"
)

const (
	testNode  = "n1"
	leaseUID  = types.UID("lease-uid-1")
	transits  = int32(2)
	bootID    = "boot-1"
	waitLimit = 5 * time.Second // bounds a wait for a goroutine on the fake clock
)

// t0 is the agent's (fake) clock; whole seconds, as metav1.Time is stored
// to the second. It is long past: a lease fresh at t0 is expired by the
// real clock, so an agent that judged expiry by anything but its injected
// clock would not act.
var t0 = time.Date(2025, 3, 10, 10, 0, 0, 0, time.UTC)

// drainerLease is node n1's disruption lease as lull's drainer holds it
// when it hands the steps over: fresh on t0, matching request()'s token.
func drainerLease(change ...func(*coordinationv1.Lease)) *coordinationv1.Lease {
	l := &coordinationv1.Lease{
		ObjectMeta: metav1.ObjectMeta{Name: lease.Name(testNode), Namespace: lease.DefaultNamespace, UID: leaseUID},
		Spec: coordinationv1.LeaseSpec{HolderIdentity: ptr.To("lull-drainer/lull-drainer-7d9f-x2"), LeaseTransitions: ptr.To(transits),
			LeaseDurationSeconds: ptr.To[int32](60), RenewTime: &metav1.MicroTime{Time: t0.Add(-10 * time.Second)}},
	}
	for _, c := range change {
		c(l)
	}
	return l
}

// request is n1's NodeMaintenance in phase Acting, fenced by drainerLease.
func request(actions ...lullv1alpha1.ActionStatus) *lullv1alpha1.NodeMaintenance {
	return &lullv1alpha1.NodeMaintenance{
		ObjectMeta: metav1.ObjectMeta{Name: testNode, UID: "nm-uid-1"},
		Spec:       lullv1alpha1.NodeMaintenanceSpec{NodeName: testNode},
		Status: lullv1alpha1.NodeMaintenanceStatus{Phase: lullv1alpha1.PhaseActing, Actions: actions,
			Fencing: &lullv1alpha1.Fencing{LeaseUID: leaseUID, LeaseTransitions: transits}},
	}
}

func node(boot string) *corev1.Node {
	return &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: testNode}, Status: corev1.NodeStatus{
		NodeInfo:   corev1.NodeSystemInfo{BootID: boot},
		Conditions: []corev1.NodeCondition{{Type: corev1.NodeReady, Status: corev1.ConditionTrue, Reason: "KubeletReady"}}}}
}

func step(t lullv1alpha1.DisruptionAction, unit string, timeout time.Duration, state lullv1alpha1.ActionState) lullv1alpha1.ActionStatus {
	return lullv1alpha1.ActionStatus{Type: t, Unit: unit, Timeout: lullv1alpha1.Duration{Duration: timeout}, State: state}
}

func restart(unit string, state lullv1alpha1.ActionState) lullv1alpha1.ActionStatus {
	return step(lullv1alpha1.StepRestartService, unit, 2*time.Minute, state)
}

func reboot(state lullv1alpha1.ActionState) lullv1alpha1.ActionStatus {
	return step(lullv1alpha1.StepReboot, "", 15*time.Minute, state)
}

func powerOff(state lullv1alpha1.ActionState) lullv1alpha1.ActionStatus {
	return step(lullv1alpha1.StepPowerOff, "", 5*time.Minute, state)
}

// started is a with the given start (and boot ID, for a reboot).
func started(a lullv1alpha1.ActionStatus, at time.Time, boot string) lullv1alpha1.ActionStatus {
	a.StartedAt, a.BootID = &metav1.Time{Time: at}, boot
	return a
}

// ended is a finished in state at, with msg.
func ended(a lullv1alpha1.ActionStatus, state lullv1alpha1.ActionState, at time.Time, msg string) lullv1alpha1.ActionStatus {
	a.State, a.FinishedAt, a.Message = state, &metav1.Time{Time: at}, msg
	return a
}

// fakeExec records the steps it is asked to run and runs them with run
// (or succeeds at once, printing "done").
type fakeExec struct {
	ran   []lullv1alpha1.ActionStatus
	steps []Step // as given, with what of the request they need
	run   func(ctx context.Context, a lullv1alpha1.ActionStatus) (string, error)
}

func (f *fakeExec) Run(ctx context.Context, s Step) (string, error) {
	f.ran, f.steps = append(f.ran, s.Action), append(f.steps, s)
	if f.run == nil {
		return "done", nil
	}
	return f.run(ctx, s.Action)
}

// env is an agent for node n1 on a fake client, a fake clock at t0, a
// fake executor, an event recorder and a metrics registry of its own.
type env struct {
	t     *testing.T
	ctx   context.Context
	c     client.WithWatch
	clock *clocktesting.FakeClock
	exec  *fakeExec
	rec   *events.FakeRecorder
	a     *Agent
	// statusUpdateErr, if set, is asked before each status write: an
	// error answers the write instead of the API server.
	statusUpdateErr func() error
}

func newEnv(t *testing.T, objs ...client.Object) *env {
	t.Helper()
	e := &env{t: t, ctx: context.Background(), clock: clocktesting.NewFakeClock(t0), exec: &fakeExec{}, rec: events.NewFakeRecorder(100)}
	e.c = fake.NewClientBuilder().WithScheme(lullscheme.New()).WithObjects(objs...).
		WithStatusSubresource(&lullv1alpha1.NodeMaintenance{}).
		WithInterceptorFuncs(interceptor.Funcs{SubResourceUpdate: e.statusUpdate}).Build()
	e.a = &Agent{Client: e.c, Live: e.c, Node: testNode, LeaseNamespace: lease.DefaultNamespace, DrainerIdentity: "lull-drainer",
		Exec: e.exec, Clock: e.clock, Recorder: e.rec, Metrics: NewMetrics(prometheus.NewRegistry())}
	return e
}

// statusUpdate writes as a real client does: a write the API server
// refuses leaves the caller's object as it was. (The fake client copies
// the stored object's metadata, its UID too, into it before it checks the
// resourceVersion.)
func (e *env) statusUpdate(ctx context.Context, c client.Client, sub string, obj client.Object, opts ...client.SubResourceUpdateOption) error {
	if e.statusUpdateErr != nil {
		if err := e.statusUpdateErr(); err != nil {
			return err
		}
	}
	w := obj.DeepCopyObject().(client.Object)
	if err := c.SubResource(sub).Update(ctx, w, opts...); err != nil {
		return err
	}
	reflect.ValueOf(obj).Elem().Set(reflect.ValueOf(w).Elem())
	return nil
}

// failStatusWritesAfter lets the first n status writes through and
// answers every later one with err: the stored request keeps what the
// first n wrote.
func (e *env) failStatusWritesAfter(n int, err error) {
	writes := 0
	e.statusUpdateErr = func() error {
		if writes++; writes > n {
			return err
		}
		return nil
	}
}

func (e *env) reconcile(ctx context.Context, name string) (reconcile.Result, error) {
	return e.a.Reconcile(ctx, reconcile.Request{NamespacedName: types.NamespacedName{Name: name}})
}

// stored is the request named name as the API server has it.
func (e *env) stored(name string) *lullv1alpha1.NodeMaintenance {
	e.t.Helper()
	nm := &lullv1alpha1.NodeMaintenance{}
	require.NoError(e.t, e.c.Get(e.ctx, types.NamespacedName{Name: name}, nm))
	return nm
}

// actions are the stored request's steps, their times in UTC.
func (e *env) actions() []lullv1alpha1.ActionStatus {
	e.t.Helper()
	return inUTC(e.stored(testNode).Status.Actions)
}

func inUTC(as []lullv1alpha1.ActionStatus) []lullv1alpha1.ActionStatus {
	as = append([]lullv1alpha1.ActionStatus(nil), as...)
	for i := range as {
		if as[i].StartedAt != nil {
			as[i].StartedAt = &metav1.Time{Time: as[i].StartedAt.UTC()}
		}
		if as[i].FinishedAt != nil {
			as[i].FinishedAt = &metav1.Time{Time: as[i].FinishedAt.UTC()}
		}
	}
	return as
}

// events drains the events recorded so far.
func (e *env) events() []string {
	var got []string
	for {
		select {
		case ev := <-e.rec.Events:
			got = append(got, ev)
		default:
			return got
		}
	}
}

// ranLabels are the labels of the steps the executor was asked to run.
func (e *env) ranLabels() []string {
	var got []string
	for i := range e.exec.ran {
		got = append(got, e.exec.ran[i].Label())
	}
	return got
}

// untilDeadline waits for the step's context to end, as a command still
// running at its deadline would; the wait is bounded so a broken deadline
// fails the test instead of hanging it.
func untilDeadline(t *testing.T, ctx context.Context, out string) (string, error) {
	select {
	case <-ctx.Done():
		return out, ctx.Err()
	case <-time.After(waitLimit):
		t.Errorf("the step's context did not end at its deadline")
		return out, errors.New("no deadline")
	}
}

// The agent acts only on its own node's request, in phase Acting, while
// the request is live and has a step left; otherwise it neither runs nor
// writes anything.
func TestReconcileIgnores(t *testing.T) {
	inPhase := func(p lullv1alpha1.MaintenancePhase) *lullv1alpha1.NodeMaintenance {
		nm := request(restart("chronyd", lullv1alpha1.ActionPending))
		nm.Status.Phase = p
		return nm
	}
	for _, tc := range []struct {
		name string
		nm   *lullv1alpha1.NodeMaintenance
		req  string
	}{
		{name: "another node's request, even in phase Acting", req: "n2", nm: func() *lullv1alpha1.NodeMaintenance {
			nm := request(restart("chronyd", lullv1alpha1.ActionPending))
			nm.Name, nm.Spec.NodeName = "n2", "n2"
			return nm
		}()},
		{name: "no request for the node", req: testNode},
		{name: "phase Pending", req: testNode, nm: inPhase(lullv1alpha1.PhasePending)},
		{name: "phase WaitingForAgent", req: testNode, nm: inPhase(lullv1alpha1.PhaseWaitingForAgent)},
		{name: "phase Draining", req: testNode, nm: inPhase(lullv1alpha1.PhaseDraining)},
		{name: "phase Drained", req: testNode, nm: inPhase(lullv1alpha1.PhaseDrained)},
		{name: "phase PoweredOff", req: testNode, nm: inPhase(lullv1alpha1.PhasePoweredOff)},
		{name: "phase Completed", req: testNode, nm: inPhase(lullv1alpha1.PhaseCompleted)},
		{name: "phase Failed", req: testNode, nm: inPhase(lullv1alpha1.PhaseFailed)},
		{name: "a request an admin completed (spec.complete)", req: testNode, nm: func() *lullv1alpha1.NodeMaintenance {
			nm := request(restart("chronyd", lullv1alpha1.ActionPending))
			nm.Spec.Complete = true
			return nm
		}()},
		{name: "a request being deleted", req: testNode, nm: func() *lullv1alpha1.NodeMaintenance {
			nm := request(restart("chronyd", lullv1alpha1.ActionPending))
			nm.DeletionTimestamp, nm.Finalizers = &metav1.Time{Time: t0}, []string{"lull.dev/drainer"}
			return nm
		}()},
		{name: "every step done", req: testNode, nm: request(
			ended(started(restart("chronyd", lullv1alpha1.ActionRunning), t0.Add(-time.Minute), ""), lullv1alpha1.ActionSucceeded, t0, "ok"),
			restart("sshd", lullv1alpha1.ActionSkipped),
			ended(started(reboot(lullv1alpha1.ActionRunning), t0.Add(-time.Minute), bootID), lullv1alpha1.ActionFailed, t0, "no"))},
		{name: "no steps at all", req: testNode, nm: request()},
	} {
		t.Run(tc.name, func(t *testing.T) {
			objs := []client.Object{drainerLease(), node(bootID)}
			if tc.nm != nil {
				objs = append(objs, tc.nm)
			}
			e := newEnv(t, objs...)
			var before *lullv1alpha1.NodeMaintenance
			if tc.nm != nil {
				before = e.stored(tc.nm.Name)
			}

			res, err := e.reconcile(e.ctx, tc.req)
			require.NoError(t, err)
			require.Equal(t, reconcile.Result{}, res)
			require.Empty(t, e.exec.ran, "nothing runs")
			require.Empty(t, e.events())
			if before != nil {
				require.Equal(t, before.ResourceVersion, e.stored(tc.nm.Name).ResourceVersion, "nothing is written")
			}
		})
	}
}

// No step runs unless the node's lease, read live, is the one the
// request's fencing token names, held by lull's drainer and not expired by
// observation (lease.Observer: unchanged for its duration on the agent's
// clock since the agent first saw that version; the timestamps in it do
// not count); a lease that matches runs exactly the next step.
func TestFencing(t *testing.T) {
	for _, tc := range []struct {
		name    string
		noToken bool                  // the request carries no fencing token
		lease   *coordinationv1.Lease // nil: there is none
		// unchanged: the agent saw the lease this long before the check,
		// and nobody renewed it since.
		unchanged time.Duration
		wantWhy   string // "": the agent acts
	}{
		{name: "the request carries no fencing token", noToken: true, lease: drainerLease(), wantWhy: "the request carries no fencing token"},
		{name: "the node has no lease", wantWhy: "the node's lease does not exist"},
		{name: "the lease was released and taken again (another UID)", lease: drainerLease(func(l *coordinationv1.Lease) { l.UID = "lease-uid-2" }),
			wantWhy: "the lease was released and taken again (UID lease-uid-2, token names lease-uid-1)"},
		{name: "the lease was taken over since (more transitions)", lease: drainerLease(func(l *coordinationv1.Lease) { l.Spec.LeaseTransitions = ptr.To[int32](3) }),
			wantWhy: "the lease changed holder since the token was issued (transitions 3, token 2)"},
		{name: "the token names transitions the lease never recorded", lease: drainerLease(func(l *coordinationv1.Lease) { l.Spec.LeaseTransitions = nil }),
			wantWhy: "the lease changed holder since the token was issued (transitions 0, token 2)"},
		{name: "another tool holds the lease", lease: drainerLease(func(l *coordinationv1.Lease) { l.Spec.HolderIdentity = ptr.To("kured/node-a") }),
			wantWhy: `the lease is held by "kured/node-a", not by lull-drainer`},
		{name: "a holder whose name only begins like lull's drainer", lease: drainerLease(func(l *coordinationv1.Lease) { l.Spec.HolderIdentity = ptr.To("lull-drainer-evil/x") }),
			wantWhy: `the lease is held by "lull-drainer-evil/x", not by lull-drainer`},
		{name: "nobody holds the lease", lease: drainerLease(func(l *coordinationv1.Lease) { l.Spec.HolderIdentity = nil }),
			wantWhy: `the lease is held by "", not by lull-drainer`},
		{name: "the lease went unrenewed for its duration on the agent's clock", lease: drainerLease(), unchanged: 60 * time.Second,
			wantWhy: "the lease has expired: unchanged for 1m0s since this process first saw its version"},
		{name: "a lease without a duration lasts the protocol's default", lease: drainerLease(func(l *coordinationv1.Lease) { l.Spec.LeaseDurationSeconds = nil }),
			unchanged: lease.DefaultDuration, wantWhy: "the lease has expired: unchanged for " + lease.DefaultDuration.String() + " since this process first saw its version"},
		{name: "the drainer's lease, a second before it expires", lease: drainerLease(), unchanged: 59 * time.Second},
		{name: "a renewTime long past by the holder's clock is no expiry", lease: drainerLease(func(l *coordinationv1.Lease) { l.Spec.RenewTime = &metav1.MicroTime{Time: t0.Add(-time.Hour)} })},
		{name: "a lease never renewed, first seen now", lease: drainerLease(func(l *coordinationv1.Lease) { l.Spec.RenewTime = nil })},
		{name: "the drainer's lease, held by another of its replicas", lease: drainerLease(func(l *coordinationv1.Lease) { l.Spec.HolderIdentity = ptr.To("lull-drainer/other-replica") })},
		{name: "the drainer's lease, held under the bare family name", lease: drainerLease(func(l *coordinationv1.Lease) { l.Spec.HolderIdentity = ptr.To("lull-drainer") })},
	} {
		t.Run(tc.name, func(t *testing.T) {
			nm := request(restart("chronyd", lullv1alpha1.ActionPending), reboot(lullv1alpha1.ActionPending))
			if tc.noToken {
				nm.Status.Fencing = nil
			}
			objs := []client.Object{nm, node(bootID)}
			if tc.lease != nil {
				objs = append(objs, tc.lease)
			}
			e := newEnv(t, objs...)
			rv := e.stored(testNode).ResourceVersion
			if tc.unchanged > 0 {
				_, err := e.a.fenced(e.ctx, e.stored(testNode)) // the agent sees the lease's version
				require.NoError(t, err)
				e.clock.Step(tc.unchanged)
			}

			why, err := e.a.fenced(e.ctx, e.stored(testNode))
			require.NoError(t, err)
			require.Equal(t, tc.wantWhy, why)

			res, err := e.reconcile(e.ctx, testNode)
			require.NoError(t, err)
			if tc.wantWhy != "" {
				require.Equal(t, reconcile.Result{RequeueAfter: 10 * time.Second}, res, "fenced: look again in a while")
				require.Empty(t, e.exec.ran, "a fenced agent runs nothing")
				require.Equal(t, rv, e.stored(testNode).ResourceVersion, "a fenced agent writes nothing")
				return
			}
			require.Equal(t, reconcile.Result{}, res)
			require.Equal(t, []string{"RestartService chronyd"}, e.ranLabels(), "exactly the next step")
			require.Equal(t, lullv1alpha1.ActionPending, e.stored(testNode).Status.Actions[1].State, "the reboot waits for the next reconcile")
		})
	}
}

// The fencing check reads the lease from the API server (Live), never
// from the cache the request is read from: a cache that still shows
// lull's lease does not let a taken-over lease act.
func TestFencingReadsTheLeaseLive(t *testing.T) {
	e := newEnv(t, request(restart("chronyd", lullv1alpha1.ActionPending)), drainerLease())
	e.a.Live = fake.NewClientBuilder().WithScheme(lullscheme.New()).
		WithObjects(drainerLease(func(l *coordinationv1.Lease) {
			l.Spec.HolderIdentity, l.Spec.LeaseTransitions = ptr.To("kured"), ptr.To[int32](3)
		})).Build()

	res, err := e.reconcile(e.ctx, testNode)
	require.NoError(t, err)
	require.Equal(t, reconcile.Result{RequeueAfter: 10 * time.Second}, res)
	require.Empty(t, e.exec.ran)
}

// A lease that cannot be read is an error (the controller retries), and
// nothing runs.
func TestFencingLeaseReadFails(t *testing.T) {
	e := newEnv(t, request(restart("chronyd", lullv1alpha1.ActionPending)), drainerLease())
	e.a.Live = interceptor.NewClient(e.c, interceptor.Funcs{
		Get: func(ctx context.Context, c client.WithWatch, key client.ObjectKey, obj client.Object, opts ...client.GetOption) error {
			if _, ok := obj.(*coordinationv1.Lease); ok {
				return apierrors.NewServiceUnavailable("etcd is away")
			}
			return c.Get(ctx, key, obj, opts...)
		},
	})

	_, err := e.reconcile(e.ctx, testNode)
	require.ErrorContains(t, err, "reading the lease of node n1: etcd is away")
	require.Empty(t, e.exec.ran)
}

// A step's life on the agent: recorded Running (with its start, and a
// reboot's boot ID) before the executor runs it, then ended by what the
// run returned, on the agent's clock.
func TestRunStep(t *testing.T) {
	for _, tc := range []struct {
		name    string
		actions []lullv1alpha1.ActionStatus
		boot    string // the node's boot ID now; bootID if empty
		run     func(t *testing.T, e *env, ctx context.Context, a lullv1alpha1.ActionStatus) (string, error)
		// wantRan are the steps the executor ran; wantAtRun the stored
		// steps while it ran (nil: it did not run); want the stored steps
		// after.
		wantRan    []string
		wantAtRun  []lullv1alpha1.ActionStatus
		want       []lullv1alpha1.ActionStatus
		wantEvents []string
		wantCount  map[[2]string]float64 // {type, result}: steps counted
	}{
		{
			name:    "a pending restart is recorded Running before it runs, then Succeeded with its last output line",
			actions: []lullv1alpha1.ActionStatus{restart("chronyd", lullv1alpha1.ActionPending)},
			run: func(t *testing.T, e *env, ctx context.Context, a lullv1alpha1.ActionStatus) (string, error) {
				e.clock.Step(3 * time.Second)
				return "restarted chronyd", nil
			},
			wantRan:   []string{"RestartService chronyd"},
			wantAtRun: []lullv1alpha1.ActionStatus{started(restart("chronyd", lullv1alpha1.ActionRunning), t0, "")},
			want: []lullv1alpha1.ActionStatus{ended(started(restart("chronyd", lullv1alpha1.ActionRunning), t0, ""),
				lullv1alpha1.ActionSucceeded, t0.Add(3*time.Second), "restarted chronyd")},
			wantEvents: []string{"Normal ActionStarted lull-agent started RestartService chronyd",
				"Normal ActionSucceeded RestartService chronyd succeeded: restarted chronyd"},
			wantCount: map[[2]string]float64{{"RestartService", "Succeeded"}: 1},
		},
		{
			name: "only the next pending step runs",
			actions: []lullv1alpha1.ActionStatus{
				ended(started(restart("chronyd", lullv1alpha1.ActionRunning), t0.Add(-time.Minute), ""), lullv1alpha1.ActionSucceeded, t0.Add(-time.Minute), "ok"),
				restart("sshd", lullv1alpha1.ActionPending),
				reboot(lullv1alpha1.ActionPending)},
			wantRan: []string{"RestartService sshd"},
			wantAtRun: []lullv1alpha1.ActionStatus{
				ended(started(restart("chronyd", lullv1alpha1.ActionRunning), t0.Add(-time.Minute), ""), lullv1alpha1.ActionSucceeded, t0.Add(-time.Minute), "ok"),
				started(restart("sshd", lullv1alpha1.ActionRunning), t0, ""),
				reboot(lullv1alpha1.ActionPending)},
			want: []lullv1alpha1.ActionStatus{
				ended(started(restart("chronyd", lullv1alpha1.ActionRunning), t0.Add(-time.Minute), ""), lullv1alpha1.ActionSucceeded, t0.Add(-time.Minute), "ok"),
				ended(started(restart("sshd", lullv1alpha1.ActionRunning), t0, ""), lullv1alpha1.ActionSucceeded, t0, "done"),
				reboot(lullv1alpha1.ActionPending)},
			wantEvents: []string{"Normal ActionStarted lull-agent started RestartService sshd",
				"Normal ActionSucceeded RestartService sshd succeeded: done"},
			wantCount: map[[2]string]float64{{"RestartService", "Succeeded"}: 1},
		},
		{
			name:    "a pending reboot records the node's boot ID before it is issued, and stays Running once issued: the drainer judges the node's return",
			actions: []lullv1alpha1.ActionStatus{reboot(lullv1alpha1.ActionPending)},
			run: func(t *testing.T, e *env, ctx context.Context, a lullv1alpha1.ActionStatus) (string, error) {
				require.Equal(t, bootID, a.BootID, "the executor gets the recorded step")
				return "Rebooting.", nil
			},
			wantRan:    []string{"Reboot"},
			wantAtRun:  []lullv1alpha1.ActionStatus{started(reboot(lullv1alpha1.ActionRunning), t0, bootID)},
			want:       []lullv1alpha1.ActionStatus{started(reboot(lullv1alpha1.ActionRunning), t0, bootID)},
			wantEvents: []string{"Normal ActionStarted lull-agent started Reboot"},
			wantCount:  map[[2]string]float64{{"Reboot", "Running"}: 1},
		},
		{
			name:    "a failing restart is Failed with the error and its last output, and lull falls back to a reboot",
			actions: []lullv1alpha1.ActionStatus{restart("chronyd", lullv1alpha1.ActionPending)},
			run: func(t *testing.T, e *env, ctx context.Context, a lullv1alpha1.ActionStatus) (string, error) {
				e.clock.Step(time.Second)
				return "Job for chronyd.service failed.", errors.New("systemctl restart: exit status 1")
			},
			wantRan:   []string{"RestartService chronyd"},
			wantAtRun: []lullv1alpha1.ActionStatus{started(restart("chronyd", lullv1alpha1.ActionRunning), t0, "")},
			want: []lullv1alpha1.ActionStatus{ended(started(restart("chronyd", lullv1alpha1.ActionRunning), t0, ""), lullv1alpha1.ActionFailed,
				t0.Add(time.Second), "systemctl restart: exit status 1; last output: Job for chronyd.service failed.")},
			wantEvents: []string{"Normal ActionStarted lull-agent started RestartService chronyd",
				"Warning ActionFailed RestartService chronyd Failed: systemctl restart: exit status 1; last output: Job for chronyd.service failed.; lull falls back to a reboot"},
			wantCount: map[[2]string]float64{{"RestartService", "Failed"}: 1},
		},
		{
			name:    "a failing power-off is Failed and the request fails",
			actions: []lullv1alpha1.ActionStatus{powerOff(lullv1alpha1.ActionPending)},
			run: func(t *testing.T, e *env, ctx context.Context, a lullv1alpha1.ActionStatus) (string, error) {
				return "", errors.New("PowerOff is disabled on this agent (its command is empty)")
			},
			wantRan:   []string{"PowerOff"},
			wantAtRun: []lullv1alpha1.ActionStatus{started(powerOff(lullv1alpha1.ActionRunning), t0, "")},
			want: []lullv1alpha1.ActionStatus{ended(started(powerOff(lullv1alpha1.ActionRunning), t0, ""), lullv1alpha1.ActionFailed, t0,
				"PowerOff is disabled on this agent (its command is empty)")},
			wantEvents: []string{"Normal ActionStarted lull-agent started PowerOff",
				"Warning ActionFailed PowerOff Failed: PowerOff is disabled on this agent (its command is empty); the request fails"},
			wantCount: map[[2]string]float64{{"PowerOff", "Failed"}: 1},
		},
		{
			name:    "a reboot whose command fails is Failed, not left Running",
			actions: []lullv1alpha1.ActionStatus{reboot(lullv1alpha1.ActionPending)},
			run: func(t *testing.T, e *env, ctx context.Context, a lullv1alpha1.ActionStatus) (string, error) {
				return "Failed to reboot: Access denied", errors.New("systemctl reboot: exit status 1")
			},
			wantRan:   []string{"Reboot"},
			wantAtRun: []lullv1alpha1.ActionStatus{started(reboot(lullv1alpha1.ActionRunning), t0, bootID)},
			want: []lullv1alpha1.ActionStatus{ended(started(reboot(lullv1alpha1.ActionRunning), t0, bootID), lullv1alpha1.ActionFailed, t0,
				"systemctl reboot: exit status 1; last output: Failed to reboot: Access denied")},
			wantEvents: []string{"Normal ActionStarted lull-agent started Reboot",
				"Warning ActionFailed Reboot Failed: systemctl reboot: exit status 1; last output: Failed to reboot: Access denied; the request fails"},
			wantCount: map[[2]string]float64{{"Reboot", "Failed"}: 1},
		},
		{
			name:    "a restart still running at its deadline (start + timeout, on the agent's clock) is TimedOut",
			actions: []lullv1alpha1.ActionStatus{restart("chronyd", lullv1alpha1.ActionPending)},
			run: func(t *testing.T, e *env, ctx context.Context, a lullv1alpha1.ActionStatus) (string, error) {
				e.clock.Step(2*time.Minute - time.Second)
				require.NoError(t, ctx.Err(), "a second before the deadline")
				e.clock.Step(time.Second)
				return untilDeadline(t, ctx, "waiting for chronyd")
			},
			wantRan:   []string{"RestartService chronyd"},
			wantAtRun: []lullv1alpha1.ActionStatus{started(restart("chronyd", lullv1alpha1.ActionRunning), t0, "")},
			want: []lullv1alpha1.ActionStatus{ended(started(restart("chronyd", lullv1alpha1.ActionRunning), t0, ""), lullv1alpha1.ActionTimedOut,
				t0.Add(2*time.Minute), "did not finish within 2m0s; last output: waiting for chronyd")},
			wantEvents: []string{"Normal ActionStarted lull-agent started RestartService chronyd",
				"Warning ActionTimedOut RestartService chronyd TimedOut: did not finish within 2m0s; last output: waiting for chronyd; lull falls back to a reboot"},
			wantCount: map[[2]string]float64{{"RestartService", "TimedOut"}: 1},
		},
		{
			name:    "a step found Running (the agent restarted mid-step) runs again, keeping its start and saying nothing new",
			actions: []lullv1alpha1.ActionStatus{started(restart("chronyd", lullv1alpha1.ActionRunning), t0.Add(-30*time.Second), "")},
			wantRan: []string{"RestartService chronyd"},
			wantAtRun: []lullv1alpha1.ActionStatus{
				started(restart("chronyd", lullv1alpha1.ActionRunning), t0.Add(-30*time.Second), "")},
			want: []lullv1alpha1.ActionStatus{ended(started(restart("chronyd", lullv1alpha1.ActionRunning), t0.Add(-30*time.Second), ""),
				lullv1alpha1.ActionSucceeded, t0, "done")},
			wantEvents: []string{"Normal ActionSucceeded RestartService chronyd succeeded: done"},
			wantCount:  map[[2]string]float64{{"RestartService", "Succeeded"}: 1},
		},
		{
			name:    "a step run again keeps its first deadline",
			actions: []lullv1alpha1.ActionStatus{started(restart("chronyd", lullv1alpha1.ActionRunning), t0.Add(-90*time.Second), "")},
			run: func(t *testing.T, e *env, ctx context.Context, a lullv1alpha1.ActionStatus) (string, error) {
				e.clock.Step(30 * time.Second)
				return untilDeadline(t, ctx, "")
			},
			wantRan:   []string{"RestartService chronyd"},
			wantAtRun: []lullv1alpha1.ActionStatus{started(restart("chronyd", lullv1alpha1.ActionRunning), t0.Add(-90*time.Second), "")},
			want: []lullv1alpha1.ActionStatus{ended(started(restart("chronyd", lullv1alpha1.ActionRunning), t0.Add(-90*time.Second), ""),
				lullv1alpha1.ActionTimedOut, t0.Add(30*time.Second), "did not finish within 2m0s")},
			wantEvents: []string{"Warning ActionTimedOut RestartService chronyd TimedOut: did not finish within 2m0s; lull falls back to a reboot"},
			wantCount:  map[[2]string]float64{{"RestartService", "TimedOut"}: 1},
		},
		{
			name:    "a step found Running past its deadline times out at once",
			actions: []lullv1alpha1.ActionStatus{started(restart("chronyd", lullv1alpha1.ActionRunning), t0.Add(-5*time.Minute), "")},
			run: func(t *testing.T, e *env, ctx context.Context, a lullv1alpha1.ActionStatus) (string, error) {
				require.Error(t, ctx.Err(), "the deadline has passed before the run")
				return "", ctx.Err()
			},
			wantRan:   []string{"RestartService chronyd"},
			wantAtRun: []lullv1alpha1.ActionStatus{started(restart("chronyd", lullv1alpha1.ActionRunning), t0.Add(-5*time.Minute), "")},
			want: []lullv1alpha1.ActionStatus{ended(started(restart("chronyd", lullv1alpha1.ActionRunning), t0.Add(-5*time.Minute), ""),
				lullv1alpha1.ActionTimedOut, t0, "did not finish within 2m0s")},
			wantEvents: []string{"Warning ActionTimedOut RestartService chronyd TimedOut: did not finish within 2m0s; lull falls back to a reboot"},
			wantCount:  map[[2]string]float64{{"RestartService", "TimedOut"}: 1},
		},
		{
			name:      "a reboot found Running whose node still has its boot ID is issued again (the agent stopped before the machine went down)",
			actions:   []lullv1alpha1.ActionStatus{started(reboot(lullv1alpha1.ActionRunning), t0.Add(-time.Minute), bootID)},
			wantRan:   []string{"Reboot"},
			wantAtRun: []lullv1alpha1.ActionStatus{started(reboot(lullv1alpha1.ActionRunning), t0.Add(-time.Minute), bootID)},
			want:      []lullv1alpha1.ActionStatus{started(reboot(lullv1alpha1.ActionRunning), t0.Add(-time.Minute), bootID)},
			wantCount: map[[2]string]float64{{"Reboot", "Running"}: 1},
		},
		{
			name:    "a reboot found Running whose node reports another boot ID has happened: it is not issued again",
			actions: []lullv1alpha1.ActionStatus{started(reboot(lullv1alpha1.ActionRunning), t0.Add(-time.Minute), bootID)},
			boot:    "boot-2",
			want:    []lullv1alpha1.ActionStatus{started(reboot(lullv1alpha1.ActionRunning), t0.Add(-time.Minute), bootID)},
		},
	} {
		t.Run(tc.name, func(t *testing.T) {
			boot := tc.boot
			if boot == "" {
				boot = bootID
			}
			e := newEnv(t, request(tc.actions...), drainerLease(), node(boot))
			var atRun []lullv1alpha1.ActionStatus
			e.exec.run = func(ctx context.Context, a lullv1alpha1.ActionStatus) (string, error) {
				atRun = e.actions()
				if tc.run == nil {
					return "done", nil
				}
				return tc.run(t, e, ctx, a)
			}

			res, err := e.reconcile(e.ctx, testNode)
			require.NoError(t, err)
			require.Equal(t, reconcile.Result{}, res)
			require.Equal(t, tc.wantRan, e.ranLabels())
			require.Equal(t, tc.wantAtRun, atRun, "stored while the executor ran")
			require.Equal(t, tc.want, e.actions(), "stored after")
			require.Equal(t, tc.wantEvents, e.events())
			for _, typ := range []string{"RestartService", "Reboot", "PowerOff"} {
				for _, result := range []string{"Succeeded", "Failed", "TimedOut", "Running"} {
					require.Equal(t, tc.wantCount[[2]string{typ, result}], testutil.ToFloat64(e.a.Metrics.Actions.WithLabelValues(typ, result)),
						"lull_agent_actions_total{type=%q,result=%q}", typ, result)
				}
			}
		})
	}
}

// The agent stopping mid-run (its own context, not the step's deadline)
// records nothing: the step stays Running and the next agent runs it.
func TestAgentStoppingMidRunLeavesTheStepRunning(t *testing.T) {
	e := newEnv(t, request(restart("chronyd", lullv1alpha1.ActionPending)), drainerLease(), node(bootID))
	ctx, stop := context.WithCancel(e.ctx)
	defer stop()
	e.exec.run = func(runCtx context.Context, a lullv1alpha1.ActionStatus) (string, error) {
		stop()
		return untilDeadline(t, runCtx, "")
	}

	_, err := e.reconcile(ctx, testNode)
	require.ErrorIs(t, err, context.Canceled)
	require.Equal(t, []lullv1alpha1.ActionStatus{started(restart("chronyd", lullv1alpha1.ActionRunning), t0, "")}, e.actions())
	require.Equal(t, []string{"Normal ActionStarted lull-agent started RestartService chronyd"}, e.events())
	require.Zero(t, testutil.CollectAndCount(e.a.Metrics.Actions), "no result counted")
}

// A step start is a write with the request's resourceVersion: when the
// drainer wrote first, the agent starts over from the newer request and
// runs nothing now.
func TestStartConflictStartsOver(t *testing.T) {
	e := newEnv(t, request(restart("chronyd", lullv1alpha1.ActionPending)), drainerLease(), node(bootID))
	conflicts := 0
	e.statusUpdateErr = func() error {
		conflicts++
		return apierrors.NewConflict(schema.GroupResource{Group: "lull.dev", Resource: "nodemaintenances"}, testNode, errors.New("the object has been modified"))
	}

	res, err := e.reconcile(e.ctx, testNode)
	require.NoError(t, err)
	require.Equal(t, reconcile.Result{Requeue: true}, res) //nolint:staticcheck // SA1019: what the agent returns (run.go)
	require.Equal(t, 1, conflicts)
	require.Empty(t, e.exec.ran, "nothing runs unrecorded")
	require.Equal(t, []lullv1alpha1.ActionStatus{restart("chronyd", lullv1alpha1.ActionPending)}, e.actions())
	require.Empty(t, e.events())
}

// A start that cannot be recorded for another reason is an error, and
// nothing runs.
func TestStartWriteFails(t *testing.T) {
	e := newEnv(t, request(restart("chronyd", lullv1alpha1.ActionPending)), drainerLease(), node(bootID))
	e.statusUpdateErr = func() error {
		return apierrors.NewForbidden(schema.GroupResource{Group: "lull.dev", Resource: "nodemaintenances"}, testNode, errors.New("no"))
	}

	_, err := e.reconcile(e.ctx, testNode)
	require.ErrorContains(t, err, "recording RestartService chronyd started")
	require.Empty(t, e.exec.ran)
}

// A reboot needs the node's boot ID recorded before it is issued: a node
// the agent cannot read is an error, and nothing runs.
func TestRebootWithoutItsNode(t *testing.T) {
	e := newEnv(t, request(reboot(lullv1alpha1.ActionPending)), drainerLease())

	_, err := e.reconcile(e.ctx, testNode)
	require.ErrorContains(t, err, "reading node n1")
	require.Empty(t, e.exec.ran)
	require.Equal(t, []lullv1alpha1.ActionStatus{reboot(lullv1alpha1.ActionPending)}, e.actions())
}

// A node that reports no boot ID cannot be seen to come back: its reboot
// fails at once, saying why, and nothing runs.
func TestRebootOfANodeWithoutBootID(t *testing.T) {
	e := newEnv(t, request(reboot(lullv1alpha1.ActionPending)), drainerLease(), node(""))

	_, err := e.reconcile(e.ctx, testNode)
	require.NoError(t, err)
	require.Empty(t, e.exec.ran)
	got := e.actions()
	require.Len(t, got, 1)
	require.Equal(t, lullv1alpha1.ActionFailed, got[0].State)
	require.Contains(t, got[0].Message, "reports no boot ID")
}

// A reboot this process issued is not issued again on the wake-ups that
// follow it (lease renewals, the node going NotReady) while the node has
// not yet come back; a new process would issue it again.
func TestRebootIssuedOnce(t *testing.T) {
	e := newEnv(t, request(reboot(lullv1alpha1.ActionPending)), drainerLease(), node("boot-1"))

	for range 3 {
		_, err := e.reconcile(e.ctx, testNode)
		require.NoError(t, err)
	}
	require.Len(t, e.exec.ran, 1, "issued once")
	require.Equal(t, lullv1alpha1.ActionRunning, e.actions()[0].State)

	e.a.issued = nil // a new process: the reboot did not happen
	_, err := e.reconcile(e.ctx, testNode)
	require.NoError(t, err)
	require.Len(t, e.exec.ran, 2, "issued again by a new agent")
}

// The drainer may write the request while a step runs; the agent records
// the step's end on the request as it is then, and only that step's
// fields: a step the drainer ended meanwhile keeps the drainer's verdict.
func TestRecordAfterTheDrainerWrote(t *testing.T) {
	running := started(restart("chronyd", lullv1alpha1.ActionRunning), t0, "")
	for _, tc := range []struct {
		name string
		// drainer changes the stored request while the step runs.
		drainer        func(t *testing.T, e *env)
		want           []lullv1alpha1.ActionStatus
		wantWaitingFor string
		wantEvents     []string
	}{
		{
			name: "the drainer timed the step out: its verdict stands",
			drainer: func(t *testing.T, e *env) {
				nm := e.stored(testNode)
				nm.Status.Actions[0] = ended(nm.Status.Actions[0], lullv1alpha1.ActionTimedOut, t0, "RestartService chronyd did not finish within its timeout 2m0s")
				require.NoError(t, e.c.Status().Update(e.ctx, nm))
			},
			want:       []lullv1alpha1.ActionStatus{ended(running, lullv1alpha1.ActionTimedOut, t0, "RestartService chronyd did not finish within its timeout 2m0s")},
			wantEvents: []string{"Normal ActionStarted lull-agent started RestartService chronyd"},
		},
		{
			name: "the drainer wrote something else: the step's end is recorded on the newer request",
			drainer: func(t *testing.T, e *env) {
				nm := e.stored(testNode)
				nm.Status.WaitingFor = "lull-agent runs RestartService chronyd"
				require.NoError(t, e.c.Status().Update(e.ctx, nm))
			},
			want:           []lullv1alpha1.ActionStatus{ended(running, lullv1alpha1.ActionSucceeded, t0, "done")},
			wantWaitingFor: "lull-agent runs RestartService chronyd",
			wantEvents: []string{"Normal ActionStarted lull-agent started RestartService chronyd",
				"Normal ActionSucceeded RestartService chronyd succeeded: done"},
		},
		{
			name: "the request was replaced: the new one is not written",
			drainer: func(t *testing.T, e *env) {
				require.NoError(t, e.c.Delete(e.ctx, e.stored(testNode)))
				nm := request(restart("chronyd", lullv1alpha1.ActionPending))
				nm.UID = "nm-uid-2"
				require.NoError(t, e.c.Create(e.ctx, nm))
			},
			want:       []lullv1alpha1.ActionStatus{restart("chronyd", lullv1alpha1.ActionPending)},
			wantEvents: []string{"Normal ActionStarted lull-agent started RestartService chronyd"},
		},
	} {
		t.Run(tc.name, func(t *testing.T) {
			e := newEnv(t, request(restart("chronyd", lullv1alpha1.ActionPending)), drainerLease(), node(bootID))
			e.exec.run = func(ctx context.Context, a lullv1alpha1.ActionStatus) (string, error) {
				tc.drainer(t, e)
				return "done", nil
			}

			res, err := e.reconcile(e.ctx, testNode)
			require.NoError(t, err)
			require.Equal(t, reconcile.Result{}, res)
			require.Equal(t, tc.want, e.actions())
			require.Equal(t, tc.wantWaitingFor, e.stored(testNode).Status.WaitingFor)
			require.Equal(t, tc.wantEvents, e.events())
		})
	}
}

// The end of a step is retried on conflicts, a few times, then given up
// as an error (the step stays Running; the drainer times it out).
func TestRecordGivesUpAfterRepeatedConflicts(t *testing.T) {
	e := newEnv(t, request(restart("chronyd", lullv1alpha1.ActionPending)), drainerLease(), node(bootID))
	writes := 0
	e.statusUpdateErr = func() error {
		writes++
		if writes == 1 {
			return nil // the start
		}
		return apierrors.NewConflict(schema.GroupResource{Group: "lull.dev", Resource: "nodemaintenances"}, testNode, errors.New("the object has been modified"))
	}

	_, err := e.reconcile(e.ctx, testNode)
	require.ErrorContains(t, err, "recording RestartService chronyd Succeeded")
	require.True(t, apierrors.IsConflict(err), "the cause is kept")
	require.Equal(t, 1+6, writes, "the start, then the end tried six times")
	require.Equal(t, []lullv1alpha1.ActionStatus{started(restart("chronyd", lullv1alpha1.ActionRunning), t0, "")}, e.actions())
}

// record on a request whose step is already done writes nothing.
func TestRecordLeavesADoneStep(t *testing.T) {
	done := ended(started(restart("chronyd", lullv1alpha1.ActionRunning), t0, ""), lullv1alpha1.ActionTimedOut, t0, "timed out by the drainer")
	e := newEnv(t, request(done))
	nm := e.stored(testNode)

	res, err := e.a.record(e.ctx, nm, 0, lullv1alpha1.ActionSucceeded, "restarted")
	require.NoError(t, err)
	require.Equal(t, reconcile.Result{}, res)
	after := e.stored(testNode)
	require.Equal(t, nm.ResourceVersion, after.ResourceVersion, "nothing written")
	require.Equal(t, []lullv1alpha1.ActionStatus{done}, inUTC(after.Status.Actions))
	require.Empty(t, e.events())
}

// A step's message is its last output line; a failure's is the error
// (and the last output), a timeout's says so; none exceeds the CRD's 1024.
func TestMessage(t *testing.T) {
	long := strings.Repeat("x", 2000)
	for _, tc := range []struct {
		name  string
		out   string
		err   error
		state lullv1alpha1.ActionState
		want  string
	}{
		{name: "success: the last output line", out: "restarted chronyd", state: lullv1alpha1.ActionSucceeded, want: "restarted chronyd"},
		{name: "success without output", state: lullv1alpha1.ActionSucceeded, want: ""},
		{name: "failure: the error and the last output", out: "unit not found", err: errors.New("exit status 5"),
			state: lullv1alpha1.ActionFailed, want: "exit status 5; last output: unit not found"},
		{name: "failure without output", err: errors.New("exit status 5"), state: lullv1alpha1.ActionFailed, want: "exit status 5"},
		{name: "timeout: the timeout and the last output", out: "still waiting", err: context.Canceled,
			state: lullv1alpha1.ActionTimedOut, want: "did not finish within 2m0s; last output: still waiting"},
		{name: "timeout without output", err: context.Canceled, state: lullv1alpha1.ActionTimedOut, want: "did not finish within 2m0s"},
		{name: "exactly 1024 bytes are kept", out: long[:1024], state: lullv1alpha1.ActionSucceeded, want: long[:1024]},
		{name: "longer is cut to 1024 bytes, saying so", out: long, state: lullv1alpha1.ActionSucceeded, want: long[:1021] + "..."},
		{name: "a long error is cut too", out: "last", err: errors.New(long), state: lullv1alpha1.ActionFailed, want: long[:1021] + "..."},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got := message(tc.out, tc.err, tc.state, 2*time.Minute)
			require.Equal(t, tc.want, got)
			require.LessOrEqual(t, len(got), 1024)
		})
	}
}

// The run's outcome: an error at the deadline is a timeout, another error
// a failure; a reboot or power-off issued stays Running; anything else
// succeeded.
func TestOutcome(t *testing.T) {
	live, ended := context.Background(), func() context.Context {
		ctx, cancel := context.WithCancel(context.Background())
		cancel()
		return ctx
	}()
	for _, tc := range []struct {
		name string
		typ  lullv1alpha1.DisruptionAction
		ctx  context.Context
		err  error
		want lullv1alpha1.ActionState
	}{
		{name: "a restart that exited 0", typ: lullv1alpha1.StepRestartService, ctx: live, want: lullv1alpha1.ActionSucceeded},
		{name: "a power-off issued stays Running: the drainer sees the machine stay down", typ: lullv1alpha1.StepPowerOff, ctx: live, want: lullv1alpha1.ActionRunning},
		{name: "a reboot issued", typ: lullv1alpha1.StepReboot, ctx: live, want: lullv1alpha1.ActionRunning},
		{name: "a restart that failed", typ: lullv1alpha1.StepRestartService, ctx: live, err: errors.New("exit status 1"), want: lullv1alpha1.ActionFailed},
		{name: "a reboot that failed", typ: lullv1alpha1.StepReboot, ctx: live, err: errors.New("exit status 1"), want: lullv1alpha1.ActionFailed},
		{name: "a restart killed at its deadline", typ: lullv1alpha1.StepRestartService, ctx: ended, err: errors.New("signal: killed"), want: lullv1alpha1.ActionTimedOut},
		{name: "a restart that finished just as its deadline came", typ: lullv1alpha1.StepRestartService, ctx: ended, want: lullv1alpha1.ActionSucceeded},
	} {
		t.Run(tc.name, func(t *testing.T) {
			require.Equal(t, tc.want, outcome(tc.ctx, tc.typ, tc.err))
		})
	}
}

// staleCache answers reads of the request with a copy taken earlier, as
// the agent's cache does until it has seen the latest write.
type staleCache struct {
	client.Client
	nm *lullv1alpha1.NodeMaintenance
}

func (s staleCache) Get(ctx context.Context, key client.ObjectKey, obj client.Object, opts ...client.GetOption) error {
	if nm, ok := obj.(*lullv1alpha1.NodeMaintenance); ok && key.Name == s.nm.Name {
		s.nm.DeepCopyInto(nm)
		return nil
	}
	return s.Client.Get(ctx, key, obj, opts...)
}

// A step that this agent ended a moment ago still shows Running in the
// cache: the agent asks the API server before it runs the step again, and
// leaves it (found on real-node-1: a unit restarted twice, 76 ms apart).
// One that an agent stopped mid-step really is Running: it runs again.
func TestRunningStepResumedOnlyWhenTheAPIServerSaysSo(t *testing.T) {
	running := started(restart("chronyd", lullv1alpha1.ActionRunning), t0, "")
	for name, done := range map[string]bool{"ended a moment ago": true, "stopped mid-step": false} {
		t.Run(name, func(t *testing.T) {
			e := newEnv(t, request(running), drainerLease(), node(bootID))
			snapshot := e.stored(testNode)
			if done {
				nm := snapshot.DeepCopy()
				nm.Status.Actions[0] = ended(running, lullv1alpha1.ActionSucceeded, t0, "done")
				require.NoError(t, e.c.Status().Update(e.ctx, nm))
			}
			e.a.Client = staleCache{Client: e.c, nm: snapshot}
			_, err := e.reconcile(e.ctx, testNode)
			require.NoError(t, err)
			if done {
				require.Empty(t, e.ranLabels(), "not run again")
				require.Equal(t, lullv1alpha1.ActionSucceeded, e.actions()[0].State)
				return
			}
			require.Equal(t, []string{"RestartService chronyd"}, e.ranLabels(), "resumed")
		})
	}
}

// A step whose plan gives no timeout has a deadline all the same, counted
// from when the agent runs it: the agent's DefaultStepTimeout, or
// DefaultStepTimeout when that is not set. A step with a timeout of its
// own keeps it.
func TestDefaultStepTimeout(t *testing.T) {
	for _, tc := range []struct {
		name    string
		field   time.Duration // Agent.DefaultStepTimeout
		timeout time.Duration // the step's own
		want    time.Duration // its deadline, from t0
	}{
		{name: "no timeout, field unset: DefaultStepTimeout", want: DefaultStepTimeout},
		{name: "no timeout, field set: the field", field: 5 * time.Minute, want: 5 * time.Minute},
		{name: "a timeout of its own: the timeout", field: 5 * time.Minute, timeout: 2 * time.Minute, want: 2 * time.Minute},
	} {
		t.Run(tc.name, func(t *testing.T) {
			e := newEnv(t, request(step(lullv1alpha1.StepRestartService, "chronyd", tc.timeout, lullv1alpha1.ActionPending)), drainerLease(), node(bootID))
			e.a.DefaultStepTimeout = tc.field
			e.exec.run = func(ctx context.Context, a lullv1alpha1.ActionStatus) (string, error) {
				// The deadline is the one timer on the clock: still set a
				// second before, fired at it.
				e.clock.Step(tc.want - time.Second)
				require.Equal(t, 1, e.clock.Waiters(), "a second before the deadline")
				e.clock.Step(time.Second)
				require.Zero(t, e.clock.Waiters(), "at the deadline")
				return untilDeadline(t, ctx, "waiting for chronyd")
			}

			_, err := e.reconcile(e.ctx, testNode)
			require.NoError(t, err)
			got := e.actions()
			require.Len(t, got, 1)
			require.Equal(t, lullv1alpha1.ActionTimedOut, got[0].State)
			require.Equal(t, t0, got[0].StartedAt.Time)
			require.Equal(t, t0.Add(tc.want), got[0].FinishedAt.Time, "ended at its deadline")
		})
	}
}

// A refused step is said on the request as a Fenced event, once per
// reason: the agent looks again every 10 s, and saying the same each time
// would bury it.
func TestFencedEvent(t *testing.T) {
	nm := request(restart("chronyd", lullv1alpha1.ActionPending))
	e := newEnv(t, nm, node(bootID), drainerLease(func(l *coordinationv1.Lease) { l.Spec.HolderIdentity = ptr.To("kured/node-a") }))
	for range 3 {
		_, err := e.reconcile(e.ctx, testNode)
		require.NoError(t, err)
	}
	evs := e.events()
	require.Len(t, evs, 1, "once per reason: %v", evs)
	require.Contains(t, evs[0], "Warning Fenced lull-agent does not run RestartService chronyd: the lease is held by \"kured/node-a\", not by lull-drainer")
	require.Empty(t, e.exec.ran)

	// Another reason is news.
	var l coordinationv1.Lease
	require.NoError(t, e.a.Live.Get(e.ctx, types.NamespacedName{Namespace: lease.DefaultNamespace, Name: lease.Name(testNode)}, &l))
	require.NoError(t, e.a.Client.Delete(e.ctx, &l))
	_, err := e.reconcile(e.ctx, testNode)
	require.NoError(t, err)
	evs = e.events()
	require.Len(t, evs, 1, "%v", evs)
	require.Contains(t, evs[0], "Fenced lull-agent does not run RestartService chronyd: the node's lease does not exist")
}

// A WriteFiles that an earlier agent left Running (killed mid-set, away
// past the step's timeout, which the drainer held) starts again with its
// whole timeout, and its start says what recovery made of the set before
// anything is written (issue 41, finding 2).
func TestResumedWriteFilesStartsAgain(t *testing.T) {
	running := started(step(lullv1alpha1.StepWriteFiles, "", 2*time.Minute, lullv1alpha1.ActionRunning), t0.Add(-time.Hour), "")
	e := newEnv(t, request(running), drainerLease(), node(bootID))
	e.a.filesRecovered = true
	e.a.recovered = &hostfiles.Recovery{ID: "died", State: hostfiles.JournalRolledBack, Files: []string{"/etc/chrony.conf"}}
	e.failStatusWritesAfter(1, errors.New("the API server is gone")) // keep what the first write stored
	_, _ = e.reconcile(e.ctx, testNode)
	a := e.actions()[0]
	require.Equal(t, lullv1alpha1.ActionRunning, a.State)
	require.Equal(t, t0, a.StartedAt.Time, "its timeout counts from now")
	require.Equal(t, "resumed by a new lull-agent, which found set died unfinished: rolled back (/etc/chrony.conf)", a.Message)
	require.Contains(t, e.events(), "Normal ActionStarted lull-agent resumed by a new lull-agent, which found set died unfinished: rolled back (/etc/chrony.conf): WriteFiles starts again")
}
