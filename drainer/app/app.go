// Package app wires lull-drainer's controllers into a controller-runtime
// manager with leader election, health probes and a metrics endpoint.
package app

import (
	"context"
	"fmt"
	"os"
	"time"

	"github.com/spf13/pflag"
	coordinationv1 "k8s.io/api/coordination/v1"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/fields"
	coordinationv1client "k8s.io/client-go/kubernetes/typed/coordination/v1"
	corev1client "k8s.io/client-go/kubernetes/typed/core/v1"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/leaderelection/resourcelock"
	"k8s.io/klog/v2"
	"k8s.io/utils/clock"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/cache"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/healthz"
	crmetrics "sigs.k8s.io/controller-runtime/pkg/metrics"

	"lull.dev/lull/drainer/apirequests"
	"lull.dev/lull/drainer/maintenance"
	"lull.dev/lull/drainer/policycontroller"
	"lull.dev/lull/drainer/windowcontroller"
	"lull.dev/lull/internal/agentlease"
	"lull.dev/lull/internal/lullscheme"
	"lull.dev/lull/internal/memlimit"
	"lull.dev/lull/internal/options"
	"lull.dev/lull/internal/serving"
	"lull.dev/lull/internal/settings"
	"lull.dev/lull/internal/version"
)

// Options are lull-drainer's options (internal/options declares them).
type Options = options.Drainer

// NewOptions returns lull-drainer's defaults.
func NewOptions() *Options { return options.NewDrainer() }

// Run parses args, runs the manager until a signal and returns the exit code.
func Run(args []string) int {
	fs := pflag.NewFlagSet(settings.Drainer, pflag.ContinueOnError)
	o := NewOptions()
	o.AddFlags(fs)
	if code, ok := options.Parse(settings.Drainer, fs, args, o.Validate, o.Logs, os.Stdout, os.Stderr); !ok {
		return code
	}
	return run(*o)
}

// run runs the manager until a signal and returns the exit code.
func run(o Options) int {
	ctrl.SetLogger(klog.NewKlogr())
	logger := klog.Background().WithName(settings.Drainer)
	if o.Maintenance.Identity == "" {
		o.Maintenance.Identity = DefaultIdentity()
	}
	if o.PprofAddr != "" && !serving.Loopback(o.PprofAddr) {
		logger.Info("Warning: pprof served without authentication on a non-loopback address", "address", o.PprofAddr)
	}
	o.WarnInsecure(logger)
	memlimit.Set(logger)
	cfg, err := restConfig(&o)
	if err != nil {
		logger.Error(err, "Loading kubeconfig")
		return 1
	}
	if o.Uninstall {
		return uninstallHook(cfg, o, logger)
	}
	mgr, err := newManager(cfg, &o)
	if err != nil {
		logger.Error(err, "Creating manager")
		return 1
	}
	clk := clock.RealClock{}
	ctx := ctrl.SetupSignalHandler()
	if err := setupControllers(ctx, mgr, clk, o); err != nil {
		logger.Error(err, "Setting up the controllers")
		return 1
	}
	_ = mgr.AddHealthzCheck("ping", healthz.Ping)
	_ = mgr.AddReadyzCheck("ping", healthz.Ping)
	logger.Info("Starting", "version", version.Version, "leaderElect", o.LeaderElect)
	if err := mgr.Start(ctx); err != nil {
		logger.Error(err, "Manager stopped")
		return 1
	}
	if o.EndOnUninstall {
		endOnUninstall(cfg, o, clk, logger)
	}
	_ = os.Stdout.Sync()
	return 0
}

// restConfig is the drainer's client configuration: the kubeconfig (or
// in-cluster), its client-side limits, a user agent that names the
// replica, and requests counted by verb and resource.
func restConfig(o *Options) (*rest.Config, error) {
	cfg, err := ctrl.GetConfig()
	if err != nil {
		return nil, err
	}
	// controller-runtime's default (20/s, burst 30) throttled a
	// 1,000-node wave's waiting requests into one-second reconciles; these
	// defaults are kube-scheduler's.
	cfg.QPS, cfg.Burst = float32(o.QPS), o.Burst
	// Requests name the replica, so an API server audit log tells replicas apart.
	cfg.UserAgent = fmt.Sprintf(settings.Drainer+"/%s (%s)", version.Version, o.Maintenance.Identity)
	// And are counted by verb and resource (lull_api_requests_total).
	apirequests.New(crmetrics.Registry).Wrap(cfg)
	return cfg, nil
}

