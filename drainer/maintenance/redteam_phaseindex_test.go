package maintenance

import (
	"context"
	"errors"
	"fmt"
	"sort"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/equality"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/client/fake"
	"sigs.k8s.io/controller-runtime/pkg/client/interceptor"
	"sigs.k8s.io/controller-runtime/pkg/reconcile"

	lullv1alpha1 "lull.dev/lull/api/v1alpha1"
	"lull.dev/lull/internal/lullscheme"
)

// rtOldRequestsIn is requestsIn before the phase index (6587998^): a full
// list filtered by a predicate on the phase.
func rtOldRequestsIn(ctx context.Context, c client.Reader, match func(lullv1alpha1.MaintenancePhase) bool) []string {
	var list lullv1alpha1.NodeMaintenanceList
	if err := c.List(ctx, &list); err != nil {
		return nil
	}
	out := []string{}
	for _, nm := range list.Items {
		if match(nm.Status.Phase) {
			out = append(out, nm.Name)
		}
	}
	sort.Strings(out)
	return out
}

func rtOldHeld(ctx context.Context, c client.Reader) []string {
	return rtOldRequestsIn(ctx, c, func(p lullv1alpha1.MaintenancePhase) bool { return p == lullv1alpha1.PhaseWaitingForGates })
}

func rtOldWaiting(ctx context.Context, c client.Reader) []string {
	return rtOldRequestsIn(ctx, c, lullv1alpha1.MaintenancePhase.Waiting)
}

func rtOldDraining(ctx context.Context, c client.Reader) []string {
	return rtOldRequestsIn(ctx, c, func(p lullv1alpha1.MaintenancePhase) bool { return p == lullv1alpha1.PhaseDraining })
}

func rtNames(reqs []reconcile.Request) []string {
	out := []string{}
	for _, r := range reqs {
		out = append(out, r.Name)
	}
	sort.Strings(out)
	return out
}

// rtAllPhases is every phase of the API, "" (not yet seen), and a phase
// this version does not know (a newer drainer's, during a rollback).
func rtAllPhases() []lullv1alpha1.MaintenancePhase {
	return append(append([]lullv1alpha1.MaintenancePhase{""}, lullv1alpha1.Phases...), "SomeFuturePhase")
}

func rtRequest(name string, phase lullv1alpha1.MaintenancePhase) *lullv1alpha1.NodeMaintenance {
	return &lullv1alpha1.NodeMaintenance{
		ObjectMeta: metav1.ObjectMeta{Name: name, Labels: map[string]string{"a": "b"}, Annotations: map[string]string{"c": "d"}},
		Spec:       lullv1alpha1.NodeMaintenanceSpec{NodeName: name},
		Status: lullv1alpha1.NodeMaintenanceStatus{Phase: phase,
			Conditions: []metav1.Condition{{Type: "X", Status: metav1.ConditionTrue, Reason: "R", LastTransitionTime: metav1.Now()}}},
	}
}

func rtPhaseName(p lullv1alpha1.MaintenancePhase) string {
	if p == "" {
		return "nm-empty"
	}
	return "nm-" + string(p)
}

func rtClient(indexed bool, objs ...client.Object) client.WithWatch {
	b := fake.NewClientBuilder().WithScheme(lullscheme.New()).WithObjects(objs...).
		WithStatusSubresource(&lullv1alpha1.NodeMaintenance{})
	if indexed {
		b = b.WithIndex(&lullv1alpha1.NodeMaintenance{}, PhaseField, PhaseIndex)
	}
	return b.Build()
}

// Every phase (and "", and an unknown phase): the three map functions
// name exactly what a full list filtered the old way named, with and
// without the index.
func TestRedteamPhaseIndexEveryPhaseMatchesOldCode(t *testing.T) {
	var objs []client.Object
	for _, p := range rtAllPhases() {
		objs = append(objs, rtRequest(rtPhaseName(p), p), rtRequest(rtPhaseName(p)+"-2", p))
	}
	for name, indexed := range map[string]bool{"indexed": true, "listed": false} {
		t.Run(name, func(t *testing.T) {
			c := rtClient(indexed, objs...)
			r := &Reconciler{Client: c}
			ctx := context.Background()
			require.Equal(t, rtOldHeld(ctx, c), rtNames(r.heldRequests(ctx, nil)), "heldRequests")
			require.Equal(t, rtOldWaiting(ctx, c), rtNames(r.waitingRequests(ctx, nil)), "waitingRequests")
			pdb := &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: "x"}}
			require.Equal(t, rtOldDraining(ctx, c), rtNames(r.blockedRequests(ctx, pdb)), "blockedRequests")
			// Sanity: the sets are what the lifecycle says.
			require.Equal(t, []string{"nm-WaitingForGates", "nm-WaitingForGates-2"}, rtNames(r.heldRequests(ctx, nil)))
			require.Contains(t, rtNames(r.waitingRequests(ctx, nil)), "nm-empty", "a request the drainer has not seen yet waits")
			require.Contains(t, rtNames(r.waitingRequests(ctx, nil)), "nm-Pending")
			// Any single phase asked by its own value.
			for _, p := range rtAllPhases() {
				got := rtNames(r.requestsIn(ctx, string(p)))
				want := rtOldRequestsIn(ctx, c, func(q lullv1alpha1.MaintenancePhase) bool { return q == p })
				require.Equal(t, want, got, "phase %q", p)
			}
		})
	}
}

