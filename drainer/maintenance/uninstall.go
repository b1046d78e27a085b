package maintenance

import (
	"context"
	"errors"
	"fmt"
	"sync/atomic"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	apiextensionsv1 "k8s.io/apiextensions-apiserver/pkg/apis/apiextensions/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/client-go/util/retry"
	"k8s.io/klog/v2"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/controller/controllerutil"
	"sigs.k8s.io/controller-runtime/pkg/reconcile"

	lullv1alpha1 "lull.dev/lull/api/v1alpha1"
	"lull.dev/lull/internal/budget"
	"lull.dev/lull/lease"
)

// Uninstalling lull (docs/install.md#uninstalling). When lull is being
// uninstalled, lull-drainer ends the requests it holds something for:
// its own cordons undone, the node leases released, each request's record
// kept as Failed with reason Uninstalled, the maintenance labels left as
// their users set them (installing lull again asks again), and no new
// request made from a label. kubectl lull uninstall marks the install
// (UninstallAnnotation on the Deployment lull-drainer) and waits for that
// before anything is deleted; a drainer whose Deployment, namespace or
// NodeMaintenance CRD is deleted does the same with what time and rights
// it has left.
const (
	// ReasonUninstalled: a request ended because lull was uninstalled.
	// NodeMaintenanceCRD is the CRD whose deletion ends every request.
	NodeMaintenanceCRD = "nodemaintenances.lull.dev"
)

// Install names what lull-drainer watches for an uninstall: its
// Deployment (DefaultIdentityFamily) in Namespace.
type Install struct {
	Namespace string
}

// Uninstalling reports whether lull is being uninstalled, and why: the
// drainer's Deployment marked (lullv1alpha1.UninstallAnnotation) or deleted, its
// namespace deleted (kubectl delete deletes the namespace first, Helm the
// Deployment), or the NodeMaintenance CRD being deleted (its requests go
// with it). A rolling update, a deleted pod or a node drain change none
// of them.
func (in Install) Uninstalling(ctx context.Context, c client.Reader) (bool, string, error) {
	var d appsv1.Deployment
	switch err := c.Get(ctx, client.ObjectKey{Namespace: in.Namespace, Name: DefaultIdentityFamily}, &d); {
	case apierrors.IsNotFound(err):
		return true, fmt.Sprintf("the Deployment %s/%s was deleted", in.Namespace, DefaultIdentityFamily), nil
	case err != nil:
		return false, "", err
	case d.DeletionTimestamp != nil:
		return true, fmt.Sprintf("the Deployment %s/%s is being deleted", in.Namespace, DefaultIdentityFamily), nil
	case d.Annotations[lullv1alpha1.UninstallAnnotation] != "":
		return true, fmt.Sprintf("the Deployment %s/%s is marked %s=%s (kubectl lull uninstall)", in.Namespace, DefaultIdentityFamily,
			lullv1alpha1.UninstallAnnotation, d.Annotations[lullv1alpha1.UninstallAnnotation]), nil
	}
	// A namespace or CRD already gone is one being deleted.
	var ns corev1.Namespace
	switch err := c.Get(ctx, client.ObjectKey{Name: in.Namespace}, &ns); {
	case apierrors.IsNotFound(err):
		return true, fmt.Sprintf("the namespace %s is being deleted", in.Namespace), nil
	case err != nil:
		return false, "", err
	case ns.DeletionTimestamp != nil:
		return true, fmt.Sprintf("the namespace %s is being deleted", in.Namespace), nil
	}
	var crd apiextensionsv1.CustomResourceDefinition
	switch err := c.Get(ctx, client.ObjectKey{Name: NodeMaintenanceCRD}, &crd); {
	case apierrors.IsNotFound(err):
		return true, fmt.Sprintf("the CRD %s is being deleted", NodeMaintenanceCRD), nil
	case err != nil:
		return false, "", err
	case crd.DeletionTimestamp != nil:
		return true, fmt.Sprintf("the CRD %s is being deleted", NodeMaintenanceCRD), nil
	}
	return false, "", nil
}

// UninstallWatch tells the reconciler whether lull is being uninstalled,
// from Install.Uninstalling asked every Period.
type UninstallWatch struct {
	Install Install
	Reader  client.Reader
	Period  time.Duration
	// OnChange is called when an uninstall is seen (again) and when it is
	// no longer seen (the mark removed): either way every request has
	// something to do now (end, or be made again from its label). ctx
	// ends with the watch.
	OnChange func(ctx context.Context)

	seen atomic.Bool
}

// Seen reports whether an uninstall was seen at the last look.
func (w *UninstallWatch) Seen() bool { return w != nil && w.seen.Load() }

// Start polls until ctx ends (a manager.Runnable on every replica).
func (w *UninstallWatch) Start(ctx context.Context) error {
	t := time.NewTicker(w.Period)
	defer t.Stop()
	for {
		// Asked every period, not latched: removing the mark (kubectl
		// lull uninstall's "to keep lull instead") resumes requests.
		if ok, why, err := w.Install.Uninstalling(ctx, w.Reader); err == nil {
			was := w.seen.Swap(ok)
			switch {
			case ok && !was:
				klog.FromContext(ctx).Info("lull is being uninstalled: ending every request", "because", why)
			case !ok && was:
				klog.FromContext(ctx).Info("lull is no longer being uninstalled: requests are made from labels again")
			}
			if ok != was && w.OnChange != nil {
				w.OnChange(ctx)
			}
		}
		select {
		case <-ctx.Done():
			return nil
		case <-t.C:
		}
	}
}

