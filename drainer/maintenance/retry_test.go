package maintenance

import (
	"context"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	corev1 "k8s.io/api/core/v1"
	policyv1 "k8s.io/api/policy/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/intstr"
	kubefake "k8s.io/client-go/kubernetes/fake"
	k8stesting "k8s.io/client-go/testing"
	"k8s.io/klog/v2"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/client/fake"
	"sigs.k8s.io/controller-runtime/pkg/reconcile"

	lullv1alpha1 "lull.dev/lull/api/v1alpha1"
	"lull.dev/lull/internal/lullscheme"
	"lull.dev/lull/internal/options"
)

// staleBudgetFixture is a request Draining node n1, whose two pods a
// PodDisruptionBudget covers. The controller's cache (client) shows the
// budget allowing no disruption, for ever: a cache that is behind. The
// API server (kube) refuses evictions until allowFrom and accepts them
// after; asked records when each eviction was sent.
type staleBudgetFixture struct {
	r     *Reconciler
	c     client.Client
	mu    sync.Mutex
	now   time.Time
	asked []time.Time
}

func newStaleBudgetFixture(t *testing.T, allowFrom time.Time) *staleBudgetFixture {
	t.Helper()
	labels := map[string]string{"app": "web"}
	pod := func(name string) *corev1.Pod {
		return &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Namespace: "shop", Name: name, UID: types.UID(name), Labels: labels,
			OwnerReferences: []metav1.OwnerReference{{APIVersion: "apps/v1", Kind: "ReplicaSet", Name: "web", UID: "rs", Controller: ptr.To(true)}}},
			Spec: corev1.PodSpec{NodeName: "n1"}, Status: corev1.PodStatus{Phase: corev1.PodRunning}}
	}
	pdb := &policyv1.PodDisruptionBudget{ObjectMeta: metav1.ObjectMeta{Namespace: "shop", Name: "web", Generation: 1, ResourceVersion: "7"},
		Spec:   policyv1.PodDisruptionBudgetSpec{MaxUnavailable: ptr.To(intstr.FromInt32(1)), Selector: &metav1.LabelSelector{MatchLabels: labels}},
		Status: policyv1.PodDisruptionBudgetStatus{ObservedGeneration: 1, DisruptionsAllowed: 0, CurrentHealthy: 2, DesiredHealthy: 2, ExpectedPods: 2}}
	nm := &lullv1alpha1.NodeMaintenance{ObjectMeta: metav1.ObjectMeta{Name: "n1", UID: "req-1"},
		Spec: lullv1alpha1.NodeMaintenanceSpec{NodeName: "n1", Classes: []string{"kernel-update"}},
		Status: lullv1alpha1.NodeMaintenanceStatus{Phase: lullv1alpha1.PhaseDraining, CordonedByLull: true, WasUnschedulable: ptr.To(false),
			Decision: &lullv1alpha1.Decision{Action: lullv1alpha1.ActionDrain, Steps: []lullv1alpha1.PlannedStep{{Type: lullv1alpha1.ActionCordon}, {Type: lullv1alpha1.ActionDrain}}}}}
	node := &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: "n1"}, Spec: corev1.NodeSpec{Unschedulable: true}}
	c := fake.NewClientBuilder().WithScheme(lullscheme.New()).WithObjects(node, nm, pdb).WithStatusSubresource(nm).Build()
	f := &staleBudgetFixture{c: c, now: time.Date(2026, 11, 27, 6, 36, 49, 0, time.UTC)}
	kube := kubefake.NewClientset(pod("web-0"), pod("web-1"))
	kube.PrependReactor("create", "pods", func(a k8stesting.Action) (bool, runtime.Object, error) {
		if a.GetSubresource() != "eviction" {
			return false, nil, nil
		}
		f.mu.Lock()
		defer f.mu.Unlock()
		f.asked = append(f.asked, f.now)
		if f.now.Before(allowFrom) {
			return true, nil, apierrors.NewTooManyRequests("Cannot evict pod as it would violate the pod's disruption budget.", 10)
		}
		return true, nil, nil
	})
	f.r = &Reconciler{Client: c, Kube: kube, Metrics: NewMetrics(c), Options: options.DefaultMaintenance()}
	return f
}

