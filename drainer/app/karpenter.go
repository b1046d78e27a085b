package app

import (
	"context"
	"time"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/client-go/discovery"
	"k8s.io/klog/v2"
	"k8s.io/utils/clock"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/manager"

	"lull.dev/lull/drainer/karpenter"
	"lull.dev/lull/internal/settings"
)

// karpenterPoll is how often the leader asks discovery whether
// Karpenter's NodePools are served yet.
const karpenterPoll = 30 * time.Second

// SetupKarpenter starts the NodePool controller (drainer/karpenter) on the
// leader once the API server serves karpenter.sh/v1 NodePools: Karpenter
// may be installed before lull, after it, or never. lull's view of the
// nodes Karpenter disrupts (internal/disruptors) needs none of this: it reads
// the nodes.
func SetupKarpenter(mgr ctrl.Manager, o Options, clk clock.WithTicker) error {
	return mgr.Add(manager.RunnableFunc(func(ctx context.Context) error {
		logger := klog.FromContext(ctx).WithName("karpenter")
		dc, err := discovery.NewDiscoveryClientForConfig(mgr.GetConfig())
		if err != nil {
			return err
		}
		t := clk.NewTicker(karpenterPoll)
		defer t.Stop()
		for {
			served, err := served(dc, karpenter.NodePoolResource.GroupVersion().String(), karpenter.NodePoolResource.Resource)
			switch {
			case err != nil:
				logger.V(2).Info("Cannot tell whether Karpenter's NodePools are served; asking again", "error", err, "in", karpenterPoll)
			case served:
				logger.Info("Karpenter's NodePools are served; windows with spec.karpenter.governDisruption govern their voluntary disruption")
				r := &karpenter.Reconciler{Client: mgr.GetClient(), Clock: clk, Options: o.Settings.WindowOptions(),
					Recorder: mgr.GetEventRecorder(settings.Drainer)}
				if o.EndOnUninstall {
					// As the NodeMaintenance controller decides it
					// (--end-requests-on-uninstall), read live: the manager
					// caches no Deployments, and a cached Get would start an
					// informer lull-drainer has no right to.
					in := install(&o)
					r.Uninstalling = func(ctx context.Context) (bool, error) {
						gone, _, err := in.Uninstalling(ctx, mgr.GetAPIReader())
						return gone, err
					}
				}
				return r.SetupWithManager(mgr)
			}
			select {
			case <-ctx.Done():
				return nil
			case <-t.C():
			}
		}
	}))
}

// served reports whether the API server serves resource in groupVersion.
func served(dc discovery.DiscoveryInterface, groupVersion, resource string) (bool, error) {
	res, err := dc.ServerResourcesForGroupVersion(groupVersion)
	if apierrors.IsNotFound(err) {
		return false, nil
	}
	if err != nil {
		return false, err
	}
	for _, r := range res.APIResources {
		if r.Name == resource {
			return true, nil
		}
	}
	return false, nil
}
