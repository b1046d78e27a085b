package maintenance

import (
	"context"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/runtime"
	kubefake "k8s.io/client-go/kubernetes/fake"
	k8stesting "k8s.io/client-go/testing"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/controller/controllerutil"

	lullv1alpha1 "lull.dev/lull/api/v1alpha1"
)

// completionWrites completes a Drained request (its node's budget slot
// taken) by trigger, and returns the phases of its status writes and
// every write in order.
func completionWrites(t *testing.T, trigger func(e *rcEnv)) (e *rcEnv, phases, writes []string) {
	t.Helper()
	e = newRCDrainedEnv(t)
	rc2Reserve(t, e)
	trigger(e)
	r := e.reconciler(t, func(op string, obj client.Object, _ []byte) error {
		switch o := obj.(type) {
		case *lullv1alpha1.NodeMaintenance:
			if op == "status" {
				phases = append(phases, string(o.Status.Phase))
			}
			writes = append(writes, op+" request")
		case *corev1.Node:
			writes = append(writes, op+" node")
		case *corev1.ConfigMap:
			writes = append(writes, op+" ledger")
		}
		return nil
	})
	_, crashed, err := e.reconcile(t, r)
	require.False(t, crashed)
	require.NoError(t, err)
	return e, phases, writes
}

// A completion whose trigger is a record a restart finds again (the label
// removed, spec.complete) writes the request's status once: Completed,
// with no Uncordoning before it. The budget slot goes after that write,
// when the stored status no longer holds it, and before the finalizer's.
func TestCompletionByARecordWritesTheStatusOnce(t *testing.T) {
	for name, trigger := range map[string]func(e *rcEnv){
		"label removed": func(e *rcEnv) { e.patchNode(t, `{"metadata":{"labels":{"`+rcLabel+`":null}}}`) },
		"spec.complete": func(e *rcEnv) {
			nm := e.nm(t)
			nm.Spec.Complete = true
			require.NoError(t, e.store.Update(context.Background(), nm))
		},
	} {
		t.Run(name, func(t *testing.T) {
			e, phases, writes := completionWrites(t, trigger)
			require.Equal(t, []string{string(lullv1alpha1.PhaseCompleted)}, phases, "writes: %v", writes)
			require.Equal(t, []string{"status request", "update ledger", "update request"}, writes[len(writes)-3:],
				"Completed, then the slot, then the finalizer; all: %v", writes)
			nm := e.nm(t)
			require.False(t, controllerutil.ContainsFinalizer(nm, Finalizer))
			n := e.node(t)
			require.False(t, n.Spec.Unschedulable, "lull's cordon undone")
			require.NotContains(t, n.Labels, rcLabel)
			entries, err := e.reconciler(t, nil).Budget.Entries(context.Background())
			require.NoError(t, err)
			require.NotContains(t, entries, "n1", "the slot is free")
		})
	}
}

// A completion by the host steps' end (a moment, not a record) writes
// Uncordoning first, its commit point, then Completed.
func TestCompletionByTheStepsEndWritesUncordoningFirst(t *testing.T) {
	e := newRCActingEnv(t)
	var phases []string
	r := e.reconciler(t, func(op string, obj client.Object, _ []byte) error {
		if o, ok := obj.(*lullv1alpha1.NodeMaintenance); ok && op == "status" {
			phases = append(phases, string(o.Status.Phase))
		}
		return nil
	})
	_, _, err := e.reconcile(t, r)
	require.NoError(t, err)
	require.Contains(t, phases, string(lullv1alpha1.PhaseUncordoning))
	require.Less(t, indexOf(phases, string(lullv1alpha1.PhaseUncordoning)), indexOf(phases, string(lullv1alpha1.PhaseCompleted)), "phases: %v", phases)
}

func indexOf(xs []string, x string) int {
	for i, v := range xs {
		if v == x {
			return i
		}
	}
	return -1
}

// Someone uncordons a node lull holds Drained (kubectl uncordon: lull's
// mark stays) and a pod lands on it. The next round puts lull's cordon
// back and drains the node again before it says Drained: a Drained
// request's node is empty (docs/operations.md), whoever uncordoned it.
func TestForeignUncordonOfADrainedNodeDrainsItAgain(t *testing.T) {
	e := newRCDrainedEnv(t)
	e.patchNode(t, `{"spec":{"unschedulable":false}}`) // kubectl uncordon
	rc2Pod(t, e)
	rc2EvictionDeletesPod(t, e)
	r := e.reconciler(t, nil)
	for range 4 {
		_, _, err := e.reconcile(t, r)
		require.NoError(t, err)
		e.clock.Step(5 * time.Second)
	}
	require.True(t, e.node(t).Spec.Unschedulable, "lull's cordon is back")
	require.Equal(t, 1, rc2Evictions(e), "the pod that landed was evicted")
	require.Equal(t, lullv1alpha1.PhaseDrained, e.nm(t).Status.Phase)
}

// The same, with the first drain round after the cordon is put back
// failing (the pods cannot be listed): the request was recorded Draining
// before its cordon went back, so the next round drains the node rather
// than finding it cordoned and taking it for Drained.
func TestForeignUncordonDrainsAgainAfterAFailedRound(t *testing.T) {
	e := newRCDrainedEnv(t)
	e.patchNode(t, `{"spec":{"unschedulable":false}}`) // kubectl uncordon
	rc2Pod(t, e)
	rc2EvictionDeletesPod(t, e)
	failList := true
	e.kube.(*kubefake.Clientset).PrependReactor("list", "pods", func(k8stesting.Action) (bool, runtime.Object, error) {
		if failList {
			failList = false
			return true, nil, apierrors.NewServiceUnavailable("etcdserver: leader changed")
		}
		return false, nil, nil
	})
	r := e.reconciler(t, nil)
	_, _, err := e.reconcile(t, r)
	require.Error(t, err, "the first round failed")
	require.True(t, e.node(t).Spec.Unschedulable, "lull's cordon is back")
	require.Equal(t, lullv1alpha1.PhaseDraining, e.nm(t).Status.Phase, "recorded before the cordon went back")
	for range 3 {
		e.clock.Step(5 * time.Second)
		_, _, err = e.reconcile(t, r)
		require.NoError(t, err)
	}
	require.Equal(t, 1, rc2Evictions(e), "the pod that landed was evicted")
	require.Equal(t, lullv1alpha1.PhaseDrained, e.nm(t).Status.Phase)
}
