package config

import (
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
)

// SchemeGroupVersion is the internal version of the scheduler's config group.
var SchemeGroupVersion = schema.GroupVersion{Group: "kubescheduler.config.k8s.io", Version: runtime.APIVersionInternal}

// NoWindowPolicy is what a node that no MaintenanceWindow selects may do.
type NoWindowPolicy string

const (
	// NoWindowPermissive lets maintenance of such nodes start at any time.
	NoWindowPermissive NoWindowPolicy = "Permissive"
	// NoWindowRestrictive never lets it start.
	NoWindowRestrictive NoWindowPolicy = "Restrictive"
)

// NodeDisruptionArgs configure the NodeDisruption plugin.
//
// +kubebuilder:object:root=true
type NodeDisruptionArgs struct {
	metav1.TypeMeta

	// LeaseNamespace holds the node disruption leases.
	LeaseNamespace string
	// MaintenanceLabel is the node label that requests maintenance.
	MaintenanceLabel string
	// TolerationKey: pods tolerating this key ignore disruption.
	TolerationKey string
	// ExpectedRuntimeAnnotation gives a pod's expected runtime.
	ExpectedRuntimeAnnotation string
	// Horizon is how far ahead scoring looks; a disruption further away
	// than this costs nothing.
	Horizon metav1.Duration
	// FilterRequestedOutsideWindow also filters nodes whose maintenance is
	// requested but whose window is closed (by default they are only
	// scored lower).
	FilterRequestedOutsideWindow bool
	// NodesWithoutWindow is the policy for nodes no window selects; it
	// must match lull-drainer's so both halves agree.
	NodesWithoutWindow NoWindowPolicy
}
