package maintenance

import (
	"errors"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	kubefake "k8s.io/client-go/kubernetes/fake"
	k8stesting "k8s.io/client-go/testing"
	clocktesting "k8s.io/utils/clock/testing"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/client/fake"

	lullv1alpha1 "lull.dev/lull/api/v1alpha1"
	"lull.dev/lull/internal/lullscheme"
)

// A start is recorded by the drain's first status write (Draining), not by
// a write of its own before the cordon: the cordon's patch records on the
// node what lull put there (its mark, the hold annotations it added), and
// a restart in between takes that into the record (adoptUnrecorded).

// newStartEnv: node n1, labelled, running one ReplicaSet pod, and its
// request not yet started (phase ""); nothing of lull's on the node.
// admin says who else already wrote the node: its annotations and
// whether it is cordoned.
func newStartEnv(t *testing.T, cordoned bool, annotations map[string]string) *rcEnv {
	t.Helper()
	node := &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: "n1", Labels: map[string]string{rcLabel: "kernel-update"}, Annotations: annotations},
		Spec:   corev1.NodeSpec{Unschedulable: cordoned},
		Status: corev1.NodeStatus{Conditions: []corev1.NodeCondition{{Type: corev1.NodeReady, Status: corev1.ConditionTrue}}}}
	nm := &lullv1alpha1.NodeMaintenance{
		ObjectMeta: metav1.ObjectMeta{Name: "n1", UID: "uid-n1", Finalizers: []string{Finalizer},
			Annotations: map[string]string{lullv1alpha1.RequestedByAnnotation: lullv1alpha1.RequestedByLabel}},
		Spec: lullv1alpha1.NodeMaintenanceSpec{NodeName: "n1", Classes: []string{"kernel-update"}}}
	e := &rcEnv{kube: kubefake.NewClientset(node.DeepCopy()), clock: clocktesting.NewFakeClock(t0())}
	e.store = fake.NewClientBuilder().WithScheme(lullscheme.New()).WithObjects(node, nm).
		WithStatusSubresource(&corev1.Node{}, &lullv1alpha1.NodeMaintenance{}).Build()
	rc2Pod(t, e)
	rc2EvictionDeletesPod(t, e)
	return e
}

// crashAtFirstDraining kills the process as the drain's first status write
// (Draining) is sent: the node is cordoned and its pod evicted, and the
// request's stored status still says it waits.
func crashAtFirstDraining(op string, obj client.Object, _ []byte) error {
	if m, ok := obj.(*lullv1alpha1.NodeMaintenance); ok && op == "status" && m.Status.Phase == lullv1alpha1.PhaseDraining {
		panic(errRCCrash)
	}
	return nil
}

// startUntilCrash reconciles the fresh request until the drain's first
// status write kills the process, and checks what that left: lull's
// cordon (if the node was schedulable) and hold annotations on the node,
// recorded there, and nothing of it in the request's status.
func startUntilCrash(t *testing.T, e *rcEnv) {
	t.Helper()
	r := e.reconciler(t, crashAtFirstDraining)
	for i := 0; ; i++ {
		require.Less(t, i, 5, "the request never reached its drain")
		if _, crashed, _ := e.reconcile(t, r); crashed {
			break
		}
	}
	nm := e.nm(t)
	require.True(t, nm.Status.Phase.Waiting(), "nothing recorded the start: %s", nm.Status.Phase)
	require.False(t, nm.Status.CordonedByLull)
	require.Nil(t, nm.Status.NodeAnnotations)
	n := e.node(t)
	require.True(t, n.Spec.Unschedulable)
	keys, ok := recordedHold(n, "uid-n1")
	require.True(t, ok, "the node records the hold annotations lull added: %v", n.Annotations)
	for _, k := range keys {
		require.Equal(t, "true", n.Annotations[k])
	}
}

