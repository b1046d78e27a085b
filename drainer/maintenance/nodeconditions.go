package maintenance

import (
	"context"
	"encoding/json"
	"fmt"
	"slices"
	"strings"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/equality"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/util/workqueue"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/controller"
	"sigs.k8s.io/controller-runtime/pkg/event"
	"sigs.k8s.io/controller-runtime/pkg/handler"
	"sigs.k8s.io/controller-runtime/pkg/manager"
	"sigs.k8s.io/controller-runtime/pkg/reconcile"

	lullv1alpha1 "lull.dev/lull/api/v1alpha1"
)

// The node-conditions unit: lull tells tools that do not read its CRDs
// what it does to a node, in the shared vocabulary of Kubernetes' node
// lifecycle conditions (KEP-5683, v1.37's MaintenancePlanned,
// MaintenanceInProgress, DrainInProgress and Drained): planned while the
// request waits (with the next start the forecast gives), in progress
// once it starts, draining and drained as the drain goes, none once it
// ends. Every condition lull writes has a reason starting with "Lull": a
// condition of the same type with another reason is someone else's, which
// lull neither overwrites nor removes.
//
// They are written by a controller of their own (nodeconditions), not by
// the request's reconcile: they are for others to read, so they stay off
// the path that cordons and drains, and a request's changes within
// conditionsDelay make one write (a wave's request goes from its first
// look to Completed in a few seconds; writing each phase cost a Node
// status patch apiece, docs/performance.md).

// conditionsDelay is how long after a change of a request (or of its
// node's lifecycle conditions) the node's conditions are written: the
// changes of that time make one write.
const conditionsDelay = 2 * time.Second

// ReasonPrefix starts the reason of every node condition lull writes.
const ReasonPrefix = "Lull"

// lifecycleConditions are the node condition types lull writes.
var lifecycleConditions = []corev1.NodeConditionType{
	corev1.NodeMaintenancePlanned, corev1.NodeMaintenanceInProgress, corev1.NodeDrainInProgress, corev1.NodeDrained,
}

// NodeConditions are the lifecycle conditions a request in status st
// puts on its node (none once it ended); drains says whether its plan
// drains the node (step.needsDrain).
func NodeConditions(nm *lullv1alpha1.NodeMaintenance, st *lullv1alpha1.NodeMaintenanceStatus, drains bool) map[corev1.NodeConditionType]corev1.NodeCondition {
	out := map[corev1.NodeConditionType]corev1.NodeCondition{}
	phase := st.Phase
	if phase == "" || phase.Finished() {
		return out
	}
	set := func(t corev1.NodeConditionType, msg string) {
		out[t] = corev1.NodeCondition{Type: t, Status: corev1.ConditionTrue, Reason: ReasonPrefix + string(phase), Message: msg}
	}
	what := fmt.Sprintf("lull: NodeMaintenance %s (%s)", nm.Name, nm.Spec.ClassNames())
	if st.StartedAt == nil && !phase.Disrupting() {
		// The reason says what it waits for; the message changes only
		// with the next start (not with the budget's count in use, which
		// would rewrite every waiting node at each start in a wave).
		msg := what
		if st.NextWindowStart != nil {
			msg += "; next start " + st.NextWindowStart.UTC().Format(time.RFC3339)
		}
		set(corev1.NodeMaintenancePlanned, msg)
		return out
	}
	set(corev1.NodeMaintenanceInProgress, what+": "+string(phase))
	switch phase {
	case lullv1alpha1.PhaseDraining:
		set(corev1.NodeDrainInProgress, what+": evicting the node's pods")
	case lullv1alpha1.PhaseDrained, lullv1alpha1.PhaseActing, lullv1alpha1.PhasePoweredOff:
		if drains {
			set(corev1.NodeDrained, what+": the node's pods are evicted")
		}
	}
	return out
}

// wantedOn is the lifecycle conditions nm (as stored) puts on its node.
func wantedOn(nm *lullv1alpha1.NodeMaintenance) map[corev1.NodeConditionType]corev1.NodeCondition {
	return NodeConditions(nm, &nm.Status, nm.Status.Decision != nil && needsDrain(&nm.Status))
}

// syncConditionsOf is the node-conditions controller's reconcile: node
// name carries what its request, as the cache shows it, says (nothing
// when there is none, or it ended).
func (r *Reconciler) syncConditionsOf(ctx context.Context, name string) error {
	node, err := r.getNode(ctx, name)
	if err != nil || node == nil {
		return err
	}
	var want map[corev1.NodeConditionType]corev1.NodeCondition
	nm := &lullv1alpha1.NodeMaintenance{}
	switch err := r.Client.Get(ctx, types.NamespacedName{Name: name}, nm); {
	case apierrors.IsNotFound(err):
	case err != nil:
		return fmt.Errorf("getting NodeMaintenance %s: %w", name, err)
	default:
		want = wantedOn(nm)
	}
	return r.syncNodeConditions(ctx, node, want, r.Clock.Now())
}

