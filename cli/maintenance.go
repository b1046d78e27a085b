package cli

import (
	"context"
	"fmt"
	"sort"
	"strings"
	"time"

	"github.com/spf13/cobra"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/wait"
	"sigs.k8s.io/controller-runtime/pkg/client"

	lullv1alpha1 "lull.dev/lull/api/v1alpha1"
	"lull.dev/lull/internal/plan"
)

// This file holds the commands that make and end maintenance requests:
// request, complete and cancel.

// ExitNeedsForce: `request` found a node leased by another actor or
// already under maintenance, and --force was not given. Nothing changed.
const ExitNeedsForce = 4

func newRequestCommand(o *options) *cobra.Command {
	var d drainerFlags
	var ch changeFlags
	var classes []string
	var reason, deadline string
	var force bool
	cmd := &cobra.Command{
		Use:   "request NODE... (--class CLASS[,CLASS...] | --from OLD --to NEW [--write]) --reason REASON",
		Short: "Request maintenance of nodes (a NodeMaintenance each)",
		Long: `Request maintenance: creates a NodeMaintenance per node, with spec.classes
(several: their steps merge into one plan), and with
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
			return o.request(cmd.Context(), &d, req, reason, force, &ch)
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

// request previews req and, unless a node needs --force that was not
// given, submits it.
func (o *options) request(ctx context.Context, d *drainerFlags, req plan.Request, reason string, force bool, ch *changeFlags) error {
	po, c, kube, err := o.connect(d)
	if err != nil {
		return err
	}
	cl, err := plan.Load(ctx, c, po)
	if err != nil {
		return err
	}
	defer cl.Forecast.Stop()
	res, err := cl.Preview(ctx, c, kube, req)
	if err != nil {
		return err
	}
	return o.requestAll(ctx, c, cl, res, req, reason, force, ch)
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
		ex.Spec.Classes, ex.Spec.Reason, ex.Spec.Deadline, ex.Spec.Changes = spec.Classes, reason, spec.Deadline, spec.Changes
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
