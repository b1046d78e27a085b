// Package app wires lull-drainer's controllers into a controller-runtime
// manager with leader election, health probes and a metrics endpoint.
package app

import (
	"cmp"
	"context"
	"fmt"
	"os"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/spf13/pflag"
	coordinationv1 "k8s.io/api/coordination/v1"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/kubernetes"
	coordinationv1client "k8s.io/client-go/kubernetes/typed/coordination/v1"
	corev1client "k8s.io/client-go/kubernetes/typed/core/v1"
	"k8s.io/client-go/rest"
	toolscache "k8s.io/client-go/tools/cache"
	"k8s.io/client-go/tools/events"
	"k8s.io/client-go/tools/leaderelection/resourcelock"
	logsapi "k8s.io/component-base/logs/api/v1"
	"k8s.io/klog/v2"
	"k8s.io/utils/clock"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/cache"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/healthz"
	"sigs.k8s.io/controller-runtime/pkg/manager"
	crmetrics "sigs.k8s.io/controller-runtime/pkg/metrics"

	lullv1alpha1 "lull.dev/lull/api/v1alpha1"
	"lull.dev/lull/drainer/maintenance"
	policyctl "lull.dev/lull/drainer/policy"
	windowctrl "lull.dev/lull/drainer/window"
	"lull.dev/lull/lease"
	"lull.dev/lull/pkg/agentlease"
	"lull.dev/lull/pkg/apirequests"
	"lull.dev/lull/pkg/forecast"
	"lull.dev/lull/pkg/options"
	lullscheme "lull.dev/lull/pkg/scheme"
	"lull.dev/lull/pkg/serving"
	"lull.dev/lull/pkg/settings"
	"lull.dev/lull/pkg/uninstall"
	"lull.dev/lull/pkg/version"
)

// Options are lull-drainer's options (pkg/options declares them).
type Options = options.Drainer

// NewOptions returns lull-drainer's defaults.
func NewOptions() *Options { return options.NewDrainer() }

