// Package options declares lull-drainer's options once, in the style of
// Kubernetes' component options: a type with its defaults, AddFlags on a
// pflag.FlagSet and Validate. lull-drainer parses them; the plan preview
// (internal/plan) and kubectl-lull derive theirs from the same declarations,
// so a preview decides with the drainer's defaults and its flags read the
// same.
package options

import (
	"fmt"
	"time"

	"github.com/spf13/pflag"
	"k8s.io/apimachinery/pkg/util/validation"
	"k8s.io/apimachinery/pkg/util/validation/field"

	"lull.dev/lull/internal/settings"
	"lull.dev/lull/lease"
)

// DefaultWorkers is how many requests are reconciled at once by default.
// A reconcile mostly waits on the API server: with 4, a wave's windows
// never filled (4 of 10–25 slots), and 16 filled them and drained 1,000
// nodes in 0.93 of the time of kubectl drain under xargs -P at the same
// budgets (docs/performance.md).
const DefaultWorkers = 16

// Maintenance configures the NodeMaintenance controller: what a request's
// life depends on. The plan preview reads the same fields.
type Maintenance struct {
	// Settings shared with lull-scheduler and kubectl-lull (internal/settings);
	// the controller reads the maintenance label and the default budget.
	settings.Settings
	// Identity is this replica's lease holder name, lull-drainer/<replica>:
	// every replica's own, so each write says who made it; the family
	// (lull-drainer) makes the replicas' leases lull's (lease.SameFamily).
	// A preview names the family.
	Identity string
	// BudgetNamespace holds the budget ledger (budget.Ledger).
	BudgetNamespace string
	// AgentNamespace holds lull-agent's leases (internal/agentlease).
	AgentNamespace string
	// AdmissionNamespace holds the admission guard's parameters
	// (settings.AdmissionConfigMap), whose criticalUnits the plans drain
	// for.
	AdmissionNamespace string
	// LeaseDuration of the node disruption lease lull holds.
	LeaseDuration time.Duration
	// DrainTimeout is how long a blocked drain waits before its
	// escalation applies (per request: spec.drain.timeout).
	DrainTimeout time.Duration
	// RetryDelay is the first delay between eviction rounds; it doubles
	// while the drain is blocked, up to MaxRetryDelay.
	RetryDelay, MaxRetryDelay time.Duration
	// AllowForce permits the Force escalation (deleting pods past their
	// PodDisruptionBudget). Off unless explicitly configured.
	AllowForce bool
	// DeleteEmptyDirData lets drains evict pods with emptyDir volumes.
	DeleteEmptyDirData bool
	// NodeConditions: write the node lifecycle conditions
	// (MaintenancePlanned, MaintenanceInProgress, DrainInProgress,
	// Drained) on the nodes of lull's requests.
	NodeConditions bool
	// Workers is how many requests are reconciled at once (never the same
	// node twice). A reconcile mostly waits for the API server, so with
	// one worker a wave's hundreds of waiting requests delay the one that
	// could start.
	Workers int
}

// DefaultMaintenance is the controller's defaults.
func DefaultMaintenance() Maintenance {
	return Maintenance{
		Settings:           settings.Defaults(),
		Identity:           settings.Drainer,
		BudgetNamespace:    settings.Namespace,
		AgentNamespace:     settings.Namespace,
		AdmissionNamespace: settings.Namespace,
		LeaseDuration:      time.Minute,
		DrainTimeout:       time.Hour,
		RetryDelay:         2 * time.Second,
		MaxRetryDelay:      30 * time.Second,
		DeleteEmptyDirData: true,
		NodeConditions:     true,
		Workers:            DefaultWorkers,
	}
}

// Default fills in what m leaves unset (zero) with DefaultMaintenance's
// values. The switches (AllowForce, DeleteEmptyDirData) are taken as
// given: false is a choice (so are NodeConditions).
func (m *Maintenance) Default() {
	d := DefaultMaintenance()
	set := func(v *string, def string) {
		if *v == "" {
			*v = def
		}
	}
	setDuration := func(v *time.Duration, def time.Duration) {
		if *v == 0 {
			*v = def
		}
	}
	set(&m.Identity, d.Identity)
	set(&m.BudgetNamespace, d.BudgetNamespace)
	set(&m.AgentNamespace, d.AgentNamespace)
	set(&m.AdmissionNamespace, d.AdmissionNamespace)
	setDuration(&m.LeaseDuration, d.LeaseDuration)
	setDuration(&m.DrainTimeout, d.DrainTimeout)
	setDuration(&m.RetryDelay, d.RetryDelay)
	setDuration(&m.MaxRetryDelay, d.MaxRetryDelay)
	if m.Workers == 0 {
		m.Workers = d.Workers
	}
	m.Settings = m.Settings.WithDefaults()
}

// Help of the flags the drainer and kubectl-lull's previews share.
const (
	deleteEmptyDirDataHelp = "evict pods with emptyDir volumes (their data is lost)"
	identityFamilyHelp     = "the drainer's lease holder family (its replicas hold leases as <family>/<replica>)"
)

