package cli

import (
	"context"
	"fmt"
	"time"

	"github.com/spf13/cobra"
	"github.com/spf13/pflag"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/utils/clock"

	lullv1alpha1 "lull.dev/lull/api/v1alpha1"
	"lull.dev/lull/internal/plan"
)

// This file holds the plan command and the request arguments it shares
// with the request command (nodes, classes, deadline).

// maxClasses is how many classes one request may name (the CRD's
// spec.classes maxItems).
const maxClasses = 16

// addClassFlag adds --class: one class, or several (repeated, or
// comma-separated) whose steps merge into one plan.
func addClassFlag(fs *pflag.FlagSet, classes *[]string, what string) {
	fs.StringSliceVar(classes, "class", nil, what+"; several classes (--class a --class b, or --class a,b) merge into one plan (required)")
}

func newPlanCommand(o *options) *cobra.Command {
	var d drainerFlags
	var ch changeFlags
	var classes []string
	var selector, deadline string
	var showPods bool
	var out *outputFlags
	cmd := &cobra.Command{
		Use:   "plan NODE... | -l SELECTOR (--class CLASS[,CLASS...] | --from OLD --to NEW)",
		Short: "Preview what a maintenance request would do, changing nothing",
		Long: `Preview a maintenance request: for each node, the steps the DisruptionPolicies
choose (Cordon, Drain, DaemonReload, ReloadService, RestartService, Reboot,
PowerOff; or None), merged into one plan when several classes or changes are
given, with the rule that decided each class and each change and the steps a
Reboot or PowerOff makes pointless; when it would start (now,
when lull-agent runs on the node, when a window opens, when the budget frees,
when another lease holder releases the node) and the windows deciding it; the
pods a drain would evict; the PodDisruptionBudgets that would block it now;
and warnings. The preview runs the drainer's own decision code on the
cluster's current state.

With --from and --to, the request is planned from the change itself: the two
node configurations (Ignition configs, MachineConfigs or directory trees) are
compared into a change set (files, units, SSH keys, kernel arguments, OS
image), and each change is decided by the first rule that matches it.`,
		Example: `  kubectl lull plan node-1 node-2 --class kernel-update
  kubectl lull plan node-1 --class ssh-keys,chrony-config,kernel-update
  kubectl lull plan -l pool=general --from rendered-v1.ign --to rendered-v2.ign
  kubectl lull plan -l pool=general --class ssh-keys -o json
  kubectl lull plan -l pool=general --class kernel-update -o custom-columns=NODE:.metadata.name,START:.start,AT:.startAt`,
		RunE: func(cmd *cobra.Command, args []string) error {
			if err := ch.load(); err != nil {
				return err
			}
			req, err := buildRequest(args, selector, classes, ch.changes, deadline, o.clock)
			if err != nil {
				return err
			}
			if err := out.validate(); err != nil {
				return err
			}
			return o.printPlan(cmd.Context(), &d, out, req, showPods)
		},
	}
	addClassFlag(cmd.Flags(), &classes, "maintenance class")
	cmd.Flags().StringVarP(&selector, "selector", "l", "", "label selector of the nodes")
	cmd.Flags().StringVar(&deadline, "deadline", "", "deadline after which windows no longer gate the request: RFC 3339 time or a duration from now (\"6h\")")
	cmd.Flags().BoolVar(&showPods, "show-pods", false, "list the pods each drain would evict")
	ch.add(cmd.Flags(), false)
	d.add(cmd.Flags())
	out = addOutputFlags(cmd)
	return cmd
}

// printPlan previews req and prints the preview.
func (o *options) printPlan(ctx context.Context, d *drainerFlags, out *outputFlags, req plan.Request, showPods bool) error {
	po, c, kube, err := o.connect(d)
	if err != nil {
		return err
	}
	res, err := plan.Preview(ctx, c, kube, po, req)
	if err != nil {
		return err
	}
	obj, err := planObject(res)
	if err != nil {
		return err
	}
	return out.printObj(o.out, obj, func(h humanOptions) error { return renderPlan(o.out, res, showPods, h) })
}

// buildRequest validates the arguments shared by plan and request.
func buildRequest(nodes []string, selector string, classes []string, changes *lullv1alpha1.Changes, deadline string, clk clock.PassiveClock) (plan.Request, error) {
	req := plan.Request{Nodes: nodes, Classes: classes, Changes: changes}
	if len(nodes) == 0 && selector == "" {
		return req, fmt.Errorf("name one or more nodes, or give a label selector (-l)")
	}
	// Classes are checked unless the request is planned from the change
	// alone.
	if len(classes) > 0 || changes == nil {
		if err := validateClasses(classes); err != nil {
			return req, err
		}
	}
	if selector != "" {
		sel, err := labels.Parse(selector)
		if err != nil {
			return req, fmt.Errorf("--selector: %w", err)
		}
		req.Selector = sel
	}
	if deadline != "" {
		t, err := parseDeadline(deadline, clk.Now())
		if err != nil {
			return req, err
		}
		req.Deadline = &t
	}
	return req, nil
}

// validateClasses checks the classes with the admission rules, before a
// preview (which creates nothing the API server could reject): each a
// valid class, none repeated, at most maxClasses.
func validateClasses(classes []string) error {
	if len(classes) == 0 {
		return fmt.Errorf("say what changes: --class (a maintenance class), or --from and --to (two node configurations)")
	}
	if len(classes) > maxClasses {
		return fmt.Errorf("--class: %d classes; a request names at most %d", len(classes), maxClasses)
	}
	seen := map[string]bool{}
	for _, c := range classes {
		if err := lullv1alpha1.ValidateClass(c); err != nil {
			return fmt.Errorf("--class: %w", err)
		}
		if seen[c] {
			return fmt.Errorf("--class: %q is given twice; name each class once", c)
		}
		seen[c] = true
	}
	return nil
}

func parseDeadline(s string, now time.Time) (time.Time, error) {
	if t, err := time.Parse(time.RFC3339, s); err == nil {
		return t, nil
	}
	if d, err := time.ParseDuration(s); err == nil && d > 0 {
		return now.Add(d).UTC().Truncate(time.Second), nil
	}
	return time.Time{}, fmt.Errorf("--deadline %q: give an RFC 3339 time (2026-11-23T06:00:00Z) or a positive duration from now (6h)", s)
}
