package gate

import (
	"context"
	"fmt"
	"slices"
	"strings"
	"time"

	corev1 "k8s.io/api/core/v1"
	policyv1 "k8s.io/api/policy/v1"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/fields"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/kubernetes"
	"sigs.k8s.io/controller-runtime/pkg/client"

	lullv1alpha1 "lull.dev/lull/api/v1alpha1"
)

// Health: a gate of the node's windows (spec.gates) holds it: matching
// alerts fire (or could not be asked), pods block the node, or a node the
// window finished is not back to health yet.
const Health Name = "Health"

// Reasons the health gates give (the GatesPass condition's and the
// window conditions' reasons).
const (
	ReasonGatesPass     = "GatesPass"
	ReasonAlertsQuiet   = "AlertsQuiet"
	ReasonAlertsFiring  = "AlertsFiring"
	ReasonAlertsUnknown = "AlertsUnknown"
	ReasonBlockingPods  = "BlockingPods"
	ReasonRecovered     = "Recovered"
	ReasonSettling      = "Settling"
	ReasonNodeUnwell    = "NodeUnwell"
)

// healthRetry is when a request a health gate holds looks again by itself
// (pods starting and stopping do not wake it; window conditions do).
const healthRetry = 30 * time.Second

// staleAlertPeriods: an alerts gate not asked for this many periods holds.
const staleAlertPeriods = 3

// HealthVerdict is the health gates' answer for one node.
type HealthVerdict struct {
	// Hold is true while a gate keeps the node from starting.
	Hold bool
	// Reason and Message say why.
	Reason, Message string
	// RetryAfter is when the answer may change by itself.
	RetryAfter time.Duration
}

// HealthSource is where the health gates read the cluster: lull-drainer
// reads its cache and lists a node's pods from the API server; the
// preview reads its snapshot.
type HealthSource struct {
	// Reader reads NodeMaintenances, Nodes and PodDisruptionBudgets.
	Reader client.Reader
	// Pods lists the pods on a node that match a selector.
	Pods func(ctx context.Context, node string, sel labels.Selector) ([]corev1.Pod, error)
	// Ended, when set, says when a request this process ended did (its
	// finished status written), for a Reader that may not show it yet:
	// lull-drainer's cache lags its own writes, and the request woken for
	// the slot a completion freed is judged at once
	// (TestRecoveryGateHaltsTheWave).
	Ended func(uid types.UID) (time.Time, bool)
}

// PodsFromAPI lists a node's pods from the API server (a field selector
// on spec.nodeName): neither lull-drainer nor the preview caches pods.
func PodsFromAPI(kube kubernetes.Interface) func(ctx context.Context, node string, sel labels.Selector) ([]corev1.Pod, error) {
	return func(ctx context.Context, node string, sel labels.Selector) ([]corev1.Pod, error) {
		list, err := kube.CoreV1().Pods(metav1.NamespaceAll).List(ctx, metav1.ListOptions{
			FieldSelector: fields.OneTermEqualSelector("spec.nodeName", node).String(), LabelSelector: sel.String()})
		if err != nil {
			return nil, err
		}
		return list.Items, nil
	}
}

// hasGates reports whether any of the windows sets a health gate.
func hasGates(ws []*lullv1alpha1.MaintenanceWindow) bool {
	for _, w := range ws {
		for _, g := range HealthGates {
			if g.Configured(w) {
				return true
			}
		}
	}
	return false
}

// CheckHealth runs the gates of the node's windows, window by window in
// name order, each window's gates in HealthGates' order (alerts, blocking
// pods, recovery); the first that holds answers. Windows without gates
// give the zero verdict (no reason: nothing to show). An error (a read
// that failed) decides nothing.
func CheckHealth(ctx context.Context, src HealthSource, ws []*lullv1alpha1.MaintenanceWindow, node string, now time.Time) (HealthVerdict, error) {
	if !hasGates(ws) {
		return HealthVerdict{}, nil
	}
	ws = slices.Clone(ws)
	slices.SortFunc(ws, func(a, b *lullv1alpha1.MaintenanceWindow) int { return strings.Compare(a.Name, b.Name) })
	hc := &healthCheck{src: src}
	for _, w := range ws {
		for _, g := range HealthGates {
			if !g.Configured(w) {
				continue
			}
			v, err := g.Judge(ctx, hc, w, node, now)
			if err != nil || v.Hold {
				return v, err
			}
		}
	}
	return HealthVerdict{Reason: ReasonGatesPass, Message: "the windows' gates pass"}, nil
}

