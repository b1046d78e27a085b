// Package scheme installs the NodeDisruption args into kube-scheduler's
// config scheme, so a KubeSchedulerConfiguration carrying them decodes,
// defaults and converts like an in-tree plugin's.
package scheme

import (
	"k8s.io/apimachinery/pkg/runtime"
	utilruntime "k8s.io/apimachinery/pkg/util/runtime"
	kubeschedulerscheme "k8s.io/kubernetes/pkg/scheduler/apis/config/scheme"
	configv1 "k8s.io/kubernetes/pkg/scheduler/apis/config/v1"

	"lull.dev/lull/plugins/nodedisruption/apis/config"
	v1 "lull.dev/lull/plugins/nodedisruption/apis/config/v1"
)

func init() {
	// The scheduler decodes with one scheme and converts plugin args with
	// another; both must know our type.
	AddToScheme(kubeschedulerscheme.Scheme)
	AddToScheme(configv1.GetPluginArgConversionScheme())
}

// AddToScheme adds the internal and v1 args to a scheme.
func AddToScheme(s *runtime.Scheme) {
	utilruntime.Must(config.AddToScheme(s))
	utilruntime.Must(v1.AddToScheme(s))
}
