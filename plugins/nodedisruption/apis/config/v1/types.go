package v1

import (
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// NodeDisruptionArgs configure the NodeDisruption plugin. Unset fields take
// the defaults documented on each field. The fields marked shared are
// lull's shared settings (internal/settings): lull-drainer and kubectl-lull take
// them as flags, and all three must be given the same values.
//
// +kubebuilder:object:root=true
type NodeDisruptionArgs struct {
	metav1.TypeMeta `json:",inline"`

	// LeaseNamespace holds the node disruption leases. Default
	// lull-leases. Shared: --lease-namespace.
	LeaseNamespace *string `json:"leaseNamespace,omitempty"`
	// MaintenanceLabel is the node label that requests maintenance.
	// Default lull.dev/maintenance. Shared: --maintenance-label.
	MaintenanceLabel *string `json:"maintenanceLabel,omitempty"`
	// TolerationKey: pods with a toleration for this key ignore disruption.
	// Default lull.dev/disruption. Shared: --toleration-key.
	TolerationKey *string `json:"tolerationKey,omitempty"`
	// ExpectedRuntimeAnnotation gives a pod's expected runtime as a Go
	// duration. Default lull.dev/expected-runtime.
	ExpectedRuntimeAnnotation *string `json:"expectedRuntimeAnnotation,omitempty"`
	// Horizon is how far ahead scoring looks. Default 24h.
	Horizon *metav1.Duration `json:"horizon,omitempty"`
	// FilterRequestedOutsideWindow also filters nodes whose maintenance is
	// requested while their window is closed. Default false.
	FilterRequestedOutsideWindow *bool `json:"filterRequestedOutsideWindow,omitempty"`
	// NodesWithoutWindow: Permissive (default) or Restrictive, the policy
	// for nodes no MaintenanceWindow selects. Shared: --nodes-without-window.
	NodesWithoutWindow *string `json:"nodesWithoutWindow,omitempty"`
	// WindowHorizon bounds the search for a node's next maintenance
	// window. Default 36000h (1500 days). Shared: --window-horizon.
	WindowHorizon *metav1.Duration `json:"windowHorizon,omitempty"`
}