// Alerts is the alerts gate of a window as its status shows it: lull-
// drainer's window controller asks the server every period and records
// the answer in the AlertsQuiet condition. It holds unless that condition
// is True, for the window's current generation, and was asked within
// three periods.
func Alerts(w *lullv1alpha1.MaintenanceWindow, now time.Time) HealthVerdict {
	g := w.Spec.Gates.Alerts
	hold := func(reason, msg string) HealthVerdict {
		return HealthVerdict{Hold: true, Reason: reason, Message: fmt.Sprintf("window %s's alerts gate: %s", w.Name, msg), RetryAfter: g.AlertsPeriod()}
	}
	c := meta.FindStatusCondition(w.Status.Conditions, lullv1alpha1.WindowConditionAlertsQuiet)
	switch {
	case c == nil || c.ObservedGeneration != w.Generation || w.Status.Alerts == nil:
		return hold(ReasonAlertsUnknown, fmt.Sprintf("%s has not been asked yet", g.URL))
	case now.Sub(w.Status.Alerts.CheckedAt.Time) > staleAlertPeriods*g.AlertsPeriod()+time.Second:
		return hold(ReasonAlertsUnknown, fmt.Sprintf("%s not asked since %s (every %s)",
			g.URL, w.Status.Alerts.CheckedAt.UTC().Format(time.RFC3339), g.AlertsPeriod()))
	case c.Status != metav1.ConditionTrue:
		return hold(c.Reason, c.Message)
	}
	return HealthVerdict{Reason: ReasonAlertsQuiet, Message: c.Message}
}

// blockingPods holds while a pod matching one of the window's selectors
// runs (or is about to) on the node.
func blockingPods(ctx context.Context, src HealthSource, w *lullv1alpha1.MaintenanceWindow, node string) (HealthVerdict, error) {
	var found []string
	for i := range w.Spec.Gates.BlockingPods {
		sel, err := metav1.LabelSelectorAsSelector(&w.Spec.Gates.BlockingPods[i])
		if err != nil {
			return HealthVerdict{Hold: true, Reason: ReasonBlockingPods, RetryAfter: healthRetry,
				Message: fmt.Sprintf("window %s's blockingPods[%d] is not a valid selector (%v): fix it; until then no node of the window starts", w.Name, i, err)}, nil
		}
		pods, err := src.Pods(ctx, node, sel)
		if err != nil {
			return HealthVerdict{}, fmt.Errorf("listing pods on node %s for window %s's blockingPods: %w", node, w.Name, err)
		}
		for _, p := range pods {
			if p.Status.Phase == corev1.PodSucceeded || p.Status.Phase == corev1.PodFailed {
				continue
			}
			if id := p.Namespace + "/" + p.Name; !slices.Contains(found, id) {
				found = append(found, id)
			}
		}
	}
	if len(found) == 0 {
		return HealthVerdict{}, nil
	}
	slices.Sort(found)
	return HealthVerdict{Hold: true, Reason: ReasonBlockingPods, RetryAfter: healthRetry,
		Message: fmt.Sprintf("window %s's blockingPods: %s run on node %s", w.Name, listSome(found, 5), node)}, nil
}

