// Package v1 is the versioned (kubescheduler.config.k8s.io/v1) form of the
// NodeDisruption plugin's arguments, with defaults and conversion.
//
// +kubebuilder:object:generate=true
package v1
