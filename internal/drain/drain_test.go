package drain

import (
	"context"
	"errors"
	"maps"
	"slices"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	corev1 "k8s.io/api/core/v1"
	policyv1 "k8s.io/api/policy/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes/fake"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"
	crfake "sigs.k8s.io/controller-runtime/pkg/client/fake"
	"sigs.k8s.io/controller-runtime/pkg/client/interceptor"

	lullv1alpha1 "lull.dev/lull/api/v1alpha1"
	"lull.dev/lull/internal/lullscheme"
	"lull.dev/lull/internal/options"
)

func pod(name, app string, grace int64) *corev1.Pod {
	return &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: "shop", Labels: map[string]string{"app": app},
			OwnerReferences: []metav1.OwnerReference{{APIVersion: "apps/v1", Kind: "ReplicaSet", Name: app, UID: "u", Controller: ptr.To(true)}}},
		Spec:   corev1.PodSpec{NodeName: "n1", TerminationGracePeriodSeconds: ptr.To(grace)},
		Status: corev1.PodStatus{Phase: corev1.PodRunning},
	}
}

func pdb(name, app string, allowed int32) *policyv1.PodDisruptionBudget {
	return &policyv1.PodDisruptionBudget{ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: "shop"},
		Spec:   policyv1.PodDisruptionBudgetSpec{Selector: &metav1.LabelSelector{MatchLabels: map[string]string{"app": app}}},
		Status: policyv1.PodDisruptionBudgetStatus{DisruptionsAllowed: allowed}}
}

func request() *lullv1alpha1.NodeMaintenance {
	return &lullv1alpha1.NodeMaintenance{ObjectMeta: metav1.ObjectMeta{Name: "n1"},
		Spec: lullv1alpha1.NodeMaintenanceSpec{NodeName: "n1", Classes: []string{"kernel-update"}}}
}

func pdbReader(t *testing.T, pdbs ...client.Object) client.Reader {
	t.Helper()
	return crfake.NewClientBuilder().WithScheme(lullscheme.New()).WithObjects(pdbs...).Build()
}

// One round: a budget allowing one disruption gets one eviction request,
// the rest of its pods are blocked without asking; a pod already going
// counts as gone; a pod the eviction API refuses is blocked too.
func TestRound(t *testing.T) {
	going := pod("web-0", "web", 30)
	going.DeletionTimestamp = &metav1.Time{Time: time.Now()}
	going.Finalizers = []string{"keep"}
	kube := fake.NewSimpleClientset(going, pod("web-1", "web", 30), pod("web-2", "web", 30), pod("db-0", "db", 30))
	d, err := New(context.Background(), kube, Options{}, request())
	require.NoError(t, err)
	var asked []string
	r, err := d.Round(context.Background(), pdbReader(t, pdb("web", "web", 1)), func(p *corev1.Pod) Outcome {
		asked = append(asked, p.Name)
		if p.Name == "db-0" {
			return Refused
		}
		return Evicted
	})
	require.NoError(t, err)
	require.Equal(t, []string{"db-0", "web-1"}, asked)
	require.Equal(t, 2, r.Gone, "web-0 going, web-1 evicted")
	require.True(t, r.Progress)
	blockers, err := r.Blockers()
	require.NoError(t, err)
	require.Equal(t, map[string][]string{"shop/web": {"shop/web-2"}, "(unknown)": {"shop/db-0"}}, blockers)
}

