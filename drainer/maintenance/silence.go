package maintenance

import (
	"context"
	"errors"
	"fmt"
	"net"
	"slices"
	"strings"
	"sync"
	"syscall"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/equality"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/klog/v2"

	lullv1alpha1 "lull.dev/lull/api/v1alpha1"
	"lull.dev/lull/drainer/alerts"
)

// Silences while lull takes a node down on purpose (a window's
// spec.silences): before the host steps that reboot or power the node off
// are handed to lull-agent, the node has an Alertmanager silence, seen
// active there; lull extends it while the node is down on purpose
// (NodeMaintenanceStatus.DownOnPurpose) and expires it, seen expired, once
// the node is back or the request ends. Each silence lasts its duration
// past lull's last extension: if lull stops, it expires by itself.

// ConditionSilenced says whether the node's down alerts are silenced.
const ConditionSilenced = "Silenced"

// Event reasons of silences.
const (
	ReasonSilenced         = "Silenced"
	ReasonSilenceExpired   = "SilenceExpired"
	ReasonSilenceNotKept   = "SilenceNotKept"
	ReasonSilenceWithdrawn = "SilenceWithdrawn"
)

const (
	// silenceTimeout bounds the questions to Alertmanager of one round:
	// reconciles run one at a time.
	silenceTimeout = 5 * time.Second
	// silenceRetry is how soon a request waiting for its silence, or one
	// whose silence could not be kept, tries again.
	silenceRetry = 10 * time.Second
	// silenceBackdate is how far in the past a new silence starts.
	silenceBackdate = time.Minute
)

// silenceRound is when the request must look at its silence again: by
// half the time it has left, so that it is extended before it lapses
// whatever the other waits of the phase (0: no silence kept).
func silenceRound(st *lullv1alpha1.NodeMaintenanceStatus, now time.Time) time.Duration {
	if st.Silence == nil || st.Silence.Withdrawn || !st.DownOnPurpose() {
		return 0
	}
	return max(st.Silence.EndsAt.Sub(now)/2, time.Second)
}

// silenceTries remembers when each request last failed to keep its
// silence and why, so that a round in between does not ask an
// Alertmanager that failed moments ago.
type silenceTries struct {
	mu     sync.Mutex
	failed map[types.UID]silenceTry
	// unanswered are the Alertmanagers that did not answer, by URL.
	unanswered map[string]silenceTry
}

// away is why the Alertmanager at url is taken as away: it did not answer
// less than silenceRetry ago; nil otherwise.
func (t *silenceTries) away(url string, now time.Time) error {
	t.mu.Lock()
	defer t.mu.Unlock()
	if f, ok := t.unanswered[url]; ok && now.Before(f.at.Add(silenceRetry)) {
		return fmt.Errorf("the Alertmanager at %s did not answer at %s: %w", url, f.at.UTC().Format(time.RFC3339), f.err)
	}
	return nil
}

func (t *silenceTries) noteAway(url string, now time.Time, err error) {
	t.mu.Lock()
	defer t.mu.Unlock()
	if t.unanswered == nil {
		t.unanswered = map[string]silenceTry{}
	}
	t.unanswered[url] = silenceTry{at: now, err: err}
}

type silenceTry struct {
	at  time.Time
	err error
}

// last is the failure of a try less than silenceRetry ago, nil if none.
func (t *silenceTries) last(uid types.UID, now time.Time) error {
	t.mu.Lock()
	defer t.mu.Unlock()
	if f, ok := t.failed[uid]; ok && now.Before(f.at.Add(silenceRetry)) {
		return f.err
	}
	return nil
}

func (t *silenceTries) note(uid types.UID, now time.Time, err error) {
	t.mu.Lock()
	defer t.mu.Unlock()
	if err == nil {
		delete(t.failed, uid)
		return
	}
	if t.failed == nil {
		t.failed = map[types.UID]silenceTry{}
	}
	t.failed[uid] = silenceTry{at: now, err: err}
}