// The phases a fresh request's status goes through on its way to Drained:
// no Cordoning.
func TestStartIsRecordedByTheDrainsFirstWrite(t *testing.T) {
	e := newStartEnv(t, false, nil)
	var phases []lullv1alpha1.MaintenancePhase
	r := e.reconciler(t, func(op string, obj client.Object, _ []byte) error {
		if m, ok := obj.(*lullv1alpha1.NodeMaintenance); ok && op == "status" {
			phases = append(phases, m.Status.Phase)
		}
		return nil
	})
	for range 4 {
		_, _, err := e.reconcile(t, r)
		require.NoError(t, err)
		e.clock.Step(time.Second)
	}
	require.Equal(t, lullv1alpha1.PhaseDrained, e.nm(t).Status.Phase)
	require.NotContains(t, phases, lullv1alpha1.PhaseCordoning, "phases written: %v", phases)
	require.Contains(t, phases, lullv1alpha1.PhaseDraining)
	nm := e.nm(t)
	require.True(t, nm.Status.CordonedByLull)
	require.ElementsMatch(t, holdAnnotations, nm.Status.NodeAnnotations)
	n := e.node(t)
	require.True(t, n.Spec.Unschedulable)
	require.Equal(t, "uid-n1", n.Annotations[lullv1alpha1.CordonedByAnnotation])
	keys, ok := recordedHold(n, "uid-n1")
	require.True(t, ok)
	require.Equal(t, holdAnnotations, keys)

	// The request ends: everything lull put on the node goes, its record too.
	e.patchNode(t, `{"metadata":{"labels":{"`+rcLabel+`":null}}}`)
	_, _, err := e.reconcile(t, r)
	require.NoError(t, err)
	require.Equal(t, lullv1alpha1.PhaseCompleted, e.nm(t).Status.Phase)
	n = e.node(t)
	require.False(t, n.Spec.Unschedulable)
	require.Empty(t, n.Annotations)
}

// A crash between the cordon and the drain's first write, then the
// operator removes the label: the completion gives back lull's cordon,
// the hold annotations and their record, though the status never said
// the request started.
func TestCrashBeforeTheStartIsRecordedThenCompletedGivesTheNodeBack(t *testing.T) {
	e := newStartEnv(t, false, nil)
	startUntilCrash(t, e)
	e.patchNode(t, `{"metadata":{"labels":{"`+rcLabel+`":null}}}`)
	r := e.reconciler(t, nil)
	_, _, err := e.reconcile(t, r)
	require.NoError(t, err)
	require.Equal(t, lullv1alpha1.PhaseCompleted, e.nm(t).Status.Phase)
	n := e.node(t)
	require.False(t, n.Spec.Unschedulable, "lull's cordon is undone")
	require.Empty(t, n.Annotations, "lull's mark, hold annotations and their record are gone")
	require.Empty(t, rc2LeaseHolder(t, e), "the lease is released")
}

// A crash between the cordon and the drain's first write, then the
// drainer goes on: the restarted one adopts the cordon as lull's (it
// carries the request's mark), drains, and gives back everything at the
// end.
func TestCrashBeforeTheStartIsRecordedThenTheRequestGoesOn(t *testing.T) {
	e := newStartEnv(t, false, nil)
	startUntilCrash(t, e)
	r := e.reconciler(t, nil)
	for range 4 {
		_, _, err := e.reconcile(t, r)
		require.NoError(t, err)
		e.clock.Step(time.Second)
	}
	nm := e.nm(t)
	require.Equal(t, lullv1alpha1.PhaseDrained, nm.Status.Phase)
	require.True(t, nm.Status.CordonedByLull, "the cordon carrying the request's mark is lull's")
	require.False(t, *nm.Status.WasUnschedulable)
	require.ElementsMatch(t, holdAnnotations, nm.Status.NodeAnnotations, "the annotations the node records lull added are lull's")

	e.patchNode(t, `{"metadata":{"labels":{"`+rcLabel+`":null}}}`)
	_, _, err := e.reconcile(t, r)
	require.NoError(t, err)
	n := e.node(t)
	require.False(t, n.Spec.Unschedulable)
	require.Empty(t, n.Annotations)
}

