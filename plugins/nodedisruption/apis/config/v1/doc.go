// Package v1 is the versioned (kubescheduler.config.k8s.io/v1) form of the
// NodeDisruption plugin's arguments, with defaults and conversion.
//
// Conversion and defaulting are generated (zz_generated.conversion.go by
// conversion-gen, zz_generated.defaults.go by defaulter-gen, deepcopy by
// controller-gen: hack/update-codegen.sh), as for kube-scheduler's in-tree
// plugin args; conversion.go holds what the generator cannot convert.
//
// +kubebuilder:object:generate=true
// +k8s:conversion-gen=lull.dev/lull/plugins/nodedisruption/apis/config
// +k8s:defaulter-gen=TypeMeta
// +groupName=kubescheduler.config.k8s.io
package v1
