package settings

import (
	"fmt"
	"slices"

	"github.com/spf13/pflag"
	"k8s.io/apimachinery/pkg/util/validation"
	"k8s.io/apimachinery/pkg/util/validation/field"
)

// agree ends a setting's help: which components must be given the same.
func agree(n Name) string {
	return fmt.Sprintf("; lull-scheduler (NodeDisruption argument %s), lull-drainer and kubectl-lull must agree", n.Arg)
}

// AddFlags sets s to the defaults and registers a flag for each setting
// except those named in omit (settings a binary has no use for, which keep
// their defaults). Every binary calls it, so the flags have the same names,
// defaults and help everywhere. Call Validate after parsing.
func (s *Settings) AddFlags(fs *pflag.FlagSet, omit ...Name) {
	d := Defaults()
	*s = d
	add := func(n Name) bool { return !slices.Contains(omit, n) }
	if add(MaintenanceLabelName) {
		fs.StringVar(&s.MaintenanceLabel, MaintenanceLabelName.Flag, d.MaintenanceLabel,
			"the node label that requests maintenance (its value is the class)"+agree(MaintenanceLabelName))
	}
	if add(TolerationKeyName) {
		fs.StringVar(&s.TolerationKey, TolerationKeyName.Flag, d.TolerationKey,
			"the toleration key with which a pod says it does not mind its node being disrupted; lull-scheduler (NodeDisruption argument tolerationKey) and kubectl-lull must agree (lull-drainer does not read it)")
	}
	if add(LeaseNamespaceName) {
		fs.StringVar(&s.LeaseNamespace, LeaseNamespaceName.Flag, d.LeaseNamespace,
			"namespace of the node disruption leases"+agree(LeaseNamespaceName))
	}
	if add(NodesWithoutWindowName) {
		fs.StringVar((*string)(&s.NodesWithoutWindow), NodesWithoutWindowName.Flag, string(d.NodesWithoutWindow),
			"Permissive or Restrictive: whether maintenance of a node that no MaintenanceWindow selects may start at any time or never"+agree(NodesWithoutWindowName))
	}
	if add(DefaultMaxUnavailableName) {
		fs.IntVar(&s.DefaultMaxUnavailable, DefaultMaxUnavailableName.Flag, d.DefaultMaxUnavailable,
			"how many nodes no MaintenanceWindow selects may be disrupted at once; lull-drainer and kubectl-lull must agree (lull-scheduler counts no budgets)")
	}
	if add(WindowHorizonName) {
		fs.DurationVar(&s.WindowHorizon, WindowHorizonName.Flag, d.WindowHorizon,
			"how far ahead to search for a node's next maintenance window"+agree(WindowHorizonName))
	}
}

// AgentNamespaceFlag names the flag of the namespace of lull-agent's
// leases. It is not a Setting (lull-scheduler reads no agent leases), but
// lull-drainer and kubectl-lull must agree on it, so both register it with
// AddAgentNamespaceFlag: the same name, default and help.
const AgentNamespaceFlag = "agent-namespace"

// AddAgentNamespaceFlag registers --agent-namespace, defaulting to
// lull's namespace (Namespace), into ns. Check it with
// ValidateAgentNamespace after parsing.
func AddAgentNamespaceFlag(fs *pflag.FlagSet, ns *string) {
	fs.StringVar(ns, AgentNamespaceFlag, Namespace,
		"namespace of lull-agent's leases (one per node it runs on); lull-agent (its --namespace), lull-drainer and kubectl-lull must agree")
}

// ValidateAgentNamespace checks the --agent-namespace flag's value; the
// error names the flag.
func ValidateAgentNamespace(ns string) error {
	var errs field.ErrorList
	for _, msg := range validation.IsDNS1123Label(ns) {
		errs = append(errs, field.Invalid(field.NewPath("--"+AgentNamespaceFlag), ns, msg))
	}
	if len(errs) > 0 {
		return fmt.Errorf("invalid settings: %w", errs.ToAggregate())
	}
	return nil
}
