package window

import (
	"context"
	"errors"
	"fmt"
	"net/url"
	"strings"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/klog/v2"

	lullv1alpha1 "lull.dev/lull/api/v1alpha1"
	"lull.dev/lull/pkg/alerts"
	"lull.dev/lull/pkg/gate"
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
	if g.Alerts == nil {
		meta.RemoveStatusCondition(&status.Conditions, lullv1alpha1.WindowConditionAlertsQuiet)
		status.Alerts = nil
	} else {
		period := g.Alerts.AlertsPeriod()
		c := meta.FindStatusCondition(status.Conditions, lullv1alpha1.WindowConditionAlertsQuiet)
		if status.Alerts == nil || c == nil || c.ObservedGeneration != mw.Generation || !now.Before(status.Alerts.CheckedAt.Add(period)) {
			r.askAlerts(ctx, mw, status, now)
		}
		soonest(status.Alerts.CheckedAt.Add(period).Sub(now))
	}
	if g.Recovery == nil {
		meta.RemoveStatusCondition(&status.Conditions, lullv1alpha1.WindowConditionRecovered)
	} else {
		// As the drainer's gate judges it (pkg/gate), for the window as a whole.
		v, err := gate.Recovery(ctx, r.Client, mw, nms, "", now)
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

// gateStates says what the window's alerts and recovery gates say, as a
// node's gate would judge them from this status (for the metrics).
func gateStates(mw *lullv1alpha1.MaintenanceWindow, status *lullv1alpha1.MaintenanceWindowStatus, now time.Time) []GateState {
	if mw.Spec.Gates == nil {
		return nil
	}
	judged := *mw // read only: the spec shared, the status to judge
	judged.Status = *status
	var out []GateState
	if mw.Spec.Gates.Alerts != nil {
		v := gate.Alerts(&judged, now)
		out = append(out, GateState{Gate: "alerts", Reason: v.Reason, Holds: v.Hold})
	}
	if mw.Spec.Gates.Recovery != nil {
		if c := meta.FindStatusCondition(status.Conditions, lullv1alpha1.WindowConditionRecovered); c != nil {
			out = append(out, GateState{Gate: "recovery", Reason: c.Reason, Holds: c.Status != metav1.ConditionTrue})
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
		cond.Status, cond.Reason, cond.Message = metav1.ConditionTrue, gate.ReasonAlertsQuiet, "no matching alert fires at "+g.URL
	}
	r.setCondition(status, mw.Generation, cond, now)
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

// credentials reads the alerts gate's Secret from lull's configuration
// namespace and hands its credentials to c only where the Secret's owner
// said they may go. Only a Secret labelled lull.dev/alerts-credentials=true
// is used (the admin's consent), and only for a gate whose URL is under the
// Secret's own url (same scheme, host and port; the Secret's path a prefix
// of the gate's, by whole segments): a window's author chooses the gate's
// URL, the Secret's owner where its token may be sent. Plain http needs
// the Secret's explicit insecure-http: "true" too. Redirects are not
// followed with credentials (pkg/alerts).
func (r *Reconciler) credentials(ctx context.Context, name string, c *alerts.Client) error {
	var s corev1.Secret
	if err := r.Secrets.Get(ctx, types.NamespacedName{Namespace: r.SecretNamespace, Name: name}, &s); err != nil {
		if apierrors.IsNotFound(err) {
			return fmt.Errorf("Secret %s/%s with the alerts gate's credentials does not exist", r.SecretNamespace, name) //nolint:staticcheck // ST1005: the message starts with the kind's name, as kubectl says it
		}
		return fmt.Errorf("reading Secret %s/%s with the alerts gate's credentials: %w", r.SecretNamespace, name, err)
	}
	if s.Labels[lullv1alpha1.AlertsCredentialsLabel] != "true" {
		return fmt.Errorf("Secret %s/%s lacks the label %s=true that lets lull send its credentials to an alerts server", //nolint:staticcheck // ST1005: the kind's name, as kubectl says it
			r.SecretNamespace, name, lullv1alpha1.AlertsCredentialsLabel)
	}
	if err := credentialsMayGo(string(s.Data[lullv1alpha1.AlertsCredentialsURLKey]), s.Data[lullv1alpha1.AlertsCredentialsInsecureKey], c.URL); err != nil {
		return fmt.Errorf("Secret %s/%s: %w", r.SecretNamespace, name, err) //nolint:staticcheck // ST1005: the kind's name, as kubectl says it
	}
	c.BearerToken, c.Username, c.Password = string(s.Data["token"]), string(s.Data["username"]), string(s.Data["password"])
	c.CA = s.Data["ca.crt"]
	return nil
}

// credentialsMayGo says why credentials whose Secret names allowed (its
// url: a server or a path prefix) and insecure (its insecure-http) must
// not be sent to target, the gate's URL; nil when they may.
func credentialsMayGo(allowed string, insecure []byte, target string) error {
	if strings.TrimSpace(allowed) == "" {
		return fmt.Errorf("it names no %s: lull sends credentials only to the server the Secret's owner names there (e.g. https://prometheus.monitoring:9090)",
			lullv1alpha1.AlertsCredentialsURLKey)
	}
	a, err := url.Parse(strings.TrimSpace(allowed))
	if err != nil || (a.Scheme != "http" && a.Scheme != "https") || a.Host == "" || a.User != nil || a.RawQuery != "" || a.Fragment != "" {
		return fmt.Errorf("its %s %q is not an http(s) URL without credentials, query or fragment", lullv1alpha1.AlertsCredentialsURLKey, allowed)
	}
	t, err := url.Parse(target)
	if err != nil {
		return fmt.Errorf("the gate's url %q: %w", target, err)
	}
	// The request is built with url.JoinPath, which cleans dot segments
	// (%2e%2e too, once unescaped): /prometheus/../grafana would pass a
	// prefix check by name and go elsewhere.
	for _, seg := range strings.Split(t.Path, "/") {
		if seg == "." || seg == ".." {
			return fmt.Errorf("the gate's url %s has a %q path segment: credentials go only to a clean path under the Secret's %s", target, seg, lullv1alpha1.AlertsCredentialsURLKey)
		}
	}
	// Servers normalise more than dot segments (..; in Java servlet
	// containers, backslashes, encoded slashes): a path with credentials
	// keeps to the characters no server reads as a separator.
	if strings.ContainsFunc(t.EscapedPath(), func(r rune) bool {
		return !(r >= 'a' && r <= 'z' || r >= 'A' && r <= 'Z' || r >= '0' && r <= '9' || strings.ContainsRune("/-._~", r))
	}) {
		return fmt.Errorf("the gate's url %s has a path character other than letters, digits and /-._~: credentials are not sent to it", target)
	}
	prefix := strings.TrimSuffix(a.EscapedPath(), "/")
	path := t.EscapedPath()
	under := path == prefix || strings.HasPrefix(path, prefix+"/") || (prefix == "" && (path == "" || strings.HasPrefix(path, "/")))
	if !strings.EqualFold(t.Scheme, a.Scheme) || !strings.EqualFold(t.Host, a.Host) || !under {
		return fmt.Errorf("its credentials may be sent only to %s (its %s), not to the gate's url %s", a.String(), lullv1alpha1.AlertsCredentialsURLKey, target)
	}
	if t.Scheme == "http" && strings.TrimSpace(string(insecure)) != "true" {
		return fmt.Errorf("its credentials would go over plain http to %s: set %s: \"true\" in the Secret to allow it, or use https",
			target, lullv1alpha1.AlertsCredentialsInsecureKey)
	}
	return nil
}

// setCondition sets a gate condition; its lastTransitionTime is the
// controller's clock, kept while its status holds.
func (r *Reconciler) setCondition(status *lullv1alpha1.MaintenanceWindowStatus, gen int64, c metav1.Condition, now time.Time) {
	c.ObservedGeneration = gen
	c.LastTransitionTime = metav1.Time{Time: now.UTC().Truncate(time.Second)}
	meta.SetStatusCondition(&status.Conditions, c)
}
