package config

import (
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"

	"lull.dev/lull/internal/settings"
)

// SchemeGroupVersion is the internal version of the scheduler's config group.
var SchemeGroupVersion = schema.GroupVersion{Group: "kubescheduler.config.k8s.io", Version: runtime.APIVersionInternal}

// NodeDisruptionArgs configure the NodeDisruption plugin.
//
// +kubebuilder:object:root=true
type NodeDisruptionArgs struct {
	metav1.TypeMeta

	// Settings are shared with lull-drainer and kubectl-lull, which must
	// be configured the same. DefaultMaxUnavailable has no argument (the
	// scheduler counts no budgets) and keeps its default.
	settings.Settings
	// ExpectedRuntimeAnnotation gives a pod's expected runtime.
	ExpectedRuntimeAnnotation string
	// Horizon is how far ahead scoring looks; a disruption further away
	// than this costs nothing.
	Horizon metav1.Duration
	// FilterRequestedOutsideWindow also filters nodes whose maintenance is
	// requested but whose window is closed (by default they are only
	// scored lower).
	FilterRequestedOutsideWindow bool
}
