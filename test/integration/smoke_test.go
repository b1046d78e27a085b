package integration

import (
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	coordinationv1 "k8s.io/api/coordination/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"

	lullv1alpha1 "lull.dev/lull/api/v1alpha1"
	"lull.dev/lull/test/framework"
)

var cp *framework.ControlPlane

func TestMain(m *testing.M) { framework.RunMain(m, &cp) }

// TestSmokeNodeAndLease proves the harness: a real API server stores what
// we create and our CRDs are installed.
func TestSmokeNodeAndLease(t *testing.T) {
	ctx := t.Context()
	node := &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: "smoke-node", Labels: map[string]string{"pool": "a"}}}
	require.NoError(t, cp.Client.Create(ctx, node))

	ns := &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: "smoke"}}
	require.NoError(t, cp.Client.Create(ctx, ns))
	lease := &coordinationv1.Lease{
		ObjectMeta: metav1.ObjectMeta{Namespace: "smoke", Name: "node-smoke-node"},
		Spec: coordinationv1.LeaseSpec{
			HolderIdentity:       ptr.To("smoke-test"),
			LeaseDurationSeconds: ptr.To[int32](30),
			AcquireTime:          &metav1.MicroTime{Time: time.Now()},
		},
	}
	require.NoError(t, cp.Client.Create(ctx, lease))

	var gotNode corev1.Node
	require.NoError(t, cp.Client.Get(ctx, client.ObjectKey{Name: "smoke-node"}, &gotNode))
	require.Equal(t, "a", gotNode.Labels["pool"])
	var gotLease coordinationv1.Lease
	require.NoError(t, cp.Client.Get(ctx, client.ObjectKey{Namespace: "smoke", Name: "node-smoke-node"}, &gotLease))
	require.Equal(t, "smoke-test", *gotLease.Spec.HolderIdentity)

	var windows lullv1alpha1.MaintenanceWindowList
	require.NoError(t, cp.Client.List(ctx, &windows), "the MaintenanceWindow CRD is installed")
}
