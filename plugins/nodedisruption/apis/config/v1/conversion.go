package v1

import (
	"k8s.io/apimachinery/pkg/conversion"
	"k8s.io/utils/ptr"

	"lull.dev/lull/plugins/nodedisruption/apis/config"
)

// Convert_v1_NodeDisruptionArgs_To_config_NodeDisruptionArgs converts the
// versioned args (defaults already applied) to the internal type.
//
//nolint:revive,staticcheck // the name follows the Kubernetes conversion convention
func Convert_v1_NodeDisruptionArgs_To_config_NodeDisruptionArgs(in *NodeDisruptionArgs, out *config.NodeDisruptionArgs, _ conversion.Scope) error {
	out.LeaseNamespace = ptr.Deref(in.LeaseNamespace, "")
	out.MaintenanceLabel = ptr.Deref(in.MaintenanceLabel, "")
	out.TolerationKey = ptr.Deref(in.TolerationKey, "")
	out.ExpectedRuntimeAnnotation = ptr.Deref(in.ExpectedRuntimeAnnotation, "")
	if in.Horizon != nil {
		out.Horizon = *in.Horizon
	}
	out.FilterRequestedOutsideWindow = ptr.Deref(in.FilterRequestedOutsideWindow, false)
	out.NodesWithoutWindow = config.NoWindowPolicy(ptr.Deref(in.NodesWithoutWindow, ""))
	return nil
}

// Convert_config_NodeDisruptionArgs_To_v1_NodeDisruptionArgs converts the
// internal args to the versioned type.
//
//nolint:revive,staticcheck // the name follows the Kubernetes conversion convention
func Convert_config_NodeDisruptionArgs_To_v1_NodeDisruptionArgs(in *config.NodeDisruptionArgs, out *NodeDisruptionArgs, _ conversion.Scope) error {
	out.LeaseNamespace = ptr.To(in.LeaseNamespace)
	out.MaintenanceLabel = ptr.To(in.MaintenanceLabel)
	out.TolerationKey = ptr.To(in.TolerationKey)
	out.ExpectedRuntimeAnnotation = ptr.To(in.ExpectedRuntimeAnnotation)
	out.Horizon = &in.Horizon
	out.FilterRequestedOutsideWindow = ptr.To(in.FilterRequestedOutsideWindow)
	out.NodesWithoutWindow = ptr.To(string(in.NodesWithoutWindow))
	return nil
}
