package version

import (
	"runtime/debug"
	"testing"
)

func TestKubernetesOf(t *testing.T) {
	for name, tc := range map[string]struct {
		deps []*debug.Module
		want string
	}{
		"the scheduler links k8s.io/kubernetes": {deps: []*debug.Module{{Path: "k8s.io/client-go", Version: "v0.37.1"}, {Path: "k8s.io/kubernetes", Version: "v1.37.1"}}, want: "v1.37.1"},
		"staging modules only":                  {deps: []*debug.Module{{Path: "k8s.io/apimachinery", Version: "v0.37.1"}}, want: "v1.37.1"},
		"a replaced module":                     {deps: []*debug.Module{{Path: "k8s.io/client-go", Version: "v0.36.0", Replace: &debug.Module{Version: "v0.37.2"}}}, want: "v1.37.2"},
		"none":                                  {want: "unknown"},
	} {
		t.Run(name, func(t *testing.T) {
			if got := kubernetesOf(tc.deps); got != tc.want {
				t.Errorf("kubernetesOf = %q, want %q", got, tc.want)
			}
		})
	}
}

// A test binary links client-go through the module graph: the line names
// lull's version and a Kubernetes version.
func TestLine(t *testing.T) {
	if got := Line("lull-drainer"); got != "lull-drainer dev (Kubernetes "+Kubernetes()+")" {
		t.Errorf("Line = %q", got)
	}
}
