// Package app wires lull-drainer's controllers into a controller-runtime
// manager with leader election, health probes and a metrics endpoint.
package app

import (
	"flag"
	"fmt"
	"os"
	"time"

	"k8s.io/klog/v2"
	"k8s.io/utils/clock"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/healthz"
	crmetrics "sigs.k8s.io/controller-runtime/pkg/metrics"
	metricsserver "sigs.k8s.io/controller-runtime/pkg/metrics/server"

	windowctrl "lull.dev/lull/drainer/window"
	lullscheme "lull.dev/lull/pkg/scheme"
	"lull.dev/lull/pkg/version"
	engine "lull.dev/lull/pkg/window"
)

// Options are lull-drainer's flags.
type Options struct {
	LeaderElect             bool
	LeaderElectionNamespace string
	MetricsAddr             string
	ProbeAddr               string
	Horizon                 time.Duration
}

// Run parses args, runs the manager until a signal and returns the exit code.
func Run(args []string) int {
	fs := flag.NewFlagSet("lull-drainer", flag.ContinueOnError)
	var o Options
	fs.BoolVar(&o.LeaderElect, "leader-elect", true, "elect a leader among replicas; only the leader acts")
	fs.StringVar(&o.LeaderElectionNamespace, "leader-election-namespace", "lull-system", "namespace of the leader election lease")
	fs.StringVar(&o.MetricsAddr, "metrics-bind-address", ":8080", "address of the Prometheus metrics endpoint (0 disables)")
	fs.StringVar(&o.ProbeAddr, "health-probe-bind-address", ":8081", "address of /healthz and /readyz")
	fs.DurationVar(&o.Horizon, "window-horizon", engine.DefaultHorizon, "how far ahead to search for the next maintenance window")
	klog.InitFlags(fs)
	showVersion := fs.Bool("version", false, "print the version and exit")
	if err := fs.Parse(args); err != nil {
		return 2
	}
	if *showVersion {
		fmt.Println("lull-drainer", version.Version)
		return 0
	}
	ctrl.SetLogger(klog.NewKlogr())
	logger := klog.Background().WithName("lull-drainer")

	cfg, err := ctrl.GetConfig()
	if err != nil {
		logger.Error(err, "Loading kubeconfig")
		return 1
	}
	mgr, err := ctrl.NewManager(cfg, ctrl.Options{
		Scheme:                  lullscheme.New(),
		Metrics:                 metricsserver.Options{BindAddress: o.MetricsAddr},
		HealthProbeBindAddress:  o.ProbeAddr,
		LeaderElection:          o.LeaderElect,
		LeaderElectionID:        "lull-drainer",
		LeaderElectionNamespace: o.LeaderElectionNamespace,
		// Hand over quickly when the leader stops cleanly.
		LeaderElectionReleaseOnCancel: true,
	})
	if err != nil {
		logger.Error(err, "Creating manager")
		return 1
	}
	clk := clock.RealClock{}
	collector := windowctrl.NewCollector(clk)
	crmetrics.Registry.MustRegister(collector)
	if err := (&windowctrl.Reconciler{
		Client: mgr.GetClient(), Clock: clk, Metrics: collector, Options: engine.Options{Horizon: o.Horizon},
	}).SetupWithManager(mgr); err != nil {
		logger.Error(err, "Setting up the MaintenanceWindow controller")
		return 1
	}
	_ = mgr.AddHealthzCheck("ping", healthz.Ping)
	_ = mgr.AddReadyzCheck("ping", healthz.Ping)
	logger.Info("Starting", "version", version.Version, "leaderElect", o.LeaderElect)
	if err := mgr.Start(ctrl.SetupSignalHandler()); err != nil {
		logger.Error(err, "Manager stopped")
		return 1
	}
	_ = os.Stdout.Sync()
	return 0
}