// A request moving through every phase (status writes), then deleted: after
// every write the indexed watches name what the old code names.
func TestRedteamPhaseIndexFollowsStatusWrites(t *testing.T) {
	ctx := context.Background()
	others := []client.Object{}
	for _, p := range rtAllPhases() {
		others = append(others, rtRequest(rtPhaseName(p), p))
	}
	c := rtClient(true, append(others, rtRequest("mover", ""))...)
	r := &Reconciler{Client: c}
	check := func(step string) {
		t.Helper()
		require.Equal(t, rtOldHeld(ctx, c), rtNames(r.heldRequests(ctx, nil)), "held after %s", step)
		require.Equal(t, rtOldWaiting(ctx, c), rtNames(r.waitingRequests(ctx, nil)), "waiting after %s", step)
		require.Equal(t, rtOldDraining(ctx, c), rtNames(r.requestsIn(ctx, string(lullv1alpha1.PhaseDraining))), "draining after %s", step)
	}
	check("start")
	// Forward and backward (a re-cordoned node drained again; a request
	// going back to waiting for a gate).
	seq := append(append([]lullv1alpha1.MaintenancePhase{}, lullv1alpha1.Phases...),
		lullv1alpha1.PhaseWaitingForGates, lullv1alpha1.PhaseDraining, lullv1alpha1.PhaseWaitingForBudget, "", "SomeFuturePhase", lullv1alpha1.PhaseWaitingForGates)
	for _, p := range seq {
		var nm lullv1alpha1.NodeMaintenance
		require.NoError(t, c.Get(ctx, types.NamespacedName{Name: "mover"}, &nm))
		nm.Status.Phase = p
		require.NoError(t, c.Status().Update(ctx, &nm))
		check(fmt.Sprintf("phase %q", p))
		mover := slicesContains(rtNames(r.waitingRequests(ctx, nil)), "mover")
		require.Equal(t, p.Waiting(), mover, "mover woken by a policy change in phase %q", p)
	}
	var nm lullv1alpha1.NodeMaintenance
	require.NoError(t, c.Get(ctx, types.NamespacedName{Name: "mover"}, &nm))
	require.NoError(t, c.Delete(ctx, &nm))
	check("delete")
	require.NotContains(t, rtNames(r.heldRequests(ctx, nil)), "mover")
}

func slicesContains(s []string, v string) bool {
	for _, x := range s {
		if x == v {
			return true
		}
	}
	return false
}

// A reader that refuses field selectors (an index not registered, the API
// server asked with a custom field): the fallback lists everything and
// filters, naming the same requests; a reader that fails both lists names
// none and does not panic.
func TestRedteamPhaseIndexFallback(t *testing.T) {
	ctx := context.Background()
	var objs []client.Object
	for _, p := range rtAllPhases() {
		objs = append(objs, rtRequest(rtPhaseName(p), p))
	}
	base := rtClient(true, objs...)
	fieldCalls, plainCalls := 0, 0
	refusing := interceptor.NewClient(base, interceptor.Funcs{
		List: func(ctx context.Context, c client.WithWatch, list client.ObjectList, opts ...client.ListOption) error {
			var lo client.ListOptions
			lo.ApplyOptions(opts)
			if lo.FieldSelector != nil {
				fieldCalls++
				return errors.New(`field label not supported: lull.dev/phase`)
			}
			plainCalls++
			return c.List(ctx, list, opts...)
		},
	})
	r := &Reconciler{Client: refusing}
	require.Equal(t, rtOldHeld(ctx, base), rtNames(r.heldRequests(ctx, nil)))
	require.Equal(t, rtOldWaiting(ctx, base), rtNames(r.waitingRequests(ctx, nil)))
	require.Equal(t, rtOldDraining(ctx, base), rtNames(r.requestsIn(ctx, string(lullv1alpha1.PhaseDraining))))
	require.Equal(t, 3, fieldCalls)
	require.Equal(t, 3, plainCalls) // one fallback list each

	failing := interceptor.NewClient(base, interceptor.Funcs{
		List: func(context.Context, client.WithWatch, client.ObjectList, ...client.ListOption) error {
			return errors.New("cache not synced")
		},
	})
	r = &Reconciler{Client: failing}
	require.NotPanics(t, func() {
		require.Empty(t, r.heldRequests(ctx, nil))
		require.Empty(t, r.waitingRequests(ctx, nil))
	})
}

