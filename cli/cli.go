// Package cli implements kubectl-lull, lull's kubectl plugin.
package cli

import (
	"errors"
	"flag"
	"fmt"
	"io"
	"os"

	"github.com/spf13/cobra"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	"k8s.io/cli-runtime/pkg/genericclioptions"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/clientcmd"
	clientcmdapi "k8s.io/client-go/tools/clientcmd/api"
	"k8s.io/klog/v2"
	"k8s.io/utils/clock"
	"k8s.io/utils/ptr"

	"lull.dev/lull/internal/settings"
	"lull.dev/lull/internal/version"
	"lull.dev/lull/lease"
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
	settings settings.Settings
	// agentNamespace holds lull-agent's leases, as lull-drainer's
	// --agent-namespace says.
	agentNamespace string
	medik8s        bool
	out, errOut    io.Writer
	clock          clock.WithTickerAndDelayedExecution
}

// Run runs kubectl-lull with args and returns the process exit code.
func Run(args []string, stdout, stderr io.Writer) int {
	cmd := NewCommand(stdout, stderr)
	cmd.SetArgs(args)
	err := cmd.Execute()
	if err == nil {
		return ExitOK
	}
	fmt.Fprintln(stderr, errorText(err))
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
		PersistentPreRunE: func(*cobra.Command, []string) error {
			if err := o.settings.Validate(); err != nil {
				return err
			}
			return settings.ValidateAgentNamespace(o.agentNamespace)
		},
	}
	root.SetOut(o.out)
	root.SetErr(o.errOut)
	o.flags.AddFlags(root.PersistentFlags())
	// --v=N logs client-go's requests (6: every response), as kubectl does.
	klogFlags := flag.NewFlagSet("klog", flag.ContinueOnError)
	klog.InitFlags(klogFlags)
	root.PersistentFlags().AddGoFlag(klogFlags.Lookup("v"))
	o.settings.AddFlags(root.PersistentFlags())
	settings.AddAgentNamespaceFlag(root.PersistentFlags(), &o.agentNamespace)
	root.PersistentFlags().BoolVar(&o.medik8s, "medik8s", false, "use the medik8s lease namespace ("+lease.Medik8sNamespace+") to interoperate with medik8s tools")
	root.AddCommand(newLeaseCommand(o), newStatusCommand(o), newRequestCommand(o), newCompleteCommand(o), newCancelCommand(o),
		newPlanCommand(o), newWindowsCommand(o), newWhyCommand(o), newVersionCommand(o), newUninstallCommand(o))
	return root
}

// errorText is how an error is printed: an error the API server returned
// as it is, the way kubectl prints it; any other after "error:".
func errorText(err error) string {
	if status, ok := err.(apierrors.APIStatus); ok {
		return fmt.Sprintf("Error from server (%s): %s", status.Status().Reason, err)
	}
	if meta.IsNoMatchError(err) {
		return "error: " + err.Error() + "\n(lull's CustomResourceDefinitions are not installed in this cluster: see docs/install.md; `kubectl lull version` shows what is installed)"
	}
	return "error: " + err.Error()
}

// errNoConfig says what to do when no kubeconfig was found (instead of the
// connection refused at localhost:8080 that clientcmd's defaults lead to).
var errNoConfig = errors.New("no configuration has been provided: point kubectl lull at a cluster with --kubeconfig, " +
	"the KUBECONFIG environment variable or ~/.kube/config (or --server), as for kubectl")

// restConfig is the client configuration of the connection flags. It
// fails when no configuration was found at all rather than falling back to
// http://localhost:8080 as the flags' defaults would.
func (o *options) restConfig() (*rest.Config, error) {
	if err := o.checkConfigured(); err != nil {
		return nil, err
	}
	cfg, err := o.flags.ToRESTConfig()
	if err != nil {
		return nil, fmt.Errorf("loading kubeconfig: %w", err)
	}
	return cfg, nil
}

// checkConfigured asks clientcmd, without the flags' cluster defaults,
// whether any configuration exists: a kubeconfig, --server, or the
// in-cluster service account.
func (o *options) checkConfigured() error {
	rules := clientcmd.NewDefaultClientConfigLoadingRules()
	rules.ExplicitPath = ptr.Deref(o.flags.KubeConfig, "")
	overrides := &clientcmd.ConfigOverrides{ClusterInfo: clientcmdapi.Cluster{Server: ptr.Deref(o.flags.APIServer, "")}}
	if os.Getenv("KUBERNETES_MASTER") != "" {
		return nil // clientcmd's own default server, set on purpose
	}
	_, err := clientcmd.NewNonInteractiveDeferredLoadingClientConfig(rules, overrides).ClientConfig()
	if clientcmd.IsEmptyConfig(err) {
		return errNoConfig
	}
	return nil // other problems are reported by the real loader, with the flags
}

// kube returns a clientset for the connection flags.
func (o *options) kube() (kubernetes.Interface, error) {
	cfg, err := o.restConfig()
	if err != nil {
		return nil, err
	}
	cs, err := kubernetes.NewForConfig(cfg)
	if err != nil {
		return nil, fmt.Errorf("creating a Kubernetes client: %w", err)
	}
	return cs, nil
}

func (o *options) newLeaseClient(cs kubernetes.Interface) *lease.Client {
	return lease.New(cs, lease.Options{Namespace: o.namespace()})
}

func (o *options) leaseClient() (*lease.Client, error) {
	cs, err := o.kube()
	if err != nil {
		return nil, err
	}
	return o.newLeaseClient(cs), nil
}
