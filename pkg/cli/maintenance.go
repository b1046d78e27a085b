package cli

import (
	"context"
	"fmt"
	"sort"
	"strings"
	"time"

	"github.com/spf13/cobra"
	"github.com/spf13/pflag"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/client-go/kubernetes"
	"k8s.io/utils/clock"
	"sigs.k8s.io/controller-runtime/pkg/client"

	lullv1alpha1 "lull.dev/lull/api/v1alpha1"
	"lull.dev/lull/lease"
	"lull.dev/lull/pkg/plan"
	"lull.dev/lull/pkg/scheme"
)

// ExitNeedsForce: `request` found a node leased by another actor or
// already under maintenance, and --force was not given. Nothing changed.
const ExitNeedsForce = 4

// drainerFlags are the drainer flags besides the shared settings (global
// flags) that a preview must share with the drainer to predict what it
// does: pkg/options declares them with the drainer's.
type drainerFlags struct {
	plan.Options
}

func (d *drainerFlags) add(fs *pflag.FlagSet) {
	d.Options = plan.DefaultOptions()
	d.AddPreviewFlags(fs)
}

func (o *options) planOptions(d *drainerFlags) plan.Options {
	po := d.Options
	po.Maintenance.Default()
	po.Settings = o.settings
	po.LeaseNamespace = o.namespace()
	if o.agentNamespace != "" {
		po.AgentNamespace = o.agentNamespace
	}
	po.Clock = o.clock
	return po
}

func (o *options) namespace() string {
	if o.medik8s {
		return lease.Medik8sNamespace
	}
	return o.settings.LeaseNamespace
}

// connect returns the preview options and the clients of a verb that
// decides like the drainer.
func (o *options) connect(d *drainerFlags) (plan.Options, client.Client, kubernetes.Interface, error) {
	c, kube, err := o.clients()
	return o.planOptions(d), c, kube, err
}

// clients returns a client for lull's objects and the built-in ones, and a
// clientset for pods (the drain library).
func (o *options) clients() (client.Client, kubernetes.Interface, error) {
	cfg, err := o.restConfig()
	if err != nil {
		return nil, nil, err
	}
	c, err := client.New(cfg, client.Options{Scheme: scheme.New()})
	if err != nil {
		return nil, nil, fmt.Errorf("creating a Kubernetes client: %w", err)
	}
	kube, err := kubernetes.NewForConfig(cfg)
	if err != nil {
		return nil, nil, fmt.Errorf("creating a Kubernetes client: %w", err)
	}
	return c, kube, nil
}

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
			po, c, kube, err := o.connect(&d)
			if err != nil {
				return err
			}
			res, err := plan.Preview(cmd.Context(), c, kube, po, req)
			if err != nil {
				return err
			}
			obj, err := planObject(res)
			if err != nil {
				return err
			}
			return out.printObj(o.out, obj, func(h humanOptions) error { return renderPlan(o.out, res, showPods, h) })
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

