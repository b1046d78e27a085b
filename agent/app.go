package agent

import (
	"flag"
	"fmt"
	"os"
	"time"

	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/kubernetes"
	"k8s.io/klog/v2"
	"k8s.io/utils/clock"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/healthz"
	crmetrics "sigs.k8s.io/controller-runtime/pkg/metrics"

	lullv1alpha1 "lull.dev/lull/api/v1alpha1"
	"lull.dev/lull/lease"
	lullscheme "lull.dev/lull/pkg/scheme"
	"lull.dev/lull/pkg/serving"
	"lull.dev/lull/pkg/version"
)

// Options are lull-agent's flags.
type Options struct {
	Node, Namespace, LeaseNamespace, DrainerIdentity string
	Commands                                         Commands
	SimulatePower                                    bool
	SimulatedBootTime                                time.Duration
	MetricsAddr, ProbeAddr                           string
	MetricsSecure                                    bool
	MetricsCertDir                                   string
	// ConfigNamespace holds the NodeConfigs; AdmissionConfigMap (in
	// Namespace) the writable and protected paths. NoWrite: WriteFiles
	// steps fail.
	ConfigNamespace, AdmissionConfigMap string
	NoWrite                             bool
	// The reboot sentinel (Sentinel): off unless RebootSentinel.
	RebootSentinel                               bool
	SentinelFile, SentinelCommand, SentinelClass string
	SentinelPeriod                               time.Duration
}

// AddFlags registers the flags.
func (o *Options) AddFlags(fs *flag.FlagSet) {
	fs.StringVar(&o.Node, "node-name", os.Getenv("NODE_NAME"), "the node this agent runs on (default $NODE_NAME)")
	fs.StringVar(&o.Namespace, "namespace", "lull-system", "namespace of the agent's own lease (lull-agent-<node>)")
	fs.StringVar(&o.LeaseNamespace, "lease-namespace", lease.DefaultNamespace, "namespace of the node disruption leases")
	fs.StringVar(&o.DrainerIdentity, "drainer-identity", "lull-drainer", "holder identity (family) of lull's drainer on node leases")
	fs.StringVar(&o.Commands.HostRoot, "host-root", "/host", `where the host's root file system is mounted; commands run chrooted into it ("/": no chroot)`)
	fs.StringVar(&o.Commands.DaemonReload, "daemon-reload-command", "systemctl daemon-reload", "shell command having systemd load its unit files again (empty: DaemonReload steps fail)")
	fs.StringVar(&o.Commands.Reload, "reload-command", `systemctl reload "$LULL_UNIT"`, "shell command reloading the unit $LULL_UNIT (empty: ReloadService steps fail)")
	fs.StringVar(&o.Commands.Restart, "restart-command", `systemctl restart "$LULL_UNIT"`, "shell command restarting the unit $LULL_UNIT (empty: RestartService steps fail)")
	fs.StringVar(&o.Commands.UnitState, "unit-state-command", `systemctl show --property=InvocationID,ActiveState,NeedDaemonReload,ReloadResult,StateChangeTimestampMonotonic "$LULL_UNIT"`,
		"shell command printing properties of the unit $LULL_UNIT as KEY=value lines, run before and after a step's command: a restart is done only when the InvocationID changed and the unit is active; "+
			"a reload only when StateChangeTimestampMonotonic advanced, ReloadResult (if printed) is success, the InvocationID is the same and the unit is active; "+
			"a daemon-reload only when each unit the request changes reports NeedDaemonReload=no (empty: RestartService and ReloadService steps fail, and DaemonReload steps of requests that change units)")
	fs.StringVar(&o.Commands.ManagerState, "manager-state-command", "systemctl show --property=UnitsLoadTimestampMonotonic",
		"shell command printing systemd's UnitsLoadTimestampMonotonic as a KEY=value line, run before and after a daemon-reload, which is done only when it advanced (empty: DaemonReload steps fail)")
	fs.StringVar(&o.ConfigNamespace, "config-namespace", lullv1alpha1.ConfigNamespace, "namespace of the NodeConfigs a WriteFiles step writes")
	fs.StringVar(&o.AdmissionConfigMap, "admission-configmap", "lull-admission", "ConfigMap in --namespace whose writablePaths and protectedPaths bound what a WriteFiles step may write (the admission guard's; unreadable: nothing is written)")
	fs.BoolVar(&o.NoWrite, "no-write", false, "write no files: WriteFiles steps fail (for an agent whose host root is not writable)")
	fs.BoolVar(&o.RebootSentinel, "reboot-sentinel", false, "request a reboot of this node when its reboot sentinel says so (docs/agent.md, \"The reboot sentinel\")")
	fs.StringVar(&o.SentinelFile, "reboot-sentinel-file", "/var/run/reboot-required", "the sentinel: a file on the host whose presence means a reboot is needed (<file>.pkgs lists the packages)")
	fs.StringVar(&o.SentinelCommand, "reboot-sentinel-command", "", "a shell command run chrooted into the host instead of the file check: exit 0 means a reboot is needed")
	fs.StringVar(&o.SentinelClass, "reboot-sentinel-class", lullv1alpha1.DefaultSentinelClass, "the maintenance class of the requests the sentinel files (the shipped policy drains and reboots it; the admission guard's sentinelClass must be the same)")
	fs.DurationVar(&o.SentinelPeriod, "reboot-sentinel-period", time.Minute, "how often the sentinel is checked")
	fs.StringVar(&o.Commands.Reboot, "reboot-command", "systemctl reboot", "shell command rebooting the node (empty: Reboot steps fail)")
	fs.StringVar(&o.Commands.PowerOff, "poweroff-command", "systemctl poweroff", "shell command powering the node off (empty: PowerOff steps fail)")
	fs.BoolVar(&o.SimulatePower, "simulate-power", false, "reboot and power off at the API level only (kwok nodes): Ready=False, a new boot ID, Ready=True")
	fs.DurationVar(&o.SimulatedBootTime, "simulated-boot-time", 3*time.Second, "how long a simulated reboot keeps the node NotReady")
	fs.StringVar(&o.MetricsAddr, "metrics-bind-address", "127.0.0.1:8095", `metrics endpoint ("0" disables it)`)
	fs.BoolVar(&o.MetricsSecure, "metrics-secure", false, "serve metrics over HTTPS to clients the API server authenticates and authorizes (get on the non-resource URL /metrics; the DaemonSet sets it); false: plain HTTP to anyone, for a loopback address only")
	fs.StringVar(&o.MetricsCertDir, "metrics-cert-dir", "", "directory with the metrics endpoint's tls.crt and tls.key; empty: a self-signed certificate generated in memory")
	fs.StringVar(&o.ProbeAddr, "health-probe-bind-address", "127.0.0.1:8096", "health and readiness probes")
}

