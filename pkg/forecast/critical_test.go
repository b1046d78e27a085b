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

// The planners read the guard's criticalUnits (issue 41, finding 5): a
// unit an admin adds there (k3s.service) is restarted behind a drain, as
// the guard demands of the rules, whether or not a rule names it; the
// ConfigMap gone, the last list read still applies (the guard fails
// closed without it, and so do the planners); a ConfigMap of another name
// changes nothing; a guard ConfigMap without the key makes every unit
// critical, as the guard reads it.
func TestForecastPlansWithTheGuardsCriticalUnits(t *testing.T) {
	f := New(Options{})
	defer f.Stop()
	f.SetPolicy(&lullv1alpha1.DisruptionPolicy{ObjectMeta: metav1.ObjectMeta{Name: "site"}, Spec: lullv1alpha1.DisruptionPolicySpec{Rules: []lullv1alpha1.DisruptionRule{
		{Name: "units", Units: []string{"*"}, Steps: []lullv1alpha1.Step{{Type: lullv1alpha1.StepDaemonReload}, {Type: lullv1alpha1.StepRestartService}}}}}})
	plan := func(unit string) string {
		return policy.StepsLine(f.Decide(nil, &lullv1alpha1.Changes{Units: []string{unit}}).Steps)
	}
	require.Equal(t, "DaemonReload, RestartService k3s.service", plan("k3s.service"), "not in the shipped list")
	require.Equal(t, "Cordon, Drain, DaemonReload, RestartService kubelet.service", plan("kubelet.service"))

	guard := &v1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Name: settings.AdmissionConfigMap, Namespace: settings.Namespace},
		Data: map[string]string{policy.CriticalUnitsKey: "kubelet.service, k3s.service,"}}
	f.SetAdmission(&v1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Name: "other", Namespace: settings.Namespace}, Data: guard.Data})
	require.Equal(t, "DaemonReload, RestartService k3s.service", plan("k3s.service"), "another ConfigMap is not the guard's")

	f.SetAdmission(guard)
	require.Equal(t, "Cordon, Drain, DaemonReload, RestartService k3s.service", plan("k3s.service"))
	require.Equal(t, "DaemonReload, RestartService chronyd.service", plan("chronyd.service"))

	everything := guard.DeepCopy()
	everything.Data = map[string]string{}
	f.SetAdmission(everything)
	require.Equal(t, "Cordon, Drain, DaemonReload, RestartService chronyd.service", plan("chronyd.service"), "without the key every unit is critical")

	f.SetAdmission(guard)
	f.DeleteAdmission(guard)
	require.Equal(t, "Cordon, Drain, DaemonReload, RestartService k3s.service", plan("k3s.service"), "the last list read")
}
