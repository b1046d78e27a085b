package v1

import (
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/conversion"
	"k8s.io/utils/ptr"

	"lull.dev/lull/internal/settings"
	"lull.dev/lull/plugins/nodedisruption/apis/config"
)

// The fields of the internal type's embedded settings.Settings are flat
// fields of the versioned type, which conversion-gen cannot match by name:
// they are converted here, the rest by the generated autoConvert functions
// (zz_generated.conversion.go).

// Convert_v1_NodeDisruptionArgs_To_config_NodeDisruptionArgs converts the
// versioned args (defaults already applied) to the internal type. The
// shared setting without an argument (DefaultMaxUnavailable) keeps its
// default.
//
//nolint:revive // the name follows the Kubernetes conversion convention
func Convert_v1_NodeDisruptionArgs_To_config_NodeDisruptionArgs(in *NodeDisruptionArgs, out *config.NodeDisruptionArgs, s conversion.Scope) error {
	if err := autoConvert_v1_NodeDisruptionArgs_To_config_NodeDisruptionArgs(in, out, s); err != nil {
		return err
	}
	out.Settings = settings.Defaults()
	out.LeaseNamespace = ptr.Deref(in.LeaseNamespace, "")
	out.MaintenanceLabel = ptr.Deref(in.MaintenanceLabel, "")
	out.TolerationKey = ptr.Deref(in.TolerationKey, "")
	out.NodesWithoutWindow = settings.NoWindowPolicy(ptr.Deref(in.NodesWithoutWindow, ""))
	out.WindowHorizon = ptr.Deref(in.WindowHorizon, metav1.Duration{}).Duration
	return nil
}

// Convert_config_NodeDisruptionArgs_To_v1_NodeDisruptionArgs converts the
// internal args to the versioned type.
//
//nolint:revive // the name follows the Kubernetes conversion convention
func Convert_config_NodeDisruptionArgs_To_v1_NodeDisruptionArgs(in *config.NodeDisruptionArgs, out *NodeDisruptionArgs, s conversion.Scope) error {
	if err := autoConvert_config_NodeDisruptionArgs_To_v1_NodeDisruptionArgs(in, out, s); err != nil {
		return err
	}
	out.LeaseNamespace = ptr.To(in.LeaseNamespace)
	out.MaintenanceLabel = ptr.To(in.MaintenanceLabel)
	out.TolerationKey = ptr.To(in.TolerationKey)
	out.NodesWithoutWindow = ptr.To(string(in.NodesWithoutWindow))
	out.WindowHorizon = &metav1.Duration{Duration: in.WindowHorizon}
	return nil
}
