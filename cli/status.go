package cli

import (
	"context"
	"fmt"
	"maps"
	"strings"
	"time"

	"github.com/spf13/cobra"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	lullv1alpha1 "lull.dev/lull/api/v1alpha1"
	"lull.dev/lull/internal/budget"
	"lull.dev/lull/internal/capi"
	"lull.dev/lull/internal/plan"
)

// PhaseInvalidLabel is the phase status shows for a node whose maintenance
// label is not a valid class: no NodeMaintenance can exist for it. It is
// not a phase a NodeMaintenance ever has.
const PhaseInvalidLabel lullv1alpha1.MaintenancePhase = "InvalidLabel"

// NodeStatus is one node's maintenance state, as `status` shows it.
type NodeStatus struct {
	Node string `json:"node"`
	// Class is the request's class, or its classes joined by commas;
	// Classes lists them.
	Class   string                        `json:"class,omitempty"`
	Classes []string                      `json:"classes,omitempty"`
	Action  lullv1alpha1.DisruptionAction `json:"action,omitempty"`
	Rule    string                        `json:"rule,omitempty"`
	// Steps is the request's plan (status.decision.steps).
	Steps      []lullv1alpha1.PlannedStep    `json:"steps,omitempty"`
	Phase      lullv1alpha1.MaintenancePhase `json:"phase,omitempty"`
	WaitingFor string                        `json:"waitingFor,omitempty"`
	// Actions are the host steps and how far lull-agent has got with each
	// (status.actions).
	Actions  []lullv1alpha1.ActionStatus `json:"actions,omitempty"`
	Lease    *LeaseState                 `json:"lease,omitempty"`
	Windows  *plan.Windows               `json:"windows,omitempty"`
	Pods     *lullv1alpha1.PodCounts     `json:"pods,omitempty"`
	Blockers []lullv1alpha1.Blocker      `json:"blockers,omitempty"`
	Cordoned bool                        `json:"cordoned"`
	Reason   string                      `json:"reason,omitempty"`
	// Machine is the Cluster API Machine (namespace/name) whose deletion
	// waits for this request (docs/cluster-api.md).
	Machine    string             `json:"machine,omitempty"`
	Conditions []metav1.Condition `json:"-"`
}

// LeaseState is a node's held disruption lease.
type LeaseState struct {
	Holder    string `json:"holder"`
	Operation string `json:"operation,omitempty"`
}

func newStatusCommand(o *options) *cobra.Command {
	var d drainerFlags
	var out *outputFlags
	cmd := &cobra.Command{
		Use:   "status [NODE...]",
		Short: "Show nodes under maintenance or leased: phase, host step, what they wait for, lease, windows, pods, blockers",
		Long: `Without arguments, status shows every node with a maintenance request, a
maintenance label or a disruption lease; with arguments, those nodes.`,
		RunE: func(cmd *cobra.Command, args []string) error {
			if err := out.validate(); err != nil {
				return err
			}
			po, c, _, err := o.connect(&d)
			if err != nil {
				return err
			}
			rows, now, err := loadStatus(cmd.Context(), c, po, args)
			if err != nil {
				return err
			}
			obj, err := statusObject(rows)
			if err != nil {
				return err
			}
			return out.printObj(o.out, obj, func(h humanOptions) error {
				if len(rows) == 0 && h.noHeaders {
					return renderStatus(o.errOut, rows, now, h)
				}
				return renderStatus(o.out, rows, now, h)
			})
		},
	}
	d.add(cmd.Flags())
	out = addOutputFlags(cmd)
	return cmd
}

