package budget

import (
	"context"
	"fmt"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/intstr"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/client/fake"
	"sigs.k8s.io/controller-runtime/pkg/client/interceptor"

	lullv1alpha1 "lull.dev/lull/api/v1alpha1"
	"lull.dev/lull/internal/lullscheme"
)

// The budget counted from the HoldsSlotField index is the budget counted
// from every request, in every phase a request can be in (and a request
// that lost its lease with lull's cordon still on its node); and with the
// index, the list holds only the requests that hold a slot.
func TestHoldsSlotIndexCountsAsEveryRequest(t *testing.T) {
	w := &lullv1alpha1.MaintenanceWindow{ObjectMeta: metav1.ObjectMeta{Name: "pool"},
		Spec: lullv1alpha1.MaintenanceWindowSpec{MaxUnavailable: ptr.To(intstr.FromInt32(int32(len(lullv1alpha1.Phases) + 2)))}}
	objs := []client.Object{w}
	holding := 0
	add := func(name string, st lullv1alpha1.NodeMaintenanceStatus) {
		objs = append(objs, &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: name}},
			&lullv1alpha1.NodeMaintenance{ObjectMeta: metav1.ObjectMeta{Name: name, UID: types.UID("uid-" + name)},
				Spec: lullv1alpha1.NodeMaintenanceSpec{NodeName: name, Classes: []string{"k"}}, Status: st})
		if st.HoldsSlot() {
			holding++
		}
	}
	for i, p := range lullv1alpha1.Phases {
		add(fmt.Sprintf("n%d", i), lullv1alpha1.NodeMaintenanceStatus{Phase: p})
	}
	add("lost-lease", lullv1alpha1.NodeMaintenanceStatus{Phase: lullv1alpha1.PhaseWaitingForLease, CordonedByLull: true})
	require.Greater(t, holding, 3)

	build := func(indexed bool) (client.Client, *int) {
		b := fake.NewClientBuilder().WithScheme(lullscheme.New()).WithObjects(objs...)
		if indexed {
			b = b.WithIndex(&lullv1alpha1.NodeMaintenance{}, HoldsSlotField, HoldsSlotIndex)
		}
		listed := new(int)
		return interceptor.NewClient(b.Build(), interceptor.Funcs{
			List: func(ctx context.Context, c client.WithWatch, list client.ObjectList, opts ...client.ListOption) error {
				err := c.List(ctx, list, opts...)
				if l, ok := list.(*lullv1alpha1.NodeMaintenanceList); ok && err == nil {
					*listed += len(l.Items)
				}
				return err
			},
		}), listed
	}
	ctx := context.Background()
	plain, _ := build(false)
	indexed, listed := build(true)
	leftPlain, inUsePlain, err := Left(ctx, plain, w)
	require.NoError(t, err)
	*listed = 0
	leftIndexed, inUseIndexed, err := Left(ctx, indexed, w)
	require.NoError(t, err)
	assert.Equal(t, leftPlain, leftIndexed)
	assert.ElementsMatch(t, inUsePlain, inUseIndexed)
	assert.Len(t, inUseIndexed, holding)
	assert.Equal(t, holding, *listed, "with the index, only the requests holding a slot are listed")
}
