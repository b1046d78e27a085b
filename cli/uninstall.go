package cli

import (
	"context"
	"fmt"
	"io"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/spf13/cobra"
	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"

	lullv1alpha1 "lull.dev/lull/api/v1alpha1"
	"lull.dev/lull/internal/settings"
	"lull.dev/lull/internal/uninstall"
)

func newUninstallCommand(o *options) *cobra.Command {
	var yes bool
	var namespace string
	var timeout time.Duration
	cmd := &cobra.Command{
		Use:   "uninstall",
		Short: "End every request before lull is uninstalled: preview, then --yes",
		Long: `Uninstall prepares lull's removal. Without --yes it previews what ending the
requests does, node by node. With --yes it marks the Deployment lull-drainer
(annotation lull.dev/uninstall), and lull-drainer ends every request: it undoes
its own cordons, releases the node leases, keeps each request's record as
Failed with reason Uninstalled, leaves the maintenance labels as they are, and
makes no new request. Once none holds anything, the command prints how to
delete the install (helm uninstall, or kubectl delete -k / -f); deleting it
then leaves nothing behind. To keep lull after all, remove the annotation.`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			c, _, err := o.clients()
			if err != nil {
				return err
			}
			return o.uninstall(cmd.Context(), c, namespace, yes, timeout)
		},
	}
	cmd.Flags().BoolVar(&yes, "yes", false, "end the requests (without it: preview only)")
	cmd.Flags().StringVar(&namespace, "drainer-namespace", settings.Namespace, "the namespace lull-drainer runs in")
	cmd.Flags().DurationVar(&timeout, "timeout", 2*time.Minute, "how long to wait for lull-drainer to end the requests")
	return cmd
}

func (o *options) uninstall(ctx context.Context, c client.Client, namespace string, yes bool, timeout time.Duration) error {
	d, err := uninstall.Drainer(ctx, c, namespace)
	if err != nil {
		return err
	}
	holding, err := uninstall.Holding(ctx, c)
	if err != nil {
		return err
	}
	if err := o.previewUninstall(ctx, c, holding); err != nil {
		return err
	}
	if !yes {
		fmt.Fprintln(o.out, "\nThis is a preview; nothing was changed. Run it again with --yes to end the requests.")
		return nil
	}
	if len(holding) > 0 && d.Status.ReadyReplicas == 0 {
		return fmt.Errorf("lull-drainer has no ready replica (Deployment %s/%s): nothing would end these requests; "+
			"bring it back, or see docs/install.md#if-lull-drainer-is-gone", namespace, uninstall.Deployment)
	}
	if !uninstall.Marked(d) {
		if err := uninstall.Mark(ctx, c, d, o.clock.Now()); err != nil {
			return err
		}
		fmt.Fprintf(o.out, "deployment.apps/%s annotated %s: lull-drainer ends every request and makes no new one\n",
			uninstall.Deployment, lullv1alpha1.UninstallAnnotation)
	}
	if err := uninstall.Wait(ctx, c, timeout); err != nil {
		return err
	}
	fmt.Fprintf(o.out, "Every request has ended (%d). Now delete the install:\n", len(holding))
	printDelete(o.out, d)
	fmt.Fprintf(o.out, "To keep lull instead: kubectl -n %s annotate deployment %s %s-\n", namespace, uninstall.Deployment, lullv1alpha1.UninstallAnnotation)
	return nil
}

// previewUninstall says, request by request, what ending it does.
func (o *options) previewUninstall(ctx context.Context, c client.Client, holding []lullv1alpha1.NodeMaintenance) error {
	if len(holding) == 0 {
		fmt.Fprintln(o.out, "No request holds anything: the install can be deleted as it is.")
		return nil
	}
	fmt.Fprintf(o.out, "Ending %d request(s):\n", len(holding))
	w := tabwriter.NewWriter(o.out, 0, 4, 2, ' ', 0)
	fmt.Fprintln(w, "NODE\tPHASE\tENDING IT")
	for i := range holding {
		nm := &holding[i]
		var node corev1.Node
		err := c.Get(ctx, client.ObjectKey{Name: nm.Spec.NodeName}, &node)
		if err != nil && !apierrors.IsNotFound(err) {
			return err
		}
		fmt.Fprintf(w, "%s\t%s\t%s\n", nm.Name, nm.Status.Phase, endingIt(nm, &node, err == nil, o.settings.MaintenanceLabel))
	}
	return w.Flush()
}

// endingIt says what lull-drainer does to end nm because lull goes.
func endingIt(nm *lullv1alpha1.NodeMaintenance, node *corev1.Node, nodeExists bool, label string) string {
	var out []string
	if nm.Status.CordonedByLull && !ptr.Deref(nm.Status.WasUnschedulable, false) {
		// A request started before the mark is given back by its record.
		if nm.Status.CordonMarked && nodeExists && node.Annotations[lullv1alpha1.CordonedByAnnotation] != string(nm.UID) {
			out = append(out, "leave the cordon (it no longer carries lull's mark "+lullv1alpha1.CordonedByAnnotation+")")
		} else {
			out = append(out, "uncordon (lull's cordon)")
		}
	}
	if nm.Status.LeaseHolder != "" {
		out = append(out, "release the node's lease")
	}
	for _, a := range nm.Status.Actions {
		switch a.State {
		case lullv1alpha1.ActionPending:
			out = append(out, "skip "+a.Label())
		case lullv1alpha1.ActionRunning:
			out = append(out, a.Label()+" runs on in the host, its outcome not observed")
		}
	}
	if nodeExists {
		if v, ok := node.Labels[label]; ok {
			out = append(out, fmt.Sprintf("keep the label %s=%s", label, v))
		}
	}
	if len(out) == 0 {
		out = append(out, "nothing to undo")
	}
	return strings.Join(out, "; ") + "; record it Failed/Uninstalled"
}

// printDelete says how to delete the install: Helm's release if Helm
// manages it, the manifests otherwise.
func printDelete(w io.Writer, d *appsv1.Deployment) {
	if d.Labels["app.kubernetes.io/managed-by"] == "Helm" {
		fmt.Fprintf(w, "  helm uninstall %s --namespace %s\n", d.Annotations["meta.helm.sh/release-name"], d.Annotations["meta.helm.sh/release-namespace"])
		fmt.Fprintln(w, "  kubectl delete crd nodemaintenances.lull.dev maintenancewindows.lull.dev disruptionpolicies.lull.dev nodeconfigs.lull.dev   # Helm leaves CRDs")
		return
	}
	fmt.Fprintln(w, "  kubectl delete -k manifests/install     # or: kubectl delete -f lull-install.yaml")
}