// silenceWanted is the silence the request's node needs in phase: the
// window whose spec.silences applies (the first by name of the windows
// governing the node that has one), nil when none does or the node is not
// down on purpose in that phase.
func (s *step) silenceWanted(ctx context.Context, phase lullv1alpha1.MaintenancePhase) (*lullv1alpha1.MaintenanceWindow, error) {
	st := *s.status
	st.Phase = phase
	if !st.DownOnPurpose() || s.node == nil {
		return nil, nil
	}
	ws, err := s.windows(ctx)
	if err != nil {
		return nil, err
	}
	ws = slices.Clone(ws)
	slices.SortFunc(ws, func(a, b *lullv1alpha1.MaintenanceWindow) int { return strings.Compare(a.Name, b.Name) })
	for _, w := range ws {
		if w.Spec.Silences != nil {
			return w, nil
		}
	}
	return nil, nil
}

// syncSilence brings the node's silence to what phase needs: made (or
// adopted) and extended while the node is down on purpose, expired
// otherwise. It records the silence in the status only once Alertmanager
// shows it active (or expired), and returns why it could not.
func (s *step) syncSilence(ctx context.Context, phase lullv1alpha1.MaintenancePhase) error {
	w, err := s.silenceWanted(ctx, phase)
	if err != nil {
		return err
	}
	rec := s.status.Silence
	if w == nil {
		if rec == nil {
			return nil
		}
		return s.tryingSilence(rec.URL, s.expireSilence)(ctx)
	}
	if rec != nil && rec.Withdrawn && rec.Window == w.Name {
		return nil // someone expired it: lull does not make it again
	}
	matchers, err := alerts.SilenceMatchers(w.Spec.Silences.SilenceMatchers(), s.node.Name, lullv1alpha1.SilenceNodeName)
	if err != nil {
		return fmt.Errorf("MaintenanceWindow %s: %w", w.Name, err)
	}
	written := make([]string, 0, len(matchers))
	for _, m := range matchers {
		written = append(written, m.String())
	}
	d := w.Spec.Silences.SilenceDuration()
	same := rec != nil && rec.Window == w.Name && rec.URL == w.Spec.Silences.URL && rec.SecretName == w.Spec.Silences.SecretName &&
		slices.Equal(rec.Matchers, written)
	if same && rec.EndsAt.Sub(s.now) > d/2 {
		return nil // fresh: nothing to ask
	}
	return s.tryingSilence(w.Spec.Silences.URL, func(ctx context.Context) error {
		if rec != nil && !same {
			// The window's silences changed: the old one goes first.
			if err := s.expireSilence(ctx); err != nil {
				return err
			}
		}
		return s.keepSilence(ctx, w, matchers, written, d)
	})(ctx)
}

// tryingSilence runs f with the round's bound on the Alertmanager at
// url, unless this request's last try failed moments ago, or that
// Alertmanager did not answer anyone moments ago (reconciles run one at a
// time: a blackholed Alertmanager must not take silenceTimeout of every
// request's round); it remembers how it went.
func (s *step) tryingSilence(url string, f func(context.Context) error) func(context.Context) error {
	return func(ctx context.Context) error {
		if err := s.r.silences.last(s.nm.UID, s.now); err != nil {
			return err
		}
		if err := s.r.silences.away(url, s.now); err != nil {
			return err
		}
		ctx, cancel := context.WithTimeout(ctx, silenceTimeout)
		defer cancel()
		err := f(ctx)
		s.r.silences.note(s.nm.UID, s.now, err)
		var nerr net.Error
		if errors.Is(err, context.DeadlineExceeded) || (errors.As(err, &nerr) && nerr.Timeout()) || errors.Is(err, syscall.ECONNREFUSED) {
			s.r.silences.noteAway(url, s.now, err)
		}
		return err
	}
}

// silenceClient is the Alertmanager client of a silence, with the
// credentials of secret where their owner lets them go.
func (s *step) silenceClient(ctx context.Context, url, secret string) (*alerts.Client, error) {
	c := &alerts.Client{URL: url, API: alerts.Alertmanager, Clock: s.r.Clock}
	if secret != "" {
		if s.r.Secrets == nil {
			return nil, fmt.Errorf("no reader of Secrets to read %s with", secret)
		}
		if err := alerts.Credentials(ctx, s.r.Secrets, s.r.configNamespace(), secret, c); err != nil {
			return nil, err
		}
	}
	return c, nil
}

