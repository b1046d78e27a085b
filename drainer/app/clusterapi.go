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

	lullv1alpha1 "lull.dev/lull/api/v1alpha1"
	"lull.dev/lull/drainer/machines"
	"lull.dev/lull/pkg/capi"
	"lull.dev/lull/pkg/settings"
)

// clusterAPIPoll is how often the leader asks discovery whether Cluster
// API's Machines are served yet.
const clusterAPIPoll = 30 * time.Second

// SetupClusterAPI starts the Cluster API Machine controller on the leader
// once the API server serves cluster.x-k8s.io/v1beta2 Machines: Cluster
// API may be installed before lull, after it, or never.
func SetupClusterAPI(mgr ctrl.Manager, o Options, clk clock.WithTicker) error {
	dc, err := discovery.NewDiscoveryClientForConfig(mgr.GetConfig())
	if err != nil {
		return err
	}
	return mgr.Add(manager.RunnableFunc(func(ctx context.Context) error {
		logger := klog.FromContext(ctx).WithName("cluster-api")
		t := clk.NewTicker(clusterAPIPoll)
		defer t.Stop()
		for {
			served, err := machinesServed(dc)
			switch {
			case err != nil:
				logger.V(2).Info("Cannot tell whether Cluster API Machines are served; asking again", "error", err, "in", clusterAPIPoll)
			case served:
				logger.Info("Cluster API Machines are served; governing the Machines and Clusters labelled " + capi.GovernedLabel + "=true")
				rec := mgr.GetEventRecorder(settings.Drainer)
				if err := (&machines.Reconciler{
					Client:              mgr.GetClient(),
					Recorder:            rec,
					Finalizer:           lullv1alpha1.DrainerFinalizer,
					RemediationDeadline: o.ClusterAPIRemediationDeadline,
				}).SetupWithManager(ctx, mgr); err != nil {
					return err
				}
				return (&machines.ClusterReconciler{Client: mgr.GetClient(), Recorder: rec}).SetupWithManager(mgr)
			}
			select {
			case <-ctx.Done():
				return nil
			case <-t.C():
			}
		}
	}))
}

func machinesServed(dc discovery.DiscoveryInterface) (bool, error) {
	res, err := dc.ServerResourcesForGroupVersion(capi.MachineResource.GroupVersion().String())
	if apierrors.IsNotFound(err) {
		return false, nil
	}
	if err != nil {
		return false, err
	}
	for _, r := range res.APIResources {
		if r.Name == capi.MachineResource.Resource {
			return true, nil
		}
	}
	return false, nil
}
