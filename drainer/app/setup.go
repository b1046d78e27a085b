package app

import (
	"cmp"
	"context"
	"fmt"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	coordinationv1 "k8s.io/api/coordination/v1"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/kubernetes"
	toolscache "k8s.io/client-go/tools/cache"
	"k8s.io/utils/clock"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/manager"

	lullv1alpha1 "lull.dev/lull/api/v1alpha1"
	"lull.dev/lull/drainer/maintenance"
	"lull.dev/lull/drainer/policycontroller"
	"lull.dev/lull/internal/budget"
	"lull.dev/lull/internal/disruptors"
	"lull.dev/lull/internal/forecast"
	"lull.dev/lull/internal/settings"
	"lull.dev/lull/lease"
)

// The NodeMaintenance controller's wiring: the shared forecast fed by the
// manager's informers, and the controller itself.

// SetupMaintenance wires the shared forecast to the manager's informers and
// registers the NodeMaintenance controller. Tests call it with a fake clock.
func SetupMaintenance(ctx context.Context, mgr ctrl.Manager, clk clock.WithTickerAndDelayedExecution, o Options, reg prometheus.Registerer) error {
	o.Settings = o.Settings.WithDefaults()
	f := forecast.New(forecast.Options{Settings: o.Settings, Clock: clk, AdmissionNamespace: o.Maintenance.AdmissionNamespace})
	h := f.Handlers()
	// The budget counts the requests holding a slot, and the nodes other
	// tools disrupt, from these indexes, not from lists of every request
	// and node (internal/budget, internal/disruptors).
	if err := mgr.GetFieldIndexer().IndexField(ctx, &lullv1alpha1.NodeMaintenance{}, budget.HoldsSlotField, budget.HoldsSlotIndex); err != nil {
		return fmt.Errorf("indexing NodeMaintenances by budget slot: %w", err)
	}
	// The watches that wake the requests of one phase list them by it.
	if err := mgr.GetFieldIndexer().IndexField(ctx, &lullv1alpha1.NodeMaintenance{}, maintenance.PhaseField, maintenance.PhaseIndex); err != nil {
		return fmt.Errorf("indexing NodeMaintenances by phase: %w", err)
	}
	if err := mgr.GetFieldIndexer().IndexField(ctx, &corev1.Node{}, disruptors.IndexField, disruptors.Index); err != nil {
		return fmt.Errorf("indexing Nodes by other tools' disruption: %w", err)
	}
	for obj, hd := range map[client.Object]toolscache.ResourceEventHandler{
		&corev1.Node{}: h.Nodes, &coordinationv1.Lease{}: h.Leases,
		&lullv1alpha1.NodeMaintenance{}: h.Maintenances, &lullv1alpha1.MaintenanceWindow{}: h.Windows,
		&lullv1alpha1.DisruptionPolicy{}: h.Policies,
		// The guard's criticalUnits: the plans drain for the restarts the
		// guard judges node-critical.
		&corev1.ConfigMap{}: h.Admission,
	} {
		inf, err := mgr.GetCache().GetInformer(ctx, obj)
		if err != nil {
			return fmt.Errorf("informer for %T: %w", obj, err)
		}
		if _, err := inf.AddEventHandler(hd); err != nil {
			return err
		}
	}
	// The forecast counts as synced once the cache has delivered every
	// object; the controller acts on nothing before that.
	if err := mgr.Add(manager.RunnableFunc(func(ctx context.Context) error {
		if mgr.GetCache().WaitForCacheSync(ctx) {
			f.SetSynced()
		}
		<-ctx.Done()
		f.Stop()
		return nil
	})); err != nil {
		return err
	}
	kube, err := kubernetes.NewForConfig(mgr.GetConfig())
	if err != nil {
		return err
	}
	mo := o.Maintenance
	metrics := maintenance.NewMetrics(mgr.GetClient())
	if reg != nil {
		if err := metrics.Register(reg); err != nil {
			return err
		}
	}
	if err := (&policycontroller.Reconciler{Client: mgr.GetClient()}).SetupWithManager(mgr); err != nil {
		return err
	}
	var uninstall *maintenance.UninstallWatch
	if o.EndOnUninstall {
		uninstall = &maintenance.UninstallWatch{Install: install(&o), Reader: mgr.GetAPIReader(), Period: cmp.Or(o.UninstallPoll, 5*time.Second)}
	}
	return (&maintenance.Reconciler{
		Uninstall: uninstall,
		Client:    mgr.GetClient(),
		APIReader: mgr.GetAPIReader(),
		Kube:      kube,
		// With leader election, the replica acting is the leader: a lease
		// another replica holds is a deposed leader's, taken over at once.
		// The lease's owner reference takes the node's UID from the cache.
		Leases: lease.New(kube, lease.Options{Namespace: o.Settings.LeaseNamespace, Clock: clk, TakeOverReplicas: o.LeaderElect,
			NodeUID: cachedNodeUID(mgr.GetClient())}),
		Forecast: f,
		Clock:    clk,
		Recorder: mgr.GetEventRecorder(settings.Drainer),
		Metrics:  metrics,
		Options:  mo,
		// The NodeConfigs requests write, bound when a request starts.
		ConfigNamespace: o.ConfigNamespace,
		Secrets:         mgr.GetAPIReader(),
	}).SetupWithManager(mgr)
}

// cachedNodeUID reads a node's UID from the manager's cache, which the
// drainer keeps for nodes anyway.
func cachedNodeUID(c client.Reader) func(context.Context, string) (types.UID, error) {
	return func(ctx context.Context, node string) (types.UID, error) {
		var n corev1.Node
		if err := c.Get(ctx, client.ObjectKey{Name: node}, &n); err != nil {
			return "", err
		}
		return n.UID, nil
	}
}
