package agent

import (
	"errors"
	"os"
	"time"

	"github.com/spf13/pflag"
	"k8s.io/apimachinery/pkg/util/validation"
	logsapi "k8s.io/component-base/logs/api/v1"

	lullv1alpha1 "lull.dev/lull/api/v1alpha1"
	"lull.dev/lull/internal/serving"
	"lull.dev/lull/internal/settings"
	"lull.dev/lull/lease"
)

// Options are lull-agent's options, in the style of Kubernetes' component
// options: NewOptions has the defaults, AddFlags registers them on a
// pflag.FlagSet and Validate checks them after parsing.
type Options struct {
	// Node is the node this agent runs on.
	Node string
	// Namespace holds the agent's own lease (lull-agent-<node>) and the
	// admission ConfigMap; LeaseNamespace the node disruption leases.
	Namespace, LeaseNamespace string
	// DrainerIdentity is the holder family of lull's drainer: only a lease
	// it holds lets a step run.
	DrainerIdentity string
	// Commands run the steps on the host.
	Commands Commands
	// DefaultStepTimeout is the deadline of a step whose plan gives no
	// timeout.
	DefaultStepTimeout time.Duration
	// SimulatePower reboots and powers off at the API level only (kwok
	// nodes), each reboot taking SimulatedBootTime.
	SimulatePower     bool
	SimulatedBootTime time.Duration
	// Options serve the metrics and the health probes.
	serving.Options
	// ConfigNamespace holds the NodeConfigs; AdmissionConfigMap (in
	// Namespace) the writable and protected paths. NoWrite: WriteFiles
	// steps fail.
	ConfigNamespace, AdmissionConfigMap string
	NoWrite                             bool
	// The reboot sentinel (Sentinel): off unless RebootSentinel.
	RebootSentinel                               bool
	SentinelFile, SentinelCommand, SentinelClass string
	SentinelPeriod                               time.Duration
	// Logs are component-base's logging options (-v, --vmodule,
	// --logging-format).
	Logs *logsapi.LoggingConfiguration
}

// NewOptions returns lull-agent's defaults.
func NewOptions() *Options {
	return &Options{
		Node:            os.Getenv("NODE_NAME"),
		Namespace:       settings.Namespace,
		LeaseNamespace:  lease.DefaultNamespace,
		DrainerIdentity: settings.Drainer,
		Commands: Commands{
			HostRoot:     "/host",
			DaemonReload: "systemctl daemon-reload",
			Reload:       `systemctl reload "$LULL_UNIT"`,
			Restart:      `systemctl restart "$LULL_UNIT"`,
			UnitState:    `systemctl show --property=InvocationID,ActiveState,NeedDaemonReload,ReloadResult,StateChangeTimestampMonotonic,Type,Result,LoadState,Id,Names,SuccessAction,FailureAction,JobTimeoutAction,StartLimitAction,Requires,Requisite,Wants,BindsTo,Upholds,OnSuccess,OnFailure,Triggers,ConsistsOf,RequiredBy,BoundBy,PropagatesStopTo,PropagatesReloadTo,Conflicts,ExecCondition,ExecStartPre,ExecStart,ExecStartPost,ExecReload,ExecStop,ExecStopPost "$LULL_UNIT"`,
			UnitJournal:  `journalctl --no-pager --quiet --output=json --lines=100 _PID=1 UNIT="$LULL_UNIT"`,
			ManagerState: "systemctl show --property=UnitsLoadTimestampMonotonic",
			Reboot:       "systemctl reboot",
			PowerOff:     "systemctl poweroff",
		},
		DefaultStepTimeout: DefaultStepTimeout,
		SimulatedBootTime:  3 * time.Second,
		Options:            serving.Options{MetricsAddr: "127.0.0.1:8095", ProbeAddr: "127.0.0.1:8096"},
		ConfigNamespace:    lullv1alpha1.ConfigNamespace,
		AdmissionConfigMap: "lull-admission",
		SentinelFile:       "/var/run/reboot-required",
		SentinelClass:      lullv1alpha1.DefaultSentinelClass,
		SentinelPeriod:     time.Minute,
		Logs:               logsapi.NewLoggingConfiguration(),
	}
}