// buildRequest validates the arguments shared by plan and request.
func buildRequest(nodes []string, selector string, classes []string, changes *lullv1alpha1.Changes, deadline string, clk clock.PassiveClock) (plan.Request, error) {
	req := plan.Request{Nodes: nodes, Classes: classes, Changes: changes}
	if len(nodes) == 0 && selector == "" {
		return req, fmt.Errorf("name one or more nodes, or give a label selector (-l)")
	}
	if len(classes) == 0 && changes != nil {
		// Planned from the change alone.
	} else if err := validateClasses(classes); err != nil {
		return req, err
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

func newRequestCommand(o *options) *cobra.Command {
	var d drainerFlags
	var ch changeFlags
	var classes []string
	var reason, deadline string
	var force bool
	cmd := &cobra.Command{
		Use:   "request NODE... (--class CLASS[,CLASS...] | --from OLD --to NEW [--write]) --reason REASON",
		Short: "Request maintenance of nodes (a NodeMaintenance each)",
		Long: `Request maintenance: creates a NodeMaintenance per node, with spec.class for one
class or spec.classes for several (their steps merge into one plan), and with
--from and --to, spec.changes: what changes between two node configurations
(Ignition configs, MachineConfigs or directory trees), each change decided by
the first DisruptionPolicy rule that matches it. With --write, the changed files
go into a NodeConfig (namespace lull-configs) that lull-agent writes on each
node under its lease, after checking each file still has its old content, and
before the plan's host steps (docs/actions.md, "The write phase"). The request
is previewed first; when a node is leased by another actor or already under
maintenance, nothing is created and the command exits 4 unless --force is given
(with --force, an existing request is updated to the new classes, reason and
deadline). Other findings (a window shorter than the drain estimate,
PodDisruptionBudgets that block now) are printed as warnings.`,
		Example: `  kubectl lull request node-1 --class kernel-update --reason "CVE-2026-1234"
  kubectl lull request node-1 --class chrony-config --class kernel-update --reason "CVE-2026-1234, new NTP servers"
  kubectl lull request node-1 node-2 --class hardware --reason "disk" --deadline 24h
  kubectl lull request node-1 node-2 --from old/ --to new/ --write --reason "new NTP servers"`,
		Args: cobra.MinimumNArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			if strings.TrimSpace(reason) == "" {
				return fmt.Errorf("--reason is required: say why, for the people who will find the request")
			}
			if err := ch.load(); err != nil {
				return err
			}
			req, err := buildRequest(args, "", classes, ch.changes, deadline, o.clock)
			if err != nil {
				return err
			}
			po, c, kube, err := o.connect(&d)
			if err != nil {
				return err
			}
			ctx := cmd.Context()
			cl, err := plan.Load(ctx, c, po)
			if err != nil {
				return err
			}
			defer cl.Forecast.Stop()
			res, err := cl.Preview(ctx, c, kube, req)
			if err != nil {
				return err
			}
			return o.requestAll(ctx, c, cl, res, req, reason, force, &ch)
		},
	}
	addClassFlag(cmd.Flags(), &classes, "maintenance class, e.g. kernel-update")
	cmd.Flags().StringVar(&reason, "reason", "", "why, for people (required)")
	cmd.Flags().StringVar(&deadline, "deadline", "", "deadline after which windows no longer gate the request: RFC 3339 time or a duration from now (\"6h\")")
	cmd.Flags().BoolVar(&force, "force", false, "request even when a node is leased by another actor or already under maintenance")
	ch.add(cmd.Flags(), true)
	d.add(cmd.Flags())
	return cmd
}

// requestAll prints the preview's warnings and, unless a node needs --force
// that was not given, submits the request of every node.
func (o *options) requestAll(ctx context.Context, c client.Client, cl *plan.Cluster, res *plan.Result, req plan.Request, reason string, force bool, ch *changeFlags) error {
	var needForce []string
	for _, n := range res.Nodes {
		for _, w := range n.Warnings {
			fmt.Fprintf(o.errOut, "Warning: %s: %s\n", n.Node, w)
		}
		if n.Existing != nil || n.ForeignLease {
			needForce = append(needForce, n.Node)
		}
	}
	if len(needForce) > 0 && !force {
		return &exitError{code: ExitNeedsForce, err: fmt.Errorf("node(s) %s are leased by another actor or already under maintenance; nothing was requested (use --force to request anyway)", strings.Join(needForce, ", "))}
	}
	if err := ch.ensureConfig(ctx, c, o.out); err != nil {
		return err
	}
	for _, n := range res.Nodes {
		if err := o.submit(ctx, c, cl, n, req, reason); err != nil {
			return err
		}
	}
	return nil
}

// submit creates (or, forced, updates) one node's NodeMaintenance.
func (o *options) submit(ctx context.Context, c client.Client, cl *plan.Cluster, n plan.Node, req plan.Request, reason string) error {
	spec := req.Spec(n.Node)
	spec.Reason = reason
	what := describeRequest(n, cl.Now)
	if ex := n.Existing; ex != nil {
		ex = ex.DeepCopy()
		plan.SetClasses(&ex.Spec, req.AllClasses())
		ex.Spec.Reason, ex.Spec.Deadline, ex.Spec.Changes = reason, spec.Deadline, spec.Changes
		if err := c.Update(ctx, ex); err != nil {
			return fmt.Errorf("updating NodeMaintenance %s: %w", ex.Name, err)
		}
		fmt.Fprintf(o.out, "nodemaintenance/%s updated: %s", ex.Name, what)
		return nil
	}
	old := &lullv1alpha1.NodeMaintenance{}
	if err := c.Get(ctx, client.ObjectKey{Name: n.Node}, old); client.IgnoreNotFound(err) != nil {
		return fmt.Errorf("reading NodeMaintenance %s: %w", n.Node, err)
	} else if err == nil {
		if !old.Status.Phase.Finished() && old.DeletionTimestamp == nil {
			// Made since the preview: never replace a live request.
			return fmt.Errorf("node %s got a maintenance request (NodeMaintenance %s, phase %s) since the preview; run the request again to see it", n.Node, old.Name, old.Status.Phase)
		}
		// The record of a finished request makes way for the new one.
		if err := c.Delete(ctx, old, client.Preconditions{UID: &old.UID}); err != nil && !apierrors.IsNotFound(err) {
			return fmt.Errorf("deleting the finished NodeMaintenance %s: %w", old.Name, err)
		}
		// The drainer may still be removing its finalizer from the record.
		if err := wait.PollUntilContextTimeout(ctx, 100*time.Millisecond, 30*time.Second, true, func(ctx context.Context) (bool, error) {
			err := c.Get(ctx, client.ObjectKeyFromObject(old), &lullv1alpha1.NodeMaintenance{})
			return apierrors.IsNotFound(err), client.IgnoreNotFound(err)
		}); err != nil {
			return fmt.Errorf("waiting for the finished NodeMaintenance %s to go: %w", old.Name, err)
		}
	}
	nm := &lullv1alpha1.NodeMaintenance{
		ObjectMeta: metav1.ObjectMeta{Name: n.Node, Annotations: map[string]string{lullv1alpha1.RequestedByAnnotation: lullv1alpha1.RequestedByCLI}},
		Spec:       spec,
	}
	if err := c.Create(ctx, nm); err != nil {
		return fmt.Errorf("creating NodeMaintenance %s: %w", n.Node, err)
	}
	fmt.Fprintf(o.out, "nodemaintenance/%s requested: %s", n.Node, what)
	return nil
}

func newCompleteCommand(o *options) *cobra.Command {
	return &cobra.Command{
		Use:   "complete NODE...",
		Short: "Mark maintenance done: lull uncordons (what it cordoned) and releases the lease",
		Args:  cobra.MinimumNArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			c, _, err := o.clients()
			if err != nil {
				return err
			}
			return o.eachActive(cmd.Context(), c, args, func(nm *lullv1alpha1.NodeMaintenance) error {
				patch := client.RawPatch(types.MergePatchType, []byte(`{"spec":{"complete":true}}`))
				if err := c.Patch(cmd.Context(), nm, patch); err != nil {
					return fmt.Errorf("completing NodeMaintenance %s: %w", nm.Name, err)
				}
				fmt.Fprintf(o.out, "nodemaintenance/%s completed\n", nm.Name)
				return nil
			})
		},
	}
}

