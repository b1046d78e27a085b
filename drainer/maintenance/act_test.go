package maintenance

import (
	"context"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	coordinationv1 "k8s.io/api/coordination/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	kubefake "k8s.io/client-go/kubernetes/fake"
	"k8s.io/klog/v2"
	clocktesting "k8s.io/utils/clock/testing"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/client/fake"

	lullv1alpha1 "lull.dev/lull/api/v1alpha1"
	"lull.dev/lull/pkg/agentlease"
	"lull.dev/lull/pkg/plan"
	lullscheme "lull.dev/lull/pkg/scheme"
)

// The drainer's agent gate and kubectl lull plan's are one judgement
// (pkg/agentlease) on the same leases: the drainer reads its client (the
// cache), the preview its snapshot, and both say the same.
func TestAgentGateAgreesWithPlan(t *testing.T) {
	now := t0()
	lease := func(node, ns string, renewed time.Time) *coordinationv1.Lease {
		return &coordinationv1.Lease{ObjectMeta: metav1.ObjectMeta{Name: agentlease.Name(node), Namespace: ns,
			Labels: map[string]string{agentlease.ComponentLabel: agentlease.Component}},
			Spec: coordinationv1.LeaseSpec{HolderIdentity: ptr.To("lull-agent-pod"), LeaseDurationSeconds: ptr.To[int32](40),
				RenewTime: &metav1.MicroTime{Time: renewed}}}
	}
	reboot := &lullv1alpha1.DisruptionPolicy{ObjectMeta: metav1.ObjectMeta{Name: "site"}, Spec: lullv1alpha1.DisruptionPolicySpec{Rules: []lullv1alpha1.DisruptionRule{
		{Name: "kernel", Class: "kernel-update", Steps: []lullv1alpha1.Step{{Type: lullv1alpha1.ActionDrain}, {Type: lullv1alpha1.StepReboot}}}}}}
	for name, tc := range map[string]struct {
		agent *coordinationv1.Lease
		alive bool
	}{
		"fresh":             {lease("n1", "agents", now.Add(-10*time.Second)), true},
		"expired":           {lease("n1", "agents", now.Add(-time.Minute)), false},
		"none":              {nil, false},
		"another namespace": {lease("n1", "lull-system", now), false},
	} {
		t.Run(name, func(t *testing.T) {
			objs := []client.Object{&corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: "n1"}}, reboot}
			if tc.agent != nil {
				objs = append(objs, tc.agent)
			}
			c := fake.NewClientBuilder().WithScheme(lullscheme.New()).WithObjects(objs...).Build()
			r := &Reconciler{Client: c, Options: Options{AgentNamespace: "agents"}}
			s := &step{r: r, ctx: context.Background(), logger: klog.Background(), now: now, node: &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: "n1"}}}
			alive, why, err := s.agentAlive()
			require.NoError(t, err)
			require.Equal(t, tc.alive, alive)

			o := plan.DefaultOptions()
			o.AgentNamespace, o.Clock = "agents", clocktesting.NewFakeClock(now)
			res, err := plan.Preview(context.Background(), c, kubefake.NewClientset(), o, plan.Request{Nodes: []string{"n1"}, Class: "kernel-update"})
			require.NoError(t, err)
			p := res.Nodes[0]
			if alive {
				require.Equal(t, plan.StartNow, p.Start, p.WaitingFor)
				return
			}
			require.Equal(t, plan.StartAgent, p.Start)
			require.Equal(t, "the plan (Cordon, Drain, Reboot) has steps lull-agent carries out on the node: "+why, p.WaitingFor)
		})
	}
}
