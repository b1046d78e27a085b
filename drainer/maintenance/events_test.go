package maintenance

import (
	"errors"
	"go/ast"
	"go/parser"
	"go/token"
	"strconv"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	lullv1alpha1 "lull.dev/lull/api/v1alpha1"
	"lull.dev/lull/internal/gate"
)

// every event each unit of the controller raises, built by its
// constructor.
func everyEvent() []evt {
	steps := []lullv1alpha1.PlannedStep{{Type: lullv1alpha1.ActionCordon}, {Type: lullv1alpha1.ActionDrain}}
	actions := []lullv1alpha1.ActionStatus{{Type: lullv1alpha1.StepReboot, State: lullv1alpha1.ActionPending}}
	return []evt{
		eventHeldByGate(gate.Verdict{Reason: gate.ReasonNodeUnwell, Message: "node n2 is not Ready"}),
		eventHeldByGate(gate.Verdict{Reason: "AlertsFiring", Message: "alert X is firing"}),
		eventWaitingForLease("held by kured"),
		eventStarted("", ""),
		eventStarted("node cordoned by lull", "kernel-update: Drain"),
		eventPolicyDecided([]string{"kernel-update"}, nil, lullv1alpha1.Decision{Action: lullv1alpha1.ActionDrain, Steps: steps}),
		eventInvalidLabel("lull.dev/maintenance", "Bad Class", errors.New("invalid"), false),
		eventInvalidLabel("lull.dev/maintenance", "Bad Class", errors.New("invalid"), true),
		eventCordoned("node cordoned by lull"),
		eventUncordonedByOthers("n1", lullv1alpha1.PhaseDrained),
		eventLeaseLost("kured/n1"),
		eventPaused("the window closed"),
		eventDrainBlocked("shop/db", []string{"shop/db-0"}),
		eventForceDeleted("shop/db-0"),
		eventNoAgent("no lull-agent runs on node n1"),
		eventAgentAway("WriteFiles is past its timeout 5m0s, but lull-agent is away"),
		eventActing(actions),
		eventCameBack(),
		eventStepFailed("Reboot TimedOut"),
		eventNodeUnwell("Reboot timed out and the node is not seen back (not Ready)"),
		eventFellBack("RestartService chronyd Failed; falling back to a reboot"),
		eventPoweredOff(),
		eventAborted("the window closed during the drain"),
		eventCompleted(&lullv1alpha1.NodeMaintenanceStatus{}),
		eventNodeDeleted(),
		eventNodeNotFound("n9"),
		eventNoDisruption("nothing to do"),
		eventUninstalled("lull was uninstalled"),
	}
}

// Every event has a type, a reason and a message, and every reason the
// package declares is raised by some constructor: a reason declared and
// never raised is a promise nobody keeps.
func TestEveryReasonIsRaised(t *testing.T) {
	raised := map[string]bool{}
	for _, e := range everyEvent() {
		require.Contains(t, []string{corev1.EventTypeNormal, corev1.EventTypeWarning}, e.Type, "%+v", e)
		require.NotEmpty(t, e.Reason, "%+v", e)
		require.NotEmpty(t, e.Message, "%+v", e)
		raised[e.Reason] = true
	}
	f, err := parser.ParseFile(token.NewFileSet(), "events.go", nil, 0)
	require.NoError(t, err)
	declared := 0
	ast.Inspect(f, func(n ast.Node) bool {
		vs, ok := n.(*ast.ValueSpec)
		if !ok || len(vs.Names) != 1 || len(vs.Values) != 1 {
			return true
		}
		lit, ok := vs.Values[0].(*ast.BasicLit)
		if !ok || len(vs.Names[0].Name) < len("Reason") || vs.Names[0].Name[:6] != "Reason" {
			return true
		}
		declared++
		reason, _ := strconv.Unquote(lit.Value)
		assert.True(t, raised[reason], "reason %s (%s) is declared but no constructor raises it", vs.Names[0].Name, reason)
		return true
	})
	assert.Greater(t, declared, 20, "the reasons are declared in events.go")
}

// What matters to people in a few of them.
func TestEventTypes(t *testing.T) {
	assert.Equal(t, corev1.EventTypeWarning, eventHeldByGate(gate.Verdict{Reason: gate.ReasonAlertsUnknown}).Type, "alerts that cannot be read")
	assert.Equal(t, corev1.EventTypeNormal, eventHeldByGate(gate.Verdict{Reason: "AlertsFiring"}).Type, "a gate doing its job")
	assert.Equal(t, "lease acquired", eventStarted("", "").Message)
	assert.Equal(t, "lease acquired; node cordoned by lull", eventStarted("node cordoned by lull", "").Message)
	assert.Equal(t, "lease acquired; node cordoned by lull; kernel-update: Drain", eventStarted("node cordoned by lull", "kernel-update: Drain").Message)
	start := metav1.NewTime(time.Date(2026, 11, 27, 10, 0, 0, 0, time.UTC))
	drained := metav1.NewTime(start.Add(2130 * time.Millisecond))
	assert.Equal(t, "maintenance completed; node returned to service (drained 2.1s after the start, 3 pod(s) evicted)",
		eventCompleted(&lullv1alpha1.NodeMaintenanceStatus{StartedAt: &start, DrainedAt: &drained, Pods: &lullv1alpha1.PodCounts{Evicted: 3}}).Message)
	assert.Equal(t, "maintenance completed; node returned to service", eventCompleted(&lullv1alpha1.NodeMaintenanceStatus{}).Message, "a request that never drained")
	assert.Equal(t, "PodDisruptionBudget shop/db allows no disruption of shop/db-0, shop/db-1", eventDrainBlocked("shop/db", []string{"shop/db-0", "shop/db-1"}).Message)
	assert.Contains(t, eventUncordonedByOthers("n1", lullv1alpha1.PhaseDrained).Message, "node n1 was uncordoned by someone else while lull holds it for maintenance (phase Drained)")
	assert.Equal(t, corev1.EventTypeWarning, eventInvalidLabel("l", "c", errors.New("x"), true).Type)
}
