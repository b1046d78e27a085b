package cli

import (
	"context"
	"fmt"
	"maps"
	"sort"
	"strings"
	"time"

	"github.com/spf13/cobra"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"

	lullv1alpha1 "lull.dev/lull/api/v1alpha1"
	"lull.dev/lull/pkg/budget"
	"lull.dev/lull/pkg/forecast"
	"lull.dev/lull/pkg/gate"
	"lull.dev/lull/pkg/plan"
	"lull.dev/lull/pkg/window"
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
	Actions    []lullv1alpha1.ActionStatus `json:"actions,omitempty"`
	Lease      *LeaseState                 `json:"lease,omitempty"`
	Windows    *plan.Windows               `json:"windows,omitempty"`
	Pods       *lullv1alpha1.PodCounts     `json:"pods,omitempty"`
	Blockers   []lullv1alpha1.Blocker      `json:"blockers,omitempty"`
	Cordoned   bool                        `json:"cordoned"`
	Reason     string                      `json:"reason,omitempty"`
	Conditions []metav1.Condition          `json:"-"`
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
		st.Classes = nm.Spec.AllClasses()
		st.Class, st.Phase, st.WaitingFor, st.Reason = strings.Join(st.Classes, ","), nm.Status.Phase.OrPending(), nm.Status.WaitingFor, nm.Spec.Reason
		if st.Class == "" && !nm.Spec.Changes.Empty() {
			// A request planned from a change names no class: say what
			// changes instead.
			st.Class = "changes: " + nm.Spec.Changes.Summary()
		}
		st.Pods, st.Blockers, st.Actions = nm.Status.Pods, nm.Status.Blockers, nm.Status.Actions
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

func newWhyCommand(o *options) *cobra.Command {
	var d drainerFlags
	var filterOutside bool
	var out *outputFlags
	cmd := &cobra.Command{
		Use:   "why POD",
		Short: "Explain which nodes lull-scheduler's NodeDisruption rejects for a pod, and why",
		Long: `For a pod scheduled by lull-scheduler, why lists the nodes the NodeDisruption
plugin rejects now (leased, under maintenance, or requested with an open
window) with the reason, next to what the scheduler last reported.`,
		Args: cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			if err := out.validate(); err != nil {
				return err
			}
			po, c, _, err := o.connect(&d)
			if err != nil {
				return err
			}
			ns, _, err := o.flags.ToRawKubeConfigLoader().Namespace()
			if err != nil {
				return err
			}
			var pod corev1.Pod
			if err := c.Get(cmd.Context(), client.ObjectKey{Namespace: ns, Name: args[0]}, &pod); err != nil {
				return err
			}
			cl, err := plan.Load(cmd.Context(), c, po)
			if err != nil {
				return err
			}
			defer cl.Forecast.Stop()
			w := explain(cl, &pod, filterOutside)
			obj, err := whyObject(w, pod.Namespace, pod.Name)
			if err != nil {
				return err
			}
			return out.printObj(o.out, obj, func(h humanOptions) error { return renderWhy(o.out, w, h) })
		},
	}
	cmd.Flags().BoolVar(&filterOutside, "filter-requested-outside-window", false, "lull-scheduler's filterRequestedOutsideWindow argument")
	d.add(cmd.Flags())
	out = addOutputFlags(cmd)
	return cmd
}

// Why is the explanation for one pod.
type Why struct {
	Pod           string `json:"pod"`
	SchedulerName string `json:"schedulerName"`
	NodeName      string `json:"nodeName,omitempty"`
	// Scheduler is the scheduler's last PodScheduled message.
	Scheduler string `json:"scheduler,omitempty"`
	// Tolerates: the pod tolerates disruption; lull rejects no node.
	Tolerates bool        `json:"tolerates"`
	Nodes     int         `json:"nodes"`
	Rejected  []Rejection `json:"rejected"`
}

// Rejection is a node lull rejects and why.
type Rejection struct {
	Node   string `json:"node"`
	Reason string `json:"reason"`
}

func explain(cl *plan.Cluster, pod *corev1.Pod, filterOutside bool) *Why {
	w := &Why{Pod: pod.Namespace + "/" + pod.Name, SchedulerName: pod.Spec.SchedulerName, NodeName: pod.Spec.NodeName,
		Nodes: len(cl.Nodes), Rejected: []Rejection{}}
	for _, c := range pod.Status.Conditions {
		if c.Type == corev1.PodScheduled && c.Status != corev1.ConditionTrue {
			w.Scheduler = c.Message
		}
	}
	if forecast.Tolerates(pod, cl.Options.TolerationKey) {
		w.Tolerates = true
		return w
	}
	for i := range cl.Nodes {
		n := &cl.Nodes[i]
		if reason, blocked := forecast.Blocks(cl.Forecast.Compute(n.Name, n.Labels), filterOutside); blocked {
			w.Rejected = append(w.Rejected, Rejection{Node: n.Name, Reason: reason})
		}
	}
	return w
}

