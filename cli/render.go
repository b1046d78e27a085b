package cli

import (
	"fmt"
	"io"
	"strings"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/duration"

	lullv1alpha1 "lull.dev/lull/api/v1alpha1"
	"lull.dev/lull/internal/budget"
	"lull.dev/lull/internal/plan"
	"lull.dev/lull/internal/policy"
)

// stamp is a time in UTC with how far it is from now ("in 2h", "3m ago").
func stamp(t, now time.Time) string {
	s := t.UTC().Format(time.RFC3339)
	switch d := t.Sub(now); {
	case d > 0:
		return s + " (in " + duration.HumanDuration(d) + ")"
	case d < 0:
		return s + " (" + duration.HumanDuration(-d) + " ago)"
	}
	return s + " (now)"
}

// renderPlan prints the plan's table and, below it, each node's notes.
func renderPlan(w io.Writer, res *plan.Result, showPods bool, h humanOptions) error {
	if err := printTable(w, planTable(res), h); err != nil {
		return err
	}
	if h.noHeaders {
		return nil
	}
	writeChanges(w, res.Changes, changesOf(res))
	for _, n := range res.Nodes {
		fmt.Fprintf(w, "\n%s: %s\n", n.Node, describeStart(n, res.At))
		writeWhy(w, n.Classes, n.Steps)
		if n.WaitingFor != "" && n.Start != plan.StartNow && n.Start != plan.StartImmediately {
			fmt.Fprintf(w, "  waiting for: %s\n", budget.WithHolders(n.WaitingFor, n.HeldBy))
		}
		if n.DrainEstimate.Duration > 0 {
			fmt.Fprintf(w, "  drain estimate: %s (%s), if nothing blocks\n", n.DrainEstimate.Duration, n.DrainEstimateBasis)
		}
		for _, b := range n.Blockers {
			fmt.Fprintf(w, "  blocked by PodDisruptionBudget %s: %s\n", b.PodDisruptionBudget, strings.Join(b.Pods, ", "))
		}
		if showPods {
			for _, p := range n.Evict {
				fmt.Fprintf(w, "  evict %s\n", p)
			}
		}
		for _, warn := range n.Warnings {
			fmt.Fprintf(w, "  warning: %s\n", warn)
		}
	}
	return nil
}

// writeWhy explains a plan in the notes below the table: per class, the
// rule that decided it and the steps that rule gives; then the steps a
// Reboot or PowerOff makes pointless.
func writeWhy(w io.Writer, classes []lullv1alpha1.ClassDecision, steps []lullv1alpha1.PlannedStep) {
	for _, c := range classes {
		fmt.Fprintf(w, "  class %s (rule %s): %s\n", c.Class, c.RuleRef(), listOr(c.Steps, "nothing"))
	}
	for _, line := range coveredLines(steps) {
		fmt.Fprintf(w, "  %s\n", line)
	}
}

// coveredLines says which steps each step of the plan makes pointless:
// "RestartService chronyd (chrony-config) covered by Reboot".
func coveredLines(steps []lullv1alpha1.PlannedStep) []string {
	var out []string
	for _, st := range steps {
		for _, c := range st.Covers {
			out = append(out, c+" covered by "+lullv1alpha1.StepLabel(st.Type, st.Unit))
		}
	}
	return out
}

func listOr(items []string, none string) string {
	if len(items) == 0 {
		return none
	}
	return strings.Join(items, ", ")
}

// stepsCell is a plan in a table cell: "Cordon,Drain,Reboot", a service
// restart as "RestartService:chronyd" (no spaces in a cell); "-" when the
// plan has no steps.
func stepsCell(steps []lullv1alpha1.PlannedStep) string {
	parts := make([]string, len(steps))
	for i, st := range steps {
		parts[i] = string(st.Type)
		if st.Unit != "" {
			parts[i] += ":" + st.Unit
		}
	}
	return dash(strings.Join(parts, ","))
}

// describeRequest is what `request` prints for a node it requested: the
// action and its rule, the merged steps, when it starts, and (on lines of
// their own) the steps the plan's Reboot or PowerOff covers.
func describeRequest(n plan.Node, now time.Time) string {
	what := fmt.Sprintf("%s (rule %s)", n.Action, n.Rule)
	if len(n.Steps) > 0 {
		what += ": " + policy.StepsLine(n.Steps)
	}
	what += "; " + describeStart(n, now) + "\n"
	for _, line := range coveredLines(n.Steps) {
		what += "  " + line + "\n"
	}
	return what
}