// setupNodeConditions registers the node-conditions controller: a
// request whose conditions change (its phase, its plan), is created or
// deleted, and a node whose lifecycle conditions change (lull's or
// another tool's), or which is seen for the first time with lull's
// conditions or a request, are looked at conditionsDelay later.
func (r *Reconciler) setupNodeConditions(mgr manager.Manager) error {
	later := func(o client.Object, q workqueue.TypedRateLimitingInterface[reconcile.Request]) {
		q.AddAfter(reconcile.Request{NamespacedName: types.NamespacedName{Name: o.GetName()}}, conditionsDelay)
	}
	requests := handler.TypedFuncs[client.Object, reconcile.Request]{
		CreateFunc: func(_ context.Context, e event.CreateEvent, q workqueue.TypedRateLimitingInterface[reconcile.Request]) {
			later(e.Object, q)
		},
		UpdateFunc: func(_ context.Context, e event.UpdateEvent, q workqueue.TypedRateLimitingInterface[reconcile.Request]) {
			o, ok1 := e.ObjectOld.(*lullv1alpha1.NodeMaintenance)
			n, ok2 := e.ObjectNew.(*lullv1alpha1.NodeMaintenance)
			if !ok1 || !ok2 || !equality.Semantic.DeepEqual(wantedOn(o), wantedOn(n)) {
				later(e.ObjectNew, q)
			}
		},
		DeleteFunc: func(_ context.Context, e event.DeleteEvent, q workqueue.TypedRateLimitingInterface[reconcile.Request]) {
			later(e.Object, q)
		},
	}
	nodes := handler.TypedFuncs[client.Object, reconcile.Request]{
		// A node seen for the first time (the drainer starting, or a node
		// registered again under its name) is looked at when it carries
		// lull's conditions or has a request.
		CreateFunc: func(ctx context.Context, e event.CreateEvent, q workqueue.TypedRateLimitingInterface[reconcile.Request]) {
			if n, ok := e.Object.(*corev1.Node); ok && (len(lifecycleOn(n, true)) > 0 || r.hasRequest(ctx, n.Name)) {
				later(e.Object, q)
			}
		},
		// Any change of a lifecycle condition, lull's or another tool's
		// (one that goes leaves its type to lull).
		UpdateFunc: func(_ context.Context, e event.UpdateEvent, q workqueue.TypedRateLimitingInterface[reconcile.Request]) {
			o, ok1 := e.ObjectOld.(*corev1.Node)
			n, ok2 := e.ObjectNew.(*corev1.Node)
			if ok1 && ok2 && !equality.Semantic.DeepEqual(lifecycleOn(o, false), lifecycleOn(n, false)) {
				later(e.ObjectNew, q)
			}
		},
	}
	return ctrl.NewControllerManagedBy(mgr).
		Named("nodeconditions").
		Watches(&lullv1alpha1.NodeMaintenance{}, requests).
		Watches(&corev1.Node{}, nodes).
		WithOptions(controller.Options{MaxConcurrentReconciles: 2}).
		Complete(reconcile.Func(func(ctx context.Context, req reconcile.Request) (reconcile.Result, error) {
			return reconcile.Result{}, r.syncConditionsOf(ctx, req.Name)
		}))
}

// lifecycleOn is node's lifecycle conditions, lull's only (reason Lull…)
// or everyone's.
func lifecycleOn(node *corev1.Node, lullsOnly bool) []corev1.NodeCondition {
	var out []corev1.NodeCondition
	for _, c := range node.Status.Conditions {
		if slices.Contains(lifecycleConditions, c.Type) && (!lullsOnly || strings.HasPrefix(c.Reason, ReasonPrefix)) {
			out = append(out, c)
		}
	}
	return out
}

// hasRequest reports whether the cache holds a request for node name (or
// cannot say).
func (r *Reconciler) hasRequest(ctx context.Context, name string) bool {
	err := r.Client.Get(ctx, types.NamespacedName{Name: name}, &lullv1alpha1.NodeMaintenance{})
	return !apierrors.IsNotFound(err)
}

