package app

import (
	"context"
	"fmt"
	"strings"
	"time"

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
	"lull.dev/lull/internal/capi"
	"lull.dev/lull/internal/settings"
)

// clusterAPIPoll is how often the leader asks discovery whether Cluster
// API's Machines are served yet.
const clusterAPIPoll = 30 * time.Second

// SetupClusterAPI starts the Cluster API Machine and Cluster controllers
// on the leader once the API server that holds Cluster API's objects
// (this one, or the management cluster of --cluster-api-kubeconfig)
// serves cluster.x-k8s.io/v1beta2 Machines: Cluster API may be installed
// before lull, after it, or never. A management cluster lull cannot use
// (its kubeconfig unreadable, its credentials refused, no Cluster API
// there) is logged as an error at each try, and never stops the drainer.
func SetupClusterAPI(mgr ctrl.Manager, o Options, clk clock.WithTicker) error {
	var only *types.NamespacedName
	if o.ClusterAPICluster != "" {
		ns, name, _ := strings.Cut(o.ClusterAPICluster, "/") // validated
		only = &types.NamespacedName{Namespace: ns, Name: name}
	}
	return mgr.Add(manager.RunnableFunc(func(ctx context.Context) error {
		logger := klog.FromContext(ctx).WithName("cluster-api")
		t := clk.NewTicker(clusterAPIPoll)
		defer t.Stop()
		for {
			cfg, served, err := clusterAPIServed(mgr, o)
			switch {
			case err != nil && o.ClusterAPIKubeconfig != "":
				logger.Error(err, "The Cluster API management cluster cannot be used: lull governs no Machine until it can", "kubeconfig", o.ClusterAPIKubeconfig, "retryIn", clusterAPIPoll)
			case err != nil:
				logger.V(2).Info("Cannot tell whether Cluster API Machines are served; asking again", "error", err, "in", clusterAPIPoll)
			case !served && o.ClusterAPIKubeconfig != "":
				logger.Error(nil, "The Cluster API management cluster serves no "+capi.MachineResource.GroupVersion().String()+" Machines: lull governs no Machine until it does",
					"apiServer", cfg.Host, "retryIn", clusterAPIPoll)
			case served:
				logger.Info("Cluster API Machines are served; governing the Machines and Clusters labelled "+capi.GovernedLabel+"=true", "apiServer", cfg.Host, "cluster", o.ClusterAPICluster)
				return setupClusterAPIControllers(ctx, mgr, o, cfg, only)
			}
			select {
			case <-ctx.Done():
				return nil
			case <-t.C():
			}
		}
	}))
}

// clusterAPIServed reads the config of the API server that holds Cluster
// API's objects (the kubeconfig is read at each try: a corrected Secret
// takes effect without a restart) and asks whether it serves Machines.
func clusterAPIServed(mgr ctrl.Manager, o Options) (*rest.Config, bool, error) {
	cfg := mgr.GetConfig()
	if o.ClusterAPIKubeconfig != "" {
		var err error
		if cfg, err = clientcmd.BuildConfigFromFlags("", o.ClusterAPIKubeconfig); err != nil {
			return nil, false, fmt.Errorf("--cluster-api-kubeconfig: %w", err)
		}
		cfg = rest.AddUserAgent(cfg, settings.Drainer)
		cfg.QPS, cfg.Burst = mgr.GetConfig().QPS, mgr.GetConfig().Burst
	}
	dc, err := discovery.NewDiscoveryClientForConfig(cfg)
	if err != nil {
		return cfg, false, err
	}
	served, err := machinesServed(dc)
	return cfg, served, err
}

// setupClusterAPIControllers registers the controllers, reading Cluster
// API's objects through a cluster of their own when they live in a
// management cluster.
func setupClusterAPIControllers(ctx context.Context, mgr ctrl.Manager, o Options, cfg *rest.Config, only *types.NamespacedName) error {
	var capiCluster cluster.Cluster
	var from cluster.Cluster = mgr
	if o.ClusterAPIKubeconfig != "" {
		var err error
		if capiCluster, err = cluster.New(cfg, func(co *cluster.Options) {
			co.Scheme = mgr.GetScheme()
			co.Client = client.Options{Cache: &client.CacheOptions{Unstructured: true}}
		}); err != nil {
			return fmt.Errorf("the Cluster API management cluster (--cluster-api-kubeconfig): %w", err)
		}
		// Started with the manager's other runnables: now, since the
		// manager runs.
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

func machinesServed(dc discovery.DiscoveryInterface) (bool, error) {
	return served(dc, capi.MachineResource.GroupVersion().String(), capi.MachineResource.Resource)
}