// A node an admin had cordoned and annotated (Karpenter's
// do-not-disrupt) before lull started: a crash between lull's patch (its
// one hold annotation, and the record) and the drain's first write, then
// the completion. The admin's cordon and annotation stay; lull's go.
func TestCrashBeforeTheStartIsRecordedKeepsAnAdminsCordon(t *testing.T) {
	e := newStartEnv(t, true, map[string]string{AnnotationDoNotDisrupt: "true"})
	startUntilCrash(t, e)
	n := e.node(t)
	require.NotContains(t, n.Annotations, lullv1alpha1.CordonedByAnnotation, "lull made no cordon")
	keys, _ := recordedHold(n, "uid-n1")
	require.Equal(t, []string{AnnotationScaleDownDisabled}, keys)

	e.patchNode(t, `{"metadata":{"labels":{"`+rcLabel+`":null}}}`)
	r := e.reconciler(t, nil)
	_, _, err := e.reconcile(t, r)
	require.NoError(t, err)
	n = e.node(t)
	require.True(t, n.Spec.Unschedulable, "the admin's cordon stays")
	require.Equal(t, map[string]string{AnnotationDoNotDisrupt: "true"}, n.Annotations, "the admin's annotation stays; lull's and its record go")
}

// A record on the node naming the request but listing annotations lull
// never sets (written by someone else) makes lull remove none of them.
func TestForgedHoldRecordRemovesOnlyLullsAnnotations(t *testing.T) {
	e := newStartEnv(t, false, map[string]string{"example.com/keep": "yes",
		lullv1alpha1.HoldAnnotationsAnnotation: `{"request":"uid-n1","added":["example.com/keep","karpenter.sh/do-not-disrupt"]}`,
		AnnotationDoNotDisrupt:                 "true"})
	e.patchNode(t, `{"metadata":{"labels":{"`+rcLabel+`":null}}}`)
	r := e.reconciler(t, nil)
	_, _, err := e.reconcile(t, r)
	require.NoError(t, err)
	n := e.node(t)
	require.Equal(t, "yes", n.Annotations["example.com/keep"])
	require.NotContains(t, n.Annotations, AnnotationDoNotDisrupt, "named by the record for this request: lull's")
	require.NotContains(t, n.Annotations, lullv1alpha1.HoldAnnotationsAnnotation)
	require.False(t, n.Spec.Unschedulable)

	for _, bad := range []string{`not json`, `{"request":"other-uid","added":["karpenter.sh/do-not-disrupt"]}`, `{"added":["karpenter.sh/do-not-disrupt"]}`} {
		node := &corev1.Node{ObjectMeta: metav1.ObjectMeta{Annotations: map[string]string{lullv1alpha1.HoldAnnotationsAnnotation: bad}}}
		_, ok := recordedHold(node, "uid-n1")
		require.False(t, ok, bad)
	}
}

// A drain round that fails before its status write (the pod list refused)
// records the start as Cordoning: the next round cordons (nothing to do)
// and drains, as before the change.
func TestFailedFirstRoundRecordsCordoning(t *testing.T) {
	e := newStartEnv(t, false, nil)
	fail := true
	e.kube.(*kubefake.Clientset).PrependReactor("list", "pods", func(k8stesting.Action) (bool, runtime.Object, error) {
		if fail {
			return true, nil, errors.New("the API server is busy")
		}
		return false, nil, nil
	})
	r := e.reconciler(t, nil)
	var err error
	for i := 0; err == nil; i++ {
		require.Less(t, i, 5, "the drain round never ran")
		_, _, err = e.reconcile(t, r)
	}
	require.ErrorContains(t, err, "busy")
	nm := e.nm(t)
	require.Equal(t, lullv1alpha1.PhaseCordoning, nm.Status.Phase)
	require.True(t, nm.Status.CordonedByLull)
	require.ElementsMatch(t, holdAnnotations, nm.Status.NodeAnnotations)

	fail = false
	for range 3 {
		_, _, err = e.reconcile(t, r)
		require.NoError(t, err)
		e.clock.Step(time.Second)
	}
	require.Equal(t, lullv1alpha1.PhaseDrained, e.nm(t).Status.Phase)
	require.Equal(t, 1, rc2Evictions(e))
}
