package budget

import (
	"context"
	"fmt"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/intstr"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/client/fake"
	"sigs.k8s.io/controller-runtime/pkg/client/interceptor"

	lullv1alpha1 "lull.dev/lull/api/v1alpha1"
	"lull.dev/lull/internal/lullscheme"
)

// batchFixture is a window of maxUnavailable governing n nodes n0..n<n-1>,
// each with a request not yet started.
func batchFixture(t *testing.T, n, maxUnavailable int) (client.WithWatch, *lullv1alpha1.MaintenanceWindow, []*lullv1alpha1.NodeMaintenance) {
	t.Helper()
	w := &lullv1alpha1.MaintenanceWindow{ObjectMeta: metav1.ObjectMeta{Name: "pool"},
		Spec: lullv1alpha1.MaintenanceWindowSpec{MaxUnavailable: ptr.To(intstr.FromInt(maxUnavailable))}}
	objs := []client.Object{w}
	var nms []*lullv1alpha1.NodeMaintenance
	for i := range n {
		name := fmt.Sprintf("n%d", i)
		objs = append(objs, &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: name}})
		nm := &lullv1alpha1.NodeMaintenance{ObjectMeta: metav1.ObjectMeta{Name: name, UID: types.UID("uid-" + name)},
			Spec: lullv1alpha1.NodeMaintenanceSpec{NodeName: name, Classes: []string{"kernel-update"}}}
		nms = append(nms, nm)
		objs = append(objs, nm)
	}
	c := fake.NewClientBuilder().WithScheme(lullscheme.New()).WithObjects(objs...).
		WithStatusSubresource(&lullv1alpha1.NodeMaintenance{}).Build()
	return c, w, nms
}

// heldWrites wraps c so that the ledger's first write waits until release
// is closed, and counts the ledger's writes.
func heldWrites(c client.WithWatch, release <-chan struct{}) (client.WithWatch, *atomic.Int32) {
	n := new(atomic.Int32)
	hold := func() {
		if n.Add(1) == 1 {
			<-release
		}
	}
	return interceptor.NewClient(c, interceptor.Funcs{
		Create: func(ctx context.Context, cl client.WithWatch, obj client.Object, opts ...client.CreateOption) error {
			if _, ok := obj.(*corev1.ConfigMap); ok {
				hold()
			}
			return cl.Create(ctx, obj, opts...)
		},
		Update: func(ctx context.Context, cl client.WithWatch, obj client.Object, opts ...client.UpdateOption) error {
			if _, ok := obj.(*corev1.ConfigMap); ok {
				hold()
			}
			return cl.Update(ctx, obj, opts...)
		},
	}), n
}

// queued waits until l has n changes queued behind the one being written.
func queued(t *testing.T, l *Ledger, n int) {
	t.Helper()
	require.Eventually(t, func() bool {
		l.queueMu.Lock()
		defer l.queueMu.Unlock()
		return len(l.queue) == n
	}, 10*time.Second, time.Millisecond)
}

// Reservations made while another is being written are decided together,
// in one write: each counts the ones before it, so the budget is never
// exceeded, and the ledger holds exactly the slots given.
func TestLedgerBatchesConcurrentReservations(t *testing.T) {
	base, w, nms := batchFixture(t, 8, 3)
	release := make(chan struct{})
	c, writes := heldWrites(base, release)
	l := &Ledger{Client: c, Live: c, Namespace: "lull-system", Holder: "lull-drainer/x"}
	ctx := context.Background()
	results := make([]Result, len(nms))
	errs := make([]error, len(nms))
	var wg sync.WaitGroup
	reserve := func(i int) {
		defer wg.Done()
		results[i], errs[i] = l.Reserve(ctx, c, nms[i], inWindow(w)(nms[i].Name))
	}
	wg.Add(1)
	go reserve(0) // its write waits
	require.Eventually(t, func() bool { return writes.Load() == 1 }, 10*time.Second, time.Millisecond)
	for i := 1; i < len(nms); i++ {
		wg.Add(1)
		go reserve(i)
	}
	queued(t, l, len(nms)-1)
	close(release)
	wg.Wait()

	free := 0
	for i := range nms {
		require.NoError(t, errs[i])
		if results[i].Free {
			free++
		}
	}
	assert.Equal(t, 3, free, "maxUnavailable 3")
	assert.True(t, results[0].Free, "the first written alone")
	assert.Equal(t, int32(2), writes.Load(), "the first reservation's write, then one for the seven queued behind it")
	entries, err := l.Entries(ctx)
	require.NoError(t, err)
	assert.Len(t, entries, 3)
	for node := range entries {
		i := 0
		_, _ = fmt.Sscanf(node, "n%d", &i)
		assert.True(t, results[i].Free, "%s in the ledger but told no room", node)
	}
}

