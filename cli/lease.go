package cli

import (
	"context"
	"errors"
	"fmt"
	"io"
	"sort"
	"strings"
	"time"

	"github.com/spf13/cobra"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/client-go/kubernetes"

	"lull.dev/lull/lease"
)

func newLeaseCommand(o *options) *cobra.Command {
	cmd := &cobra.Command{
		Use:   "lease",
		Short: "Acquire, renew, release and show node disruption leases",
		Long: `Every disruptive actor holds a node's disruption lease while it works on the
node. Exit codes: 0 done (acquired, or already held by you), 3 held by another
actor (the holder is printed), 1 any other error.`,
	}
	cmd.AddCommand(newLeaseAcquireCommand(o), newLeaseRenewCommand(o), newLeaseReleaseCommand(o), newLeaseShowCommand(o))
	return cmd
}

// acquireFlags are the flags of `lease acquire`.
type acquireFlags struct {
	holder, operation, reason string
	duration, wait            time.Duration
}

// validate refuses what the lease library would silently replace: a
// duration that is not a positive number of whole seconds (a lease counts
// seconds; zero or less would become the default duration).
func (a *acquireFlags) validate() error {
	if strings.TrimSpace(a.holder) == "" {
		return fmt.Errorf("--holder must name the actor taking the lease (e.g. --holder fw-updater)")
	}
	if a.duration < time.Second || a.duration%time.Second != 0 {
		return fmt.Errorf("--duration %s: a lease lasts a positive number of whole seconds (e.g. --duration 5m; default %s)", a.duration, lease.DefaultDuration)
	}
	if a.wait < 0 {
		return fmt.Errorf("--wait %s: give how long to keep trying (e.g. --wait 10m), or 0 to try once", a.wait)
	}
	return nil
}

func newLeaseAcquireCommand(o *options) *cobra.Command {
	var a acquireFlags
	var out *outputFlags
	cmd := &cobra.Command{
		Use:   "acquire NODE",
		Short: "Acquire a node's disruption lease (exit 3 when another actor holds it)",
		Args:  cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			if err := a.validate(); err != nil {
				return err
			}
			if err := out.validate(); err != nil {
				return err
			}
			c, err := o.leaseClient()
			if err != nil {
				return err
			}
			info, err := o.acquire(cmd.Context(), c, args[0], a)
			if err != nil {
				return err
			}
			return o.printLeases(out, false, info)
		},
	}
	cmd.Flags().StringVar(&a.holder, "holder", "", "identity of the actor taking the lease (required)")
	cmd.Flags().StringVar(&a.operation, "operation", "", "what you will do: drain, reboot, update, power-off, ...")
	cmd.Flags().StringVar(&a.reason, "reason", "", "why, for people who find the lease")
	cmd.Flags().DurationVar(&a.duration, "duration", lease.DefaultDuration, "lease duration, whole seconds; renew before it passes")
	cmd.Flags().DurationVar(&a.wait, "wait", 0, "keep trying for this long (a dead holder's lease is taken after one duration)")
	_ = cmd.MarkFlagRequired("holder")
	out = addOutputFlags(cmd)
	return cmd
}

// acquire takes node's lease, trying again each second for --wait: an
// unrenewed lease expires after its duration on our clock, so we keep
// observing it.
func (o *options) acquire(ctx context.Context, c *lease.Client, node string, a acquireFlags) (*lease.Info, error) {
	if a.wait > 0 {
		var cancel context.CancelFunc
		ctx, cancel = context.WithTimeout(ctx, a.wait)
		defer cancel()
	}
	for {
		info, err := c.Acquire(ctx, node, a.holder, a.operation, a.reason, a.duration)
		if err == nil {
			return info, nil
		}
		held, isHeld := lease.IsHeld(err)
		if a.wait <= 0 || ctx.Err() != nil {
			if isHeld {
				return nil, &exitError{code: ExitHeld, err: fmt.Errorf("%w; a held lease is taken over only after the holder stops renewing for %s (use --wait to keep trying)", held, held.Duration)}
			}
			return nil, err
		}
		select {
		case <-ctx.Done():
		case <-o.clock.After(time.Second):
		}
	}
}

