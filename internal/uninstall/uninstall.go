// Package uninstall ends lull's requests before lull is deleted: it marks
// the Deployment lull-drainer (lullv1alpha1.UninstallAnnotation), upon which
// lull-drainer ends every request that holds something, and waits for
// that. kubectl lull uninstall and the Helm chart's pre-delete hook
// (lull-drainer --uninstall) use it (docs/install.md#uninstalling).
package uninstall

import (
	"context"
	"fmt"
	"slices"
	"strings"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/wait"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/controller/controllerutil"

	lullv1alpha1 "lull.dev/lull/api/v1alpha1"
	"lull.dev/lull/internal/settings"
)

// Deployment is the Deployment every install runs lull-drainer as.
const Deployment = settings.Drainer

// Drainer reads lull-drainer's Deployment in namespace; a missing one is
// an error that says where to look.
func Drainer(ctx context.Context, c client.Reader, namespace string) (*appsv1.Deployment, error) {
	var d appsv1.Deployment
	if err := c.Get(ctx, client.ObjectKey{Namespace: namespace, Name: Deployment}, &d); err != nil {
		if apierrors.IsNotFound(err) {
			return nil, fmt.Errorf("no Deployment %s/%s: lull-drainer is not installed there; "+
				"requests it left behind: docs/install.md#if-lull-drainer-is-gone", namespace, Deployment)
		}
		return nil, err
	}
	return &d, nil
}

// Marked reports whether the Deployment is marked for uninstalling.
func Marked(d *appsv1.Deployment) bool { return d.Annotations[lullv1alpha1.UninstallAnnotation] != "" }

// Mark annotates lull-drainer's Deployment with the time: lull-drainer
// then ends every request and makes no new one.
func Mark(ctx context.Context, c client.Client, d *appsv1.Deployment, now time.Time) error {
	patch := fmt.Sprintf(`{"metadata":{"annotations":{%q:%q}}}`, lullv1alpha1.UninstallAnnotation, now.UTC().Format(time.RFC3339))
	if err := c.Patch(ctx, d, client.RawPatch(types.MergePatchType, []byte(patch))); err != nil {
		return fmt.Errorf("marking Deployment %s/%s for uninstalling: %w", d.Namespace, d.Name, err)
	}
	return nil
}

// Holding lists the requests lull-drainer still has something to give
// back for (its finalizer is on them), by name.
func Holding(ctx context.Context, c client.Reader) ([]lullv1alpha1.NodeMaintenance, error) {
	var nms lullv1alpha1.NodeMaintenanceList
	if err := c.List(ctx, &nms); err != nil {
		return nil, err
	}
	out := slices.DeleteFunc(nms.Items, func(nm lullv1alpha1.NodeMaintenance) bool {
		return !controllerutil.ContainsFinalizer(&nm, lullv1alpha1.DrainerFinalizer)
	})
	slices.SortFunc(out, func(a, b lullv1alpha1.NodeMaintenance) int { return strings.Compare(a.Name, b.Name) })
	return out, nil
}

// NodePools lists the Karpenter NodePools that still carry an entry of
// lull's (lullv1alpha1.KarpenterBudgetAnnotation); none without Karpenter.
func NodePools(ctx context.Context, c client.Reader) ([]string, error) {
	var pools unstructured.UnstructuredList
	pools.SetGroupVersionKind(schema.GroupVersionKind{Group: "karpenter.sh", Version: "v1", Kind: "NodePoolList"})
	err := c.List(ctx, &pools)
	if meta.IsNoMatchError(err) || apierrors.IsNotFound(err) || apierrors.IsForbidden(err) {
		// No Karpenter; or a caller who may not read NodePools, for whom
		// lull-drainer's own hook and shutdown remove the entries.
		return nil, nil
	}
	if err != nil {
		return nil, err
	}
	var out []string
	for _, p := range pools.Items {
		if _, ok := p.GetAnnotations()[lullv1alpha1.KarpenterBudgetAnnotation]; ok {
			out = append(out, p.GetName())
		}
	}
	slices.Sort(out)
	return out, nil
}

// Wait waits until no request holds anything and no Karpenter NodePool
// carries an entry of lull's, for at most timeout; the error names those
// still held.
func Wait(ctx context.Context, c client.Reader, timeout time.Duration) error {
	var left []lullv1alpha1.NodeMaintenance
	var pools []string
	err := wait.PollUntilContextTimeout(ctx, time.Second, timeout, true, func(ctx context.Context) (bool, error) {
		var err error
		if left, err = Holding(ctx, c); err != nil {
			return false, err
		}
		pools, err = NodePools(ctx, c)
		return len(left) == 0 && len(pools) == 0, err
	})
	if err == nil {
		return nil
	}
	if len(left) == 0 && len(pools) == 0 {
		return err
	}
	names := make([]string, 0, len(left))
	for _, nm := range left {
		names = append(names, nm.Name)
	}
	var what []string
	if len(names) > 0 {
		what = append(what, "requests still held: "+strings.Join(names, ", "))
	}
	if len(pools) > 0 {
		what = append(what, "Karpenter NodePools still carrying lull's budget entry (annotation "+lullv1alpha1.KarpenterBudgetAnnotation+"): "+strings.Join(pools, ", "))
	}
	return fmt.Errorf("after %s, %s (kubectl lull status; lull-drainer's log)", timeout, strings.Join(what, "; "))
}