func newCancelCommand(o *options) *cobra.Command {
	return &cobra.Command{
		Use:   "cancel NODE...",
		Short: "Withdraw maintenance requests: lull undoes what it did and the request is deleted",
		Long: `Cancel withdraws a request: the node's maintenance label (if any) is removed and
its NodeMaintenance deleted; lull then uncordons what it cordoned and releases
the lease before the object goes. Use complete instead to keep the record.`,
		Args: cobra.MinimumNArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			c, _, err := o.clients()
			if err != nil {
				return err
			}
			ctx := cmd.Context()
			return o.eachActive(ctx, c, args, func(nm *lullv1alpha1.NodeMaintenance) error {
				// The label first: while it is there, the drainer would
				// request the maintenance again.
				patch := fmt.Sprintf(`{"metadata":{"labels":{%q:null}}}`, o.settings.MaintenanceLabel)
				node := &metav1.PartialObjectMetadata{TypeMeta: metav1.TypeMeta{APIVersion: "v1", Kind: "Node"}, ObjectMeta: metav1.ObjectMeta{Name: nm.Spec.NodeName}}
				if err := c.Patch(ctx, node, client.RawPatch(types.MergePatchType, []byte(patch))); err != nil && !apierrors.IsNotFound(err) {
					return fmt.Errorf("removing the maintenance label of node %s: %w", nm.Spec.NodeName, err)
				}
				if err := c.Delete(ctx, nm, client.Preconditions{UID: &nm.UID}); err != nil && !apierrors.IsNotFound(err) {
					return fmt.Errorf("deleting NodeMaintenance %s: %w", nm.Name, err)
				}
				fmt.Fprintf(o.out, "nodemaintenance/%s cancelled\n", nm.Name)
				return nil
			})
		},
	}
}

// eachActive applies fn to each node's active request; a node without one
// is an error (after the others are done).
func (o *options) eachActive(ctx context.Context, c client.Client, nodes []string, fn func(*lullv1alpha1.NodeMaintenance) error) error {
	var missing []string
	for _, n := range nodes {
		nm := &lullv1alpha1.NodeMaintenance{}
		err := c.Get(ctx, client.ObjectKey{Name: n}, nm)
		if apierrors.IsNotFound(err) || (err == nil && (nm.Status.Phase.Finished() || nm.DeletionTimestamp != nil)) {
			missing = append(missing, n)
			continue
		}
		if err != nil {
			return err
		}
		if err := fn(nm); err != nil {
			return err
		}
	}
	if len(missing) > 0 {
		sort.Strings(missing)
		return fmt.Errorf("no active maintenance request for node(s) %s", strings.Join(missing, ", "))
	}
	return nil
}
