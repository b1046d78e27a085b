package gate

import (
	"context"
	"fmt"
	"strings"
	"time"

	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	lullv1alpha1 "lull.dev/lull/api/v1alpha1"
)

// A HealthGate is one kind of a window's health gate: a field of
// spec.gates (v1alpha1.Gates). The drainer's gate (CheckHealth), the
// window controller's conditions and metrics, and kubectl lull's plan and
// windows loop over HealthGates; none names a gate itself. Adding a gate
// kind is its field in v1alpha1.Gates and its entry here
// (TestEveryGatesFieldHasOneHealthGate fails until both are there).
type HealthGate interface {
	// Field is the gate's field in spec.gates, as its JSON names it.
	Field() string
	// Configured reports whether the window sets the gate.
	Configured(w *lullv1alpha1.MaintenanceWindow) bool
	// Judge says whether the gate holds node, a node the window governs.
	Judge(ctx context.Context, hc *healthCheck, w *lullv1alpha1.MaintenanceWindow, node string, now time.Time) (HealthVerdict, error)
	// Condition is the window status condition lull-drainer's window
	// controller keeps for the gate ("": none); it is removed from a
	// window that does not set the gate.
	Condition() string
	// View says what the gate says of the window as a whole, for kubectl
	// lull and the window metrics; PerNode is true for a gate judged only
	// node by node (Holds and Reason then say nothing).
	View(w *lullv1alpha1.MaintenanceWindow, now time.Time) View
}

// View is what one health gate says of a window.
type View struct {
	Gate    string
	Holds   bool
	Reason  string
	Message string
	// PerNode: the gate is judged node by node, not for the window.
	PerNode bool
}

// HealthGates are the health gates, in the order CheckHealth asks them
// for each window.
var HealthGates = []HealthGate{alertsHealth{}, blockingPodsHealth{}, recoveryHealth{}}

// healthCheck is one CheckHealth's view of the cluster, shared by the
// gates of every window it asks.
type healthCheck struct {
	src HealthSource
	// nms are the NodeMaintenances, listed once, for the first recovery
	// gate.
	nms *lullv1alpha1.NodeMaintenanceList
}

func (hc *healthCheck) requests(ctx context.Context) ([]lullv1alpha1.NodeMaintenance, error) {
	if hc.nms == nil {
		hc.nms = &lullv1alpha1.NodeMaintenanceList{}
		if err := hc.src.Reader.List(ctx, hc.nms, client.UnsafeDisableDeepCopy); err != nil {
			hc.nms = nil
			return nil, err
		}
	}
	return hc.nms.Items, nil
}

type alertsHealth struct{}

func (alertsHealth) Field() string { return "alerts" }
func (alertsHealth) Configured(w *lullv1alpha1.MaintenanceWindow) bool {
	return w.Spec.Gates != nil && w.Spec.Gates.Alerts != nil
}
func (alertsHealth) Judge(_ context.Context, _ *healthCheck, w *lullv1alpha1.MaintenanceWindow, _ string, now time.Time) (HealthVerdict, error) {
	return Alerts(w, now), nil
}
func (alertsHealth) Condition() string { return lullv1alpha1.WindowConditionAlertsQuiet }
func (alertsHealth) View(w *lullv1alpha1.MaintenanceWindow, now time.Time) View {
	v := Alerts(w, now)
	return View{Gate: "alerts", Holds: v.Hold, Reason: v.Reason, Message: v.Message}
}

type blockingPodsHealth struct{}

func (blockingPodsHealth) Field() string { return "blockingPods" }
func (blockingPodsHealth) Configured(w *lullv1alpha1.MaintenanceWindow) bool {
	return w.Spec.Gates != nil && len(w.Spec.Gates.BlockingPods) > 0
}
func (blockingPodsHealth) Judge(ctx context.Context, hc *healthCheck, w *lullv1alpha1.MaintenanceWindow, node string, _ time.Time) (HealthVerdict, error) {
	return blockingPods(ctx, hc.src, w, node)
}
func (blockingPodsHealth) Condition() string { return "" }
func (blockingPodsHealth) View(w *lullv1alpha1.MaintenanceWindow, _ time.Time) View {
	sels := make([]string, len(w.Spec.Gates.BlockingPods))
	for i := range w.Spec.Gates.BlockingPods {
		sels[i] = metav1.FormatLabelSelector(&w.Spec.Gates.BlockingPods[i])
	}
	return View{Gate: "blockingPods", PerNode: true,
		Message: "a node does not start while pods matching " + strings.Join(sels, " or ") + " run on it"}
}

type recoveryHealth struct{}

func (recoveryHealth) Field() string { return "recovery" }
func (recoveryHealth) Configured(w *lullv1alpha1.MaintenanceWindow) bool {
	return w.Spec.Gates != nil && w.Spec.Gates.Recovery != nil
}
func (recoveryHealth) Judge(ctx context.Context, hc *healthCheck, w *lullv1alpha1.MaintenanceWindow, node string, now time.Time) (HealthVerdict, error) {
	nms, err := hc.requests(ctx)
	if err != nil {
		return HealthVerdict{}, fmt.Errorf("listing NodeMaintenances for window %s's recovery gate: %w", w.Name, err)
	}
	return Recovery(ctx, hc.src, w, nms, node, now)
}
func (recoveryHealth) Condition() string { return lullv1alpha1.WindowConditionRecovered }

// View is the recovery gate as lull-drainer last judged it for the window
// (its condition Recovered, for the window's current generation).
func (recoveryHealth) View(w *lullv1alpha1.MaintenanceWindow, _ time.Time) View {
	v := View{Gate: "recovery", Holds: true, Reason: ReasonUnknown, Message: "lull-drainer has not judged it yet"}
	if c := meta.FindStatusCondition(w.Status.Conditions, lullv1alpha1.WindowConditionRecovered); c != nil && c.ObservedGeneration == w.Generation {
		v.Holds, v.Reason, v.Message = c.Status != metav1.ConditionTrue, c.Reason, c.Message
	}
	return v
}

// Views says what each gate the window sets says of it.
func Views(w *lullv1alpha1.MaintenanceWindow, now time.Time) []View {
	var out []View
	for _, g := range HealthGates {
		if g.Configured(w) {
			out = append(out, g.View(w, now))
		}
	}
	return out
}