// silenceComment marks lull's silence of this request: a silence made in
// a round whose status write was lost is found and adopted by it.
func (s *step) silenceComment() string {
	return fmt.Sprintf("lull takes node %s down on purpose (NodeMaintenance %s, uid %s); lull extends this silence while the node is down "+
		"and expires it once the node is back; if lull stops, it expires by itself", s.nm.Spec.NodeName, s.nm.Name, s.nm.UID)
}

// keepSilence makes, adopts or extends the node's silence to last d from
// now, and records it once Alertmanager shows it active.
func (s *step) keepSilence(ctx context.Context, w *lullv1alpha1.MaintenanceWindow, matchers []alerts.Matcher, written []string, d time.Duration) error {
	spec := w.Spec.Silences
	c, err := s.silenceClient(ctx, spec.URL, spec.SecretName)
	if err != nil {
		return err
	}
	// Started a minute ago: Alertmanager starts a new silence at its own
	// now when the start is past, so a clock of its that lags lull's does
	// not leave it pending.
	want := alerts.Silence{Matchers: matchers, StartsAt: s.now.Add(-silenceBackdate), EndsAt: s.now.Add(d), CreatedBy: alerts.SilenceAuthor, Comment: s.silenceComment()}
	cur, withdrawn, err := s.recordedSilence(ctx, c, w.Name)
	if withdrawn || err != nil {
		return err
	}
	if cur == nil {
		cur = s.lostSilence(ctx, c, want.Comment)
	}
	if cur != nil {
		// Extended in place: Alertmanager keeps the ID when the matchers
		// and the start are those it has.
		want.ID, want.StartsAt = cur.ID, cur.StartsAt
	}
	id, err := c.PutSilence(ctx, want)
	if err != nil {
		return err
	}
	got, err := c.GetSilence(ctx, id)
	if err != nil {
		return err
	}
	if !got.Active() || got.EndsAt.Before(s.now) {
		return fmt.Errorf("silence %s in Alertmanager at %s is %s, not active, right after lull put it", id, spec.URL, got.State)
	}
	news := s.status.Silence == nil
	s.status.Silence = &lullv1alpha1.SilenceStatus{ID: id, URL: spec.URL, Window: w.Name, SecretName: spec.SecretName, Matchers: written,
		StartsAt: metav1.Time{Time: got.StartsAt.UTC().Truncate(time.Second)}, EndsAt: metav1.Time{Time: got.EndsAt.UTC().Truncate(time.Second)}}
	msg := fmt.Sprintf("node %s's alerts matching %v are silenced in Alertmanager at %s (silence %s, until %s unless lull extends it)",
		s.node.Name, written, spec.URL, id, got.EndsAt.UTC().Format(time.RFC3339))
	s.cond(ConditionSilenced, true, ReasonSilenced, msg)
	if news {
		s.record(normal(ReasonSilenced, msg))
	}
	return nil
}

// recordedSilence is the silence the status records for window, as
// Alertmanager has it, when it is active or pending: nil when it is not
// recorded, no longer known or has ended. withdrawn is true (and recorded
// in the status) when someone expired it before its end.
func (s *step) recordedSilence(ctx context.Context, c *alerts.Client, window string) (cur *alerts.Silence, withdrawn bool, err error) {
	rec := s.status.Silence
	if rec == nil || rec.Window != window {
		return nil, false, nil
	}
	got, err := c.GetSilence(ctx, rec.ID)
	switch {
	case err == nil && got.State == "expired" && got.EndsAt.Before(rec.EndsAt.Add(-time.Second)):
		// Expired before its end, by someone: they want the alerts
		// (whenever lull looks; one that lapsed ends at its end).
		rec.Withdrawn = true
		msg := fmt.Sprintf("silence %s of node %s was expired at %s by someone other than lull, before its end %s; lull does not make it again for this request",
			rec.ID, s.nm.Spec.NodeName, got.EndsAt.UTC().Format(time.RFC3339), rec.EndsAt.UTC().Format(time.RFC3339))
		s.cond(ConditionSilenced, false, ReasonSilenceWithdrawn, msg)
		s.record(warning(ReasonSilenceWithdrawn, msg))
		return nil, true, nil
	case err == nil && (got.Active() || got.State == "pending"):
		return &got, false, nil
	case err != nil && !isNotFound(err):
		return nil, false, err
	}
	return nil, false, nil
}

