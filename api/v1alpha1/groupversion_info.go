// Package v1alpha1 holds lull's API types (group lull.dev): maintenance
// windows, maintenance requests and disruption policy.
//
// +kubebuilder:object:generate=true
// +groupName=lull.dev
package v1alpha1

import (
	"k8s.io/apimachinery/pkg/runtime/schema"
	"sigs.k8s.io/controller-runtime/pkg/scheme"
)

var (
	// GroupVersion is the group and version of lull's API.
	GroupVersion = schema.GroupVersion{Group: "lull.dev", Version: "v1alpha1"}

	// SchemeBuilder registers lull's types with a scheme.
	SchemeBuilder = &scheme.Builder{GroupVersion: GroupVersion}

	// AddToScheme adds lull's types to a scheme.
	AddToScheme = SchemeBuilder.AddToScheme
)