// AddFlags registers the controller's flags (not the shared settings,
// which the caller adds: Drainer.AddFlags) with m's values as defaults.
func (m *Maintenance) AddFlags(fs *pflag.FlagSet) {
	fs.StringVar(&m.Identity, "identity", m.Identity, "this replica's holder identity on node leases and the leader-election lease (default lull-drainer/$POD_NAME, or lull-drainer/<hostname>)")
	settings.AddAgentNamespaceFlag(fs, &m.AgentNamespace)
	fs.StringVar(&m.BudgetNamespace, "budget-namespace", m.BudgetNamespace, "namespace of the budget ledger ConfigMap lull-budget")
	fs.StringVar(&m.AdmissionNamespace, "admission-namespace", m.AdmissionNamespace,
		"namespace of the admission guard's ConfigMap "+settings.AdmissionConfigMap+", whose criticalUnits (the units whose restart drains the node) the plans read, as the guard does")
	fs.DurationVar(&m.LeaseDuration, "lease-duration", m.LeaseDuration, "duration of the node leases lull holds (renewed every third of it)")
	fs.DurationVar(&m.DrainTimeout, "drain-timeout", m.DrainTimeout, "how long a blocked drain waits before its escalation applies (per request: spec.drain.timeout)")
	fs.DurationVar(&m.RetryDelay, "eviction-retry-delay", m.RetryDelay, "first delay between eviction rounds; doubles while blocked")
	fs.DurationVar(&m.MaxRetryDelay, "eviction-max-retry-delay", m.MaxRetryDelay, "longest delay between eviction rounds")
	fs.IntVar(&m.Workers, "workers", m.Workers, "how many maintenance requests are reconciled at once (never the same node twice)")
	fs.BoolVar(&m.AllowForce, "allow-force", m.AllowForce, "permit the Force escalation (deleting pods past their PodDisruptionBudget); needs pods/delete RBAC")
	fs.BoolVar(&m.DeleteEmptyDirData, "delete-emptydir-data", m.DeleteEmptyDirData, deleteEmptyDirDataHelp)
	fs.BoolVar(&m.NodeConditions, "node-conditions", m.NodeConditions, "write Kubernetes' node lifecycle conditions (MaintenancePlanned, MaintenanceInProgress, DrainInProgress, Drained; KEP-5683) on the nodes of lull's requests, with reasons starting Lull (docs/interop.md)")
}

// AddPreviewFlags registers the flags with which kubectl-lull's previews
// are told how the drainer is configured, beyond the shared settings:
// --drainer-identity (the drainer's holder family) and
// --delete-emptydir-data (the drainer's), with m's values as defaults.
func (m *Maintenance) AddPreviewFlags(fs *pflag.FlagSet) {
	fs.StringVar(&m.Identity, "drainer-identity", m.Identity, identityFamilyHelp)
	fs.BoolVar(&m.DeleteEmptyDirData, "delete-emptydir-data", m.DeleteEmptyDirData, "the drainer's --delete-emptydir-data: "+deleteEmptyDirDataHelp)
}

// Validate checks what the flags set; each error names its flag.
func (m *Maintenance) Validate() []error {
	var errs field.ErrorList
	for _, msg := range validation.IsDNS1123Label(m.BudgetNamespace) {
		errs = append(errs, field.Invalid(field.NewPath("--budget-namespace"), m.BudgetNamespace, msg))
	}
	for _, msg := range validation.IsDNS1123Label(m.AdmissionNamespace) {
		errs = append(errs, field.Invalid(field.NewPath("--admission-namespace"), m.AdmissionNamespace, msg))
	}
	positive := func(flag string, d time.Duration) {
		if d <= 0 {
			errs = append(errs, field.Invalid(field.NewPath(flag), d.String(), "must be positive"))
		}
	}
	if !lease.FitsALease(m.LeaseDuration) {
		errs = append(errs, field.Invalid(field.NewPath("--lease-duration"), m.LeaseDuration.String(),
			fmt.Sprintf("must be from 1s to %s (a Lease holds whole seconds in an int32)", lease.MaxDuration)))
	}
	positive("--drain-timeout", m.DrainTimeout)
	positive("--eviction-retry-delay", m.RetryDelay)
	positive("--eviction-max-retry-delay", m.MaxRetryDelay)
	if m.MaxRetryDelay < m.RetryDelay {
		errs = append(errs, field.Invalid(field.NewPath("--eviction-max-retry-delay"), m.MaxRetryDelay.String(), "must not be less than --eviction-retry-delay"))
	}
	if m.Workers < 1 {
		errs = append(errs, field.Invalid(field.NewPath("--workers"), m.Workers, "must be at least 1"))
	}
	var out []error
	for _, e := range errs {
		out = append(out, e)
	}
	if err := settings.ValidateAgentNamespace(m.AgentNamespace); err != nil {
		out = append(out, err)
	}
	return out
}
