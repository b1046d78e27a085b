// Package config holds the internal type of the NodeDisruption plugin's
// arguments; the versioned, serialized form is in package v1.
//
// +kubebuilder:object:generate=true
package config
