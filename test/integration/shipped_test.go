package integration

import (
	"context"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	"k8s.io/apimachinery/pkg/api/equality"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/wait"
	"sigs.k8s.io/controller-runtime/pkg/client"

	lullv1alpha1 "lull.dev/lull/api/v1alpha1"
	"lull.dev/lull/drainer/policycontroller"
	"lull.dev/lull/internal/policy"
)

// lull-drainer creates the policy it ships when it is missing, puts the
// shipped spec back while the policy carries its annotation, recreates it
// when it is deleted, and leaves it alone once the admin removed the
// annotation.
func TestShippedPolicyKeptAsShipped(t *testing.T) {
	e := newDrainEnv(t)
	ctx := e.ctx
	key := client.ObjectKey{Name: policy.ShippedName}
	_ = e.c.Delete(ctx, &lullv1alpha1.DisruptionPolicy{ObjectMeta: metav1.ObjectMeta{Name: policy.ShippedName}})
	shipped, err := policy.Shipped()
	require.NoError(t, err)
	mgr := e.manager()
	require.NoError(t, (&policycontroller.Shipped{Client: mgr.GetClient()}).SetupWithManager(mgr))
	run, cancel := context.WithCancel(ctx)
	stopped := make(chan struct{})
	go func() {
		defer close(stopped)
		_ = mgr.Start(run)
	}()
	t.Cleanup(func() {
		// Stop the controller before deleting its policy: running, it
		// would recreate it, and every later test would decide by the
		// shipped policy's catch-all (drain and reboot; found by CI on
		// e05cc49, the uninstall tests waiting for a lull-agent).
		cancel()
		<-stopped
		_ = e.c.Delete(context.Background(), &lullv1alpha1.DisruptionPolicy{ObjectMeta: shipped.ObjectMeta})
	})

	get := func(what string, ok func(*lullv1alpha1.DisruptionPolicy, error) bool) *lullv1alpha1.DisruptionPolicy {
		t.Helper()
		var p lullv1alpha1.DisruptionPolicy
		require.NoError(t, wait.PollUntilContextTimeout(ctx, 20*time.Millisecond, 20*time.Second, true, func(ctx context.Context) (bool, error) {
			err := e.c.Get(ctx, key, &p)
			return ok(&p, err), nil
		}), what)
		return &p
	}
	asShipped := func(p *lullv1alpha1.DisruptionPolicy, err error) bool {
		return err == nil && equality.Semantic.DeepEqual(p.Spec, shipped.Spec) && p.Annotations[policy.ManagedByAnnotation] == policy.ManagedBy
	}
	p := get("created when missing", asShipped)

	p.Spec.Priority = 50
	p.Spec.Rules = p.Spec.Rules[:1]
	require.NoError(t, e.c.Update(ctx, p))
	p = get("its spec restored", asShipped)

	require.NoError(t, e.c.Delete(ctx, p))
	p = get("recreated when deleted", func(p *lullv1alpha1.DisruptionPolicy, err error) bool {
		return asShipped(p, err) && p.DeletionTimestamp == nil
	})

	delete(p.Annotations, policy.ManagedByAnnotation)
	p.Spec.Rules = p.Spec.Rules[:1]
	require.NoError(t, e.c.Update(ctx, p))
	time.Sleep(time.Second) // what the controller would do, it does within this (it restored the spec above in less)
	var mine lullv1alpha1.DisruptionPolicy
	require.NoError(t, e.c.Get(ctx, key, &mine))
	require.Len(t, mine.Spec.Rules, 1, "the admin's policy is left alone")
	require.NoError(t, e.c.Delete(ctx, &mine))
	_ = get("recreated as shipped after the admin deleted theirs", asShipped)
}
