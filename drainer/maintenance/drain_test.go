package maintenance

import (
	"context"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	corev1 "k8s.io/api/core/v1"
	policyv1 "k8s.io/api/policy/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/kubernetes/fake"
	policyv1client "k8s.io/client-go/kubernetes/typed/policy/v1"

	lullv1alpha1 "lull.dev/lull/api/v1alpha1"
)

func TestWindowEndMostCautiousWins(t *testing.T) {
	w := func(p lullv1alpha1.WindowEndPolicy) *lullv1alpha1.MaintenanceWindow {
		return &lullv1alpha1.MaintenanceWindow{Spec: lullv1alpha1.MaintenanceWindowSpec{WindowEnd: p}}
	}
	for name, tc := range map[string]struct {
		ws   []*lullv1alpha1.MaintenanceWindow
		want lullv1alpha1.WindowEndPolicy
	}{
		"no window never pauses": {nil, lullv1alpha1.WindowEndContinue},
		"unset means Pause":      {[]*lullv1alpha1.MaintenanceWindow{w("")}, lullv1alpha1.WindowEndPause},
		"continue alone":         {[]*lullv1alpha1.MaintenanceWindow{w(lullv1alpha1.WindowEndContinue)}, lullv1alpha1.WindowEndContinue},
		"pause beats continue":   {[]*lullv1alpha1.MaintenanceWindow{w(lullv1alpha1.WindowEndContinue), w(lullv1alpha1.WindowEndPause)}, lullv1alpha1.WindowEndPause},
		"abort beats everything": {[]*lullv1alpha1.MaintenanceWindow{w(lullv1alpha1.WindowEndPause), w(lullv1alpha1.WindowEndAbort), w(lullv1alpha1.WindowEndContinue)}, lullv1alpha1.WindowEndAbort},
	} {
		t.Run(name, func(t *testing.T) {
			assert.Equal(t, tc.want, windowEnd(tc.ws))
		})
	}
}

func TestRenewBookkeeping(t *testing.T) {
	var m renewals
	now := t0()
	assert.True(t, m.due("n", now, 20e9), "never renewed")
	m.renewed("n", now)
	assert.False(t, m.due("n", now.Add(10e9), 20e9))
	assert.True(t, m.due("n", now.Add(20e9), 20e9))
	m.forget("n")
	assert.True(t, m.due("n", now, 20e9))
}

func t0() time.Time { return time.Date(2026, 11, 21, 10, 0, 0, 0, time.UTC) }

// nextWindowStart stays put while a period that has begun goes on (the
// engine reports an always-open period as starting when evaluated), and
// follows a period still to come.
func TestWindowStart(t *testing.T) {
	now := time.Date(2026, 3, 10, 12, 0, 0, 0, time.UTC)
	at := func(d time.Duration) *metav1.Time { return &metav1.Time{Time: now.Add(d)} }
	for name, tc := range map[string]struct {
		prev  *metav1.Time
		start time.Time
		want  *metav1.Time
	}{
		"first record of an open period":           {nil, now, at(0)},
		"always open, evaluated again later":       {at(-time.Hour), now.Add(-time.Minute), at(-time.Hour)},
		"a period to come is recorded as it is":    {at(-time.Hour), now.Add(2 * time.Hour), at(2 * time.Hour)},
		"the period recorded as coming has begun":  {at(-time.Hour), now.Add(-time.Hour), at(-time.Hour)},
		"a later period to come replaces the last": {at(time.Hour), now.Add(3 * time.Hour), at(3 * time.Hour)},
		"sub-second starts are truncated":          {nil, now.Add(1500 * time.Millisecond), at(time.Second)},
	} {
		t.Run(name, func(t *testing.T) {
			got := windowStart(tc.prev, tc.start, now)
			assert.True(t, tc.want.Equal(got), "got %v, want %v", got, tc.want)
		})
	}
}

// A request read at a version our own write replaced is stale until the
// cache shows a newer one; another request of the same name (a new UID)
// never is, and a cache that lags too long is acted on anyway.
func TestStaleBookkeeping(t *testing.T) {
	var m ownWrites
	now := t0()
	assert.False(t, m.stale("n", "u1", "10", now), "nothing written")
	m.wrote("n", "u1", "10", now)
	m.wrote("n", "u1", "11", now)
	assert.True(t, m.stale("n", "u1", "10", now), "the version before both writes")
	assert.True(t, m.stale("n", "u1", "11", now), "the version between them")
	assert.False(t, m.stale("n", "u2", "11", now), "a new request of the same name")
	m.wrote("n", "u1", "11", now)
	assert.False(t, m.stale("n", "u1", "12", now), "the cache caught up")
	assert.False(t, m.stale("n", "u1", "11", now), "caught up once: forgotten")
	m.wrote("n", "u1", "12", now)
	assert.False(t, m.stale("n", "u1", "12", now.Add(staleFor+time.Second)), "lagging too long")
}

