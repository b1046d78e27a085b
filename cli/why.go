package cli

import (
	"github.com/spf13/cobra"
	corev1 "k8s.io/api/core/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"lull.dev/lull/internal/forecast"
	"lull.dev/lull/internal/plan"
)

// This file holds the why command: the nodes lull-scheduler's
// NodeDisruption plugin rejects for a pod, and why.

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
