package agent

import (
	"context"
	"fmt"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"sigs.k8s.io/controller-runtime/pkg/reconcile"

	lullv1alpha1 "lull.dev/lull/api/v1alpha1"
)

// outcome is the state a step's run leaves it in.
func outcome(ctx context.Context, t lullv1alpha1.DisruptionAction, err error) lullv1alpha1.ActionState {
	switch {
	case err != nil && ctx.Err() != nil:
		return lullv1alpha1.ActionTimedOut
	case err != nil:
		return lullv1alpha1.ActionFailed
	case t.TakesNodeDown():
		// Issued: the drainer sees the node come back, or stay down.
		return lullv1alpha1.ActionRunning
	}
	return lullv1alpha1.ActionSucceeded
}

func message(out string, err error, state lullv1alpha1.ActionState, timeout time.Duration) string {
	msg := out
	switch {
	case state == lullv1alpha1.ActionTimedOut:
		msg = fmt.Sprintf("did not finish within %s", timeout)
		if out != "" {
			msg += "; last output: " + out
		}
	case err != nil:
		msg = err.Error()
		if out != "" {
			msg += "; last output: " + out
		}
	}
	if len(msg) > 1024 {
		msg = msg[:1021] + "..."
	}
	return msg
}

// record writes how step i ended, on the request as it is now (the
// drainer may have written since): only that step's fields change.
func (a *Agent) record(ctx context.Context, nm *lullv1alpha1.NodeMaintenance, i int, state lullv1alpha1.ActionState, msg string) (reconcile.Result, error) {
	label := nm.Status.Actions[i].Label()
	for attempt := 0; ; attempt++ {
		st := &nm.Status.Actions[i]
		if st.State.Done() {
			return reconcile.Result{}, nil // the drainer ended it (timed out) meanwhile
		}
		st.State, st.Message, st.FinishedAt = state, msg, &metav1.Time{Time: a.Clock.Now()}
		err := a.Client.Status().Update(ctx, nm)
		if err == nil {
			break
		}
		if !apierrors.IsConflict(err) || attempt >= 5 {
			return reconcile.Result{}, fmt.Errorf("recording %s %s: %w", label, state, err)
		}
		fresh := &lullv1alpha1.NodeMaintenance{}
		if err := a.Live.Get(ctx, types.NamespacedName{Name: nm.Name}, fresh); err != nil {
			return reconcile.Result{}, fmt.Errorf("re-reading NodeMaintenance %s: %w", nm.Name, err)
		}
		if fresh.UID != nm.UID || len(fresh.Status.Actions) <= i || fresh.Status.Actions[i].Label() != label {
			return reconcile.Result{}, nil
		}
		nm = fresh
	}
	switch state {
	case lullv1alpha1.ActionSucceeded:
		a.event(nm, corev1.EventTypeNormal, ReasonActionSucceeded, fmt.Sprintf("%s succeeded: %s", label, msg))
	case lullv1alpha1.ActionFailed, lullv1alpha1.ActionTimedOut:
		reason := ReasonActionFailed
		if state == lullv1alpha1.ActionTimedOut {
			reason = ReasonActionTimedOut
		}
		then := "; the request fails"
		if nm.Status.Actions[i].Type.FallsBack() {
			then = "; lull falls back to a reboot"
		}
		a.event(nm, corev1.EventTypeWarning, reason, fmt.Sprintf("%s %s: %s%s", label, state, msg, then))
	}
	return reconcile.Result{}, nil
}

func (a *Agent) event(nm *lullv1alpha1.NodeMaintenance, eventType, reason, msg string) {
	if a.Recorder != nil {
		a.Recorder.Eventf(nm, nil, eventType, reason, "Act", "%s", msg)
	}
}