// planTable is a row per node: what, when, which windows, how many pods,
// which budgets block now; -o wide adds the drain estimate and what the
// node waits for.
func planTable(res *plan.Result) *metav1.Table {
	t := newTable("NODE", "ACTION", "STEPS", "RULE", "START", "AT", "WINDOWS", "EVICT", "BLOCKED-BY", "+DRAIN-ESTIMATE", "+WAITING-FOR")
	for _, n := range res.Nodes {
		at := "-"
		if n.StartAt != nil {
			at = stamp(*n.StartAt, res.At)
		}
		wins := "-"
		if n.Windows != nil && len(n.Windows.Names) > 0 {
			wins = strings.Join(n.Windows.Names, ",")
		} else if n.Windows != nil {
			wins = "(none)"
		}
		var blockers []string
		for _, b := range n.Blockers {
			blockers = append(blockers, fmt.Sprintf("%s(%d)", b.PodDisruptionBudget, len(b.Pods)))
		}
		estimate := "-"
		if n.DrainEstimate.Duration > 0 {
			estimate = n.DrainEstimate.Duration.String()
		}
		addRow(t, n.Node, string(n.Action), stepsCell(n.Steps), n.Rule, string(n.Start), at, wins, fmt.Sprint(len(n.Evict)),
			dash(strings.Join(blockers, ",")), estimate, dash(budget.WithHolders(n.WaitingFor, n.HeldBy)))
	}
	return t
}

// renderStatus prints a row per node; -o wide adds the rule, the plan's
// steps, whether the node is cordoned and the request's reason.
func renderStatus(w io.Writer, rows []NodeStatus, now time.Time, h humanOptions) error {
	if len(rows) == 0 {
		fmt.Fprintln(w, "No node is under maintenance or leased.")
		return nil
	}
	t := newTable("NODE", "CLASS", "ACTION", "PHASE", "STEP", "LEASE", "WINDOW", "PODS-LEFT", "BLOCKED-BY", "WAITING-FOR", "+RULE", "+STEPS", "+CORDONED", "+REASON")
	for _, r := range rows {
		lease := "-"
		if r.Lease != nil {
			lease = r.Lease.Holder
			if r.Lease.Operation != "" {
				lease += "/" + r.Lease.Operation
			}
		}
		pods := "-"
		if r.Pods != nil {
			pods = fmt.Sprintf("%d/%d", r.Pods.Pending, r.Pods.Total)
		}
		var blockers []string
		for _, b := range r.Blockers {
			blockers = append(blockers, fmt.Sprintf("%s(%d) since %s", b.PodDisruptionBudget, len(b.Pods), duration.HumanDuration(now.Sub(b.Since.Time))))
		}
		addRow(t, r.Node, dash(r.Class), dash(string(r.Action)), dash(string(r.Phase)), stepCell(r, now), lease, windowCell(r.Windows, now), pods,
			dash(strings.Join(blockers, ",")), dash(r.WaitingFor), dash(r.Rule), stepsCell(r.Steps), fmt.Sprint(r.Cordoned), dash(r.Reason))
	}
	return printTable(w, t, h)
}

// stepCell is the host step a request is at while lull-agent has, or
// waits to be given, the node (phases WaitingForAgent, Acting and
// PoweredOff): its place among the host steps, what it is, and its state,
// "2/3 Reboot (Running, 2m)"; "-" in any other phase.
func stepCell(r NodeStatus, now time.Time) string {
	if !r.Phase.WithAgent() {
		return "-"
	}
	as := r.Actions
	if len(as) == 0 {
		// Not handed to lull-agent yet: the plan's host steps, none started.
		for _, st := range r.Steps {
			if st.Type.HostStep() {
				as = append(as, lullv1alpha1.ActionStatus{Type: st.Type, Unit: st.Unit, State: lullv1alpha1.ActionPending})
			}
		}
	}
	if len(as) == 0 {
		return "-"
	}
	i := lullv1alpha1.NextAction(as)
	if i < 0 {
		i = len(as) - 1 // all done: the last
	}
	a := as[i]
	state := string(a.State)
	switch {
	case a.State == lullv1alpha1.ActionRunning && a.StartedAt != nil:
		state += ", " + duration.HumanDuration(now.Sub(a.StartedAt.Time))
	case a.State.Done() && a.FinishedAt != nil:
		state += ", " + duration.HumanDuration(now.Sub(a.FinishedAt.Time)) + " ago"
	}
	if a.Fallback {
		state = "fallback; " + state
	}
	return fmt.Sprintf("%d/%d %s (%s)", i+1, len(as), a.Label(), state)
}