// Recovery is the recovery gate of a window: every node whose request the
// window governed and which finished (Completed or Failed after it
// started, or uncordoning) must be Ready, and the PodDisruptionBudgets that covered the
// pods evicted from it healthy (currentHealthy >= desiredHealthy), for
// the settle time. It is judged from the conditions' transition times, so
// it needs no memory of its own and survives restarts:
//   - a node well since W holds the wave until W + settle (Settling), W
//     being the latest of its finish and the transitions to well;
//   - a node unwell since U holds it (NodeUnwell) unless U is a settle
//     time or more after its finish: such a node recovered and went
//     wrong later, which is not the wave's doing.
//
// The node being gated (skip) is left out: its own earlier request must
// not stop the one meant to mend it.
func Recovery(ctx context.Context, src HealthSource, w *lullv1alpha1.MaintenanceWindow, nms []lullv1alpha1.NodeMaintenance, skip string, now time.Time) (HealthVerdict, error) {
	settle := w.Spec.Gates.Recovery.Settle()
	// While nodes settle, the message names the one settling longest; the
	// gate looks again when the first could change.
	var settling *HealthVerdict
	var last time.Time
	wait := func(until time.Time, retry time.Duration, msg string) {
		if settling == nil {
			settling = &HealthVerdict{Hold: true, Reason: ReasonSettling, RetryAfter: retry}
		}
		settling.RetryAfter = min(settling.RetryAfter, retry)
		if !until.Before(last) {
			last, settling.Message = until, msg
		}
	}
	cl := &clusterView{r: src.Reader}
	for i := range nms {
		nm := &nms[i]
		finished, ok := src.finished(nm, now)
		if !ok || nm.Status.StartedAt == nil || nm.Spec.NodeName == skip || !slices.Contains(nm.Status.Windows, w.Name) {
			continue
		}
		settled := finished.Add(settle)
		h, err := nodeHealth(ctx, cl, nm, finished, settle, now)
		switch {
		case err != nil:
			return HealthVerdict{}, err
		case h.unwell != "":
			return HealthVerdict{Hold: true, Reason: ReasonNodeUnwell, RetryAfter: healthRetry,
				Message: fmt.Sprintf("window %s's recovery gate halts the wave: node %s came back unwell after its maintenance (finished %s): %s",
					w.Name, nm.Spec.NodeName, finished.UTC().Format(time.RFC3339), h.unwell)}, nil
		case h.recovering != "":
			wait(settled, min(healthRetry, settled.Sub(now)), fmt.Sprintf(
				"window %s's recovery gate: node %s finished at %s and its workloads are recovering: %s (the wave halts if they still are at %s)",
				w.Name, nm.Spec.NodeName, finished.UTC().Format(time.RFC3339), h.recovering, settled.UTC().Format(time.RFC3339)))
		case now.Before(h.wellSince.Add(settle)):
			until := h.wellSince.Add(settle)
			wait(until, until.Sub(now), fmt.Sprintf(
				"window %s's recovery gate: node %s is well since %s; the next node starts once it has stayed well until %s (settleTime %s)",
				w.Name, nm.Spec.NodeName, h.wellSince.UTC().Format(time.RFC3339), until.UTC().Format(time.RFC3339), settle))
		}
	}
	if settling != nil {
		return *settling, nil
	}
	return HealthVerdict{Reason: ReasonRecovered, Message: "every node the window finished is back to health"}, nil
}

// finished says whether nm has ended or is ending, by the reader or by
// src.Ended, and when it finished: a request still uncordoning has given
// its budget slot back, so it finishes now.
func (src HealthSource) finished(nm *lullv1alpha1.NodeMaintenance, now time.Time) (time.Time, bool) {
	if nm.Status.Phase.Ending() {
		if c := nm.Status.CompletedAt; c != nil && c.Time.Before(now) {
			return c.Time, true
		}
		return now, true
	}
	if src.Ended == nil {
		return time.Time{}, false
	}
	at, ok := src.Ended(nm.UID)
	if !ok {
		return time.Time{}, false
	}
	if at.After(now) {
		return now, true
	}
	return at, true
}

// health is one finished node's state.
type health struct {
	// unwell says what is wrong with it: the node not Ready, or a budget
	// of its evicted pods still unhealthy a settle time after it
	// finished. What went wrong only a settle time or more after it
	// finished is left out: the node had recovered.
	unwell string
	// recovering names the budgets still short of healthy pods within the
	// settle time after the node finished: the wave waits for them.
	recovering string
	// wellSince is since when everything is well.
	wellSince time.Time
}

// clusterView reads the nodes and budgets the recovery gate judges, each
// kind listed once per judgement (read-only, not copied: lull-drainer's
// cache holds thousands of nodes, and one Get each copied every node of a
// finished wave for every held request).
type clusterView struct {
	r     client.Reader
	nodes map[string]*corev1.Node
	pdbs  map[string]*policyv1.PodDisruptionBudget
}

