package integration

// Red team of the yield to another disruptor (drainer/maintenance
// cordon.go, commit 4efe589), promise 5: the yield keeps lull's cordon
// ownership record correct: lull undoes the cordon it made and no other.

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/yaml"

	lullv1alpha1 "lull.dev/lull/api/v1alpha1"
	"lull.dev/lull/internal/disruptors"
)

// racePolicy plays Karpenter tainting node in the same write as the one
// lull makes when matchCondition holds (as raceTaint does for the cordon),
// once.
func racePolicy(name, node, condition string) string {
	return fmt.Sprintf(`apiVersion: admissionregistration.k8s.io/v1
kind: MutatingAdmissionPolicy
metadata: {name: %[1]s}
spec:
  failurePolicy: Fail
  reinvocationPolicy: Never
  matchConstraints:
    resourceRules:
    - {apiGroups: [""], apiVersions: [v1], operations: [UPDATE], resources: [nodes]}
  matchConditions:
  - name: lull-starts
    expression: >-
      object.metadata.name == %[2]q && (%[3]s) &&
      !("e2e.lull.dev/raced" in object.metadata.?labels.orValue({}))
  mutations:
  - patchType: JSONPatch
    jsonPatch:
      expression: >-
        [JSONPatch{op: "add", path: "/spec/taints", value: [Object.spec.taints{key: "karpenter.sh/disrupted", effect: "NoSchedule"}]},
        JSONPatch{op: "add", path: "/metadata/labels/e2e.lull.dev~1raced", value: "true"}]
---
apiVersion: admissionregistration.k8s.io/v1
kind: MutatingAdmissionPolicyBinding
metadata: {name: %[1]s}
spec: {policyName: %[1]s}
`, name, node, condition)
}

// installRace creates the policy and waits until it taints a dry run of
// probe applied to node.
func (e *drainEnv) installRace(policy, node string, probe func(n *corev1.Node)) {
	e.t.Helper()
	for i, doc := range strings.Split(policy, "\n---\n") {
		obj := &unstructured.Unstructured{}
		require.NoError(e.t, yaml.Unmarshal([]byte(doc), &obj.Object), "doc %d", i)
		require.NoError(e.t, e.c.Create(e.ctx, obj))
		e.t.Cleanup(func() { _ = e.c.Delete(context.Background(), obj) })
	}
	require.NoError(e.t, wait.PollUntilContextTimeout(e.ctx, 200*time.Millisecond, time.Minute, true, func(ctx context.Context) (bool, error) {
		n := e.nodeObj(node)
		probe(n)
		if err := e.c.Update(ctx, n, client.DryRunAll); err != nil {
			return false, nil
		}
		_, marked := disruptors.Of(n)
		return marked, nil
	}), "the race policy never became active")
}

func (e *drainEnv) cordonNode(node string, on bool) {
	e.t.Helper()
	_, err := e.cs.CoreV1().Nodes().Patch(e.ctx, node, types.MergePatchType, fmt.Appendf(nil, `{"spec":{"unschedulable":%t}}`, on), metav1.PatchOptions{})
	require.NoError(e.t, err)
}

// Promise 5. lull cordons race3 and yields to Karpenter, giving its cordon
// back. While lull waits, someone cordons the node for work of their own
// (a person with kubectl cordon, another tool). When Karpenter is done
// lull starts afresh, finds the cordon someone else's, and leaves it at
// completion. (Found on 4efe589, where lull kept its cordon and its
// record of it through the wait, and uncordoned the other's.)
func TestRedteamKarpenterYieldThenSomeoneElsesCordon(t *testing.T) {
	e := newDrainEnv(t)
	e.node("race3", map[string]string{"pool": "race"})
	e.pods("race3", "web", 1)
	e.installRace(racePolicy("redteam-race3", "race3", `object.spec.?unschedulable.orValue(false) && !oldObject.spec.?unschedulable.orValue(false)`),
		"race3", func(n *corev1.Node) { n.Spec.Unschedulable = true })

	e.start(nil)
	e.label("race3", ptr.To("kernel-update"))
	nm := e.waitNM("race3", "WaitingForLease", phaseIs(lullv1alpha1.PhaseWaitingForLease))
	require.False(t, nm.Status.CordonedByLull, "lull gave its cordon back at the yield")
	require.False(t, e.nodeObj("race3").Spec.Unschedulable, "lull gave its cordon back at the yield")

	// Someone uncordons the node and cordons it again, for their own work
	// (the policy taints again on the cordon: Karpenter still at it).
	e.cordonNode("race3", false)
	e.cordonNode("race3", true)
	// Karpenter is done.
	e.taint("race3", false)
	nm = e.waitNM("race3", "Drained", phaseIs(lullv1alpha1.PhaseDrained))
	e.label("race3", nil)
	e.waitNM("race3", "Completed", phaseIs(lullv1alpha1.PhaseCompleted))
	assert.False(t, nm.Status.CordonedByLull, "lull records as its own a cordon someone else made after lull's was taken off")
	require.True(t, e.nodeObj("race3").Spec.Unschedulable, "lull undid a cordon it did not make")
}

// Promise 5, the other way round. race4 was cordoned by an admin before
// lull started; lull yields to Karpenter at its start (its hold
// annotations are the write Karpenter's taint lands in). While lull
// waits, the admin uncordons. When Karpenter is done lull starts afresh,
// cordons the node itself, records it as its own and undoes it at
// completion. (Found on 4efe589, where the stale record left lull's
// cordon on the node for good.)
func TestRedteamKarpenterYieldThenAdminUncordons(t *testing.T) {
	e := newDrainEnv(t)
	e.node("race4", map[string]string{"pool": "race"})
	e.pods("race4", "web", 1)
	e.cordonNode("race4", true)
	const dnd = `"karpenter.sh/do-not-disrupt"`
	e.installRace(racePolicy("redteam-race4", "race4",
		`object.metadata.?annotations.orValue({}).exists(k, k == `+dnd+`) && !oldObject.metadata.?annotations.orValue({}).exists(k, k == `+dnd+`)`),
		"race4", func(n *corev1.Node) { n.Annotations = map[string]string{"karpenter.sh/do-not-disrupt": "true"} })

	e.start(nil)
	e.label("race4", ptr.To("kernel-update"))
	nm := e.waitNM("race4", "WaitingForLease", phaseIs(lullv1alpha1.PhaseWaitingForLease))
	require.False(t, nm.Status.CordonedByLull, "the admin's cordon, before the yield")

	e.cordonNode("race4", false) // the admin gives their cordon up
	e.taint("race4", false)      // Karpenter is done
	nm = e.waitNM("race4", "Drained", phaseIs(lullv1alpha1.PhaseDrained))
	e.label("race4", nil)
	e.waitNM("race4", "Completed", phaseIs(lullv1alpha1.PhaseCompleted))
	assert.True(t, nm.Status.CordonedByLull, "lull cordoned the node after the yield but records the cordon as the admin's")
	require.False(t, e.nodeObj("race4").Spec.Unschedulable, "lull left its own cordon on the node after the maintenance")
}