// windowCell is "open until T", "closed; opens T" or "-".
func windowCell(ws *plan.Windows, now time.Time) string {
	if ws == nil {
		return "-"
	}
	name := "default"
	if len(ws.Names) > 0 {
		name = strings.Join(ws.Names, ",")
	}
	switch {
	case ws.Permitted && ws.NextEnd != nil:
		return fmt.Sprintf("%s open until %s", name, ws.NextEnd.UTC().Format(time.RFC3339))
	case ws.Permitted:
		return name + " open"
	case ws.NextStart != nil:
		return fmt.Sprintf("%s closed; opens %s", name, stamp(*ws.NextStart, now))
	}
	return name + " closed"
}

func renderWhy(w io.Writer, why *Why, h humanOptions) error {
	fmt.Fprintf(w, "Pod %s (scheduler %s)", why.Pod, dash(why.SchedulerName))
	if why.NodeName != "" {
		fmt.Fprintf(w, " is bound to node %s", why.NodeName)
	}
	fmt.Fprintln(w)
	if why.Scheduler != "" {
		fmt.Fprintf(w, "Scheduler: %s\n", why.Scheduler)
	}
	if why.Tolerates {
		fmt.Fprintln(w, "The pod tolerates lull.dev/disruption: lull-scheduler's NodeDisruption plugin rejects no node for it.")
		return nil
	}
	if len(why.Rejected) == 0 {
		fmt.Fprintf(w, "NodeDisruption rejects none of the %d node(s) now.\n", why.Nodes)
		return nil
	}
	fmt.Fprintf(w, "NodeDisruption rejects %d of %d node(s) now:\n", len(why.Rejected), why.Nodes)
	t := newTable("NODE", "REASON")
	for _, r := range why.Rejected {
		addRow(t, r.Node, r.Reason)
	}
	return printTable(w, t, h)
}

// renderWindows prints each window's state and its next periods.
func renderWindows(w io.Writer, views []WindowView, h humanOptions) error {
	if len(views) == 0 {
		fmt.Fprintln(w, "No MaintenanceWindow exists: the drainer's --nodes-without-window decides for every node.")
		return nil
	}
	for i, v := range views {
		if i > 0 {
			fmt.Fprintln(w)
		}
		state := "closed"
		if v.Permitted {
			state = "open"
		}
		fmt.Fprintf(w, "%s (%s, %s): %s; %d node(s), at most %d disrupted at once\n", v.Name, v.Strategy, v.TimeZone, state, v.Nodes, v.MaxUnavailable)
		fmt.Fprintf(w, "  %s\n", v.Message)
		for _, g := range v.Gates {
			state := "passes"
			if g.Holds {
				state = "HOLDS (" + g.Reason + ")"
			}
			fmt.Fprintf(w, "  gate %s %s: %s\n", g.Gate, state, g.Message)
		}
		switch {
		case len(v.Periods) == 0 && v.Ended:
			fmt.Fprintln(w, "  no permitted period: the recurrence has ended")
			continue
		case len(v.Periods) == 0:
			fmt.Fprintln(w, "  no permitted period within the search horizon")
			continue
		}
		if err := printTable(w, periodTable(v.Periods), h); err != nil {
			return err
		}
	}
	return nil
}

// periodTable lists a window's next periods; -o wide adds their length.
func periodTable(periods []Period) *metav1.Table {
	t := newTable("  START (LOCAL)", "END (LOCAL)", "START (UTC)", "END (UTC)", "+LENGTH")
	for _, p := range periods {
		end, localEnd, length := "-", "-", "unbounded"
		if p.End != nil {
			end, localEnd, length = p.End.Format(time.RFC3339), p.LocalEnd, p.End.Sub(p.Start).String()
		}
		addRow(t, "  "+p.LocalStart, localEnd, p.Start.Format(time.RFC3339), end, length)
	}
	return t
}

// describeStart says in words when a planned node starts.
func describeStart(n plan.Node, now time.Time) string {
	switch n.Start {
	case plan.StartImmediately:
		return "completes at once (nothing disruptive)"
	case plan.StartNow:
		return "starts now"
	case plan.StartWindow:
		if n.StartAt != nil {
			return "starts when a window opens at " + stamp(*n.StartAt, now)
		}
		return "waits for its window"
	case plan.StartBudget:
		return "starts when the window's disruption budget frees"
	case plan.StartHolder:
		return fmt.Sprintf("starts when %s releases the node's lease", n.LeaseHolder)
	case plan.StartAgent:
		return "starts when lull-agent runs on the node"
	case plan.StartGates:
		return "starts when the health gates of its windows pass"
	case plan.StartInProgress:
		return "already in progress"
	case plan.StartNoWindow:
		return "no window opens within the search horizon"
	}
	return strings.ToLower(string(n.Start))
}