// lostSilence is an active or pending silence of lull's with comment
// (this request's): one made by a round whose status write was lost; nil
// when there is none.
func (s *step) lostSilence(ctx context.Context, c *alerts.Client, comment string) *alerts.Silence {
	// The list may be too long to read (Alertmanager keeps expired
	// silences for days): then a new one is made, and the lost one
	// expires by itself.
	list, err := c.Silences(ctx)
	if err != nil {
		s.logger.Info("Silences not listed; making a new one rather than adopting a lost one", "err", err)
	}
	for i := range list {
		if (list[i].Active() || list[i].State == "pending") && list[i].CreatedBy == alerts.SilenceAuthor && list[i].Comment == comment {
			return &list[i]
		}
	}
	return nil
}

// expireSilence expires the recorded silence and forgets it once
// Alertmanager shows it expired (or no longer knows it).
func (s *step) expireSilence(ctx context.Context) error {
	rec := s.status.Silence
	c, err := s.silenceClient(ctx, rec.URL, rec.SecretName)
	if err != nil {
		return err
	}
	if !rec.Withdrawn {
		if err := c.ExpireSilence(ctx, rec.ID); err != nil {
			return err
		}
	}
	got, err := c.GetSilence(ctx, rec.ID)
	switch {
	case isNotFound(err):
	case err != nil:
		return err
	case got.State != "expired":
		return fmt.Errorf("silence %s in Alertmanager at %s is still %s after lull expired it", rec.ID, rec.URL, got.State)
	}
	msg := fmt.Sprintf("silence %s of node %s expired in Alertmanager at %s: its alerts page again", rec.ID, s.nm.Spec.NodeName, rec.URL)
	s.status.Silence = nil
	s.cond(ConditionSilenced, false, ReasonSilenceExpired, msg)
	s.record(normal(ReasonSilenceExpired, msg))
	return nil
}

func isNotFound(err error) bool { return err != nil && errors.Is(err, alerts.ErrSilenceNotFound) }

// silenceNotKept reports a silence lull could not make, extend or expire
// (condition Silenced, a Warning event when the reason is news) and
// returns what it says.
func (s *step) silenceNotKept(err error) string {
	msg := fmt.Sprintf("the Alertmanager silence of node %s could not be kept: %v; lull tries again in %s", s.nm.Spec.NodeName, err, silenceRetry)
	if s.status.Silence == nil && s.status.Phase != lullv1alpha1.PhaseActing {
		msg = fmt.Sprintf("an Alertmanager silence for node %s before lull-agent takes it down: %v; lull tries again in %s "+
			"(remove spec.silences from the window to go on without one)", s.nm.Spec.NodeName, err, silenceRetry)
	}
	c := meta.FindStatusCondition(s.status.Conditions, ConditionSilenced)
	if c == nil || c.Reason != ReasonSilenceNotKept {
		s.record(warning(ReasonSilenceNotKept, msg))
	}
	s.cond(ConditionSilenced, false, ReasonSilenceNotKept, msg)
	s.logger.Info("Silence not kept", "err", err)
	return msg
}

// expireFinished expires the silence an ended request still records (its
// last round could not, or lull is being uninstalled) and records that it
// is gone.
func (r *Reconciler) expireFinished(ctx context.Context, nm *lullv1alpha1.NodeMaintenance, node *corev1.Node) error {
	if nm.Status.Silence == nil {
		return nil
	}
	s := &step{r: r, logger: klog.FromContext(ctx), nm: nm, node: node, now: r.Clock.Now(), status: nm.Status.DeepCopy(), wsLoaded: true}
	if err := s.tryingSilence(s.status.Silence.URL, s.expireSilence)(ctx); err != nil {
		s.silenceNotKept(err)
		if !s.now.Before(s.status.Silence.EndsAt.Time) {
			// Past its end it has expired by itself: nothing to wait for.
			s.status.Silence = nil
		}
	}
	if equality.Semantic.DeepEqual(&nm.Status, s.status) {
		return nil
	}
	nm.Status = *s.status
	return r.Client.Status().Update(ctx, nm)
}
