// Package cli implements kubectl-lull, lull's kubectl plugin.
package cli

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"sort"
	"time"

	"github.com/spf13/cobra"
	"k8s.io/cli-runtime/pkg/genericclioptions"
	"k8s.io/client-go/kubernetes"
	"k8s.io/klog/v2"
	"k8s.io/utils/clock"

	"lull.dev/lull/pkg/lease"
	"lull.dev/lull/pkg/settings"
	"lull.dev/lull/pkg/version"
)

// Exit codes scripts can rely on.
const (
	ExitOK = 0
	// ExitError: bad usage, API errors, anything unexpected.
	ExitError = 1
	// ExitHeld: another actor holds the node's lease (acquire), or the
	// caller is not the holder (renew, release).
	ExitHeld = 3
	// ExitNeedsForce (4): see the request command.
)

// exitError carries an exit code through cobra.
type exitError struct {
	code int
	err  error
}

func (e *exitError) Error() string { return e.err.Error() }
func (e *exitError) Unwrap() error { return e.err }

type options struct {
	flags *genericclioptions.ConfigFlags
	// settings shared with lull-scheduler and lull-drainer, as flags.
	settings    settings.Settings
	medik8s     bool
	output      string
	out, errOut io.Writer
	clock       clock.WithTickerAndDelayedExecution
}

// Run runs kubectl-lull with args and returns the process exit code.
func Run(args []string, stdout, stderr io.Writer) int {
	cmd := NewCommand(stdout, stderr)
	cmd.SetArgs(args)
	err := cmd.Execute()
	if err == nil {
		return ExitOK
	}
	fmt.Fprintln(stderr, "error:", err)
	var ee *exitError
	if errors.As(err, &ee) {
		return ee.code
	}
	return ExitError
}

// NewCommand returns the root command.
func NewCommand(stdout, stderr io.Writer) *cobra.Command {
	return newCommand(&options{flags: genericclioptions.NewConfigFlags(true), out: stdout, errOut: stderr, clock: clock.RealClock{}})
}

func newCommand(o *options) *cobra.Command {
	root := &cobra.Command{
		Use:           "kubectl-lull",
		Short:         "Safe disruptive work on nodes: requests, previews, windows, leases",
		SilenceUsage:  true,
		SilenceErrors: true,
		Version:       version.Version,
		// The shared settings are checked before any verb uses them.
		PersistentPreRunE: func(*cobra.Command, []string) error { return o.settings.Validate() },
	}
	root.SetOut(o.out)
	root.SetErr(o.errOut)
	o.flags.AddFlags(root.PersistentFlags())
	// --v=N logs client-go's requests (6: every response), as kubectl does.
	klogFlags := flag.NewFlagSet("klog", flag.ContinueOnError)
	klog.InitFlags(klogFlags)
	root.PersistentFlags().AddGoFlag(klogFlags.Lookup("v"))
	o.settings.AddFlags(root.PersistentFlags())
	root.PersistentFlags().BoolVar(&o.medik8s, "medik8s", false, "use the medik8s lease namespace ("+lease.Medik8sNamespace+") to interoperate with medik8s tools")
	root.AddCommand(newLeaseCommand(o), newStatusCommand(o), newRequestCommand(o), newCompleteCommand(o), newCancelCommand(o),
		newPlanCommand(o), newWindowsCommand(o), newWhyCommand(o))
	return root
}

func (o *options) leaseClient() (*lease.Client, error) {
	cfg, err := o.flags.ToRESTConfig()
	if err != nil {
		return nil, fmt.Errorf("loading kubeconfig: %w", err)
	}
	cs, err := kubernetes.NewForConfig(cfg)
	if err != nil {
		return nil, err
	}
	return lease.New(cs, lease.Options{Namespace: o.namespace()}), nil
}