// NeedLeaderElection is false: every replica needs to know.
func (w *UninstallWatch) NeedLeaderElection() bool { return false }

// uninstalling reports whether the request in hand is to be ended rather
// than carried on.
func (r *Reconciler) uninstalling() bool { return r.Uninstall.Seen() }

// windDown ends a request because lull is being uninstalled: no new
// request from a label, none replaced, and an active one ended as
// Failed/Uninstalled with lull's cordon undone, its hold annotations
// removed and the lease released. Host steps not yet begun are skipped
// (lull-agent starts none outside phase Acting); one running goes on on
// the host, and the record says its outcome was not observed. The label
// stays.
func (r *Reconciler) windDown(ctx context.Context, nm *lullv1alpha1.NodeMaintenance, node *corev1.Node) (reconcile.Result, error) {
	if nm == nil || !controllerutil.ContainsFinalizer(nm, Finalizer) {
		return reconcile.Result{}, nil
	}
	if !nm.Status.Phase.Finished() {
		s := &step{r: r, logger: klog.FromContext(ctx), nm: nm, node: node, now: r.Clock.Now(), status: nm.Status.DeepCopy()}
		if err := s.giveBack(ctx); err != nil {
			return reconcile.Result{}, err
		}
		if err := r.Leases.ReleaseForTool(ctx, nm.Spec.NodeName, r.Options.Identity); err != nil && !errors.Is(err, lease.ErrNotHolder) && !apierrors.IsNotFound(err) {
			return reconcile.Result{}, fmt.Errorf("releasing the lease of node %s: %w", nm.Spec.NodeName, err)
		}
		r.forget(nm.Spec.NodeName)
		msg := "lull was uninstalled: " + s.endActions() + "lull's cordon is undone and the node's lease released; the label " +
			r.Options.MaintenanceLabel + " stays as it was: installing lull again requests the maintenance again"
		s.status.CordonedByLull, s.status.WasUnschedulable = false, nil
		if _, err := s.finishAs(ctx, lullv1alpha1.PhaseFailed, eventUninstalled(msg)); err != nil {
			return reconcile.Result{}, err
		}
	} else if err := r.expireFinished(ctx, nm, node); err != nil {
		// An ended request whose silence was not seen expired yet:
		// Alertmanager is asked once, and the finalizer goes whatever it
		// answers (the silence expires by itself within its duration);
		// only a failed write of the request's status is tried again.
		return reconcile.Result{}, client.IgnoreNotFound(err)
	}
	if controllerutil.RemoveFinalizer(nm, Finalizer) {
		return reconcile.Result{}, client.IgnoreNotFound(r.update(ctx, nm))
	}
	return reconcile.Result{}, nil
}

// endActions skips the host steps not begun and says what became of them,
// and of one running.
func (s *step) endActions() string {
	out := ""
	for i := range s.status.Actions {
		a := &s.status.Actions[i]
		switch a.State {
		case lullv1alpha1.ActionPending:
			s.endAction(a, lullv1alpha1.ActionSkipped, "lull was uninstalled before this step began")
			out += a.Label() + " skipped; "
		case lullv1alpha1.ActionRunning:
			out += fmt.Sprintf("lull-agent was running %s, whose outcome was not observed; ", a.Label())
		}
	}
	return out
}

// WindDown ends every request still holding something (see windDown),
// reading and writing the API server directly: the manager and its cache
// have stopped. It returns how many requests it ended.
func (r *Reconciler) WindDown(ctx context.Context) (int, error) {
	r.Options.Default()
	if r.Budget == nil {
		r.Budget = &budget.Ledger{Client: r.Client, Live: r.APIReader, Namespace: r.Options.BudgetNamespace,
			Holder: r.Options.Identity, Clock: r.Clock}
	}
	var nms lullv1alpha1.NodeMaintenanceList
	if err := r.Client.List(ctx, &nms); err != nil {
		return 0, fmt.Errorf("listing NodeMaintenances: %w", err)
	}
	ended := 0
	var errs []error
	for i := range nms.Items {
		nm := &nms.Items[i]
		if !controllerutil.ContainsFinalizer(nm, Finalizer) {
			continue
		}
		err := retry.RetryOnConflict(retry.DefaultRetry, func() error {
			if err := r.Client.Get(ctx, client.ObjectKeyFromObject(nm), nm); err != nil {
				return err
			}
			node, err := r.getNode(ctx, nm.Spec.NodeName)
			if err != nil {
				return err
			}
			_, err = r.windDown(ctx, nm, node)
			return err
		})
		if err != nil && !apierrors.IsNotFound(err) {
			errs = append(errs, fmt.Errorf("ending the request of node %s: %w", nm.Name, err))
			continue
		}
		ended++
	}
	return ended, errors.Join(errs...)
}
