package app

import (
	"context"
	"fmt"
	"strings"
	"time"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/discovery"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/clientcmd"
	"k8s.io/klog/v2"
	"k8s.io/utils/clock"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/cluster"
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
	// The Machines of this cluster's nodes: in a management cluster of
	// their own (--cluster-api-kubeconfig), or here.
	var capiCluster cluster.Cluster
	var only *types.NamespacedName
	cfg := mgr.GetConfig()
	if o.ClusterAPIKubeconfig != "" {
		ns, name, _ := strings.Cut(o.ClusterAPICluster, "/") // validated
		only = &types.NamespacedName{Namespace: ns, Name: name}
		var err error
		if cfg, err = clientcmd.BuildConfigFromFlags("", o.ClusterAPIKubeconfig); err != nil {
			return fmt.Errorf("--cluster-api-kubeconfig: %w", err)
		}
		cfg = rest.AddUserAgent(cfg, settings.Drainer)
		if capiCluster, err = cluster.New(cfg, func(co *cluster.Options) {
			co.Scheme = mgr.GetScheme()
			co.Client = client.Options{Cache: &client.CacheOptions{Unstructured: true}}
		}); err != nil {
			return fmt.Errorf("the Cluster API management cluster (--cluster-api-kubeconfig): %w", err)
		}
	}
	dc, err := discovery.NewDiscoveryClientForConfig(cfg)
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
				logger.Info("Cluster API Machines are served; governing the Machines and Clusters labelled "+capi.GovernedLabel+"=true", "apiServer", cfg.Host)
				var from cluster.Cluster = mgr
				if capiCluster != nil {
					// Started with the manager's other runnables: now,
					// since the manager runs.
					if err := mgr.Add(capiCluster); err != nil {
						return err
					}
					from = capiCluster
				}
				rec := from.GetEventRecorder(settings.Drainer)
				if err := (&machines.Reconciler{
					Client:              mgr.GetClient(),
					Machines:            from.GetClient(),
					Cluster:             only,
					Recorder:            rec,
					Finalizer:           lullv1alpha1.DrainerFinalizer,
					RemediationDeadline: o.ClusterAPIRemediationDeadline,
				}).SetupWithManager(ctx, mgr, capiCluster); err != nil {
					return err
				}
				return (&machines.ClusterReconciler{Client: mgr.GetClient(), Machines: from.GetClient(), Cluster: only, Recorder: rec}).SetupWithManager(mgr, capiCluster)
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