func loadStatus(ctx context.Context, c client.Reader, po plan.Options, names []string) ([]NodeStatus, time.Time, error) {
	cl, err := plan.Load(ctx, c, po)
	if err != nil {
		return nil, time.Time{}, err
	}
	defer cl.Forecast.Stop()
	var nodes []*corev1.Node
	if len(names) > 0 {
		for _, n := range names {
			node := cl.Node(n)
			if node == nil {
				return nil, time.Time{}, fmt.Errorf("node %q not found", n)
			}
			nodes = append(nodes, node)
		}
	} else {
		snap := cl.Forecast.Snapshot()
		for i := range cl.Nodes {
			n := &cl.Nodes[i]
			_, labelled := n.Labels[cl.Options.MaintenanceLabel]
			if labelled || cl.Requests[n.Name] != nil || snap.Get(n.Name).Leased() {
				nodes = append(nodes, n)
			}
		}
	}
	rows := make([]NodeStatus, 0, len(nodes))
	for _, n := range nodes {
		rows = append(rows, nodeStatus(cl, n))
	}
	return rows, cl.Now, nil
}

func nodeStatus(cl *plan.Cluster, n *corev1.Node) NodeStatus {
	st := NodeStatus{Node: n.Name, Cordoned: n.Spec.Unschedulable}
	fc := cl.Forecast.Compute(n.Name, n.Labels)
	if fc.Leased() {
		st.Lease = &LeaseState{Holder: fc.Lease.Holder, Operation: fc.Lease.Operation}
	}
	classes := []string{"status"}
	if nm := cl.Requests[n.Name]; nm != nil {
		st.Classes = nm.Spec.Classes
		st.Class, st.Phase, st.WaitingFor, st.Reason = strings.Join(st.Classes, ","), nm.Status.Phase.OrPending(), nm.Status.WaitingFor, nm.Spec.Reason
		if st.Class == "" && !nm.Spec.Changes.Empty() {
			// A request planned from a change names no class: say what
			// changes instead.
			st.Class = "changes: " + nm.Spec.Changes.Summary()
		}
		st.Pods, st.Blockers, st.Actions = nm.Status.Pods, nm.Status.Blockers, nm.Status.Actions
		st.Machine = nm.Annotations[capi.MachineAnnotation]
		if d := nm.Status.Decision; d != nil {
			st.Action, st.Rule, st.Steps = d.Action, d.RuleRef(), d.Steps
		}
		classes = st.Classes
		if nm.Status.Phase == lullv1alpha1.PhaseWaitingForBudget {
			// The stored message counts the holders (naming them would go
			// stale each time a slot changes hands); name them as they are now.
			st.WaitingFor = budget.WithHolders(st.WaitingFor, budget.Holders(budget.Recorded(&nm.Status), maps.Values(cl.Requests)))
		}
		if msg := relabelRefused(nm, n, cl.Options.MaintenanceLabel); msg != "" {
			st.WaitingFor = strings.TrimPrefix(st.WaitingFor+"; "+msg, "; ")
		}
	} else if v, ok := n.Labels[cl.Options.MaintenanceLabel]; ok {
		st.Class, st.Phase, st.WaitingFor = v, lullv1alpha1.PhasePending, "the drainer has not picked up the label yet"
		if err := lullv1alpha1.ValidateClass(v); err != nil {
			st.Phase = PhaseInvalidLabel
			st.WaitingFor = fmt.Sprintf("nothing: the drainer refuses the label (event InvalidMaintenanceLabel): %v; correct or remove the label", err)
		} else {
			st.Classes, classes = []string{v}, []string{v}
		}
	}
	st.Windows, _ = cl.WindowsOf(n, classes...)
	return st
}

// relabelRefused says why a label request that has not started does not
// move: its label was changed to an invalid class, which the drainer
// cannot apply to the request (it reports InvalidMaintenanceLabel and
// goes no further until the label is corrected or removed).
func relabelRefused(nm *lullv1alpha1.NodeMaintenance, n *corev1.Node, labelKey string) string {
	v, labelled := n.Labels[labelKey]
	if nm.FollowLabel(v, labelled) != lullv1alpha1.LabelReclassed {
		return ""
	}
	if err := lullv1alpha1.ValidateClass(v); err != nil {
		return fmt.Sprintf("held: the drainer refuses the label's new class (event InvalidMaintenanceLabel): %v; correct or remove the label", err)
	}
	return ""
}
