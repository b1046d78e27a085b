package windowcontroller

import (
	"context"
	"errors"
	"fmt"
	"time"

	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/klog/v2"

	lullv1alpha1 "lull.dev/lull/api/v1alpha1"
	"lull.dev/lull/drainer/alerts"
	"lull.dev/lull/internal/gate"
)

// recoveryRecheck is how often the Recovered condition is judged again.
const recoveryRecheck = 30 * time.Second

// maxFiringListed is how many firing alerts the window's status lists.
const maxFiringListed = 10

// gates brings the window's gate conditions up to date: it asks the
// alerts gate's server when a period has passed (or the spec changed)
// and judges the recovery gate. It returns when to look again (0: no
// gate needs it).
func (r *Reconciler) gates(ctx context.Context, mw *lullv1alpha1.MaintenanceWindow, nms []lullv1alpha1.NodeMaintenance, status *lullv1alpha1.MaintenanceWindowStatus, now time.Time) time.Duration {
	var g lullv1alpha1.Gates
	if mw.Spec.Gates != nil {
		g = *mw.Spec.Gates
	}
	var again time.Duration
	soonest := func(d time.Duration) {
		if d > 0 && (again == 0 || d < again) {
			again = d
		}
	}
	// A gate the window does not set keeps no condition.
	for _, hg := range gate.HealthGates {
		if c := hg.Condition(); c != "" && !hg.Configured(mw) {
			meta.RemoveStatusCondition(&status.Conditions, c)
		}
	}
	if g.Alerts == nil {
		status.Alerts = nil
	} else {
		period := g.Alerts.AlertsPeriod()
		c := meta.FindStatusCondition(status.Conditions, lullv1alpha1.WindowConditionAlertsQuiet)
		if status.Alerts == nil || c == nil || c.ObservedGeneration != mw.Generation || !now.Before(status.Alerts.CheckedAt.Add(period)) {
			r.askAlerts(ctx, mw, status, now)
		}
		soonest(status.Alerts.CheckedAt.Add(period).Sub(now))
	}
	if g.Recovery != nil {
		// As the drainer's gate judges it (internal/gate), for the window as a whole.
		v, err := gate.Recovery(ctx, gate.HealthSource{Reader: r.Client}, mw, nms, "", now)
		cond := metav1.Condition{Type: lullv1alpha1.WindowConditionRecovered, Status: metav1.ConditionTrue, Reason: v.Reason, Message: v.Message}
		switch {
		case err != nil:
			cond.Status, cond.Reason, cond.Message = metav1.ConditionUnknown, "ReadFailed", err.Error()
			soonest(10 * time.Second)
		case v.Hold:
			cond.Status = metav1.ConditionFalse
			soonest(v.RetryAfter)
		}
		// Nodes turning Ready or unready do not wake the window (it
		// watches their labels only): the condition is judged again at
		// least this often while the gate exists.
		soonest(recoveryRecheck)
		r.setCondition(status, mw.Generation, cond, now)
	}
	return again
}

// gateStates says what the window's gates judged for the window as a
// whole say (internal/gate's HealthGates), as a node's gate would judge them
// from this status (for the metrics).
func gateStates(mw *lullv1alpha1.MaintenanceWindow, status *lullv1alpha1.MaintenanceWindowStatus, now time.Time) []GateState {
	judged := *mw // read only: the spec shared, the status to judge
	judged.Status = *status
	var out []GateState
	for _, v := range gate.Views(&judged, now) {
		if !v.PerNode {
			out = append(out, GateState{Gate: v.Gate, Reason: v.Reason, Holds: v.Holds})
		}
	}
	return out
}