// A budget that counts a still-running pod as disrupted (an eviction
// approved but never carried out: the evicting client died mid-request)
// allows no disruption; Unfinished names that pod and when the budget
// frees it, so the drainer can say why a budget of healthy pods blocks.
// A pod the budget counts that is already terminating is not unfinished.
func TestUnfinished(t *testing.T) {
	at := time.Date(2026, 11, 26, 4, 25, 40, 0, time.UTC)
	going := pod("web-2", "web", 30)
	going.DeletionTimestamp = &metav1.Time{Time: at}
	going.Finalizers = []string{"keep"}
	kube := fake.NewSimpleClientset(pod("web-0", "web", 30), pod("web-1", "web", 30), going, pod("db-0", "db", 30))
	d, err := New(context.Background(), kube, Options{}, request())
	require.NoError(t, err)
	web := pdb("web", "web", 0)
	web.Status.DisruptedPods = map[string]metav1.Time{"web-1": {Time: at}, "web-2": {Time: at}}
	r, err := d.Round(context.Background(), pdbReader(t, web, pdb("db", "db", 0)), func(*corev1.Pod) Outcome {
		t.Fatal("no eviction: every budget is exhausted")
		return Failed
	})
	require.NoError(t, err)
	unfinished, err := r.Unfinished()
	require.NoError(t, err)
	require.Equal(t, []Unfinished{{Budget: "shop/web", Pod: "shop/web-1", Frees: at.Add(2 * time.Minute)}}, unfinished)
	require.Equal(t, "shop/web still counts pod shop/web-1 as evicted by a request that did not finish (the pod was not deleted), until 2026-11-26T04:27:40Z",
		unfinished[0].Describe())
}

// Again asks for the pods a round left blocked without listing the node's
// pods: the budget's room goes to one of them, a pod replaced since comes
// back Vanished, and the round says it did not list (so it cannot call the
// node empty).
func TestAgain(t *testing.T) {
	kube := fake.NewSimpleClientset(pod("web-1", "web", 30), pod("web-2", "web", 30), pod("web-3", "web", 30))
	d, err := New(context.Background(), kube, Options{}, request())
	require.NoError(t, err)
	first, err := d.Round(context.Background(), pdbReader(t, pdb("web", "web", 1)), func(*corev1.Pod) Outcome { return Evicted })
	require.NoError(t, err)
	require.True(t, first.Listed)
	left := first.StillBlocked()
	require.Len(t, left, 2)
	require.Equal(t, "web-2", left[0].Name)

	kube.ClearActions()
	var asked []string
	again, err := d.Again(context.Background(), pdbReader(t, pdb("web", "web", 1)), left, func(p *corev1.Pod) Outcome {
		asked = append(asked, p.Name)
		return Vanished
	})
	require.NoError(t, err)
	require.Empty(t, kube.Actions(), "Again listed the node's pods")
	require.False(t, again.Listed)
	require.Equal(t, []string{"web-2", "web-3"}, asked, "a vanished pod consumes no room")
	require.Equal(t, 2, again.Gone)
	require.Empty(t, again.StillBlocked())

	again, err = d.Again(context.Background(), pdbReader(t, pdb("web", "web", 1)), left, func(*corev1.Pod) Outcome { return Evicted })
	require.NoError(t, err)
	require.Equal(t, 1, again.Gone)
	require.Equal(t, []string{"web-3"}, []string{again.StillBlocked()[0].Name})
}

// The budgets cannot be read: the round fails rather than evict as if no
// budget covered the pods.
func TestRoundFailsClosed(t *testing.T) {
	kube := fake.NewSimpleClientset(pod("web-1", "web", 30))
	d, err := New(context.Background(), kube, Options{}, request())
	require.NoError(t, err)
	broken := crfake.NewClientBuilder().WithScheme(lullscheme.New()).WithInterceptorFuncs(interceptor.Funcs{
		List: func(context.Context, client.WithWatch, client.ObjectList, ...client.ListOption) error {
			return errors.New("cache not started")
		}}).Build()
	_, err = d.Round(context.Background(), broken, func(*corev1.Pod) Outcome {
		t.Fatal("evicted without reading the budgets")
		return Evicted
	})
	require.ErrorContains(t, err, "listing PodDisruptionBudgets in shop: cache not started")
}