func newLeaseRenewCommand(o *options) *cobra.Command {
	var holder string
	var out *outputFlags
	cmd := &cobra.Command{
		Use:   "renew NODE",
		Short: "Renew a lease you hold (exit 3 when you no longer hold it)",
		Args:  cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			if err := out.validate(); err != nil {
				return err
			}
			c, err := o.leaseClient()
			if err != nil {
				return err
			}
			info, err := c.Renew(cmd.Context(), args[0], holder)
			if errors.Is(err, lease.ErrNotHolder) {
				return &exitError{code: ExitHeld, err: err}
			}
			if err != nil {
				return err
			}
			return o.printLeases(out, false, info)
		},
	}
	cmd.Flags().StringVar(&holder, "holder", "", "your identity (required)")
	_ = cmd.MarkFlagRequired("holder")
	out = addOutputFlags(cmd)
	return cmd
}

func newLeaseReleaseCommand(o *options) *cobra.Command {
	var holder string
	cmd := &cobra.Command{
		Use:   "release NODE",
		Short: "Release a lease you hold (exit 3 when another actor holds it)",
		Args:  cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			cs, err := o.kube()
			if err != nil {
				return err
			}
			return o.releaseLease(cmd.Context(), cs, args[0], holder)
		},
	}
	cmd.Flags().StringVar(&holder, "holder", "", "your identity (required)")
	_ = cmd.MarkFlagRequired("holder")
	return cmd
}

func newLeaseShowCommand(o *options) *cobra.Command {
	var all bool
	var out *outputFlags
	cmd := &cobra.Command{
		Use:   "show NODE|--all",
		Short: "Show node leases",
		Args:  cobra.MaximumNArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			if all == (len(args) == 1) {
				return fmt.Errorf("give a NODE or --all")
			}
			if err := out.validate(); err != nil {
				return err
			}
			cs, err := o.kube()
			if err != nil {
				return err
			}
			if all {
				infos, err := o.newLeaseClient(cs).List(cmd.Context())
				if err != nil {
					return fmt.Errorf("listing leases in namespace %s: %w", o.namespace(), err)
				}
				return o.printLeases(out, true, infos...)
			}
			return o.showLease(cmd.Context(), cs, out, args[0])
		},
	}
	cmd.Flags().BoolVar(&all, "all", false, "show every node lease")
	out = addOutputFlags(cmd)
	return cmd
}

// releaseLease releases node's lease held by holder. Releasing a lease
// nobody holds succeeds (release is idempotent) but says so, and a node
// that does not exist is an error, as kubectl says it.
func (o *options) releaseLease(ctx context.Context, cs kubernetes.Interface, node, holder string) error {
	c := o.newLeaseClient(cs)
	info, err := c.Get(ctx, node)
	if err != nil {
		return err
	}
	if info == nil {
		if _, err := cs.CoreV1().Nodes().Get(ctx, node, metav1.GetOptions{}); err != nil {
			return err
		}
		fmt.Fprintf(o.out, "node %s has no disruption lease (namespace %s); nothing to release\n", node, o.namespace())
		return nil
	}
	err = c.Release(ctx, node, holder)
	if errors.Is(err, lease.ErrNotHolder) {
		return &exitError{code: ExitHeld, err: err}
	}
	if err != nil {
		return err
	}
	fmt.Fprintf(o.out, "released lease of node %s\n", node)
	return nil
}

