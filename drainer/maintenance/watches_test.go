package maintenance

import (
	"context"
	"testing"

	"github.com/stretchr/testify/require"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/client/fake"
	"sigs.k8s.io/controller-runtime/pkg/reconcile"

	lullv1alpha1 "lull.dev/lull/api/v1alpha1"
	"lull.dev/lull/internal/lullscheme"
)

// The watches that wake the requests of a phase (a health gate opening,
// a budget gaining room, a policy change) name the same requests from the
// phase index as from a list of every request.
func TestRequestsInByPhase(t *testing.T) {
	var objs []client.Object
	for name, phase := range map[string]lullv1alpha1.MaintenancePhase{
		"pending": "", "budget": lullv1alpha1.PhaseWaitingForBudget, "gates": lullv1alpha1.PhaseWaitingForGates,
		"gates-2": lullv1alpha1.PhaseWaitingForGates, "draining": lullv1alpha1.PhaseDraining, "drained": lullv1alpha1.PhaseDrained,
		"done": lullv1alpha1.PhaseCompleted,
	} {
		objs = append(objs, &lullv1alpha1.NodeMaintenance{ObjectMeta: metav1.ObjectMeta{Name: name},
			Spec: lullv1alpha1.NodeMaintenanceSpec{NodeName: name}, Status: lullv1alpha1.NodeMaintenanceStatus{Phase: phase}})
	}
	names := func(reqs []reconcile.Request) []string {
		out := []string{}
		for _, r := range reqs {
			out = append(out, r.Name)
		}
		return out
	}
	for name, indexed := range map[string]bool{"indexed": true, "listed": false} {
		t.Run(name, func(t *testing.T) {
			b := fake.NewClientBuilder().WithScheme(lullscheme.New()).WithObjects(objs...)
			if indexed {
				b = b.WithIndex(&lullv1alpha1.NodeMaintenance{}, PhaseField, PhaseIndex)
			}
			r := &Reconciler{Client: b.Build()}
			ctx := context.Background()
			require.ElementsMatch(t, []string{"gates", "gates-2"}, names(r.heldRequests(ctx, nil)))
			require.ElementsMatch(t, []string{"draining"}, names(r.requestsIn(ctx, string(lullv1alpha1.PhaseDraining))))
			require.ElementsMatch(t, []string{"pending", "budget", "gates", "gates-2"}, names(r.waitingRequests(ctx, nil)))
		})
	}
}