// Run runs lull-agent with args until a signal; it returns the exit code.
func Run(args []string) int {
	fs := flag.NewFlagSet("lull-agent", flag.ContinueOnError)
	klog.InitFlags(fs)
	var o Options
	o.AddFlags(fs)
	showVersion := fs.Bool("version", false, "print the version and exit")
	if err := fs.Parse(args); err != nil {
		return 2
	}
	if *showVersion {
		fmt.Println(version.Line("lull-agent"))
		return 0
	}
	if o.Node == "" {
		fmt.Fprintln(os.Stderr, "lull-agent: --node-name (or $NODE_NAME) is required")
		return 2
	}
	ctrl.SetLogger(klog.NewKlogr())
	logger := klog.Background().WithName("lull-agent").WithValues("node", o.Node)
	serving.WarnInsecure(logger, o.MetricsAddr, o.MetricsSecure)
	cfg, err := ctrl.GetConfig()
	if err != nil {
		logger.Error(err, "Loading kubeconfig")
		return 1
	}
	identity := os.Getenv("POD_NAME")
	if identity == "" {
		identity, _ = os.Hostname()
	}
	cfg.UserAgent = fmt.Sprintf("lull-agent/%s (%s)", version.Version, o.Node)
	mgr, err := ctrl.NewManager(cfg, ctrl.Options{
		Scheme:                 lullscheme.New(),
		Metrics:                serving.Metrics(o.MetricsAddr, o.MetricsSecure, o.MetricsCertDir),
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
		DrainerIdentity: o.DrainerIdentity, Exec: exec, Clock: clk, Recorder: mgr.GetEventRecorder("lull-agent"),
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
			Command: o.SentinelCommand, Class: o.SentinelClass, Period: o.SentinelPeriod, Clock: clk, Recorder: mgr.GetEventRecorder("lull-agent")}
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