// showLease prints node's lease. A node without one is not an error, a
// node that does not exist is (as kubectl says it).
func (o *options) showLease(ctx context.Context, cs kubernetes.Interface, out *outputFlags, node string) error {
	info, err := o.newLeaseClient(cs).Get(ctx, node)
	if err != nil {
		return err
	}
	if info != nil {
		return o.printLeases(out, false, info)
	}
	if _, err := cs.CoreV1().Nodes().Get(ctx, node, metav1.GetOptions{}); apierrors.IsNotFound(err) {
		return err
	} else if err != nil {
		return fmt.Errorf("node %s has no disruption lease in namespace %s; reading the node: %w", node, o.namespace(), err)
	}
	fmt.Fprintf(o.noticeOut(out), "node %s has no disruption lease (namespace %s)\n", node, o.namespace())
	return nil
}

// noticeOut is where a sentence for people goes: with the human formats
// the output, else standard error, so scripts read only objects.
func (o *options) noticeOut(out *outputFlags) io.Writer {
	if f := out.format(); (f == "" || f == "wide") && !out.noHeaders {
		return o.out
	}
	return o.errOut
}

// leaseView is the stable JSON/YAML shape of a lease (kind NodeLease).
type leaseView struct {
	Node        string    `json:"node"`
	Namespace   string    `json:"namespace"`
	Holder      string    `json:"holder"`
	Operation   string    `json:"operation,omitempty"`
	Reason      string    `json:"reason,omitempty"`
	Acquired    time.Time `json:"acquired,omitempty"`
	Renewed     time.Time `json:"renewed,omitempty"`
	Duration    string    `json:"duration"`
	Transitions int32     `json:"transitions"`
	UID         string    `json:"uid"`
}

func leaseViews(infos []*lease.Info) []leaseView {
	sort.Slice(infos, func(i, j int) bool { return infos[i].Node < infos[j].Node })
	views := make([]leaseView, 0, len(infos))
	for _, i := range infos {
		views = append(views, leaseView{Node: i.Node, Namespace: i.Namespace, Holder: i.Holder, Operation: i.Operation,
			Reason: i.Reason, Acquired: i.Acquired.UTC(), Renewed: i.Renewed.UTC(), Duration: i.Duration.String(),
			Transitions: i.Transitions, UID: string(i.UID)})
	}
	return views
}

// printLeases prints one lease as an object, or a List of them.
func (o *options) printLeases(out *outputFlags, list bool, infos ...*lease.Info) error {
	views := leaseViews(infos)
	obj, err := leasesObject(views, list)
	if err != nil {
		return err
	}
	return out.printObj(o.out, obj, func(h humanOptions) error {
		if len(views) == 0 {
			fmt.Fprintf(o.noticeOut(out), "No node has a disruption lease in namespace %s.\n", o.namespace())
			return nil
		}
		return printTable(o.out, leaseTable(views), h)
	})
}

func leasesObject(views []leaseView, list bool) (runtime.Object, error) {
	items := make([]*unstructured.Unstructured, 0, len(views))
	for _, v := range views {
		u, err := viewObject(KindNodeLease, v.Node, v)
		if err != nil {
			return nil, err
		}
		items = append(items, u)
	}
	if !list && len(items) == 1 {
		return items[0], nil
	}
	return viewList(items), nil
}

func leaseTable(views []leaseView) *metav1.Table {
	t := newTable("NODE", "HOLDER", "OPERATION", "REASON", "ACQUIRED", "RENEWED", "DURATION", "TRANSITIONS", "+NAMESPACE", "+UID")
	for _, x := range views {
		addRow(t, x.Node, x.Holder, dash(x.Operation), dash(x.Reason), rfc3339(x.Acquired), rfc3339(x.Renewed), x.Duration,
			fmt.Sprint(x.Transitions), x.Namespace, x.UID)
	}
	return t
}

// rfc3339 is t in UTC, or "-" when unset (a lease written by hand may lack
// its times).
func rfc3339(t time.Time) string {
	if t.IsZero() {
		return "-"
	}
	return t.UTC().Format(time.RFC3339)
}

func dash(s string) string {
	if s == "" {
		return "-"
	}
	return s
}
