package options

import (
	"fmt"
	"strings"
	"time"

	"github.com/spf13/pflag"
	"k8s.io/apimachinery/pkg/util/validation"
	logsapi "k8s.io/component-base/logs/api/v1"

	lullv1alpha1 "lull.dev/lull/api/v1alpha1"
	"lull.dev/lull/internal/serving"
	"lull.dev/lull/internal/settings"
)

// Drainer are lull-drainer's options.
type Drainer struct {
	// Maintenance configures the NodeMaintenance controller, the shared
	// settings among them (Drainer.Settings).
	Maintenance
	LeaderElect             bool
	LeaderElectionNamespace string
	// ConfigNamespace holds the Secrets of the windows' alerts gates and
	// the NodeConfigs requests write.
	ConfigNamespace string
	// DefaultPolicy: create and keep the DisruptionPolicy "default" lull
	// ships (drainer/policycontroller.Shipped).
	DefaultPolicy bool
	// LeaderElectionLeaseDuration, LeaderElectionRenewDeadline and
	// LeaderElectionRetryPeriod are leader election's (the node lease's
	// duration is Maintenance.LeaseDuration).
	LeaderElectionLeaseDuration time.Duration
	LeaderElectionRenewDeadline time.Duration
	LeaderElectionRetryPeriod   time.Duration
	// Options serve the metrics and the health probes.
	serving.Options
	// PprofAddr serves net/http/pprof (unauthenticated); empty: off.
	PprofAddr string
	// QPS and Burst bound the drainer's requests to the API server.
	QPS   float64
	Burst int
	// EndOnUninstall: watch for lull's uninstall (its Deployment
	// lull-drainer or its namespace deleted, the NodeMaintenance CRD
	// deleted) and end every request before exiting. The installed
	// drainer runs with it; a drainer run outside that Deployment must
	// not, or it would take the missing Deployment for an uninstall.
	EndOnUninstall bool
	// UninstallTimeout bounds the ending of requests after a signal (it
	// must fit the pod's terminationGracePeriodSeconds).
	UninstallTimeout time.Duration
	// UninstallPoll is how often a running drainer looks for an uninstall
	// (default 5 s; no flag).
	UninstallPoll time.Duration
	// Uninstall: run once as the Helm chart's pre-delete hook: mark the
	// install for uninstalling and wait until every request has ended
	// (ending them itself when no replica runs), then exit.
	Uninstall bool
	// ClusterAPI: govern Cluster API Machines labelled lull.dev/governed
	// (drainer/machines), once the API server serves Machines.
	ClusterAPI bool
	// Karpenter: keep lull's entry in the disruption budgets of the
	// Karpenter NodePools that windows with spec.karpenter.governDisruption
	// select; starts once the API server serves karpenter.sh/v1 NodePools.
	Karpenter bool
	// ClusterAPIKubeconfig is the kubeconfig of the API server that serves
	// the Cluster API objects of lull's nodes (a management cluster); empty:
	// lull's own (a self-managed cluster).
	ClusterAPIKubeconfig string
	// ClusterAPICluster (namespace/name) is this cluster's Cluster object
	// among the Cluster API objects lull reads: lull governs its Machines
	// only (another workload cluster's are another lull's). Required with
	// ClusterAPIKubeconfig; empty: every Machine.
	ClusterAPICluster string
	// ClusterAPIRemediationDeadline: a remediation's request is gated by
	// maintenance windows for this long after the Machine's deletion, and
	// no longer (its spec.deadline); negative: like any other request.
	ClusterAPIRemediationDeadline time.Duration
	// Logs are component-base's logging options (-v, --vmodule,
	// --logging-format).
	Logs *logsapi.LoggingConfiguration
}

// NewDrainer returns lull-drainer's defaults.
func NewDrainer() *Drainer {
	m := DefaultMaintenance()
	// Each replica's own identity, lull-drainer/<replica>, is found when
	// it starts (the flag's help says how).
	m.Identity = ""
	return &Drainer{
		Maintenance:                 m,
		LeaderElect:                 true,
		LeaderElectionNamespace:     settings.Namespace,
		ConfigNamespace:             lullv1alpha1.ConfigNamespace,
		DefaultPolicy:               true,
		LeaderElectionLeaseDuration: 15 * time.Second,
		LeaderElectionRenewDeadline: 10 * time.Second,
		LeaderElectionRetryPeriod:   2 * time.Second,
		Options:                     serving.Options{MetricsAddr: ":8443", MetricsSecure: true, ProbeAddr: ":8081"},
		// controller-runtime's 20/s, burst 30 throttled a 1,000-node
		// wave's waiting requests into one-second reconciles; at 50/s
		// (kube-scheduler's) a 5,000-node wave's request creations held
		// every worker in the client's limiter while slots stood empty
		// (docs/performance.md). The limit is per resource; the API
		// server's priority and fairness is the fleet's protection.
		// Karpenter's controller uses 200/s too.
		QPS:              200,
		Burst:            400,
		UninstallTimeout: 45 * time.Second,
		ClusterAPI:       true,
		Karpenter:        true,
		Logs:             logsapi.NewLoggingConfiguration(),
	}
}

