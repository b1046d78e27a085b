package config

import (
	"k8s.io/apimachinery/pkg/runtime"
)

var (
	// SchemeBuilder adds the internal type to a scheme.
	SchemeBuilder = runtime.NewSchemeBuilder(addKnownTypes)
	// AddToScheme adds the internal type to a scheme.
	AddToScheme = SchemeBuilder.AddToScheme
)

func addKnownTypes(scheme *runtime.Scheme) error {
	scheme.AddKnownTypes(SchemeGroupVersion, &NodeDisruptionArgs{})
	return nil
}
