package forecast

import (
	"testing"

	"github.com/stretchr/testify/require"
	v1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	lullv1alpha1 "lull.dev/lull/api/v1alpha1"
	"lull.dev/lull/internal/policy"
	"lull.dev/lull/internal/settings"
)

// unitsForecast is a forecast whose one policy daemon-reloads and
// restarts any changed unit (the shipped unit-files rule), the guard's
// ConfigMap in settings.Namespace; plan is its plan for a changed unit.
func unitsForecast(t *testing.T) (f *Forecast, plan func(unit string) string) {
	t.Helper()
	f = New(Options{AdmissionNamespace: settings.Namespace})
	t.Cleanup(f.Stop)
	f.SetPolicy(&lullv1alpha1.DisruptionPolicy{ObjectMeta: metav1.ObjectMeta{Name: "site"}, Spec: lullv1alpha1.DisruptionPolicySpec{Rules: []lullv1alpha1.DisruptionRule{
		{Name: "units", Units: []string{"*"}, Steps: []lullv1alpha1.Step{{Type: lullv1alpha1.StepDaemonReload}, {Type: lullv1alpha1.StepRestartService}}}}}})
	return f, func(unit string) string {
		return policy.StepsLine(f.Decide(nil, &lullv1alpha1.Changes{Units: []string{unit}}).Steps)
	}
}

// guardParams is the guard's ConfigMap with criticalUnits set to list.
func guardParams(list string) *v1.ConfigMap {
	return &v1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Name: settings.AdmissionConfigMap, Namespace: settings.Namespace},
		Data: map[string]string{policy.CriticalUnitsKey: list}}
}

// The planners read the guard's criticalUnits (issue 41, finding 5): a
// unit an admin adds there (k3s.service) is restarted behind a drain, as
// the guard demands of the rules, whether or not a rule names it; a
// ConfigMap of another name or namespace changes nothing; a guard
// ConfigMap without the key makes every unit critical, as the guard
// reads it.
func TestForecastPlansWithTheGuardsCriticalUnits(t *testing.T) {
	f, plan := unitsForecast(t)
	require.Equal(t, "DaemonReload, RestartService k3s.service", plan("k3s.service"), "not in the shipped list")
	require.Equal(t, "Cordon, Drain, DaemonReload, RestartService kubelet.service", plan("kubelet.service"))

	guard := guardParams("kubelet.service, k3s.service,")
	other := guard.DeepCopy()
	other.Name = "other"
	f.SetAdmission(other)
	elsewhere := guard.DeepCopy()
	elsewhere.Namespace = "tenant"
	f.SetAdmission(elsewhere)
	require.Equal(t, "DaemonReload, RestartService k3s.service", plan("k3s.service"), "another ConfigMap is not the guard's")

	f.SetAdmission(guard)
	require.Equal(t, "Cordon, Drain, DaemonReload, RestartService k3s.service", plan("k3s.service"))
	require.Equal(t, "DaemonReload, RestartService chronyd.service", plan("chronyd.service"))

	everything := guard.DeepCopy()
	everything.Data = map[string]string{}
	f.SetAdmission(everything)
	require.Equal(t, "Cordon, Drain, DaemonReload, RestartService chronyd.service", plan("chronyd.service"), "without the key every unit is critical")
}

// The guard fails closed without its parameters (its bindings deny), and
// so do the planners (red team 2): while the ConfigMap is gone — a
// kubectl replace --force, a GitOps Replace sync — a request naming the
// admin's k3s.service is still planned behind a drain. Only a forecast
// that never saw the ConfigMap plans with the shipped list.
func TestForecastKeepsTheGuardsListWhenDeleted(t *testing.T) {
	f, plan := unitsForecast(t)
	guard := guardParams("kubelet.service,k3s.service")
	f.SetAdmission(guard)
	require.Equal(t, "Cordon, Drain, DaemonReload, RestartService k3s.service", plan("k3s.service"))
	f.DeleteAdmission(guard)
	require.Equal(t, "Cordon, Drain, DaemonReload, RestartService k3s.service", plan("k3s.service"), "the last list read")
}