// syncNodeConditions makes node carry the conditions want (lull's) in one
// patch of its status, touching only lull's own; it writes nothing when
// the node carries them already. With --node-conditions=false it wants
// none: lull's own go, and no new one is written.
//
// The patch is a JSON patch by position, each of lull's entries tested
// first (its type and reason where lull read it): another tool's
// condition of the same type, or one that replaced lull's since the cache
// saw the node, is never overwritten or removed (a strategic merge patch
// keys conditions by type alone). A patch whose tests fail is made again
// from the node as the API server has it.
func (r *Reconciler) syncNodeConditions(ctx context.Context, node *corev1.Node, want map[corev1.NodeConditionType]corev1.NodeCondition, now time.Time) error {
	if node == nil {
		return nil
	}
	if !r.Options.NodeConditions {
		want = nil
	}
	for attempt := 0; ; attempt++ {
		ops := conditionsPatch(node, want, now)
		if len(ops) == 0 {
			return nil
		}
		b, err := json.Marshal(ops)
		if err != nil {
			return err
		}
		err = r.Client.Status().Patch(ctx, node, client.RawPatch(types.JSONPatchType, b))
		switch {
		case err == nil || apierrors.IsNotFound(err):
			return nil
		case attempt < 2:
			// A test failed (the node changed since it was read; the API
			// server says 422, a fake client otherwise), or the write did:
			// look again at the node as it is.
			var live corev1.Node
			if gerr := r.live().Get(ctx, client.ObjectKey{Name: node.Name}, &live); gerr != nil {
				return fmt.Errorf("writing lull's conditions on node %s: %w (reading it again: %v)", node.Name, err, gerr) //nolint:errorlint // the write's error is the one wrapped; the re-read's is context only
			}
			*node = live
		default:
			return fmt.Errorf("writing lull's conditions on node %s: %w", node.Name, err)
		}
	}
}

// conditionsPatch is the JSON patch that turns node's lull conditions
// into want: lull's entries (reason Lull…) replaced or removed where they
// are, each tested first; missing ones added at the end; every other
// entry untouched. Extra entries of lull's of one type (none should be)
// go too.
func conditionsPatch(node *corev1.Node, want map[corev1.NodeConditionType]corev1.NodeCondition, now time.Time) []map[string]any {
	var replace, remove []map[string]any
	var removeAt []int
	have := map[corev1.NodeConditionType]bool{}
	for i, c := range node.Status.Conditions {
		if !slices.Contains(lifecycleConditions, c.Type) || !strings.HasPrefix(c.Reason, ReasonPrefix) {
			continue
		}
		path := fmt.Sprintf("/status/conditions/%d", i)
		test := []map[string]any{{"op": "test", "path": path + "/type", "value": string(c.Type)}, {"op": "test", "path": path + "/reason", "value": c.Reason}}
		w, wanted := want[c.Type]
		if !wanted || have[c.Type] {
			remove = append(remove, test...)
			removeAt = append(removeAt, i)
			continue
		}
		have[c.Type] = true
		if c.Status == w.Status && c.Reason == w.Reason && c.Message == w.Message {
			continue
		}
		replace = append(replace, test...)
		replace = append(replace, map[string]any{"op": "replace", "path": path, "value": conditionValue(w, &c, now)})
	}
	var add []map[string]any
	for _, t := range lifecycleConditions {
		w, wanted := want[t]
		if !wanted || have[t] || foreign(node, t) {
			continue
		}
		add = append(add, map[string]any{"op": "add", "path": "/status/conditions/-", "value": conditionValue(w, nil, now)})
	}
	if len(replace)+len(removeAt)+len(add) == 0 {
		return nil
	}
	// The whole patch holds only for the node as lull read it: an add has
	// nothing to test (a condition of another tool's of that type the
	// read did not show yet would get lull's beside it), and a read that
	// showed no conditions at all would make the list anew over the ones
	// it did not show. A node changed since is read again.
	ops := []map[string]any{{"op": "test", "path": "/metadata/resourceVersion", "value": node.ResourceVersion}}
	ops = append(append(ops, remove...), replace...)
	// Removals last and from the end, so that no index moves before it
	// is used.
	slices.Sort(removeAt)
	for k := len(removeAt) - 1; k >= 0; k-- {
		ops = append(ops, map[string]any{"op": "remove", "path": fmt.Sprintf("/status/conditions/%d", removeAt[k])})
	}
	if len(node.Status.Conditions) == 0 && len(add) > 0 {
		// No list to append to: make it.
		ops = append(ops, map[string]any{"op": "add", "path": "/status/conditions", "value": []any{}})
	}
	return append(ops, add...)
}

// foreign reports whether node carries a condition of type t that is not
// lull's: lull then writes none of that type.
func foreign(node *corev1.Node, t corev1.NodeConditionType) bool {
	return slices.ContainsFunc(node.Status.Conditions, func(c corev1.NodeCondition) bool {
		return c.Type == t && !strings.HasPrefix(c.Reason, ReasonPrefix)
	})
}

// conditionValue is the JSON of condition w, its transition time kept
// from cur when its status did not change.
func conditionValue(w corev1.NodeCondition, cur *corev1.NodeCondition, now time.Time) map[string]any {
	at := now.UTC().Format(time.RFC3339)
	transition := at
	if cur != nil && cur.Status == w.Status && !cur.LastTransitionTime.IsZero() {
		transition = cur.LastTransitionTime.UTC().Format(time.RFC3339)
	}
	return map[string]any{"type": string(w.Type), "status": string(w.Status), "reason": w.Reason, "message": w.Message,
		"lastHeartbeatTime": at, "lastTransitionTime": transition}
}
