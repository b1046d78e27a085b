package v1

import (
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"

	lullv1alpha1 "lull.dev/lull/api/v1alpha1"
	"lull.dev/lull/pkg/lease"
	"lull.dev/lull/plugins/nodedisruption/apis/config"
)

// DefaultHorizon is how far ahead the plugin scores by default.
const DefaultHorizon = 24 * time.Hour

// SetDefaults_NodeDisruptionArgs fills unset fields.
//
//nolint:revive,staticcheck // the name follows the Kubernetes defaulter convention
func SetDefaults_NodeDisruptionArgs(obj *NodeDisruptionArgs) {
	if obj.LeaseNamespace == nil {
		obj.LeaseNamespace = ptr.To(lease.DefaultNamespace)
	}
	if obj.MaintenanceLabel == nil {
		obj.MaintenanceLabel = ptr.To(lullv1alpha1.MaintenanceLabel)
	}
	if obj.TolerationKey == nil {
		obj.TolerationKey = ptr.To(lullv1alpha1.DisruptionTolerationKey)
	}
	if obj.ExpectedRuntimeAnnotation == nil {
		obj.ExpectedRuntimeAnnotation = ptr.To(lullv1alpha1.ExpectedRuntimeAnnotation)
	}
	if obj.Horizon == nil {
		obj.Horizon = &metav1.Duration{Duration: DefaultHorizon}
	}
	if obj.FilterRequestedOutsideWindow == nil {
		obj.FilterRequestedOutsideWindow = ptr.To(false)
	}
	if obj.NodesWithoutWindow == nil {
		obj.NodesWithoutWindow = ptr.To(string(config.NoWindowPermissive))
	}
}
