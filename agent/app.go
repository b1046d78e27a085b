package agent

import (
	"fmt"
	"os"

	"github.com/spf13/pflag"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/kubernetes"
	"k8s.io/klog/v2"
	"k8s.io/utils/clock"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/healthz"
	crmetrics "sigs.k8s.io/controller-runtime/pkg/metrics"

	"lull.dev/lull/internal/lullscheme"
	"lull.dev/lull/internal/memlimit"
	"lull.dev/lull/internal/options"
	"lull.dev/lull/internal/settings"
	"lull.dev/lull/internal/version"
)

// Run runs lull-agent with args until a signal; it returns the exit code.
func Run(args []string) int {
	fs := pflag.NewFlagSet(settings.Agent, pflag.ContinueOnError)
	o := NewOptions()
	o.AddFlags(fs)
	if code, ok := options.Parse(settings.Agent, fs, args, o.Validate, o.Logs, os.Stdout, os.Stderr); !ok {
		return code
	}
	return run(o)
}

// run runs the agent's manager until a signal; it returns the exit code.
func run(o *Options) int {
	ctrl.SetLogger(klog.NewKlogr())
	logger := klog.Background().WithName(settings.Agent).WithValues("node", o.Node)
	o.WarnInsecure(logger)
	memlimit.Set(logger)
	cfg, err := ctrl.GetConfig()
	if err != nil {
		logger.Error(err, "Loading kubeconfig")
		return 1
	}
	identity := os.Getenv("POD_NAME")
	if identity == "" {
		identity, _ = os.Hostname()
	}
	cfg.UserAgent = fmt.Sprintf(settings.Agent+"/%s (%s)", version.Version, o.Node)
	mgr, err := ctrl.NewManager(cfg, ctrl.Options{
		Scheme:                 lullscheme.New(),
		Metrics:                o.Metrics(),
		HealthProbeBindAddress: o.ProbeAddr,
		Cache:                  CacheOptions(o.Node, o.LeaseNamespace),
	})
	if err != nil {
		logger.Error(err, "Creating manager")
		return 1
	}
	kube, err := kubernetes.NewForConfig(cfg)
	if err != nil {
		logger.Error(err, "Creating client")
		return 1
	}
	clk := clock.RealClock{}
	heartbeat := &Heartbeat{Kube: kube, Namespace: o.Namespace, Node: o.Node, Identity: identity, Clock: clk}
	var exec Executor = &o.Commands
	if o.SimulatePower {
		sim := &SimulatedPower{Client: mgr.GetClient(), Node: o.Node, BootTime: o.SimulatedBootTime, Clock: clk, Commands: &o.Commands,
			Off: heartbeat.Off}
		if err := mgr.Add(sim); err != nil {
			logger.Error(err, "Adding the simulated node's boot ID")
			return 1
		}
		exec = sim
	}
	a := &Agent{Client: mgr.GetClient(), Live: mgr.GetAPIReader(), Node: o.Node, LeaseNamespace: o.LeaseNamespace,
		DrainerIdentity: o.DrainerIdentity, DefaultStepTimeout: o.DefaultStepTimeout, Exec: exec, Clock: clk, Recorder: mgr.GetEventRecorder(settings.Agent),
		Metrics: NewMetrics(crmetrics.Registry)}
	if !o.NoWrite {
		a.Files = &Files{Live: mgr.GetAPIReader(), HostRoot: o.Commands.HostRoot, ConfigNamespace: o.ConfigNamespace,
			Admission: types.NamespacedName{Namespace: o.Namespace, Name: o.AdmissionConfigMap}}
	}
	if err := a.SetupWithManager(mgr); err != nil {
		logger.Error(err, "Setting up the controller")
		return 1
	}
	if o.RebootSentinel {
		s := &Sentinel{Live: mgr.GetAPIReader(), Client: mgr.GetClient(), Node: o.Node, Commands: &o.Commands, File: o.SentinelFile,
			Command: o.SentinelCommand, Class: o.SentinelClass, Period: o.SentinelPeriod, Clock: clk, Recorder: mgr.GetEventRecorder(settings.Agent)}
		if err := mgr.Add(s); err != nil {
			logger.Error(err, "Adding the reboot sentinel")
			return 1
		}
	}
	if err := mgr.Add(heartbeat); err != nil {
		logger.Error(err, "Adding the heartbeat")
		return 1
	}
	_ = mgr.AddHealthzCheck("ping", healthz.Ping)
	_ = mgr.AddReadyzCheck("ping", healthz.Ping)
	logger.Info("Starting", "version", version.Version, "hostRoot", o.Commands.HostRoot, "simulatePower", o.SimulatePower)
	if err := mgr.Start(ctrl.SetupSignalHandler()); err != nil {
		logger.Error(err, "Manager stopped")
		return 1
	}
	return 0
}