func newWindowsCommand(o *options) *cobra.Command {
	var count int
	var out *outputFlags
	cmd := &cobra.Command{
		Use:   "windows [NAME]",
		Short: "Show MaintenanceWindows: open or closed now, and the next periods in local time and UTC",
		Args:  cobra.MaximumNArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			if count < 1 {
				return fmt.Errorf("--count %d: show at least 1 period", count)
			}
			if err := out.validate(); err != nil {
				return err
			}
			c, _, err := o.clients()
			if err != nil {
				return err
			}
			var list lullv1alpha1.MaintenanceWindowList
			if err := c.List(cmd.Context(), &list); err != nil {
				return err
			}
			var nodes corev1.NodeList
			if err := c.List(cmd.Context(), &nodes); err != nil {
				return err
			}
			var ws []lullv1alpha1.MaintenanceWindow
			for _, w := range list.Items {
				if len(args) == 0 || w.Name == args[0] {
					ws = append(ws, w)
				}
			}
			if len(args) == 1 && len(ws) == 0 {
				return fmt.Errorf("MaintenanceWindow %q not found", args[0])
			}
			views := windowViews(ws, nodes.Items, o.clock.Now(), count)
			obj, err := windowsObject(views, len(args) == 1)
			if err != nil {
				return err
			}
			return out.printObj(o.out, obj, func(h humanOptions) error { return renderWindows(o.out, views, h) })
		},
	}
	cmd.Flags().IntVar(&count, "count", 3, "how many upcoming periods to show per window")
	out = addOutputFlags(cmd)
	return cmd
}

// WindowView is a window's state and next periods.
type WindowView struct {
	Name           string   `json:"name"`
	Strategy       string   `json:"strategy"`
	TimeZone       string   `json:"timeZone"`
	Permitted      bool     `json:"permitted"`
	Message        string   `json:"message"`
	Ended          bool     `json:"ended,omitempty"` // its RRULE (COUNT or UNTIL) has ended: no period follows
	Nodes          int      `json:"nodes"`
	MaxUnavailable int      `json:"maxUnavailable"`
	Periods        []Period `json:"periods"`
	// Gates are the window's health gates and what they say now.
	Gates []GateView `json:"gates,omitempty"`
}

// GateView is one health gate of a window.
type GateView struct {
	Gate    string `json:"gate"`
	Holds   bool   `json:"holds"`
	Reason  string `json:"reason,omitempty"`
	Message string `json:"message"`
}

// gateViews says what a window's gates say: the alerts gate as the drainer
// judges it from the window's status (pkg/gate), the recovery gate as the
// drainer last recorded it; blocking pods are judged node by node.
func gateViews(mw *lullv1alpha1.MaintenanceWindow, now time.Time) []GateView {
	g := mw.Spec.Gates
	if g == nil {
		return nil
	}
	var out []GateView
	if g.Alerts != nil {
		v := gate.Alerts(mw, now)
		out = append(out, GateView{Gate: "alerts", Holds: v.Hold, Reason: v.Reason, Message: v.Message})
	}
	if n := len(g.BlockingPods); n > 0 {
		sels := make([]string, n)
		for i := range g.BlockingPods {
			sels[i] = metav1.FormatLabelSelector(&g.BlockingPods[i])
		}
		out = append(out, GateView{Gate: "blockingPods", Message: "a node does not start while pods matching " + strings.Join(sels, " or ") + " run on it"})
	}
	if g.Recovery != nil {
		v := GateView{Gate: "recovery", Holds: true, Reason: gate.ReasonUnknown, Message: "lull-drainer has not judged it yet"}
		if c := meta.FindStatusCondition(mw.Status.Conditions, lullv1alpha1.WindowConditionRecovered); c != nil && c.ObservedGeneration == mw.Generation {
			v.Holds, v.Reason, v.Message = c.Status != metav1.ConditionTrue, c.Reason, c.Message
		}
		out = append(out, v)
	}
	return out
}

// Period is a permitted period, in the window's zone and in UTC.
type Period struct {
	Start      time.Time  `json:"start"`
	End        *time.Time `json:"end,omitempty"`
	LocalStart string     `json:"localStart"`
	LocalEnd   string     `json:"localEnd,omitempty"`
}

func windowViews(ws []lullv1alpha1.MaintenanceWindow, nodes []corev1.Node, now time.Time, count int) []WindowView {
	sort.Slice(ws, func(i, j int) bool { return ws[i].Name < ws[j].Name })
	out := make([]WindowView, 0, len(ws))
	for i := range ws {
		mw := &ws[i]
		v := WindowView{Name: mw.Name, Strategy: string(mw.Spec.Strategy), TimeZone: "UTC", Periods: []Period{}}
		if v.Strategy == "" {
			v.Strategy = string(lullv1alpha1.StrategySchedule)
		}
		if s := mw.Spec.Schedule; s != nil && s.TimeZone != "" {
			v.TimeZone = s.TimeZone
		}
		loc, err := time.LoadLocation(v.TimeZone)
		if err != nil {
			loc = time.UTC
		}
		compiled := window.CompileOrInvalid(&mw.Spec, window.Options{})
		r := compiled.Evaluate(now)
		v.Permitted, v.Message, v.Ended = r.Permitted, r.Message(), r.Ended
		sel := budget.WindowSelector(mw)
		for j := range nodes {
			if sel.Matches(labels.Set(nodes[j].Labels)) {
				v.Nodes++
			}
		}
		v.MaxUnavailable, _ = budget.MaxUnavailable(mw, v.Nodes)
		v.Gates = gateViews(mw, now)
		for j, iv := range compiled.Upcoming(now, count) {
			if j == 0 && iv.Start.Equal(r.Next.Start) {
				iv.Start = r.ShownStart(&mw.Status, mw.Generation) // stable for an always-open window
			}
			p := Period{Start: iv.Start.UTC(), LocalStart: iv.Start.In(loc).Format("Mon 2006-01-02 15:04 MST")}
			if !iv.Unbounded() {
				p.End = ptr.To(iv.End.UTC())
				p.LocalEnd = iv.End.In(loc).Format("Mon 2006-01-02 15:04 MST")
			}
			v.Periods = append(v.Periods, p)
		}
		out = append(out, v)
	}
	return out
}
