package v1

import (
	"k8s.io/apimachinery/pkg/conversion"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"

	"lull.dev/lull/plugins/nodedisruption/apis/config"
)

// SchemeGroupVersion is the scheduler's config group at v1: plugin args
// live beside KubeSchedulerConfiguration.
var SchemeGroupVersion = schema.GroupVersion{Group: "kubescheduler.config.k8s.io", Version: "v1"}

var (
	// SchemeBuilder adds the type, its defaults and conversions to a scheme.
	SchemeBuilder = runtime.NewSchemeBuilder(addKnownTypes, addDefaultingFuncs, addConversionFuncs)
	// AddToScheme adds the type, its defaults and conversions to a scheme.
	AddToScheme = SchemeBuilder.AddToScheme
)

func addKnownTypes(scheme *runtime.Scheme) error {
	scheme.AddKnownTypes(SchemeGroupVersion, &NodeDisruptionArgs{})
	return nil
}

func addDefaultingFuncs(scheme *runtime.Scheme) error {
	scheme.AddTypeDefaultingFunc(&NodeDisruptionArgs{}, func(obj interface{}) {
		SetDefaults_NodeDisruptionArgs(obj.(*NodeDisruptionArgs))
	})
	return nil
}

func addConversionFuncs(scheme *runtime.Scheme) error {
	if err := scheme.AddConversionFunc((*NodeDisruptionArgs)(nil), (*config.NodeDisruptionArgs)(nil), func(a, b interface{}, s conversion.Scope) error {
		return Convert_v1_NodeDisruptionArgs_To_config_NodeDisruptionArgs(a.(*NodeDisruptionArgs), b.(*config.NodeDisruptionArgs), s)
	}); err != nil {
		return err
	}
	return scheme.AddConversionFunc((*config.NodeDisruptionArgs)(nil), (*NodeDisruptionArgs)(nil), func(a, b interface{}, s conversion.Scope) error {
		return Convert_config_NodeDisruptionArgs_To_v1_NodeDisruptionArgs(a.(*config.NodeDisruptionArgs), b.(*NodeDisruptionArgs), s)
	})
}