// The preview walks the same round without evicting: the pods that would
// go, the blockers, and the longest grace period (the request's override
// when set).
func TestPreview(t *testing.T) {
	kube := fake.NewSimpleClientset(pod("web-1", "web", 30), pod("web-2", "web", 30), pod("batch-0", "batch", 600))
	d, err := New(context.Background(), kube, Options{}, request())
	require.NoError(t, err)
	p, err := d.Preview(context.Background(), pdbReader(t, pdb("web", "web", 1)))
	require.NoError(t, err)
	require.Equal(t, []string{"shop/batch-0", "shop/web-1"}, p.Evict)
	require.Equal(t, []lullv1alpha1.Blocker{{PodDisruptionBudget: "shop/web", Pods: []string{"shop/web-2"}}}, p.Blockers)
	require.Equal(t, 10*time.Minute, p.MaxGracePeriod)

	nm := request()
	nm.Spec.Drain = &lullv1alpha1.DrainOptions{GracePeriodSeconds: ptr.To[int64](5)}
	d, err = New(context.Background(), kube, Options{}, nm)
	require.NoError(t, err)
	p, err = d.Preview(context.Background(), pdbReader(t))
	require.NoError(t, err)
	require.Equal(t, 5*time.Second, p.MaxGracePeriod)

	nm.Spec.Drain = &lullv1alpha1.DrainOptions{PodSelector: &metav1.LabelSelector{MatchLabels: map[string]string{"a": "in valid"}}}
	_, err = New(context.Background(), kube, Options{}, nm)
	require.ErrorContains(t, err, "spec.drain.podSelector")
}

// A plan that takes the node down drains every evictable pod: a
// podSelector matching nothing would otherwise call the node drained with
// every pod still on it, and the reboot would stop them past their
// PodDisruptionBudgets.
func TestWholeNodeIgnoresPodSelector(t *testing.T) {
	kube := fake.NewSimpleClientset(pod("web-1", "web", 30), pod("db-0", "db", 30))
	nm := request()
	nm.Spec.Drain = &lullv1alpha1.DrainOptions{PodSelector: &metav1.LabelSelector{MatchLabels: map[string]string{"app": "nothing"}}}
	d, err := New(context.Background(), kube, Options{}, nm)
	require.NoError(t, err)
	p, err := d.Preview(context.Background(), pdbReader(t))
	require.NoError(t, err)
	require.Empty(t, p.Evict, "a drain alone follows the podSelector")

	d, err = New(context.Background(), kube, Options{WholeNode: true}, nm)
	require.NoError(t, err)
	p, err = d.Preview(context.Background(), pdbReader(t))
	require.NoError(t, err)
	require.Equal(t, []string{"shop/db-0", "shop/web-1"}, p.Evict)
}

// A drain is configured by the drainer's options.
func TestFor(t *testing.T) {
	m := options.DefaultMaintenance()
	m.DeleteEmptyDirData = false
	d := For(&m, true)
	require.Equal(t, Options{DeleteEmptyDirData: false, Timeout: m.DrainTimeout, RetryDelay: m.RetryDelay, WholeNode: true}, d)
}

// AskBudgets: a budget the cache shows exhausted is asked anyway, once per
// round (the API server decides, not a cache that may be behind); a pod
// of it the API server evicts says the cache disagreed. Without
// AskBudgets, no request is sent for its pods.
func TestAskBudgets(t *testing.T) {
	kube := fake.NewSimpleClientset(pod("web-1", "web", 30), pod("web-2", "web", 30), pod("db-0", "db", 30), pod("db-1", "db", 30))
	d, err := New(context.Background(), kube, Options{}, request())
	require.NoError(t, err)
	budgets := pdbReader(t, pdb("web", "web", 0), pdb("db", "db", 0))
	r, err := d.Round(context.Background(), budgets, func(*corev1.Pod) Outcome {
		t.Fatal("the cache's word is taken unless asked to ask")
		return Failed
	})
	require.NoError(t, err)
	require.Len(t, r.Blocked, 4)

	d.AskBudgets = true
	var asked []string
	r, err = d.Round(context.Background(), budgets, func(p *corev1.Pod) Outcome {
		asked = append(asked, p.Name)
		if p.Labels["app"] == "db" {
			return Refused
		}
		return Evicted // the cache was behind: the API server let it go
	})
	require.NoError(t, err)
	require.Equal(t, []string{"db-0", "web-1"}, asked, "one eviction per budget the cache shows exhausted")
	require.Equal(t, []string{"shop/web"}, r.Disagreed)
	require.Equal(t, []string{"shop/db-0", "shop/db-1", "shop/web-2"}, slices.Sorted(maps.Keys(r.Blocked)))
}