// round runs one reconcile of the drain unit at the fixture's time and
// returns when the controller asked to look again.
func (f *staleBudgetFixture) round(t *testing.T) time.Duration {
	t.Helper()
	ctx := context.Background()
	var nm lullv1alpha1.NodeMaintenance
	require.NoError(t, f.c.Get(ctx, client.ObjectKey{Name: "n1"}, &nm))
	var node corev1.Node
	require.NoError(t, f.c.Get(ctx, client.ObjectKey{Name: "n1"}, &node))
	f.r.renewals.renewed("n1", f.now) // the lease is not this test's business
	s := &step{r: f.r, logger: klog.Background(), nm: &nm, node: &node, now: f.now, status: nm.Status.DeepCopy()}
	res, err := s.drain(ctx)
	require.NoError(t, err)
	require.Positive(t, res.RequeueAfter, "a drain that is not done looks again by itself")
	return res.RequeueAfter
}

// A drain blocked by a PodDisruptionBudget asks the eviction API again
// within --eviction-max-retry-delay, whatever the cache shows: here the
// cache shows the budget exhausted for ever (behind the API server, as
// when the budget's status change has not reached it), and the API server
// accepts evictions from a minute on. Only the requeues drive the rounds,
// as if every watch event were lost.
func TestBlockedDrainAsksAgainWhateverTheCacheSays(t *testing.T) {
	start := time.Date(2026, 11, 27, 6, 36, 49, 0, time.UTC)
	allowFrom := start.Add(time.Minute)
	f := newStaleBudgetFixture(t, allowFrom)
	maxDelay := f.r.Options.MaxRetryDelay
	accepted := func() bool {
		f.mu.Lock()
		defer f.mu.Unlock()
		return len(f.asked) > 0 && !f.asked[len(f.asked)-1].Before(allowFrom)
	}
	for f.now.Before(start.Add(3*time.Minute)) && !accepted() {
		f.now = f.now.Add(f.round(t))
	}
	ok := accepted()
	f.mu.Lock()
	defer f.mu.Unlock()
	require.NotEmpty(t, f.asked, "the eviction API was never asked in 3 minutes")
	require.LessOrEqual(t, f.asked[0].Sub(start), maxDelay, "the first ask within the retry delay of the request's first sight (a freshly listed cache is trusted that long)")
	for i := 1; i < len(f.asked); i++ {
		require.LessOrEqual(t, f.asked[i].Sub(f.asked[i-1]), maxDelay, "asked at %v after %v: longer than --eviction-max-retry-delay", f.asked[i], f.asked[i-1])
	}
	require.True(t, ok, "an eviction the API server allows is sent: %v", f.asked)
	require.LessOrEqual(t, f.asked[len(f.asked)-1].Sub(allowFrom), maxDelay, "sent within --eviction-max-retry-delay of the budget allowing it")
	require.LessOrEqual(t, len(f.asked), int(time.Minute/maxDelay)+2, "asking is bounded: one eviction per budget and retry delay while blocked: %v", f.asked)
}

// A budget that gains room wakes the requests it blocked, also when the
// cache does not yet show them Draining (the status write of the round it
// blocked has not reached the cache): the rounds memo knows them.
func TestBudgetWakesTheDrainsItBlocked(t *testing.T) {
	nm := &lullv1alpha1.NodeMaintenance{ObjectMeta: metav1.ObjectMeta{Name: "n1", UID: "req-1"},
		Status: lullv1alpha1.NodeMaintenanceStatus{Phase: lullv1alpha1.PhaseCordoning}} // as the cache still shows it
	draining := &lullv1alpha1.NodeMaintenance{ObjectMeta: metav1.ObjectMeta{Name: "n2", UID: "req-2"},
		Status: lullv1alpha1.NodeMaintenanceStatus{Phase: lullv1alpha1.PhaseDraining}}
	c := fake.NewClientBuilder().WithScheme(lullscheme.New()).WithObjects(nm, draining).Build()
	r := &Reconciler{Client: c}
	now := time.Date(2026, 11, 27, 6, 36, 49, 0, time.UTC)
	r.rounds.blocked("n1", "req-1", now, map[string]string{"shop/web": "7"}, []corev1.Pod{{}}, now)
	web := &policyv1.PodDisruptionBudget{ObjectMeta: metav1.ObjectMeta{Namespace: "shop", Name: "web"}}
	other := &policyv1.PodDisruptionBudget{ObjectMeta: metav1.ObjectMeta{Namespace: "shop", Name: "db"}}
	names := func(reqs []reconcile.Request) []string {
		var out []string
		for _, q := range reqs {
			out = append(out, q.Name)
		}
		return out
	}
	require.ElementsMatch(t, []string{"n1", "n2"}, names(r.blockedRequests(context.Background(), web)))
	require.Equal(t, []string{"n2"}, names(r.blockedRequests(context.Background(), other)), "a budget that blocked nothing wakes only what is Draining")
	r.forget("n1")
	require.Equal(t, []string{"n2"}, names(r.blockedRequests(context.Background(), web)), "forgotten with the lease")
}