// Run parses args, runs the manager until a signal and returns the exit code.
func Run(args []string) int {
	fs := pflag.NewFlagSet(settings.Drainer, pflag.ContinueOnError)
	o := NewOptions()
	o.AddFlags(fs)
	showVersion := fs.Bool("version", false, "print the version and exit")
	if err := fs.Parse(args); err != nil {
		return 2
	}
	if *showVersion {
		fmt.Println(version.Line(settings.Drainer))
		return 0
	}
	if errs := o.Validate(); len(errs) > 0 {
		for _, err := range errs {
			fmt.Fprintln(os.Stderr, err)
		}
		return 2
	}
	if err := logsapi.ValidateAndApply(o.Logs, nil); err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 2
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
	serving.WarnInsecure(logger, o.MetricsAddr, o.MetricsSecure)

	cfg, err := ctrl.GetConfig()
	if err != nil {
		logger.Error(err, "Loading kubeconfig")
		return 1
	}
	// controller-runtime's default (20/s, burst 30) throttled a
	// 1,000-node wave's waiting requests into one-second reconciles; these
	// defaults are kube-scheduler's.
	cfg.QPS, cfg.Burst = float32(o.QPS), o.Burst
	// Requests name the replica, so an API server audit log tells replicas apart.
	cfg.UserAgent = fmt.Sprintf(settings.Drainer+"/%s (%s)", version.Version, o.Maintenance.Identity)
	// And are counted by verb and resource (lull_api_requests_total).
	apirequests.New(crmetrics.Registry).Wrap(cfg)
	if o.Uninstall {
		return uninstallHook(cfg, o, logger)
	}
	lock, err := leaderLock(cfg, &o)
	if err != nil {
		logger.Error(err, "Creating the leader-election lock")
		return 1
	}
	mgr, err := ctrl.NewManager(cfg, ctrl.Options{
		Scheme:                  lullscheme.New(),
		Metrics:                 serving.Metrics(o.MetricsAddr, o.MetricsSecure, o.MetricsCertDir),
		HealthProbeBindAddress:  o.ProbeAddr,
		PprofBindAddress:        o.PprofAddr,
		LeaderElection:          o.LeaderElect,
		LeaderElectionID:        settings.Drainer,
		LeaderElectionNamespace: o.LeaderElectionNamespace,
		// The lease names the replica (lull-drainer/<pod>), as the node
		// leases do, not controller-runtime's hostname_uuid.
		LeaderElectionResourceLockInterface: lock,
		LeaseDuration:                       &o.LeaseDuration,
		RenewDeadline:                       &o.RenewDeadline,
		RetryPeriod:                         &o.RetryPeriod,
		// Hand over quickly when the leader stops cleanly.
		LeaderElectionReleaseOnCancel: true,
		// Only the lease namespace's Leases and lull-agent's: every
		// kubelet renews its own heartbeat Lease every 10 s, and none of
		// those concern us.
		Cache: cache.Options{ByObject: map[client.Object]cache.ByObject{
			&coordinationv1.Lease{}: {Namespaces: leaseNamespaces(&o)},
		},
			// Nothing in the drainer reads managedFields; at 5,000 nodes
			// they are a large part of what the cache holds. (An update
			// of an object read from the cache omits them, which keeps
			// the server's.)
			DefaultTransform: cache.TransformStripManagedFields(),
		},
	})
	if err != nil {
		logger.Error(err, "Creating manager")
		return 1
	}
	clk := clock.RealClock{}
	collector := windowctrl.NewCollector(clk)
	crmetrics.Registry.MustRegister(collector)
	if err := (&windowctrl.Reconciler{
		Client: mgr.GetClient(), Clock: clk, Metrics: collector, Options: o.Settings.WindowOptions(),
		Secrets: mgr.GetAPIReader(), SecretNamespace: o.ConfigNamespace,
	}).SetupWithManager(mgr); err != nil {
		logger.Error(err, "Setting up the MaintenanceWindow controller")
		return 1
	}
	if o.DefaultPolicy {
		if err := (&policyctl.Shipped{Client: mgr.GetClient()}).SetupWithManager(mgr); err != nil {
			logger.Error(err, "Setting up the shipped DisruptionPolicy")
			return 1
		}
	}
	ctx := ctrl.SetupSignalHandler()
	if err := SetupMaintenance(ctx, mgr, clk, o, crmetrics.Registry); err != nil {
		logger.Error(err, "Setting up the NodeMaintenance controller")
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

// uninstallHook is lull-drainer --uninstall, the Helm chart's pre-delete
// hook: it marks the install, so the running lull-drainer ends every
// request and makes no new one, and waits for that; with no replica ready
// it ends them itself (it runs as lull-drainer's ServiceAccount). Helm
// deletes nothing until it exits 0.
func uninstallHook(cfg *rest.Config, o Options, logger klog.Logger) int {
	ctx, cancel := context.WithTimeout(ctrl.SetupSignalHandler(), o.UninstallTimeout)
	defer cancel()
	ctx = klog.NewContext(ctx, logger)
	c, err := client.New(cfg, client.Options{Scheme: lullscheme.New()})
	if err != nil {
		logger.Error(err, "Creating a client")
		return 1
	}
	d, err := uninstall.Drainer(ctx, c, o.LeaderElectionNamespace)
	if err != nil {
		logger.Error(err, "Finding lull-drainer")
		return 1
	}
	holding, err := uninstall.Holding(ctx, c)
	if err != nil {
		logger.Error(err, "Listing the requests")
		return 1
	}
	logger.Info("lull is being uninstalled: ending every request", "holding", len(holding))
	if !uninstall.Marked(d) {
		if err := uninstall.Mark(ctx, c, d, time.Now()); err != nil {
			logger.Error(err, "Marking the install")
			return 1
		}
	}
	if len(holding) > 0 && d.Status.ReadyReplicas == 0 {
		logger.Info("No lull-drainer replica is ready: ending the requests here")
		endRequests(ctx, cfg, o, clock.RealClock{}, logger)
	}
	if err := uninstall.Wait(ctx, c, o.UninstallTimeout); err != nil {
		logger.Error(err, "Waiting for the requests to end")
		return 1
	}
	logger.Info("Every request has ended", "ended", len(holding))
	return 0
}

// install is what lull-drainer watches for an uninstall.
func install(o *Options) maintenance.Install {
	return maintenance.Install{Namespace: o.LeaderElectionNamespace}
}

// endOnUninstall runs after a signal stopped the manager: when lull is
// being uninstalled it ends every request still holding something (the
// reconcilers may not have ended them all: helm uninstall deletes the
// Deployment first, and its pods stop at once), talking to the API server
// directly, for as long as its rights last (the same delete removes them:
// kubectl lull uninstall ends the requests first). Every replica does it;
// the writes are idempotent and conflicts are retried.
func endOnUninstall(cfg *rest.Config, o Options, clk clock.Clock, logger klog.Logger) {
	ctx, cancel := context.WithTimeout(context.Background(), o.UninstallTimeout)
	defer cancel()
	ctx = klog.NewContext(ctx, logger)
	c, err := client.New(cfg, client.Options{Scheme: lullscheme.New()})
	if err != nil {
		logger.Error(err, "Creating a client to check for an uninstall")
		return
	}
	in := install(&o)
	uninstalling, why, err := in.Uninstalling(ctx, c)
	if err != nil || !uninstalling {
		if err != nil {
			logger.Error(err, "Checking whether lull is being uninstalled; requests are left as they are")
		}
		return
	}
	logger.Info("lull is being uninstalled: ending every request before exiting", "because", why)
	endRequests(ctx, cfg, o, clk, logger)
}

// endRequests ends every request still holding something, with a direct
// client, until done or ctx ends.
func endRequests(ctx context.Context, cfg *rest.Config, o Options, clk clock.Clock, logger klog.Logger) {
	c, err := client.New(cfg, client.Options{Scheme: lullscheme.New()})
	if err != nil {
		logger.Error(err, "Creating a client")
		return
	}
	kube, err := kubernetes.NewForConfig(cfg)
	if err != nil {
		logger.Error(err, "Creating a clientset")
		return
	}
	b := events.NewBroadcaster(&events.EventSinkImpl{Interface: kube.EventsV1()})
	b.StartRecordingToSink(ctx.Done())
	defer b.Shutdown()
	o.Settings = o.Settings.WithDefaults()
	mo := o.Maintenance
	r := &maintenance.Reconciler{
		Client: c, APIReader: c, Kube: kube, Clock: clk, Options: mo,
		Leases:   lease.New(kube, lease.Options{Namespace: o.Settings.LeaseNamespace, Clock: clk, TakeOverReplicas: o.LeaderElect}),
		Recorder: b.NewRecorder(lullscheme.New(), settings.Drainer),
	}
	// The admission guard may refuse for a moment while it is deleted
	// (its parameters go before its bindings): try again until the
	// deadline.
	for {
		n, err := r.WindDown(ctx)
		if err == nil {
			logger.Info("Ended every request", "ended", n)
			return
		}
		logger.Error(err, "Ending the requests; trying again")
		select {
		case <-ctx.Done():
			logger.Info("Gave up ending the requests (docs/install.md#if-lull-drainer-is-gone)")
			return
		case <-time.After(time.Second):
		}
	}
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
	lc.Timeout = max(o.RenewDeadline/2, time.Second)
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

// SetupMaintenance wires the shared forecast to the manager's informers and
// registers the NodeMaintenance controller. Tests call it with a fake clock.
func SetupMaintenance(ctx context.Context, mgr ctrl.Manager, clk clock.WithTickerAndDelayedExecution, o Options, reg prometheus.Registerer) error {
	o.Settings = o.Settings.WithDefaults()
	f := forecast.New(forecast.Options{Settings: o.Settings, Clock: clk})
	h := f.Handlers()
	for obj, hd := range map[client.Object]toolscache.ResourceEventHandler{
		&corev1.Node{}: h.Nodes, &coordinationv1.Lease{}: h.Leases,
		&lullv1alpha1.NodeMaintenance{}: h.Maintenances, &lullv1alpha1.MaintenanceWindow{}: h.Windows,
		&lullv1alpha1.DisruptionPolicy{}: h.Policies,
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
	if err := (&policyctl.Reconciler{Client: mgr.GetClient()}).SetupWithManager(mgr); err != nil {
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