// askAlerts asks the alerts gate's server and records the answer: the
// AlertsQuiet condition (False when matching alerts fire or when the
// server could not be asked: the gate fails closed) and status.alerts.
func (r *Reconciler) askAlerts(ctx context.Context, mw *lullv1alpha1.MaintenanceWindow, status *lullv1alpha1.MaintenanceWindowStatus, now time.Time) {
	g := mw.Spec.Gates.Alerts
	cond := metav1.Condition{Type: lullv1alpha1.WindowConditionAlertsQuiet, Status: metav1.ConditionFalse}
	status.Alerts = &lullv1alpha1.AlertsStatus{CheckedAt: metav1.Time{Time: now.UTC().Truncate(time.Second)}}
	firing, err := r.firing(ctx, g)
	var ignored []alerts.Alert
	if err == nil {
		firing, ignored, err = r.downOnPurpose(ctx, firing, now)
	}
	quiet := "no matching alert fires at " + g.URL
	if len(ignored) > 0 {
		quiet += fmt.Sprintf("; ignored, as their nodes are down on purpose under lull's silences: %s", alerts.Summary(ignored, 3))
	}
	switch {
	case err != nil:
		// An answer that may lack alerts that fire (flagged partial, a
		// server up too briefly to know them all) holds like no answer.
		until := "lull can ask again"
		if errors.Is(err, alerts.ErrIncomplete) {
			until = "lull gets a complete answer"
		}
		cond.Reason = gate.ReasonAlertsUnknown
		cond.Message = fmt.Sprintf("%s; the window's nodes do not start until %s", err, until)
		klog.FromContext(ctx).Info("Alerts gate could not ask its server", "url", g.URL, "err", err)
	case len(firing) > 0:
		cond.Reason, cond.Message = gate.ReasonAlertsFiring, alerts.Summary(firing, 5)+" ("+g.URL+")"
		for i, a := range firing {
			if i == maxFiringListed {
				break
			}
			status.Alerts.Firing = append(status.Alerts.Firing, a.String())
		}
	default:
		cond.Status, cond.Reason, cond.Message = metav1.ConditionTrue, gate.ReasonAlertsQuiet, quiet
	}
	r.setCondition(status, mw.Generation, cond, now)
}

// downOnPurpose splits the firing alerts into those that count and those
// lull's own silences select for nodes lull takes down on purpose now
// (a request's status.silence while DownOnPurpose, before its end, not
// withdrawn; its regular expressions judged as Alertmanager does): an
// alert of a node lull reboots does not hold the next wave; one of a node
// lull no longer holds down, or that no silence of lull's selects, does.
func (r *Reconciler) downOnPurpose(ctx context.Context, firing []alerts.Alert, now time.Time) (counted, ignored []alerts.Alert, err error) {
	if len(firing) == 0 {
		return firing, nil, nil
	}
	var nms lullv1alpha1.NodeMaintenanceList
	if err := r.Client.List(ctx, &nms); err != nil {
		return nil, nil, fmt.Errorf("listing the requests whose nodes lull takes down on purpose: %w", err)
	}
	var silences [][]alerts.Matcher
	for i := range nms.Items {
		st := &nms.Items[i].Status
		if st.Silence == nil || st.Silence.Withdrawn || !st.DownOnPurpose() || !now.Before(st.Silence.EndsAt.Time) {
			continue
		}
		ms := make([]alerts.Matcher, 0, len(st.Silence.Matchers))
		for _, w := range st.Silence.Matchers {
			m, err := alerts.ParseSilenceMatcher(w)
			if err != nil {
				ms = nil // a record that does not parse ignores nothing
				break
			}
			ms = append(ms, m)
		}
		if len(ms) > 0 {
			silences = append(silences, ms)
		}
	}
	for _, a := range firing {
		lulls := false
		for _, ms := range silences {
			lulls = lulls || alerts.SilenceMatches(ms, a.Labels)
		}
		if lulls {
			ignored = append(ignored, a)
		} else {
			counted = append(counted, a)
		}
	}
	return counted, ignored, nil
}

// firing asks the server, with the credentials from the window's Secret.
func (r *Reconciler) firing(ctx context.Context, g *lullv1alpha1.AlertsGate) ([]alerts.Alert, error) {
	f, err := alerts.ParseFilter(g.Matchers, g.IgnoreAlerts, g.FiringOnly)
	if err != nil {
		return nil, fmt.Errorf("the alerts gate's filter is invalid: %w", err)
	}
	c := &alerts.Client{URL: g.URL, API: alerts.API(g.API), Clock: r.Clock}
	if g.SecretName != "" {
		if err := r.credentials(ctx, g.SecretName, c); err != nil {
			return nil, err
		}
	}
	ctx, cancel := context.WithTimeout(ctx, alerts.DefaultTimeout)
	defer cancel()
	return c.Firing(ctx, f)
}

// credentials hands c the credentials of the Secret name, where its
// owner said they may go (alerts.Credentials).
func (r *Reconciler) credentials(ctx context.Context, name string, c *alerts.Client) error {
	return alerts.Credentials(ctx, r.Secrets, r.SecretNamespace, name, c)
}

// credentialsMayGo is the one rule of where credentials may go.
var credentialsMayGo = alerts.CredentialsMayGo

// setCondition sets a gate condition; its lastTransitionTime is the
// controller's clock, kept while its status holds.
func (r *Reconciler) setCondition(status *lullv1alpha1.MaintenanceWindowStatus, gen int64, c metav1.Condition, now time.Time) {
	c.ObservedGeneration = gen
	c.LastTransitionTime = metav1.Time{Time: now.UTC().Truncate(time.Second)}
	meta.SetStatusCondition(&status.Conditions, c)
}
