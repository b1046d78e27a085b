package plan

import (
	"context"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/client-go/kubernetes/fake"
	clocktesting "k8s.io/utils/clock/testing"
	"sigs.k8s.io/controller-runtime/pkg/client"
	crfake "sigs.k8s.io/controller-runtime/pkg/client/fake"

	lullv1alpha1 "lull.dev/lull/api/v1alpha1"
	"lull.dev/lull/internal/lullscheme"
)

// forbiddenConfigMaps is a reader for someone RBAC does not let read
// ConfigMaps in lull's namespace: a member of lull:maintainers (the
// lull-maintainer roles grant no ConfigMaps), who is who previews.
type forbiddenConfigMaps struct{ client.Reader }

func (r forbiddenConfigMaps) Get(ctx context.Context, key client.ObjectKey, obj client.Object, opts ...client.GetOption) error {
	if _, ok := obj.(*corev1.ConfigMap); ok {
		return apierrors.NewForbidden(schema.GroupResource{Resource: "configmaps"}, key.Name, nil)
	}
	return r.Reader.Get(ctx, key, obj, opts...)
}

// Red team 2: "one list, read alike by the guard, the drainer, the
// scheduler's forecast and the kubectl-lull preview". A maintainer may
// not read lull-system/lull-admission (no lull-maintainer role grants
// ConfigMaps there), so load.go's Forbidden branch previews with the
// shipped list, silently: the admin's k3s.service is previewed as an
// undrained restart while lull-drainer cordons and drains for it (and an
// admin's narrower list the other way round). The preview neither plans
// as the drainer will nor says that it could not.
func TestRedteam2PreviewForbiddenGuardListIsSilent(t *testing.T) {
	policy := &lullv1alpha1.DisruptionPolicy{ObjectMeta: metav1.ObjectMeta{Name: "site"}, Spec: lullv1alpha1.DisruptionPolicySpec{Rules: []lullv1alpha1.DisruptionRule{
		{Name: "units", Units: []string{"*"}, Steps: []lullv1alpha1.Step{{Type: lullv1alpha1.StepDaemonReload}, {Type: lullv1alpha1.StepRestartService}}}}}}
	guard := &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Name: "lull-admission", Namespace: "lull-system"},
		Data: map[string]string{"criticalUnits": "kubelet.service,k3s.service"}}
	c := crfake.NewClientBuilder().WithScheme(lullscheme.New()).WithObjects(node("n1", nil), policy, guard).Build()
	o := DefaultOptions()
	o.Clock = clocktesting.NewFakeClock(t0)
	res, err := Preview(context.Background(), forbiddenConfigMaps{c}, fake.NewClientset(), o, Request{Nodes: []string{"n1"},
		Changes: &lullv1alpha1.Changes{Units: []string{"k3s.service"}}})
	require.NoError(t, err)
	n := res.Nodes[0]
	drains := n.Steps[0].Type == lullv1alpha1.ActionCordon
	warned := false
	for _, w := range n.Warnings {
		warned = warned || strings.Contains(w, "criticalUnits") || strings.Contains(w, "lull-admission")
	}
	require.True(t, drains || warned,
		"the drainer drains for k3s.service (guard's criticalUnits); the preview shows %+v with no word that it could not read the guard's list", n.Steps)
}
