// Package v1alpha1 holds lull's API types (group lull.dev): maintenance
// windows, maintenance requests and disruption policy.
//
// +kubebuilder:object:generate=true
// +groupName=lull.dev
package v1alpha1

import (
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
)

var (
	// GroupVersion is the group and version of lull's API.
	GroupVersion = schema.GroupVersion{Group: "lull.dev", Version: "v1alpha1"}

	// SchemeBuilder registers lull's types with a scheme (apimachinery's,
	// so the API package needs nothing beyond apimachinery).
	SchemeBuilder = runtime.NewSchemeBuilder(addKnownTypes)

	// AddToScheme adds lull's types to a scheme.
	AddToScheme = SchemeBuilder.AddToScheme

	// knownTypes are the kinds each types file registers (register).
	knownTypes []runtime.Object
)

// register adds kinds to those AddToScheme registers; each types file
// calls it from its init.
func register(objs ...runtime.Object) { knownTypes = append(knownTypes, objs...) }

func addKnownTypes(s *runtime.Scheme) error {
	s.AddKnownTypes(GroupVersion, knownTypes...)
	metav1.AddToGroupVersion(s, GroupVersion)
	return nil
}
