package maintenance

import (
	"context"
	"fmt"
	"slices"
	"strings"
	"time"

	corev1 "k8s.io/api/core/v1"
	policyv1 "k8s.io/api/policy/v1"
	"k8s.io/apimachinery/pkg/api/equality"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/reconcile"

	lullv1alpha1 "lull.dev/lull/api/v1alpha1"
	"lull.dev/lull/internal/drain"
	"lull.dev/lull/internal/gate"
)

// The drain unit: Draining → Drained (or Acting). One eviction round per
// reconcile through internal/drain; a blocked drain escalates (escalate.go),
// and a window that closes pauses or aborts it.

// maxPendingNames bounds the pod names kept in status.
const maxPendingNames = 50

// drain runs one eviction round: list the node's pods, evict those not
// yet going, record progress and blockers, and requeue after the retry
// delay (growing while blocked). A closed window acts per windowEnd.
// While the last round left only pods that PodDisruptionBudgets block,
// the next asks for those again without listing (drain.Again); the pods
// are listed again when none is left blocked (only a listed round calls
// the node drained) and at least every MaxRetryDelay.
func (s *step) drain(ctx context.Context) (reconcile.Result, error) {
	if res, lost, err := s.renew(ctx); lost || err != nil {
		return res, err
	}
	s.noteWindows()
	if s.fc != nil && !s.fc.WindowOpen {
		if res, stop, err := s.windowClosed(ctx); stop || err != nil {
			return res, err
		}
	}
	if res, ok := s.stillBlocked(ctx); ok {
		return res, nil
	}
	opts := drain.For(&s.r.Options, s.plan().TakesNodeDown() || s.rebootsOrPowersOff())
	d, err := drain.New(ctx, s.r.Kube, opts, s.nm)
	if err != nil {
		return s.abort(ctx, lullv1alpha1.PhaseFailed, err.Error())
	}
	d.AskBudgets, _ = s.r.rounds.askDue(s.node.Name, s.nm.UID, s.now, s.r.Options.MaxRetryDelay)
	var evictErr string
	evict := func(p *corev1.Pod) drain.Outcome {
		o, msg := s.evictOne(ctx, p, d.GracePeriod())
		if msg != "" {
			evictErr = msg
		}
		return o
	}
	var round *drain.Round
	pods, listed, again := s.r.rounds.blockedPods(s.node.Name, s.nm.UID, s.now, s.r.Options.MaxRetryDelay)
	if again {
		round, err = d.Again(ctx, s.r.Client, pods, evict)
	} else {
		round, err = d.Round(ctx, s.r.Client, evict)
		listed = s.now
	}
	if err != nil {
		return reconcile.Result{}, fmt.Errorf("drain round on node %s: %w", s.node.Name, err)
	}
	if len(round.Disagreed) > 0 {
		// Ask again next round: the cache is behind.
		s.logger.Info("The cache showed PodDisruptionBudgets allowing no disruption, but the API server evicted", "budgets", round.Disagreed)
	} else if d.AskBudgets {
		s.r.rounds.askedAll(s.node.Name, s.nm.UID, s.now)
	}
	s.count(round, evictErr)
	s.coveredBudgets(round)
	return s.recordRound(ctx, round, evictErr, listed)
}

// recordRound ends a drain round: the node is drained when a listed round
// found nothing left; otherwise its blockers are recorded (escalating a
// blocked drain), its progress saved and, after a successful save, what
// it left blocked remembered for the next round (listed: when the pods
// were last listed).
func (s *step) recordRound(ctx context.Context, round *drain.Round, evictErr string, listed time.Time) (reconcile.Result, error) {
	if round.Listed && len(round.Pods) == 0 && len(round.Refused) == 0 {
		s.status.Pods.Evicted, s.status.Pods.Pending = s.status.Pods.Total, 0
		return s.drained(ctx)
	}
	if err := s.blockers(round); err != nil {
		return reconcile.Result{}, fmt.Errorf("drain round on node %s: %w", s.node.Name, err)
	}
	if len(s.status.Blockers) > 0 || len(round.Refused) > 0 {
		if res, done, err := s.escalate(ctx, round.Blocked); done || err != nil {
			return res, err
		}
	} else {
		s.cond(ConditionBlocked, false, "Progressing", "evictions are progressing")
	}
	s.cond(ConditionDrained, false, "Draining", fmt.Sprintf("%d pod(s) still on the node", s.status.Pods.Pending))
	s.status.WaitingFor = fmt.Sprintf("draining: %d of %d pod(s) left", s.status.Pods.Pending, s.status.Pods.Total)
	res, err := s.save(ctx, lullv1alpha1.PhaseDraining, reconcile.Result{RequeueAfter: s.retryDelay(round.Progress)})
	if err == nil {
		budgets, left := onlyBudgetsBlock(round, evictErr), []corev1.Pod(nil)
		if budgets != nil {
			left = round.StillBlocked() // copied only when kept
		}
		s.r.rounds.blocked(s.node.Name, s.nm.UID, s.now, budgets, left, listed)
	}
	return res, err
}

