package cli

import (
	"encoding/json"
	"fmt"
	"io"
	"strings"
	"text/tabwriter"
	"time"

	"k8s.io/apimachinery/pkg/util/duration"
	"sigs.k8s.io/yaml"

	"lull.dev/lull/pkg/plan"
)

// emit prints v as JSON or YAML, or calls table.
func (o *options) emit(v any, table func() error) error {
	switch o.output {
	case "json":
		b, err := json.MarshalIndent(v, "", "  ")
		if err != nil {
			return err
		}
		fmt.Fprintln(o.out, string(b))
		return nil
	case "yaml":
		b, err := yaml.Marshal(v)
		if err != nil {
			return err
		}
		fmt.Fprint(o.out, string(b))
		return nil
	case "table", "":
		return table()
	}
	return fmt.Errorf("unknown output format %q (table, json, yaml)", o.output)
}

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

func table(w io.Writer) *tabwriter.Writer { return tabwriter.NewWriter(w, 0, 4, 2, ' ', 0) }

func renderPlan(w io.Writer, res *plan.Result, showPods bool) error {
	tw := table(w)
	fmt.Fprintln(tw, "NODE\tACTION\tRULE\tSTART\tAT\tWINDOWS\tEVICT\tBLOCKED-BY")
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
		fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%s\t%s\t%d\t%s\n", n.Node, n.Action, n.Rule, n.Start, at, wins, len(n.Evict), dash(strings.Join(blockers, ",")))
	}
	if err := tw.Flush(); err != nil {
		return err
	}
	for _, n := range res.Nodes {
		fmt.Fprintf(w, "\n%s: %s\n", n.Node, describeStart(n, res.At))
		if n.WaitingFor != "" && n.Start != plan.StartNow && n.Start != plan.StartImmediately {
			fmt.Fprintf(w, "  waiting for: %s\n", n.WaitingFor)
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

func renderStatus(w io.Writer, rows []NodeStatus, now time.Time) error {
	if len(rows) == 0 {
		fmt.Fprintln(w, "No node is under maintenance or leased.")
		return nil
	}
	tw := table(w)
	fmt.Fprintln(tw, "NODE\tCLASS\tACTION\tPHASE\tLEASE\tWINDOW\tPODS-LEFT\tBLOCKED-BY\tWAITING-FOR")
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
		fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\n", r.Node, dash(r.Class), dash(string(r.Action)), dash(string(r.Phase)), lease,
			windowCell(r.Windows, now), pods, dash(strings.Join(blockers, ",")), dash(r.WaitingFor))
	}
	return tw.Flush()
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

func renderWhy(w io.Writer, why *Why) error {
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
	tw := table(w)
	fmt.Fprintln(tw, "NODE\tREASON")
	for _, r := range why.Rejected {
		fmt.Fprintf(tw, "%s\t%s\n", r.Node, r.Reason)
	}
	return tw.Flush()
}

func renderWindows(w io.Writer, views []WindowView) error {
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
		if len(v.Periods) == 0 {
			fmt.Fprintln(w, "  no permitted period within the search horizon")
			continue
		}
		tw := table(w)
		fmt.Fprintln(tw, "  START (LOCAL)\tEND (LOCAL)\tSTART (UTC)\tEND (UTC)")
		for _, p := range v.Periods {
			end, localEnd := "-", "-"
			if p.End != nil {
				end, localEnd = p.End.Format(time.RFC3339), p.LocalEnd
			}
			fmt.Fprintf(tw, "  %s\t%s\t%s\t%s\n", p.LocalStart, localEnd, p.Start.Format(time.RFC3339), end)
		}
		if err := tw.Flush(); err != nil {
			return err
		}
	}
	return nil
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
	case plan.StartInProgress:
		return "already in progress"
	case plan.StartNoWindow:
		return "no window opens within the search horizon"
	}
	return strings.ToLower(string(n.Start))
}