func newLeaseCommand(o *options) *cobra.Command {
	cmd := &cobra.Command{
		Use:   "lease",
		Short: "Acquire, renew, release and show node disruption leases",
		Long: `Every disruptive actor holds a node's disruption lease while it works on the
node. Exit codes: 0 done (acquired, or already held by you), 3 held by another
actor (the holder is printed), 1 any other error.`,
	}
	var holder, operation, reason string
	var duration, wait time.Duration
	acquire := &cobra.Command{
		Use:   "acquire NODE",
		Short: "Acquire a node's disruption lease (exit 3 when another actor holds it)",
		Args:  cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			c, err := o.leaseClient()
			if err != nil {
				return err
			}
			ctx := cmd.Context()
			if wait > 0 {
				var cancel context.CancelFunc
				ctx, cancel = context.WithTimeout(ctx, wait)
				defer cancel()
			}
			for {
				info, err := c.Acquire(ctx, args[0], holder, operation, reason, duration)
				if err == nil {
					return o.print(info)
				}
				held, isHeld := lease.IsHeld(err)
				if wait <= 0 || ctx.Err() != nil {
					if isHeld {
						return &exitError{code: ExitHeld, err: fmt.Errorf("%w; a held lease is taken over only after the holder stops renewing for %s (use --wait to keep trying)", held, held.Duration)}
					}
					return err
				}
				// Keep observing: an unrenewed lease expires after its
				// duration on our clock.
				select {
				case <-ctx.Done():
				case <-time.After(time.Second):
				}
			}
		},
	}
	acquire.Flags().StringVar(&holder, "holder", "", "identity of the actor taking the lease (required)")
	acquire.Flags().StringVar(&operation, "operation", "", "what you will do: drain, reboot, update, power-off, ...")
	acquire.Flags().StringVar(&reason, "reason", "", "why, for people who find the lease")
	acquire.Flags().DurationVar(&duration, "duration", lease.DefaultDuration, "lease duration; renew before it passes")
	acquire.Flags().DurationVar(&wait, "wait", 0, "keep trying for this long (a dead holder's lease is taken after one duration)")
	_ = acquire.MarkFlagRequired("holder")

	var renewHolder string
	renew := &cobra.Command{
		Use:   "renew NODE",
		Short: "Renew a lease you hold (exit 3 when you no longer hold it)",
		Args:  cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			c, err := o.leaseClient()
			if err != nil {
				return err
			}
			info, err := c.Renew(cmd.Context(), args[0], renewHolder)
			if errors.Is(err, lease.ErrNotHolder) {
				return &exitError{code: ExitHeld, err: err}
			}
			if err != nil {
				return err
			}
			return o.print(info)
		},
	}
	renew.Flags().StringVar(&renewHolder, "holder", "", "your identity (required)")
	_ = renew.MarkFlagRequired("holder")

	var releaseHolder string
	release := &cobra.Command{
		Use:   "release NODE",
		Short: "Release a lease you hold (exit 3 when another actor holds it)",
		Args:  cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			c, err := o.leaseClient()
			if err != nil {
				return err
			}
			err = c.Release(cmd.Context(), args[0], releaseHolder)
			if errors.Is(err, lease.ErrNotHolder) {
				return &exitError{code: ExitHeld, err: err}
			}
			if err != nil {
				return err
			}
			fmt.Fprintf(o.out, "released lease of node %s\n", args[0])
			return nil
		},
	}
	release.Flags().StringVar(&releaseHolder, "holder", "", "your identity (required)")
	_ = release.MarkFlagRequired("holder")

	var all bool
	show := &cobra.Command{
		Use:   "show NODE|--all",
		Short: "Show node leases",
		Args:  cobra.MaximumNArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			if all == (len(args) == 1) {
				return fmt.Errorf("give a NODE or --all")
			}
			c, err := o.leaseClient()
			if err != nil {
				return err
			}
			if all {
				infos, err := c.List(cmd.Context())
				if err != nil {
					return err
				}
				return o.print(infos...)
			}
			info, err := c.Get(cmd.Context(), args[0])
			if err != nil {
				return err
			}
			if info == nil {
				fmt.Fprintf(o.out, "node %s has no disruption lease\n", args[0])
				return nil
			}
			return o.print(info)
		},
	}
	show.Flags().BoolVar(&all, "all", false, "show every node lease")

	for _, c := range []*cobra.Command{acquire, renew, show} {
		c.Flags().StringVarP(&o.output, "output", "o", "table", "output format: table, json or yaml")
	}
	cmd.AddCommand(acquire, renew, release, show)
	return cmd
}

// leaseView is the stable JSON/YAML shape of a lease.
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

func (o *options) print(infos ...*lease.Info) error {
	sort.Slice(infos, func(i, j int) bool { return infos[i].Node < infos[j].Node })
	views := make([]leaseView, 0, len(infos))
	for _, i := range infos {
		views = append(views, leaseView{Node: i.Node, Namespace: i.Namespace, Holder: i.Holder, Operation: i.Operation,
			Reason: i.Reason, Acquired: i.Acquired.UTC(), Renewed: i.Renewed.UTC(), Duration: i.Duration.String(),
			Transitions: i.Transitions, UID: string(i.UID)})
	}
	var v any = views
	if len(views) == 1 {
		v = views[0]
	}
	return o.emit(v, func() error {
		tw := table(o.out)
		fmt.Fprintln(tw, "NODE\tHOLDER\tOPERATION\tREASON\tACQUIRED\tRENEWED\tDURATION\tTRANSITIONS")
		for _, x := range views {
			fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%s\t%s\t%s\t%d\n", x.Node, x.Holder, dash(x.Operation), dash(x.Reason),
				x.Acquired.Format(time.RFC3339), x.Renewed.Format(time.RFC3339), x.Duration, x.Transitions)
		}
		return tw.Flush()
	})
}

func dash(s string) string {
	if s == "" {
		return "-"
	}
	return s
}
