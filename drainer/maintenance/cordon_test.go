package maintenance

import (
	"context"
	"testing"

	"github.com/prometheus/client_golang/prometheus/testutil"
	"github.com/stretchr/testify/require"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/klog/v2"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/client/fake"

	lullv1alpha1 "lull.dev/lull/api/v1alpha1"
	"lull.dev/lull/internal/lullscheme"
)

// holdFixture is a step of a request in phase, on node n1 as given.
func holdFixture(t *testing.T, node *corev1.Node, st lullv1alpha1.NodeMaintenanceStatus) (*step, client.Client) {
	t.Helper()
	nm := &lullv1alpha1.NodeMaintenance{ObjectMeta: metav1.ObjectMeta{Name: "n1", UID: "uid-n1"}, Spec: lullv1alpha1.NodeMaintenanceSpec{NodeName: "n1", Classes: []string{"kernel-update"}},
		Status: st}
	c := fake.NewClientBuilder().WithScheme(lullscheme.New()).WithObjects(node, nm).WithStatusSubresource(nm).Build()
	r := &Reconciler{Client: c, Metrics: NewMetrics(c)}
	require.NoError(t, c.Get(context.Background(), client.ObjectKey{Name: "n1"}, node))
	return &step{r: r, logger: klog.Background(), now: t0(), nm: nm, node: node, status: nm.Status.DeepCopy()}, c
}

func getNode(t *testing.T, c client.Client) *corev1.Node {
	t.Helper()
	var n corev1.Node
	require.NoError(t, c.Get(context.Background(), client.ObjectKey{Name: "n1"}, &n))
	return &n
}

// A node lull holds keeps its cordon and lull's annotations: someone
// else's uncordon is noticed (condition, metric) and undone, and the
// cordon is lull's from then on, also when the node had been cordoned by
// someone else before lull started.
func TestKeepHoldRestoresCordonAndAnnotations(t *testing.T) {
	for name, was := range map[string]bool{"lull's cordon": false, "a cordon from before lull": true} {
		t.Run(name, func(t *testing.T) {
			n := &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: "n1", Annotations: map[string]string{AnnotationDoNotDisrupt: "true"}}}
			s, c := holdFixture(t, n, lullv1alpha1.NodeMaintenanceStatus{Phase: lullv1alpha1.PhaseDrained,
				CordonedByLull: !was, WasUnschedulable: ptr.To(was), NodeAnnotations: []string{AnnotationScaleDownDisabled, AnnotationDoNotDisrupt},
				Decision: &lullv1alpha1.Decision{Action: lullv1alpha1.ActionDrain}})
			before := testutil.ToFloat64(s.r.Metrics.ForeignUncordons)
			ctx := context.Background()
			recordoned, err := s.keepHold(ctx)
			require.NoError(t, err)
			require.True(t, recordoned)
			got := getNode(t, c)
			require.True(t, got.Spec.Unschedulable)
			require.Equal(t, map[string]string{AnnotationScaleDownDisabled: "true", AnnotationDoNotDisrupt: "true",
				lullv1alpha1.CordonedByAnnotation: "uid-n1"}, got.Annotations, "the cordon put back carries lull's mark")
			require.Equal(t, 1.0, testutil.ToFloat64(s.r.Metrics.ForeignUncordons)-before)
			require.True(t, s.status.CordonedByLull)
			require.False(t, *s.status.WasUnschedulable, "lull removes the cordon it put back")
			cond := meta.FindStatusCondition(s.status.Conditions, ConditionUncordonedByOthers)
			require.NotNil(t, cond)
			require.Equal(t, ReasonCordonRestored, cond.Reason)

			// Nothing taken away: nothing to do.
			s.node = got
			s.nm.Status = *s.status
			recordoned, err = s.keepHold(ctx)
			require.NoError(t, err)
			require.False(t, recordoned)
			require.Equal(t, 1.0, testutil.ToFloat64(s.r.Metrics.ForeignUncordons)-before)
		})
	}
}

