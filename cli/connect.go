package cli

import (
	"fmt"

	"github.com/spf13/pflag"
	"k8s.io/client-go/kubernetes"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"lull.dev/lull/internal/lullscheme"
	"lull.dev/lull/internal/plan"
	"lull.dev/lull/lease"
)

// This file holds the client plumbing the commands share: the drainer
// flags a preview needs, the preview options, and the clients.

// drainerFlags are the drainer flags besides the shared settings (global
// flags) that a preview must share with the drainer to predict what it
// does: internal/options declares them with the drainer's.
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
	c, err := client.New(cfg, client.Options{Scheme: lullscheme.New()})
	if err != nil {
		return nil, nil, fmt.Errorf("creating a Kubernetes client: %w", err)
	}
	kube, err := kubernetes.NewForConfig(cfg)
	if err != nil {
		return nil, nil, fmt.Errorf("creating a Kubernetes client: %w", err)
	}
	return c, kube, nil
}
