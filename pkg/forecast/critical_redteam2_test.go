package forecast

import (
	"testing"

	"github.com/stretchr/testify/require"
	v1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	lullv1alpha1 "lull.dev/lull/api/v1alpha1"
	"lull.dev/lull/pkg/policy"
	"lull.dev/lull/pkg/settings"
)

// Red team 2: the guard fails closed without its parameters (a
// ValidatingAdmissionPolicy whose paramRef finds no lull-admission denies),
// but the planners fail open: DeleteAdmission drops the admin's list for
// the shipped default, so for as long as the ConfigMap is gone (a
// `kubectl replace --force`, a GitOps Replace=true sync, a delete and
// re-apply, an uninstall/reinstall of the guard) a request naming
// k3s.service — the very case of issue 41, finding 5 — is decided and
// started with an undrained restart. The guard blocks policy writes in
// that window, not requests. Keep the last list read (or "*") when the
// ConfigMap goes, as the guard does; only "never seen one" should mean
// the shipped default.
func TestRedteam2GuardListDeletedFailsOpen(t *testing.T) {
	f := New(Options{})
	defer f.Stop()
	f.SetPolicy(&lullv1alpha1.DisruptionPolicy{ObjectMeta: metav1.ObjectMeta{Name: "site"}, Spec: lullv1alpha1.DisruptionPolicySpec{Rules: []lullv1alpha1.DisruptionRule{
		{Name: "units", Units: []string{"*"}, Steps: []lullv1alpha1.Step{{Type: lullv1alpha1.StepDaemonReload}, {Type: lullv1alpha1.StepRestartService}}}}}})
	plan := func(unit string) string {
		return policy.StepsLine(f.Decide(nil, &lullv1alpha1.Changes{Units: []string{unit}}).Steps)
	}
	guard := &v1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Name: settings.AdmissionConfigMap, Namespace: settings.Namespace},
		Data: map[string]string{policy.CriticalUnitsKey: "kubelet.service,k3s.service"}}
	f.SetAdmission(guard)
	require.Equal(t, "Cordon, Drain, DaemonReload, RestartService k3s.service", plan("k3s.service"))
	f.DeleteAdmission(guard)
	require.Equal(t, "Cordon, Drain, DaemonReload, RestartService k3s.service", plan("k3s.service"),
		"the guard's ConfigMap deleted (the guard now denies): the admin's critical k3s.service is restarted undrained")
}