// lull's cordon whose mark is gone (taken away, or the cordon of a lull
// from before the mark) gets it back while lull holds the node, so that
// the request's end undoes it; a cordon from before lull gets none.
func TestKeepHoldMarksLullsCordon(t *testing.T) {
	for name, was := range map[string]bool{"lull's cordon": false, "a cordon from before lull": true} {
		t.Run(name, func(t *testing.T) {
			n := &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: "n1"}, Spec: corev1.NodeSpec{Unschedulable: true}}
			s, c := holdFixture(t, n, lullv1alpha1.NodeMaintenanceStatus{Phase: lullv1alpha1.PhaseDrained,
				CordonedByLull: !was, WasUnschedulable: ptr.To(was), NodeAnnotations: []string{}, Decision: &lullv1alpha1.Decision{Action: lullv1alpha1.ActionDrain}})
			recordoned, err := s.keepHold(context.Background())
			require.NoError(t, err)
			require.False(t, recordoned, "a mark put back is no cordon put back")
			got := getNode(t, c)
			require.True(t, got.Spec.Unschedulable)
			if was {
				require.NotContains(t, got.Annotations, lullv1alpha1.CordonedByAnnotation)
			} else {
				require.Equal(t, "uid-n1", got.Annotations[lullv1alpha1.CordonedByAnnotation])
			}
			require.Zero(t, testutil.ToFloat64(s.r.Metrics.ForeignUncordons), "no uncordon was undone")
		})
	}
}

// Before the cordon is recorded (Cordoning) and for a plan without one
// (service restarts alone) an unschedulable node is nobody's business.
func TestKeepHoldOnlyWhatThePlanNeeds(t *testing.T) {
	restart := &lullv1alpha1.Decision{Action: lullv1alpha1.StepRestartService, Steps: []lullv1alpha1.PlannedStep{{Type: lullv1alpha1.StepRestartService, Unit: "chronyd.service"}}}
	for name, st := range map[string]lullv1alpha1.NodeMaintenanceStatus{
		"cordoning":      {Phase: lullv1alpha1.PhaseCordoning, WasUnschedulable: ptr.To(false), Decision: &lullv1alpha1.Decision{Action: lullv1alpha1.ActionDrain}},
		"restarts only":  {Phase: lullv1alpha1.PhaseActing, WasUnschedulable: ptr.To(false), Decision: restart},
		"never cordoned": {Phase: lullv1alpha1.PhaseDrained},
		"lost its lease": {Phase: lullv1alpha1.PhaseWaitingForLease, CordonedByLull: true, CordonMarked: true, WasUnschedulable: ptr.To(false)},
	} {
		t.Run(name, func(t *testing.T) {
			s, c := holdFixture(t, &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: "n1"}}, st)
			ctx := context.Background()
			recordoned, err := s.keepHold(ctx)
			require.NoError(t, err)
			require.False(t, recordoned)
			require.False(t, getNode(t, c).Spec.Unschedulable)
			require.Zero(t, testutil.ToFloat64(s.r.Metrics.ForeignUncordons))
		})
	}
}

// Giving a node back removes lull's cordon (with its mark) and only the
// annotations lull recorded as its own; someone else's cordon and
// annotations stay, and so does a cordon without lull's mark.
func TestGiveBackRemovesOnlyWhatLullSet(t *testing.T) {
	n := &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: "n1", Annotations: map[string]string{AnnotationScaleDownDisabled: "true", AnnotationDoNotDisrupt: "true",
		lullv1alpha1.CordonedByAnnotation: "uid-n1"}},
		Spec: corev1.NodeSpec{Unschedulable: true}}
	s, c := holdFixture(t, n, lullv1alpha1.NodeMaintenanceStatus{Phase: lullv1alpha1.PhaseDrained, CordonedByLull: true, CordonMarked: true, WasUnschedulable: ptr.To(false),
		NodeAnnotations: []string{AnnotationScaleDownDisabled}})
	ctx := context.Background()
	require.NoError(t, s.giveBack(ctx))
	got := getNode(t, c)
	require.False(t, got.Spec.Unschedulable)
	require.Equal(t, map[string]string{AnnotationDoNotDisrupt: "true"}, got.Annotations, "Karpenter's annotation was there before lull")
	require.False(t, s.status.CordonedByLull)
	require.Nil(t, s.status.NodeAnnotations)

	n2 := &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: "n1"}, Spec: corev1.NodeSpec{Unschedulable: true}}
	s, c = holdFixture(t, n2, lullv1alpha1.NodeMaintenanceStatus{Phase: lullv1alpha1.PhaseDrained, WasUnschedulable: ptr.To(true)})
	require.NoError(t, s.giveBack(ctx))
	require.True(t, getNode(t, c).Spec.Unschedulable, "a cordon from before lull stays")

	// The status says lull's cordon, the node does not carry lull's mark
	// (someone cordoned it after lull gave it back, or another request's
	// mark is there): the cordon stays, and so do the annotations lull
	// recorded: an earlier giveBack removed lull's with its mark, so
	// those there now are someone else's.
	for _, mark := range []string{"", "uid-other"} {
		n3 := &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: "n1", Annotations: map[string]string{AnnotationDoNotDisrupt: "true"}}, Spec: corev1.NodeSpec{Unschedulable: true}}
		if mark != "" {
			n3.Annotations[lullv1alpha1.CordonedByAnnotation] = mark
		}
		s, c = holdFixture(t, n3, lullv1alpha1.NodeMaintenanceStatus{Phase: lullv1alpha1.PhaseUncordoning, CordonedByLull: true, CordonMarked: true, WasUnschedulable: ptr.To(false),
			NodeAnnotations: []string{AnnotationDoNotDisrupt}})
		require.NoError(t, s.giveBack(ctx))
		got = getNode(t, c)
		require.True(t, got.Spec.Unschedulable, "a cordon without lull's mark %q stays", mark)
		require.Equal(t, "true", got.Annotations[AnnotationDoNotDisrupt])
		require.Equal(t, mark, got.Annotations[lullv1alpha1.CordonedByAnnotation])
		require.False(t, s.status.CordonedByLull)
	}
}