// A release and a reservation queued together are written together, in
// order: the slot given back is the one taken.
func TestLedgerBatchReleaseThenReserve(t *testing.T) {
	base, w, nms := batchFixture(t, 3, 1)
	ctx := context.Background()
	setup := &Ledger{Client: base, Live: base, Namespace: "lull-system", Holder: "lull-drainer/x"}
	res, err := setup.Reserve(ctx, base, nms[0], inWindow(w)("n0"))
	require.NoError(t, err)
	require.True(t, res.Free)

	release := make(chan struct{})
	c, writes := heldWrites(base, release)
	l := &Ledger{Client: c, Live: c, Namespace: "lull-system", Holder: "lull-drainer/x"}
	l.took("n0", nms[0].UID)
	var wg sync.WaitGroup
	var ownRes Result
	var ownErr, relErr error
	var released bool
	// The lock held, as by a write in progress, while the two queue.
	l.writing.Lock()
	wg.Add(2)
	go func() { defer wg.Done(); released, relErr = l.Release(ctx, "n0", nms[0].UID) }()
	queued(t, l, 1)
	go func() { defer wg.Done(); ownRes, ownErr = l.Reserve(ctx, c, nms[1], inWindow(w)("n1")) }()
	queued(t, l, 2)
	close(release)
	l.writing.Unlock()
	wg.Wait()
	require.NoError(t, relErr)
	require.NoError(t, ownErr)
	assert.True(t, released)
	assert.True(t, ownRes.Free, ownRes.Message)
	assert.Equal(t, int32(1), writes.Load(), "one write for both")
	entries, err := l.Entries(ctx)
	require.NoError(t, err)
	assert.Equal(t, []string{"n1"}, sortedNodes(entries))
}

// A batch whose write conflicts (another replica wrote the ledger since)
// is decided again, whole, on the ledger as it is: the other replica's
// slot counts, and the budget holds. (On the ledger as remembered, the
// three reservations fitted: a batch with a "no room" in it would have
// read the ledger live before writing.)
func TestLedgerBatchConflictDecidesAgain(t *testing.T) {
	base, w, nms := batchFixture(t, 4, 3)
	ctx := context.Background()
	other := &Ledger{Client: base, Live: base, Namespace: "lull-system", Holder: "lull-drainer/y"}
	l := &Ledger{Client: base, Live: base, Namespace: "lull-system", Holder: "lull-drainer/x"}
	_, err := l.Entries(ctx) // remembered: no ledger yet
	require.NoError(t, err)
	// The other replica takes a slot: our remembered ledger is stale.
	res, err := other.Reserve(ctx, base, nms[3], inWindow(w)("n3"))
	require.NoError(t, err)
	require.True(t, res.Free)

	var conflicts atomic.Int32
	c := interceptor.NewClient(base, interceptor.Funcs{
		Create: func(ctx context.Context, cl client.WithWatch, obj client.Object, opts ...client.CreateOption) error {
			if _, ok := obj.(*corev1.ConfigMap); ok {
				conflicts.Add(1)
			}
			return cl.Create(ctx, obj, opts...)
		},
	})
	l.Client = c
	l.writing.Lock()
	results := make([]Result, 3)
	var wg sync.WaitGroup
	for i := range 3 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			var err error
			results[i], err = l.Reserve(ctx, c, nms[i], inWindow(w)(nms[i].Name))
			assert.NoError(t, err)
		}()
		queued(t, l, i+1)
	}
	l.writing.Unlock()
	wg.Wait()
	assert.Equal(t, int32(1), conflicts.Load(), "the stale batch tried to create the ledger the other replica had made")
	free := 0
	for _, r := range results {
		if r.Free {
			free++
		}
	}
	assert.Equal(t, 2, free, "n3 holds one of the three slots; on the stale ledger all three fitted")
	entries, err := l.Entries(ctx)
	require.NoError(t, err)
	assert.Len(t, entries, 3)
	assert.Contains(t, entries, "n3")
}

// A batch whose write fails for good fails each change it carries, and
// no slot is recorded as this process's.
func TestLedgerBatchWriteFailsEveryChange(t *testing.T) {
	base, w, nms := batchFixture(t, 3, 3)
	ctx := context.Background()
	broken := apierrors.NewForbidden(schema.GroupResource{Resource: "configmaps"}, "lull-budget", fmt.Errorf("no"))
	c := interceptor.NewClient(base, interceptor.Funcs{
		Create: func(ctx context.Context, cl client.WithWatch, obj client.Object, opts ...client.CreateOption) error {
			if _, ok := obj.(*corev1.ConfigMap); ok {
				return broken
			}
			return cl.Create(ctx, obj, opts...)
		},
	})
	l := &Ledger{Client: c, Live: c, Namespace: "lull-system", Holder: "lull-drainer/x"}
	l.writing.Lock()
	errs := make([]error, 2)
	var wg sync.WaitGroup
	for i := range 2 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			_, errs[i] = l.Reserve(ctx, c, nms[i], inWindow(w)(nms[i].Name))
		}()
		queued(t, l, i+1)
	}
	l.writing.Unlock()
	wg.Wait()
	for i, err := range errs {
		require.Error(t, err)
		assert.Contains(t, err.Error(), "reserving budget for node "+nms[i].Name)
		assert.True(t, apierrors.IsForbidden(err))
	}
	assert.Empty(t, l.mine)
}
