package maintenance

import (
	"context"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	kubefake "k8s.io/client-go/kubernetes/fake"
	"k8s.io/klog/v2"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/client/fake"

	lullv1alpha1 "lull.dev/lull/api/v1alpha1"
	"lull.dev/lull/internal/budget"
	"lull.dev/lull/internal/disruptors"
	"lull.dev/lull/internal/lullscheme"
	"lull.dev/lull/lease"
)

// Promise 5 (a request never proceeds on a node another tool is
// disrupting). The yield looks at "the node as the cordon's patch returns
// it", but cordon sends no patch when the node is already cordoned and
// already carries both hold annotations (an admin cordoned it and set
// karpenter.sh/do-not-disrupt and scale-down-disabled before asking lull).
// It then looks at the cached node the round started from, the same look
// the lease gate had: Karpenter's taint (forceful disruption ignores
// do-not-disrupt: expiry, a deleted NodeClaim) that landed since is not
// seen, and lull goes on (here: holds the node Cordoned; with a drain,
// evicts beside Karpenter).
func TestRedteamKarpenterYieldMissedWithoutACordonWrite(t *testing.T) {
	anns := map[string]string{AnnotationScaleDownDisabled: "true", AnnotationDoNotDisrupt: "true"}
	live := &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: "n1", Annotations: anns}, Spec: corev1.NodeSpec{Unschedulable: true,
		Taints: []corev1.Taint{{Key: disruptors.KarpenterDisruptedTaint, Effect: corev1.TaintEffectNoSchedule}}}}
	nm := &lullv1alpha1.NodeMaintenance{ObjectMeta: metav1.ObjectMeta{Name: "n1", UID: "uid-n1"},
		Spec: lullv1alpha1.NodeMaintenanceSpec{NodeName: "n1", Classes: []string{"kernel-update"}},
		Status: lullv1alpha1.NodeMaintenanceStatus{Phase: lullv1alpha1.PhaseCordoning,
			WasUnschedulable: ptr.To(true), NodeAnnotations: []string{}, StartedAt: &metav1.Time{Time: t0()},
			Decision: &lullv1alpha1.Decision{Action: lullv1alpha1.ActionCordon}}}
	c := fake.NewClientBuilder().WithScheme(lullscheme.New()).WithObjects(live, nm).WithStatusSubresource(nm).Build()
	r := &Reconciler{Client: c, Metrics: NewMetrics(c),
		Budget: &budget.Ledger{Client: c, Live: c, Namespace: "lull-system", Holder: "lull-drainer/x"},
		Leases: lease.New(kubefake.NewClientset(), lease.Options{})}
	require.NoError(t, c.Get(context.Background(), client.ObjectKey{Name: "n1"}, nm))
	s := &step{r: r, logger: klog.Background(), now: t0(), nm: nm, status: nm.Status.DeepCopy()}
	// The round's node, from the cache: Karpenter's taint not there yet.
	stale := live.DeepCopy()
	stale.Spec.Taints = nil
	s.node = stale
	s.r.Options.LeaseDuration = time.Minute
	s.r.renewals.renewed("n1", s.now) // the lease was just taken (start)

	_, err := s.cordon(context.Background())
	require.NoError(t, err)
	_, tainted := disruptors.Of(getNode(t, c))
	require.True(t, tainted, "Karpenter is disrupting n1")
	require.Equal(t, lullv1alpha1.PhaseWaitingForLease, s.status.Phase, "lull went on with a node Karpenter is disrupting")
}