// maxCoveredBudgets bounds status.podDisruptionBudgets (the CRD's MaxItems).
const maxCoveredBudgets = 32

// coveredBudgets adds the budgets of the pods the round evicted to the
// request's status: the recovery gate waits for them after the request.
func (s *step) coveredBudgets(round *drain.Round) {
	for id := range round.Covered {
		if len(s.status.PodDisruptionBudgets) >= maxCoveredBudgets {
			return
		}
		if !slices.Contains(s.status.PodDisruptionBudgets, id) {
			s.status.PodDisruptionBudgets = append(s.status.PodDisruptionBudgets, id)
			slices.Sort(s.status.PodDisruptionBudgets)
		}
	}
}

// onlyBudgetsBlock returns the PodDisruptionBudgets that block the pods
// the round left, with the version the round read each at; nil when
// anything else is left to do (pods refused by the drain rules, a failed
// eviction, a refusal by a budget the round did not see, or no blocked pod).
func onlyBudgetsBlock(round *drain.Round, evictErr string) map[string]string {
	if len(round.Blocked) == 0 || len(round.Refused) > 0 || evictErr != "" {
		return nil
	}
	byPDB, err := round.Blockers()
	if err != nil {
		return nil
	}
	versions := round.BudgetVersions()
	out := map[string]string{}
	for id := range byPDB {
		rv, ok := versions[id]
		if !ok {
			return nil // "(unknown)": a budget the round did not see
		}
		out[id] = rv
	}
	return out
}

// stillBlocked skips a round whose outcome is known: the last round left
// only pods that PodDisruptionBudgets block, none of those budgets has
// changed since (or each still allows no disruption), the escalation is
// not due and nothing in the status changed. Such a round would list the
// same pods, evict nothing and write nothing. A budget gaining room wakes
// the drain (the controller watches them), and a round runs at least
// every MaxRetryDelay, so pods that appear or go meanwhile are still seen.
// Neither the memo nor the cache can stop the drain asking: within
// MaxRetryDelay of the last time the eviction API was asked about every
// blocking budget, a round asks again (drain.Drain.AskBudgets), whatever
// the cached budgets say.
func (s *step) stillBlocked(ctx context.Context) (reconcile.Result, bool) {
	budgets, ok := s.r.rounds.lastBlocked(s.node.Name, s.nm.UID, s.now, s.r.Options.MaxRetryDelay)
	if !ok || len(s.status.Blockers) == 0 || !equality.Semantic.DeepEqual(&s.nm.Status, s.status) {
		return reconcile.Result{}, false
	}
	if due, _ := s.r.rounds.askDue(s.node.Name, s.nm.UID, s.now, s.r.Options.MaxRetryDelay); due {
		return reconcile.Result{}, false
	}
	if timeout, esc, _ := s.escalation(); esc != lullv1alpha1.EscalationWait && s.now.Sub(s.status.Blockers[0].Since.Time) >= timeout {
		return reconcile.Result{}, false
	}
	for id, rv := range budgets {
		ns, name, _ := strings.Cut(id, "/")
		var pdb policyv1.PodDisruptionBudget
		if err := s.r.Client.Get(ctx, types.NamespacedName{Namespace: ns, Name: name}, &pdb); err != nil {
			return reconcile.Result{}, false
		}
		exhausted := pdb.Status.ObservedGeneration >= pdb.Generation && pdb.Status.DisruptionsAllowed <= 0
		if pdb.ResourceVersion != rv && !exhausted {
			return reconcile.Result{}, false
		}
	}
	s.logger.V(4).Info("Drain still blocked by the same PodDisruptionBudgets; no round", "budgets", budgets)
	return reconcile.Result{RequeueAfter: s.retryDelay(false)}, true
}