// A budget gaining room wakes the Draining requests and the nodes the
// budget blocked in the last round (the cache may not show Draining yet),
// each once.
func TestRedteamPhaseIndexBlockedMergesRounds(t *testing.T) {
	ctx := context.Background()
	c := rtClient(true,
		rtRequest("draining", lullv1alpha1.PhaseDraining),
		rtRequest("cordoned", lullv1alpha1.PhaseCordoned), // the cache lags: Draining not seen yet
		rtRequest("gates", lullv1alpha1.PhaseWaitingForGates),
	)
	r := &Reconciler{Client: c}
	now := time.Now()
	r.rounds.blocked("draining", "u1", now, map[string]string{"ns/pdb": "1"}, nil, now)
	r.rounds.blocked("cordoned", "u2", now, map[string]string{"ns/pdb": "1"}, nil, now)
	r.rounds.blocked("gates", "u3", now, map[string]string{"ns/other": "1"}, nil, now)
	pdb := &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Namespace: "ns", Name: "pdb"}}
	got := r.blockedRequests(ctx, pdb)
	require.Equal(t, []string{"cordoned", "draining"}, rtNames(got))
	require.Len(t, got, 2, "no request twice")
}

// rtSharingReader hands out the "cache's" own objects the way the
// informer cache does with UnsafeDisableDeepCopy: list items are shallow
// copies that share every map, slice and pointer with the cache.
type rtSharingReader struct {
	client.Reader
	cache       []*lullv1alpha1.NodeMaintenance
	unsafeAsked int
}

func (s *rtSharingReader) List(_ context.Context, list client.ObjectList, opts ...client.ListOption) error {
	var lo client.ListOptions
	lo.ApplyOptions(opts)
	if lo.UnsafeDisableDeepCopy != nil && *lo.UnsafeDisableDeepCopy {
		s.unsafeAsked++
	}
	l := list.(*lullv1alpha1.NodeMaintenanceList)
	for _, nm := range s.cache {
		if lo.FieldSelector != nil {
			reqs := lo.FieldSelector.Requirements()
			if len(reqs) != 1 || reqs[0].Field != PhaseField || !slicesContains(PhaseIndex(nm), reqs[0].Value) {
				continue
			}
		}
		l.Items = append(l.Items, *nm)
	}
	return nil
}

// Nothing the watches do writes through the cache's objects, nor does
// the index function change the object it is given.
func TestRedteamPhaseIndexDoesNotMutateCache(t *testing.T) {
	ctx := context.Background()
	var cache, snapshot []*lullv1alpha1.NodeMaintenance
	for _, p := range rtAllPhases() {
		nm := rtRequest(rtPhaseName(p), p)
		cache = append(cache, nm)
		snapshot = append(snapshot, nm.DeepCopy())
	}
	for _, withIndex := range []bool{true, false} {
		sharing := &rtSharingReader{cache: cache}
		var reader client.Reader = sharing
		if !withIndex {
			reader = rtNoFieldsReader{reader}
		}
		r := &Reconciler{Client: rtReaderClient{Reader: reader}}
		_ = r.heldRequests(ctx, nil)
		_ = r.waitingRequests(ctx, nil)
		_ = r.blockedRequests(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: "x"}})
		require.Equal(t, 3, sharing.unsafeAsked, "every list asks for the cache's own objects")
		for i := range cache {
			_ = PhaseIndex(cache[i])
			require.True(t, equality.Semantic.DeepEqual(snapshot[i], cache[i]), "cache object %s changed (index=%v)", cache[i].Name, withIndex)
		}
	}
	require.Nil(t, PhaseIndex(&corev1.Node{}), "another kind indexes under nothing")
}

// rtNoFieldsReader refuses field selectors, like a reader without the index.
type rtNoFieldsReader struct{ client.Reader }

func (r rtNoFieldsReader) List(ctx context.Context, list client.ObjectList, opts ...client.ListOption) error {
	var lo client.ListOptions
	lo.ApplyOptions(opts)
	if lo.FieldSelector != nil {
		return errors.New("index with name field:lull.dev/phase does not exist")
	}
	return r.Reader.List(ctx, list, opts...)
}

// rtReaderClient is a client.Client whose reads go to Reader; writes panic,
// so a watch that wrote would fail the test.
type rtReaderClient struct {
	client.Client
	Reader client.Reader
}

func (c rtReaderClient) List(ctx context.Context, list client.ObjectList, opts ...client.ListOption) error {
	return c.Reader.List(ctx, list, opts...)
}

func (c rtReaderClient) Get(ctx context.Context, key client.ObjectKey, obj client.Object, opts ...client.GetOption) error {
	return c.Reader.Get(ctx, key, obj, opts...)
}