// AddFlags registers lull-drainer's flags with o's values as defaults:
// the shared settings' (all but the toleration key, which only the
// scheduler and kubectl lull why read), the controller's, its own and
// component-base's logging flags.
func (o *Drainer) AddFlags(fs *pflag.FlagSet) {
	fs.BoolVar(&o.LeaderElect, "leader-elect", o.LeaderElect, "elect a leader among replicas; only the leader acts")
	fs.StringVar(&o.LeaderElectionNamespace, "leader-election-namespace", o.LeaderElectionNamespace, "namespace of the leader election lease")
	fs.DurationVar(&o.LeaderElectionLeaseDuration, "leader-elect-lease-duration", o.LeaderElectionLeaseDuration, "how long a stopped leader's lease blocks the others")
	fs.DurationVar(&o.LeaderElectionRenewDeadline, "leader-elect-renew-deadline", o.LeaderElectionRenewDeadline, "how long the leader retries renewing before it gives up leading")
	fs.DurationVar(&o.LeaderElectionRetryPeriod, "leader-elect-retry-period", o.LeaderElectionRetryPeriod, "interval between leader-election attempts")
	fs.Float64Var(&o.QPS, "kube-api-qps", o.QPS, "requests per second to the API server the drainer may send (client-side limit)")
	fs.IntVar(&o.Burst, "kube-api-burst", o.Burst, "burst above --kube-api-qps")
	o.Options.AddFlags(fs)
	fs.StringVar(&o.PprofAddr, "pprof-bind-address", o.PprofAddr, "address of Go's /debug/pprof endpoints for profiling, unauthenticated: use a loopback address and kubectl port-forward (empty: off)")
	o.Settings.AddFlags(fs, settings.TolerationKeyName)
	o.Maintenance.AddFlags(fs)
	fs.BoolVar(&o.DefaultPolicy, "default-policy", o.DefaultPolicy, "create the DisruptionPolicy \"default\" lull ships and keep it as shipped while it carries the annotation lull.dev/managed-by=lull-drainer (docs/policy.md)")
	fs.StringVar(&o.ConfigNamespace, "config-namespace", o.ConfigNamespace, "namespace of the Secrets with the alerts gates' credentials (spec.gates.alerts.secretName) and of the NodeConfigs requests write (spec.changes.config)")
	fs.BoolVar(&o.EndOnUninstall, "end-requests-on-uninstall", o.EndOnUninstall, "when lull is being uninstalled (the Deployment lull-drainer marked lull.dev/uninstall or deleted, its namespace or the NodeMaintenance CRD deleted), end every request: undo lull's cordons, release the node leases, keep the labels (the install's manifests set it)")
	fs.DurationVar(&o.UninstallTimeout, "uninstall-timeout", o.UninstallTimeout, "how long, after a signal, ending the requests of an uninstall may take (less than the pod's terminationGracePeriodSeconds)")
	fs.BoolVar(&o.Uninstall, "uninstall", o.Uninstall, "do not run the controllers: mark the Deployment lull-drainer lull.dev/uninstall, wait until every request has ended (ending them here if no replica is ready) for --uninstall-timeout, and exit (the Helm chart's pre-delete hook)")
	fs.BoolVar(&o.Karpenter, "karpenter", o.Karpenter, "let windows with spec.karpenter.governDisruption govern Karpenter's voluntary disruption through an entry of lull's in the NodePools' disruption budgets (docs/interop.md); starts once the API server serves karpenter.sh/v1 NodePools")
	fs.BoolVar(&o.ClusterAPI, "cluster-api", o.ClusterAPI, "govern Cluster API Machines labelled lull.dev/governed=true: their deletion waits for lull's drain (docs/cluster-api.md); starts once the API server serves cluster.x-k8s.io/v1beta2 Machines")
	fs.StringVar(&o.ClusterAPIKubeconfig, "cluster-api-kubeconfig", o.ClusterAPIKubeconfig, "kubeconfig of the Cluster API management cluster whose Machines and Clusters are this cluster's nodes (empty: this cluster's own API server, a self-managed cluster; docs/cluster-api.md)")
	fs.StringVar(&o.ClusterAPICluster, "cluster-api-cluster", o.ClusterAPICluster, "this cluster's Cluster object among the Cluster API objects lull reads, as namespace/name: lull governs only its Machines and it (required with --cluster-api-kubeconfig; empty: every Machine of this API server)")
	fs.DurationVar(&o.ClusterAPIRemediationDeadline, "cluster-api-remediation-deadline", o.ClusterAPIRemediationDeadline, "how long maintenance windows may hold a Machine a MachineHealthCheck remediates (its request's spec.deadline, from the Machine's deletion); budgets, gates, leases and PodDisruptionBudgets still apply; negative: windows gate it like any other request")
	logsapi.AddFlags(o.Logs, fs)
}

// Validate checks the options after parsing; each error names its flag.
func (o *Drainer) Validate() []error {
	var errs []error
	if err := o.Settings.Validate(); err != nil {
		errs = append(errs, err)
	}
	errs = append(errs, o.Maintenance.Validate()...)
	switch {
	case o.ClusterAPICluster != "":
		ns, name, _ := strings.Cut(o.ClusterAPICluster, "/")
		if bad := append(validation.IsDNS1123Label(ns), validation.IsDNS1035Label(name)...); len(bad) > 0 {
			errs = append(errs, fmt.Errorf("--cluster-api-cluster=%q: give this cluster's Cluster object as namespace/name (lull governs its Machines only): %s",
				o.ClusterAPICluster, strings.Join(bad, "; ")))
		}
	case o.ClusterAPIKubeconfig != "":
		errs = append(errs, fmt.Errorf("--cluster-api-cluster is required with --cluster-api-kubeconfig: name this cluster's Cluster object in the management cluster as namespace/name (lull governs its Machines only)"))
	}
	if err := logsapi.Validate(o.Logs, nil, nil).ToAggregate(); err != nil {
		errs = append(errs, err)
	}
	return errs
}