// windowClosed applies the windows' windowEnd to a drain whose window
// closed: Abort undoes it, Pause holds it (cordoned and leased) until the
// window opens again, Continue goes on. stop is true when the round ends
// here.
func (s *step) windowClosed(ctx context.Context) (res reconcile.Result, stop bool, err error) {
	ws, err := s.windows(ctx)
	if err != nil {
		return reconcile.Result{}, true, err
	}
	switch windowEnd(ws) {
	case lullv1alpha1.WindowEndAbort:
		res, err := s.abort(ctx, lullv1alpha1.PhaseWaitingForWindow, "the window closed during the drain (windowEnd: Abort); uncordoned what lull cordoned and released the lease")
		return res, true, err
	case lullv1alpha1.WindowEndPause:
		msg := "paused: the window closed during the drain (windowEnd: Pause); the node stays cordoned and leased"
		if w := s.fc.Windows; w != nil && w.HasNext {
			msg += "; resumes at " + w.Next.Start.UTC().Format(time.RFC3339)
			res.RequeueAfter = w.Next.Start.Sub(s.now)
		}
		if rd := s.r.Options.LeaseDuration / 3; res.RequeueAfter == 0 || res.RequeueAfter > rd {
			res.RequeueAfter = rd // keep renewing the lease while paused
		}
		if s.status.WaitingFor != msg {
			s.record(eventPaused(msg))
		}
		s.status.WaitingFor = msg
		s.cond(ConditionWindowPermits, false, gate.ReasonWindowClosed, msg)
		res, err := s.save(ctx, lullv1alpha1.PhaseDraining, res)
		return res, true, err
	}
	return reconcile.Result{}, false, nil
}

// evictOne asks the eviction API for one pod and counts the result; msg
// reports an unexpected error.
func (s *step) evictOne(ctx context.Context, p *corev1.Pod, grace int) (o drain.Outcome, msg string) {
	switch err := s.r.evict(ctx, p, grace); {
	case err == nil:
		s.r.Metrics.Evictions.WithLabelValues("evicted").Inc()
		return drain.Evicted, ""
	case apierrors.IsTooManyRequests(err):
		s.r.Metrics.Evictions.WithLabelValues("blocked").Inc()
		return drain.Refused, ""
	case apierrors.IsNotFound(err) || apierrors.IsConflict(err):
		// Gone, or replaced by a new pod of the same name (next round).
		s.r.Metrics.Evictions.WithLabelValues("gone").Inc()
		return drain.Vanished, ""
	default:
		s.r.Metrics.Evictions.WithLabelValues("error").Inc()
		return drain.Failed, fmt.Sprintf("evicting %s/%s: %v", p.Namespace, p.Name, err)
	}
}

// count records the round's pod counts. They derive from what the API
// server shows this round, so a lost status write or a restart cannot
// skew them. Pods the drain library refuses (not managed by a controller,
// local storage) block like a PDB and are reported; an eviction error
// seen this round is reported over them.
func (s *step) count(round *drain.Round, evictErr string) {
	if s.status.Pods == nil {
		s.status.Pods = &lullv1alpha1.PodCounts{}
	}
	if s.status.Pods.Total == 0 {
		s.status.Pods.Total = int32(len(round.Pods)) //nolint:gosec // G115: a count of a node's pods, far below 2^31 (the first round sees them all)
	}
	if len(round.Refused) > 0 {
		s.status.LastError = strings.Join(round.Refused, "; ")
	}
	if evictErr != "" {
		s.status.LastError = evictErr
	}
	var pending []string
	for _, p := range round.Pods {
		pending = append(pending, p.Namespace+"/"+p.Name)
	}
	left := int32(len(round.Pods) - round.Gone) //nolint:gosec // G115: a count of a node's pods, far below 2^31
	if left > s.status.Pods.Total {
		s.status.Pods.Total = left
	}
	s.status.Pods.Evicted = s.status.Pods.Total - left
	s.status.Pods.Pending = left
	if len(pending) > maxPendingNames {
		pending = pending[:maxPendingNames]
	}
	s.status.Pods.PendingPods = pending
}