// markNode records only the annotations the node does not carry yet, once.
func TestMarkNode(t *testing.T) {
	s := &step{node: &corev1.Node{ObjectMeta: metav1.ObjectMeta{Annotations: map[string]string{AnnotationDoNotDisrupt: "false"}}},
		status: &lullv1alpha1.NodeMaintenanceStatus{}}
	s.markNode()
	require.Equal(t, []string{AnnotationScaleDownDisabled}, s.status.NodeAnnotations)
	s.node.Annotations = nil
	s.markNode()
	require.Equal(t, []string{AnnotationScaleDownDisabled}, s.status.NodeAnnotations, "recorded once, at the start")
}

// A request waiting with lull's cordon (it lost its lease mid-drain)
// drops its mark once the API server shows the cordon gone, and only
// then: a cache that has not caught up with lull's cordon changes
// nothing (the request keeps its slot while the cordon is on).
func TestCordonGoneAsksTheAPIServer(t *testing.T) {
	st := lullv1alpha1.NodeMaintenanceStatus{Phase: lullv1alpha1.PhaseWaitingForLease, CordonedByLull: true, CordonMarked: true, WasUnschedulable: ptr.To(false)}
	marked := map[string]string{lullv1alpha1.CordonedByAnnotation: "uid-n1"}

	// The cache shows the node schedulable, the API server cordoned.
	s, c := holdFixture(t, &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: "n1", Annotations: marked}, Spec: corev1.NodeSpec{Unschedulable: true}}, st)
	stale := s.node.DeepCopy()
	stale.Spec.Unschedulable = false
	s.node = stale
	require.NoError(t, s.cordonGone(context.Background()))
	require.True(t, s.status.CordonedByLull, "a cache behind lull's cordon changed the record")
	require.Equal(t, "uid-n1", getNode(t, c).Annotations[lullv1alpha1.CordonedByAnnotation])

	// Someone uncordoned it: the mark goes, and the record with it.
	s, c = holdFixture(t, &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: "n1", Annotations: marked}}, st)
	require.NoError(t, s.cordonGone(context.Background()))
	require.False(t, s.status.CordonedByLull)
	require.NotContains(t, getNode(t, c).Annotations, lullv1alpha1.CordonedByAnnotation)
}

// lull's cordon write carries the node's resourceVersion as read, also
// when the node still carries lull's mark from an earlier cordon: it never
// lands on a node that changed since (someone cordoned it meanwhile).
func TestCordonWriteIsConditional(t *testing.T) {
	n := &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: "n1", Annotations: map[string]string{lullv1alpha1.CordonedByAnnotation: "uid-n1"}}}
	s, _ := holdFixture(t, n, lullv1alpha1.NodeMaintenanceStatus{Phase: lullv1alpha1.PhaseCordoning, CordonMarked: true, WasUnschedulable: ptr.To(false)})
	patch := map[string]any{"spec": map[string]any{"unschedulable": true}}
	s.markCordon(patch)
	require.Equal(t, s.node.ResourceVersion, patch["metadata"].(map[string]any)["resourceVersion"])
	require.NotContains(t, patch["metadata"].(map[string]any), "annotations", "the mark is there already")

	// Nothing to mark or cordon: no precondition, no write.
	empty := map[string]any{}
	s.node.Spec.Unschedulable = true
	s.markCordon(empty)
	require.Empty(t, empty)
}
