package v1

import (
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/utils/ptr"

	lullv1alpha1 "lull.dev/lull/api/v1alpha1"
	"lull.dev/lull/internal/settings"
)

// DefaultHorizon is how far ahead the plugin scores by default.
const DefaultHorizon = 24 * time.Hour

// addDefaultingFuncs registers the defaulters generated from
// SetDefaults_NodeDisruptionArgs (zz_generated.defaults.go).
func addDefaultingFuncs(scheme *runtime.Scheme) error {
	return RegisterDefaults(scheme)
}

// SetDefaults_NodeDisruptionArgs fills unset fields; the shared settings
// take the defaults of internal/settings, as lull-drainer's and kubectl-lull's
// flags do.
//
//nolint:revive // the name follows the Kubernetes defaulter convention
func SetDefaults_NodeDisruptionArgs(obj *NodeDisruptionArgs) {
	d := settings.Defaults()
	setDefault(&obj.LeaseNamespace, d.LeaseNamespace)
	setDefault(&obj.MaintenanceLabel, d.MaintenanceLabel)
	setDefault(&obj.TolerationKey, d.TolerationKey)
	setDefault(&obj.NodesWithoutWindow, string(d.NodesWithoutWindow))
	setDefault(&obj.WindowHorizon, metav1.Duration{Duration: d.WindowHorizon})
	setDefault(&obj.ExpectedRuntimeAnnotation, lullv1alpha1.ExpectedRuntimeAnnotation)
	setDefault(&obj.Horizon, metav1.Duration{Duration: DefaultHorizon})
	setDefault(&obj.FilterRequestedOutsideWindow, false)
}

func setDefault[T any](p **T, def T) {
	if *p == nil {
		*p = ptr.To(def)
	}
}