func (v *clusterView) node(ctx context.Context, name string) (*corev1.Node, error) {
	if v.nodes == nil {
		var list corev1.NodeList
		if err := v.r.List(ctx, &list, client.UnsafeDisableDeepCopy); err != nil {
			return nil, fmt.Errorf("listing nodes for the recovery gate: %w", err)
		}
		v.nodes = make(map[string]*corev1.Node, len(list.Items))
		for i := range list.Items {
			v.nodes[list.Items[i].Name] = &list.Items[i]
		}
	}
	return v.nodes[name], nil
}

func (v *clusterView) pdb(ctx context.Context, id string) (*policyv1.PodDisruptionBudget, error) {
	if v.pdbs == nil {
		var list policyv1.PodDisruptionBudgetList
		if err := v.r.List(ctx, &list, client.UnsafeDisableDeepCopy); err != nil {
			return nil, fmt.Errorf("listing PodDisruptionBudgets for the recovery gate: %w", err)
		}
		v.pdbs = make(map[string]*policyv1.PodDisruptionBudget, len(list.Items))
		for i := range list.Items {
			v.pdbs[list.Items[i].Namespace+"/"+list.Items[i].Name] = &list.Items[i]
		}
	}
	return v.pdbs[id], nil
}

// nodeHealth judges one finished node by its Ready condition and the
// budgets of the pods lull evicted from it.
func nodeHealth(ctx context.Context, cl *clusterView, nm *lullv1alpha1.NodeMaintenance, finished time.Time, settle time.Duration, now time.Time) (health, error) {
	h := health{wellSince: finished}
	settled := finished.Add(settle)
	var wrong, short []string
	node, err := cl.node(ctx, nm.Spec.NodeName)
	switch {
	case err != nil:
		return h, err
	case node == nil:
		return h, nil // the node is gone: nothing to wait for
	}
	ready := ReadyCondition(node)
	switch {
	case ready == nil:
		wrong = append(wrong, "its Ready condition is missing")
	case ready.Status != corev1.ConditionTrue:
		if ready.LastTransitionTime.Time.Before(settled) {
			wrong = append(wrong, fmt.Sprintf("Ready is %s since %s (%s: %s)", ready.Status,
				ready.LastTransitionTime.UTC().Format(time.RFC3339), ready.Reason, ready.Message))
		}
	case ready.LastTransitionTime.After(h.wellSince):
		h.wellSince = ready.LastTransitionTime.Time
	}
	for _, id := range nm.Status.PodDisruptionBudgets {
		pdb, err := cl.pdb(ctx, id)
		if err != nil {
			return h, err
		}
		if pdb == nil {
			continue // deleted since: it no longer speaks for the workload
		}
		allowed := meta.FindStatusCondition(pdb.Status.Conditions, policyv1.DisruptionAllowedCondition)
		if pdb.Status.ObservedGeneration >= pdb.Generation && pdb.Status.CurrentHealthy >= pdb.Status.DesiredHealthy {
			if allowed != nil && allowed.Status == metav1.ConditionTrue && allowed.LastTransitionTime.After(h.wellSince) {
				h.wellSince = allowed.LastTransitionTime.Time
			}
			continue
		}
		since := finished
		if allowed != nil && allowed.Status != metav1.ConditionTrue {
			since = allowed.LastTransitionTime.Time
		}
		if !since.Before(settled) {
			continue // went wrong after the node had recovered
		}
		what := fmt.Sprintf("PodDisruptionBudget %s has %d of the %d healthy pods it needs", id, pdb.Status.CurrentHealthy, pdb.Status.DesiredHealthy)
		if now.Before(settled) {
			short = append(short, what)
		} else {
			wrong = append(wrong, what+fmt.Sprintf(", %s after the node finished", settle))
		}
	}
	h.unwell, h.recovering = strings.Join(wrong, "; "), strings.Join(short, "; ")
	return h, nil
}

// ReadyCondition is the node's Ready condition (nil: it has none).
func ReadyCondition(n *corev1.Node) *corev1.NodeCondition {
	for i := range n.Status.Conditions {
		if n.Status.Conditions[i].Type == corev1.NodeReady {
			return &n.Status.Conditions[i]
		}
	}
	return nil
}

// listSome lists at most limit items, then how many more.
func listSome(items []string, limit int) string {
	if len(items) <= limit {
		return strings.Join(items, ", ")
	}
	return fmt.Sprintf("%s and %d more", strings.Join(items[:limit], ", "), len(items)-limit)
}