// AddFlags registers lull-agent's flags, with o's values as defaults, and
// component-base's logging flags.
func (o *Options) AddFlags(fs *pflag.FlagSet) {
	fs.StringVar(&o.Node, "node-name", o.Node, "the node this agent runs on (default $NODE_NAME)")
	fs.StringVar(&o.Namespace, "namespace", o.Namespace, "namespace of the agent's own lease (lull-agent-<node>)")
	fs.StringVar(&o.LeaseNamespace, "lease-namespace", o.LeaseNamespace, "namespace of the node disruption leases")
	fs.StringVar(&o.DrainerIdentity, "drainer-identity", o.DrainerIdentity, "holder identity (family) of lull's drainer on node leases")
	o.Commands.AddFlags(fs)
	fs.DurationVar(&o.DefaultStepTimeout, "default-step-timeout", o.DefaultStepTimeout, "the deadline of a host step whose plan gives no timeout (the policy's planner gives every host step one)")
	fs.StringVar(&o.ConfigNamespace, "config-namespace", o.ConfigNamespace, "namespace of the NodeConfigs a WriteFiles step writes")
	fs.StringVar(&o.AdmissionConfigMap, "admission-configmap", o.AdmissionConfigMap, "ConfigMap in --namespace whose writablePaths and protectedPaths bound what a WriteFiles step may write (the admission guard's; unreadable: nothing is written)")
	fs.BoolVar(&o.NoWrite, "no-write", o.NoWrite, "write no files: WriteFiles steps fail (for an agent whose host root is not writable)")
	fs.BoolVar(&o.RebootSentinel, "reboot-sentinel", o.RebootSentinel, "request a reboot of this node when its reboot sentinel says so (docs/agent.md, \"The reboot sentinel\")")
	fs.StringVar(&o.SentinelFile, "reboot-sentinel-file", o.SentinelFile, "the sentinel: a file on the host whose presence means a reboot is needed (<file>.pkgs lists the packages)")
	fs.StringVar(&o.SentinelCommand, "reboot-sentinel-command", o.SentinelCommand, "a shell command run chrooted into the host instead of the file check: exit 0 means a reboot is needed")
	fs.StringVar(&o.SentinelClass, "reboot-sentinel-class", o.SentinelClass, "the maintenance class of the requests the sentinel files (the shipped policy drains and reboots it; the admission guard's sentinelClass must be the same)")
	fs.DurationVar(&o.SentinelPeriod, "reboot-sentinel-period", o.SentinelPeriod, "how often the sentinel is checked")
	fs.BoolVar(&o.SimulatePower, "simulate-power", o.SimulatePower, "reboot and power off at the API level only (kwok nodes): Ready=False, a new boot ID, Ready=True")
	fs.DurationVar(&o.SimulatedBootTime, "simulated-boot-time", o.SimulatedBootTime, "how long a simulated reboot keeps the node NotReady")
	o.Options.AddFlags(fs)
	logsapi.AddFlags(o.Logs, fs)
}

// AddFlags registers the host commands' flags, with c's values as
// defaults.
func (c *Commands) AddFlags(fs *pflag.FlagSet) {
	fs.StringVar(&c.HostRoot, "host-root", c.HostRoot, `where the host's root file system is mounted; commands run chrooted into it ("/": no chroot)`)
	fs.StringVar(&c.DaemonReload, "daemon-reload-command", c.DaemonReload, "shell command having systemd load its unit files again (empty: DaemonReload steps fail)")
	fs.StringVar(&c.Reload, "reload-command", c.Reload, "shell command reloading the unit $LULL_UNIT (empty: ReloadService steps fail)")
	fs.StringVar(&c.Restart, "restart-command", c.Restart, "shell command restarting the unit $LULL_UNIT (empty: RestartService steps fail)")
	fs.StringVar(&c.UnitState, "unit-state-command", c.UnitState,
		"shell command printing properties of the unit $LULL_UNIT as KEY=value lines, run before and after a step's command: a restart is done only when the InvocationID changed and the unit is active; "+
			"a reload only when StateChangeTimestampMonotonic advanced, ReloadResult (if printed) is success, the InvocationID is the same and the unit is active; "+
			"a daemon-reload only when each unit the request changes reports NeedDaemonReload=no (empty: RestartService and ReloadService steps fail, and DaemonReload steps of requests that change units)")
	fs.StringVar(&c.UnitJournal, "unit-journal-command", c.UnitJournal,
		"shell command printing what systemd wrote in its journal of the unit $LULL_UNIT as JSON lines (journalctl --output=json), run before and after restarting a oneshot service, which systemd unloads once it ran: "+
			"the restart is done when an entry of a new invocation says it succeeded (empty: such restarts fail unless the unit's state shows the run)")
	fs.StringVar(&c.ManagerState, "manager-state-command", c.ManagerState,
		"shell command printing systemd's UnitsLoadTimestampMonotonic as a KEY=value line, run before and after a daemon-reload, which is done only when it advanced (empty: DaemonReload steps fail)")
	fs.StringVar(&c.Reboot, "reboot-command", c.Reboot, "shell command rebooting the node (empty: Reboot steps fail)")
	fs.StringVar(&c.PowerOff, "poweroff-command", c.PowerOff, "shell command powering the node off (empty: PowerOff steps fail)")
}

// Validate checks the options after parsing; each error names its flag.
func (o *Options) Validate() []error {
	var errs []error
	if o.Node == "" {
		errs = append(errs, errors.New("--node-name (or $NODE_NAME) is required"))
	}
	for flag, ns := range map[string]string{"--namespace": o.Namespace, "--lease-namespace": o.LeaseNamespace, "--config-namespace": o.ConfigNamespace} {
		for _, msg := range validation.IsDNS1123Label(ns) {
			errs = append(errs, errors.New(flag+" "+ns+": "+msg))
		}
	}
	for flag, d := range map[string]time.Duration{"--default-step-timeout": o.DefaultStepTimeout, "--reboot-sentinel-period": o.SentinelPeriod} {
		if d <= 0 {
			errs = append(errs, errors.New(flag+" must be positive"))
		}
	}
	if o.DrainerIdentity == "" {
		errs = append(errs, errors.New("--drainer-identity must not be empty"))
	}
	if err := logsapi.Validate(o.Logs, nil, nil).ToAggregate(); err != nil {
		errs = append(errs, err)
	}
	return errs
}