// A request we just created is not created again while the cache does not
// show it, for staleFor at most; once the cache shows it (or we write it
// again) that is forgotten.
func TestCreatedBookkeeping(t *testing.T) {
	var m ownWrites
	now := t0()
	assert.False(t, m.createdAhead("n", now))
	m.created("n", "u1", now)
	assert.True(t, m.createdAhead("n", now.Add(time.Second)))
	assert.False(t, m.createdAhead("n", now.Add(staleFor+time.Second)), "lagging too long: create (and conflict)")
	assert.False(t, m.stale("n", "u1", "5", now), "the cache shows it")
	assert.False(t, m.createdAhead("n", now), "caught up: forgotten")
	m.created("n", "u1", now)
	m.wrote("n", "u1", "5", now)
	assert.False(t, m.createdAhead("n", now), "written since: it exists")
}

// What a round left blocked is kept per request, for MaxRetryDelay at
// most; nil budgets or a lost lease forget it.
func TestBlockedBookkeeping(t *testing.T) {
	var m blockedRounds
	now := t0()
	budgets := map[string]string{"ns/db": "7"}
	pods := []corev1.Pod{{ObjectMeta: metav1.ObjectMeta{Namespace: "ns", Name: "db-1"}}}
	m.blocked("n", "u1", now, budgets, pods, now.Add(-20*time.Second))
	got, ok := m.lastBlocked("n", "u1", now.Add(time.Second), 30*time.Second)
	assert.True(t, ok)
	assert.Equal(t, budgets, got)
	gotPods, listed, ok := m.blockedPods("n", "u1", now.Add(time.Second), 30*time.Second)
	assert.True(t, ok)
	assert.Equal(t, pods, gotPods)
	assert.Equal(t, now.Add(-20*time.Second), listed)
	_, _, ok = m.blockedPods("n", "u1", now.Add(10*time.Second), 30*time.Second)
	assert.False(t, ok, "listed 30s ago: the next round lists")
	_, _, ok = m.blockedPods("n", "u2", now, 30*time.Second)
	assert.False(t, ok, "another request")
	_, ok = m.lastBlocked("n", "u2", now, 30*time.Second)
	assert.False(t, ok, "another request")
	_, ok = m.lastBlocked("n", "u1", now.Add(30*time.Second), 30*time.Second)
	assert.False(t, ok, "too old: a full round is due")
	m.blocked("n", "u1", now, nil, nil, now)
	_, ok = m.lastBlocked("n", "u1", now, 30*time.Second)
	assert.False(t, ok, "the last round left something else to do")
	m.blocked("n", "u1", now, budgets, pods, now)
	m.forget("n")
	_, ok = m.lastBlocked("n", "u1", now, 30*time.Second)
	assert.False(t, ok, "forgotten with the lease")
}

// stoppingEvictions is a clientset whose eviction requests see the
// drainer stop (its reconcile context cancelled) while they are in
// flight, and record whether their own context was cancelled with it.
type stoppingEvictions struct {
	*fake.Clientset
	stop      context.CancelFunc
	asked     []string
	cancelled []bool
}

func (c *stoppingEvictions) PolicyV1() policyv1client.PolicyV1Interface {
	return stoppingPolicy{c.Clientset.PolicyV1(), c}
}

type stoppingPolicy struct {
	policyv1client.PolicyV1Interface
	c *stoppingEvictions
}

func (p stoppingPolicy) Evictions(ns string) policyv1client.EvictionInterface {
	return stoppingEviction{p.PolicyV1Interface.Evictions(ns), p.c}
}

type stoppingEviction struct {
	policyv1client.EvictionInterface
	c *stoppingEvictions
}

func (e stoppingEviction) Evict(ctx context.Context, ev *policyv1.Eviction) error {
	e.c.stop() // SIGTERM arrives while the request is on its way
	e.c.asked = append(e.c.asked, ev.Name)
	e.c.cancelled = append(e.c.cancelled, ctx.Err() != nil)
	return e.EvictionInterface.Evict(ctx, ev)
}

// An eviction already sent is not cancelled when lull-drainer stops: the
// API server counts the budget down before it deletes the pod, and a
// request cut in between leaves the budget counting a running pod for two
// minutes. Once stopping, no further eviction is sent.
func TestEvictionOutlivesTheReconcile(t *testing.T) {
	pod := func(name string) *corev1.Pod {
		return &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: "shop", UID: types.UID(name)}}
	}
	ctx, stop := context.WithCancel(context.Background())
	kube := &stoppingEvictions{Clientset: fake.NewClientset(pod("web-0"), pod("web-1")), stop: stop}
	r := &Reconciler{Kube: kube}
	require.NoError(t, r.evict(ctx, pod("web-0"), -1))
	err := r.evict(ctx, pod("web-1"), -1)
	require.ErrorIs(t, err, context.Canceled)
	require.Equal(t, []string{"web-0"}, kube.asked, "no eviction starts once stopping")
	require.Equal(t, []bool{false}, kube.cancelled, "the eviction in flight keeps its context")
}
