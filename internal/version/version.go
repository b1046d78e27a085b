// Package version holds the build's version, stamped with -ldflags, and
// the Kubernetes version lull is built against, read from the binary's
// module information (go.mod pins it once for every component).
package version

import (
	"fmt"
	"runtime/debug"
	"strings"
)

// Version is set at build time: -X lull.dev/lull/internal/version.Version=...
var Version = "dev"

// Kubernetes is the Kubernetes version the binary is built against:
// k8s.io/kubernetes's module version where the binary links it
// (lull-scheduler is kube-scheduler of that version), else the staging
// modules' (client-go v0.37.1 is Kubernetes v1.37.1); "unknown" without
// module information.
func Kubernetes() string {
	info, ok := debug.ReadBuildInfo()
	if !ok {
		return "unknown"
	}
	return kubernetesOf(info.Deps)
}

func kubernetesOf(deps []*debug.Module) string {
	staging := ""
	for _, m := range deps {
		v := m.Version
		if m.Replace != nil && m.Replace.Version != "" {
			v = m.Replace.Version
		}
		switch m.Path {
		case "k8s.io/kubernetes":
			return v
		case "k8s.io/client-go", "k8s.io/apimachinery":
			if rest, ok := strings.CutPrefix(v, "v0."); ok && staging == "" {
				staging = "v1." + rest
			}
		}
	}
	if staging == "" {
		return "unknown"
	}
	return staging
}

// Line is what a component's --version prints: its name, lull's version
// and Kubernetes'.
func Line(component string) string {
	return fmt.Sprintf("%s %s (Kubernetes %s)", component, Version, Kubernetes())
}
