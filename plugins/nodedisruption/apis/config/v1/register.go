package v1

import (
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
)

// GroupName is the scheduler's config group: plugin args live beside
// KubeSchedulerConfiguration.
const GroupName = "kubescheduler.config.k8s.io"

// SchemeGroupVersion is the scheduler's config group at v1.
var SchemeGroupVersion = schema.GroupVersion{Group: GroupName, Version: "v1"}

var (
	// SchemeBuilder adds the type, its defaults and conversions to a scheme.
	SchemeBuilder = runtime.NewSchemeBuilder(addKnownTypes)
	// localSchemeBuilder is where the defaulting and conversion functions
	// register themselves, the generated ones from the generated files.
	localSchemeBuilder = &SchemeBuilder
	// AddToScheme adds the type, its defaults and conversions to a scheme.
	AddToScheme = localSchemeBuilder.AddToScheme
)

func init() {
	// Only hand-written functions are registered here; the generated
	// conversions register themselves in zz_generated.conversion.go.
	localSchemeBuilder.Register(addDefaultingFuncs)
}

func addKnownTypes(scheme *runtime.Scheme) error {
	scheme.AddKnownTypes(SchemeGroupVersion, &NodeDisruptionArgs{})
	return nil
}