// evictionTimeout bounds one eviction request. The API server retries a
// budget update that conflicts for up to 10 s before it answers.
const evictionTimeout = 30 * time.Second

// evict issues one eviction for the pod, with its UID as precondition so a
// replacement pod with the same name is never evicted by mistake. Once the
// reconcile is cancelled (lull-drainer stopping on SIGTERM: an upgrade,
// its pod moved) no eviction starts; but one already sent runs to its end
// within the manager's graceful shutdown. (Lost leadership skips that
// shutdown: the process exits at once, as a kill would.)
// The API server counts the pod's budgets down before it deletes the pod,
// so a request cancelled in between leaves the pod running and its budget
// counting it as disrupted for two minutes (drain.DisruptionTimeout),
// refusing every other eviction meanwhile.
func (r *Reconciler) evict(ctx context.Context, p *corev1.Pod, grace int) error {
	if err := ctx.Err(); err != nil {
		return fmt.Errorf("not evicting: %w", err)
	}
	ctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), evictionTimeout)
	defer cancel()
	opts := &metav1.DeleteOptions{Preconditions: &metav1.Preconditions{UID: &p.UID}}
	if grace >= 0 {
		opts.GracePeriodSeconds = ptr.To(int64(grace))
	}
	return r.Kube.PolicyV1().Evictions(p.Namespace).Evict(ctx, &policyv1.Eviction{
		ObjectMeta:    metav1.ObjectMeta{Name: p.Name, Namespace: p.Namespace},
		DeleteOptions: opts,
	})
}

// retryDelay is RetryDelay while the drain makes progress and grows while
// it is blocked, up to MaxRetryDelay, and never past the moment the
// eviction API must be asked again (askDue). A blocking budget gaining
// room wakes the controller at once (it watches PodDisruptionBudgets), so
// the longer delay costs no time.
func (s *step) retryDelay(progress bool) time.Duration {
	d := s.r.Options.RetryDelay
	if progress || len(s.status.Blockers) == 0 {
		return d
	}
	since := s.now.Sub(s.status.Blockers[0].Since.Time)
	for d < s.r.Options.MaxRetryDelay && since > d {
		d *= 2
	}
	if d > s.r.Options.MaxRetryDelay {
		d = s.r.Options.MaxRetryDelay
	}
	if _, by := s.r.rounds.askDue(s.node.Name, s.nm.UID, s.now, s.r.Options.MaxRetryDelay); by.Sub(s.now) < d {
		d = max(by.Sub(s.now), s.r.Options.RetryDelay/4)
	}
	return d
}

// drained records a node with no evictable pod left.
func (s *step) drained(ctx context.Context) (reconcile.Result, error) {
	s.status.DrainedAt = &metav1.Time{Time: s.now}
	s.status.Blockers = nil
	s.status.LastError = ""
	if s.status.StartedAt != nil {
		s.r.Metrics.DrainDuration.Observe(s.now.Sub(s.status.StartedAt.Time).Seconds())
	}
	s.cond(ConditionBlocked, false, "Drained", "nothing left to evict")
	s.cond(ConditionDrained, true, "Drained", "no evictable pod left on the node")
	// No event: the phase, the Drained condition and the node's condition
	// say it now; the Completed event tells the drain (events.go).
	if s.status.HasHostSteps() {
		return s.act(ctx)
	}
	return s.hold(ctx, lullv1alpha1.PhaseDrained)
}

// windowEnd is the most cautious windowEnd among the governing windows:
// Abort over Pause over Continue. Nodes no window selects never pause.
func windowEnd(ws []*lullv1alpha1.MaintenanceWindow) lullv1alpha1.WindowEndPolicy {
	out := lullv1alpha1.WindowEndContinue
	rank := map[lullv1alpha1.WindowEndPolicy]int{lullv1alpha1.WindowEndContinue: 0, lullv1alpha1.WindowEndPause: 1, lullv1alpha1.WindowEndAbort: 2}
	for _, w := range ws {
		p := w.Spec.WindowEnd
		if p == "" {
			p = lullv1alpha1.WindowEndPause
		}
		if rank[p] > rank[out] {
			out = p
		}
	}
	return out
}