// newManager is the controller manager: leader election under the
// replica's own identity, metrics, probes and a cache of only the Leases
// lull reads.
func newManager(cfg *rest.Config, o *Options) (ctrl.Manager, error) {
	lock, err := leaderLock(cfg, o)
	if err != nil {
		return nil, fmt.Errorf("creating the leader-election lock: %w", err)
	}
	return ctrl.NewManager(cfg, ctrl.Options{
		Scheme:                  lullscheme.New(),
		Metrics:                 o.Metrics(),
		HealthProbeBindAddress:  o.ProbeAddr,
		PprofBindAddress:        o.PprofAddr,
		LeaderElection:          o.LeaderElect,
		LeaderElectionID:        settings.Drainer,
		LeaderElectionNamespace: o.LeaderElectionNamespace,
		// The lease names the replica (lull-drainer/<pod>), as the node
		// leases do, not controller-runtime's hostname_uuid.
		LeaderElectionResourceLockInterface: lock,
		LeaseDuration:                       &o.LeaderElectionLeaseDuration,
		RenewDeadline:                       &o.LeaderElectionRenewDeadline,
		RetryPeriod:                         &o.LeaderElectionRetryPeriod,
		// Hand over quickly when the leader stops cleanly.
		LeaderElectionReleaseOnCancel: true,
		// Cluster API's objects are read as unstructured
		// (drainer/machines): from the cache too, not one live request
		// per read.
		Client: client.Options{Cache: &client.CacheOptions{Unstructured: true}},
		// Nodes are cached trimmed (cache.go): the client refuses to
		// update one.
		NewClient: newClient,
		// Only the lease namespace's Leases and lull-agent's: every
		// kubelet renews its own heartbeat Lease every 10 s, and none of
		// those concern us.
		Cache: cache.Options{ByObject: map[client.Object]cache.ByObject{
			&corev1.Node{}:          {Transform: trimNode},
			&coordinationv1.Lease{}: {Namespaces: leaseNamespaces(o)},
			// Of ConfigMaps, the admission guard's parameters alone (its
			// criticalUnits, which the plans drain for): the drainer
			// reads its budget ledger live.
			&corev1.ConfigMap{}: {Namespaces: map[string]cache.Config{o.Maintenance.AdmissionNamespace: {}},
				Field: fields.OneTermEqualSelector("metadata.name", settings.AdmissionConfigMap)},
		},
			// Nothing in the drainer reads managedFields; at 5,000 nodes
			// they are a large part of what the cache holds (cache.go).
			DefaultTransform: stripManagedFields,
		},
	})
}

// setupControllers registers lull-drainer's controllers: MaintenanceWindow
// status, the shipped DisruptionPolicy (unless --default-policy=false) and
// the NodeMaintenance controller with the shared forecast.
func setupControllers(ctx context.Context, mgr ctrl.Manager, clk clock.WithTickerAndDelayedExecution, o Options) error {
	collector := windowcontroller.NewCollector(clk)
	crmetrics.Registry.MustRegister(collector)
	if err := (&windowcontroller.Reconciler{
		Client: mgr.GetClient(), Clock: clk, Metrics: collector, Options: o.Settings.WindowOptions(),
		Secrets: mgr.GetAPIReader(), SecretNamespace: o.ConfigNamespace,
	}).SetupWithManager(mgr); err != nil {
		return fmt.Errorf("setting up the MaintenanceWindow controller: %w", err)
	}
	if o.DefaultPolicy {
		if err := (&policycontroller.Shipped{Client: mgr.GetClient()}).SetupWithManager(mgr); err != nil {
			return fmt.Errorf("setting up the shipped DisruptionPolicy: %w", err)
		}
	}
	if err := SetupMaintenance(ctx, mgr, clk, o, crmetrics.Registry); err != nil {
		return fmt.Errorf("setting up the NodeMaintenance controller: %w", err)
	}
	if o.ClusterAPI {
		if err := SetupClusterAPI(mgr, o, clk); err != nil {
			return fmt.Errorf("setting up the Cluster API Machine controller: %w", err)
		}
	}
	if o.Karpenter {
		if err := SetupKarpenter(mgr, o, clk); err != nil {
			return fmt.Errorf("setting up the Karpenter NodePool controller: %w", err)
		}
	}
	return nil
}

// leaderLock is the leader-election Lease lull-drainer in
// --leader-election-namespace, held under the replica's identity (nil
// without leader election). Its client times out within half the renew
// deadline, as controller-runtime's own does, so one hung request does not
// cost the leadership.
func leaderLock(cfg *rest.Config, o *Options) (resourcelock.Interface, error) {
	if !o.LeaderElect {
		return nil, nil
	}
	lc := rest.AddUserAgent(rest.CopyConfig(cfg), "leader-election")
	lc.Timeout = max(o.LeaderElectionRenewDeadline/2, time.Second)
	core, err := corev1client.NewForConfig(lc)
	if err != nil {
		return nil, err
	}
	coord, err := coordinationv1client.NewForConfig(lc)
	if err != nil {
		return nil, err
	}
	return resourcelock.New(resourcelock.LeasesResourceLock, o.LeaderElectionNamespace, settings.Drainer, core, coord,
		resourcelock.ResourceLockConfig{Identity: o.Maintenance.Identity})
}

// DefaultIdentity is this replica's holder identity: lull-drainer/ and the
// pod's name (POD_NAME, from the downward API), or the host name outside
// a pod.
func DefaultIdentity() string {
	replica := os.Getenv("POD_NAME")
	if replica == "" {
		replica, _ = os.Hostname()
	}
	if replica == "" {
		return maintenance.DefaultIdentityFamily
	}
	return maintenance.DefaultIdentityFamily + "/" + replica
}

// leaseNamespaces are the Leases the drainer caches: every node lease, and
// lull-agent's (by their label: the leader election lease may share the
// namespace).
func leaseNamespaces(o *Options) map[string]cache.Config {
	ns := map[string]cache.Config{o.Settings.LeaseNamespace: {}}
	if o.Maintenance.AgentNamespace != o.Settings.LeaseNamespace {
		ns[o.Maintenance.AgentNamespace] = cache.Config{LabelSelector: agentlease.Selector()}
	}
	return ns
}
