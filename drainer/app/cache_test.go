package app

import (
	"context"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/client/fake"

	lullv1alpha1 "lull.dev/lull/api/v1alpha1"
	"lull.dev/lull/internal/lullscheme"
)

func fullNode() *corev1.Node {
	return &corev1.Node{
		ObjectMeta: metav1.ObjectMeta{Name: "n1", Labels: map[string]string{"zone": "a"}, Annotations: map[string]string{"lull.dev/hold": "true"},
			ManagedFields: []metav1.ManagedFieldsEntry{{Manager: "kubelet"}}},
		Spec: corev1.NodeSpec{Unschedulable: true, ProviderID: "kwok://n1", Taints: []corev1.Taint{{Key: "karpenter.sh/disrupted", Effect: corev1.TaintEffectNoSchedule}}},
		Status: corev1.NodeStatus{
			Conditions:   []corev1.NodeCondition{{Type: corev1.NodeReady, Status: corev1.ConditionTrue}},
			NodeInfo:     corev1.NodeSystemInfo{BootID: "boot-1", KernelVersion: "6.1"},
			Images:       []corev1.ContainerImage{{Names: []string{"registry.example/app:1"}, SizeBytes: 1 << 30}},
			Capacity:     corev1.ResourceList{corev1.ResourceCPU: resource.MustParse("4")},
			Addresses:    []corev1.NodeAddress{{Type: corev1.NodeInternalIP, Address: "10.0.0.1"}},
			VolumesInUse: []corev1.UniqueVolumeName{"kubernetes.io/csi/x"},
		},
	}
}

// The cache keeps of a Node what the drainer reads, and drops the rest of
// its status and its managedFields.
func TestTrimNodeKeepsWhatTheDrainerReads(t *testing.T) {
	in := fullNode()
	out, err := trimNode(in)
	require.NoError(t, err)
	n := out.(*corev1.Node)
	want := fullNode()
	assert.Equal(t, want.Labels, n.Labels)
	assert.Equal(t, want.Annotations, n.Annotations)
	assert.Equal(t, want.Spec, n.Spec, "cordon, taints, providerID")
	assert.Equal(t, want.Status.Conditions, n.Status.Conditions, "Ready, and the lifecycle conditions lull patches by position")
	assert.Equal(t, "boot-1", n.Status.NodeInfo.BootID, "a reboot is told by the boot ID")
	assert.Nil(t, n.ManagedFields)
	assert.Nil(t, n.Status.Images)
	assert.Nil(t, n.Status.Capacity)
	assert.Nil(t, n.Status.Addresses)
	assert.Nil(t, n.Status.VolumesInUse)

	nm := &lullv1alpha1.NodeMaintenance{ObjectMeta: metav1.ObjectMeta{Name: "n1", ManagedFields: []metav1.ManagedFieldsEntry{{Manager: "x"}}}}
	other, err := trimNode(nm)
	require.NoError(t, err)
	assert.Nil(t, other.(*lullv1alpha1.NodeMaintenance).ManagedFields, "another kind loses only its managedFields")
}

// A trimmed Node written back by an update would erase what the cache
// dropped: the drainer's client refuses it, and lets patches (and other
// kinds' updates) through.
func TestDrainerNeverUpdatesANode(t *testing.T) {
	ctx := context.Background()
	nm := &lullv1alpha1.NodeMaintenance{ObjectMeta: metav1.ObjectMeta{Name: "n1"}}
	stored := fullNode()
	stored.ManagedFields = nil
	c := refuseNodeUpdates(fake.NewClientBuilder().WithScheme(lullscheme.New()).WithObjects(stored, nm).
		WithStatusSubresource(&corev1.Node{}, &lullv1alpha1.NodeMaintenance{}).Build())
	var n corev1.Node
	require.NoError(t, c.Get(ctx, client.ObjectKey{Name: "n1"}, &n))
	n.Spec.Unschedulable = false
	require.ErrorIs(t, c.Update(ctx, &n), errNodeUpdate)
	require.ErrorIs(t, c.Status().Update(ctx, &n), errNodeUpdate)
	require.NoError(t, c.Patch(ctx, &n, client.RawPatch(types.MergePatchType, []byte(`{"spec":{"unschedulable":false}}`))))
	require.NoError(t, c.Get(ctx, client.ObjectKey{Name: "n1"}, &n))
	assert.False(t, n.Spec.Unschedulable, "a patch goes through")
	assert.NotEmpty(t, n.Status.Images, "and keeps what it does not name")

	require.NoError(t, c.Get(ctx, client.ObjectKey{Name: "n1"}, nm))
	nm.Spec.Complete = true
	require.NoError(t, c.Update(ctx, nm), "other kinds are updated as before")
	nm.Status.Phase = lullv1alpha1.PhaseCompleted
	require.NoError(t, c.Status().Update(ctx, nm))
}
