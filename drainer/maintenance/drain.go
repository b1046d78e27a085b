package maintenance

import (
	"context"
	"fmt"
	"io"
	"sort"
	"strings"
	"time"

	corev1 "k8s.io/api/core/v1"
	policyv1 "k8s.io/api/policy/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/client-go/kubernetes"
	"k8s.io/kubectl/pkg/drain"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/reconcile"

	lullv1alpha1 "lull.dev/lull/api/v1alpha1"
)

// maxPendingNames bounds the pod names kept in status.
const maxPendingNames = 50

// drainHelper configures kubectl's drain library explicitly for one round:
// it only selects the pods to evict (DaemonSet pods and mirror pods are
// skipped; emptyDir data may go if configured); lull issues the evictions
// itself, one per pod and round, with the pod's UID as precondition, so a
// reconcile never blocks waiting for pods to go.
func drainHelper(ctx context.Context, kube kubernetes.Interface, o Options, nm *lullv1alpha1.NodeMaintenance) (*drain.Helper, error) {
	o.defaults()
	h := &drain.Helper{
		Ctx:                             ctx,
		Client:                          kube,
		Force:                           false, // never evict pods no controller will recreate
		GracePeriodSeconds:              -1,    // each pod's own grace period
		IgnoreAllDaemonSets:             true,
		DeleteEmptyDirData:              o.DeleteEmptyDirData,
		Timeout:                         o.DrainTimeout,
		EvictErrorRetryDelay:            o.RetryDelay, // unused by lull's own rounds; never 0
		SkipWaitForDeleteTimeoutSeconds: 0,
		Out:                             io.Discard,
		ErrOut:                          io.Discard,
	}
	if d := nm.Spec.Drain; d != nil {
		if d.GracePeriodSeconds != nil {
			h.GracePeriodSeconds = int(*d.GracePeriodSeconds)
		}
		if d.PodSelector != nil {
			sel, err := metav1.LabelSelectorAsSelector(d.PodSelector)
			if err != nil {
				return nil, fmt.Errorf("spec.drain.podSelector: %w", err)
			}
			h.PodSelector = sel.String()
		}
	}
	return h, nil
}

// drain runs one eviction round: re-list the node's pods, evict those not
// yet going, record progress and blockers, and requeue after the retry
// delay (growing while blocked). A closed window acts per windowEnd.
func (s *step) drain() (reconcile.Result, error) {
	if res, lost, err := s.renew(); lost || err != nil {
		return res, err
	}
	s.noteWindows()
	if s.fc != nil && !s.fc.WindowOpen {
		ws, err := s.windows()
		if err != nil {
			return reconcile.Result{}, err
		}
		switch windowEnd(ws) {
		case lullv1alpha1.WindowEndAbort:
			return s.abort(lullv1alpha1.PhaseWaitingForWindow, "the window closed during the drain (windowEnd: Abort); uncordoned what lull cordoned and released the lease")
		case lullv1alpha1.WindowEndPause:
			msg := "paused: the window closed during the drain (windowEnd: Pause); the node stays cordoned and leased"
			var res reconcile.Result
			if w := s.fc.Windows; w != nil && w.HasNext {
				msg += "; resumes at " + w.Next.Start.UTC().Format(time.RFC3339)
				res.RequeueAfter = w.Next.Start.Sub(s.now)
			}
			if rd := s.r.Options.LeaseDuration / 3; res.RequeueAfter == 0 || res.RequeueAfter > rd {
				res.RequeueAfter = rd // keep renewing the lease while paused
			}
			if s.status.WaitingFor != msg {
				s.event(corev1.EventTypeNormal, "Paused", msg)
			}
			s.status.WaitingFor = msg
			s.cond(ConditionWindowPermits, false, "WindowClosed", msg)
			return s.save(lullv1alpha1.PhaseDraining, res)
		}
	}

	h, err := drainHelper(s.ctx, s.r.Kube, s.r.Options, s.nm)
	if err != nil {
		return s.abort(lullv1alpha1.PhaseFailed, err.Error())
	}
	list, errs := h.GetPodsForDeletion(s.node.Name)
	if list == nil {
		return reconcile.Result{}, fmt.Errorf("listing pods on node %s: %v", s.node.Name, errs)
	}
	pods := list.Pods()
	if s.status.Pods == nil {
		s.status.Pods = &lullv1alpha1.PodCounts{}
	}
	if s.status.Pods.Total == 0 {
		s.status.Pods.Total = int32(len(pods)) // the first round sees them all
	}
	if len(errs) > 0 {
		// Pods the drain library refuses (not managed by a controller,
		// local storage): they block like a PDB and are reported.
		msgs := make([]string, len(errs))
		for i, e := range errs {
			msgs[i] = e.Error()
		}
		s.status.LastError = strings.Join(msgs, "; ")
	}

	pdbs := newPDBIndex(s.ctx, s.r.Client)
	blocked, gone, progress := walkRound(pods, &pdbs, func(p *corev1.Pod) evictOutcome {
		switch err := s.r.evict(s.ctx, p, h.GracePeriodSeconds); {
		case err == nil:
			s.r.Metrics.Evictions.WithLabelValues("evicted").Inc()
			return evicted
		case apierrors.IsTooManyRequests(err):
			s.r.Metrics.Evictions.WithLabelValues("blocked").Inc()
			return refused
		case apierrors.IsNotFound(err) || apierrors.IsConflict(err):
			// Gone, or replaced by a new pod of the same name (next round).
			s.r.Metrics.Evictions.WithLabelValues("gone").Inc()
			return vanished
		default:
			s.r.Metrics.Evictions.WithLabelValues("error").Inc()
			s.status.LastError = fmt.Sprintf("evicting %s/%s: %v", p.Namespace, p.Name, err)
			return failed
		}
	})

	// Counts derive from what the API server shows this round, so a lost
	// status write or a restart cannot skew them.
	var pending []string
	for _, p := range pods {
		pending = append(pending, p.Namespace+"/"+p.Name)
	}
	left := int32(len(pods) - gone)
	if left > s.status.Pods.Total {
		s.status.Pods.Total = left
	}
	s.status.Pods.Evicted = s.status.Pods.Total - left
	s.status.Pods.Pending = left
	if len(pending) > maxPendingNames {
		pending = pending[:maxPendingNames]
	}
	s.status.Pods.PendingPods = pending

	if len(pods) == 0 && len(errs) == 0 {
		s.status.Pods.Evicted, s.status.Pods.Pending = s.status.Pods.Total, 0
		return s.drained()
	}
	s.blockers(blocked, &pdbs)
	if len(s.status.Blockers) > 0 || len(errs) > 0 {
		if res, done, err := s.escalate(blocked); done || err != nil {
			return res, err
		}
	} else {
		s.cond(ConditionBlocked, false, "Progressing", "evictions are progressing")
	}
	s.cond(ConditionDrained, false, "Draining", fmt.Sprintf("%d pod(s) still on the node", s.status.Pods.Pending))
	s.status.WaitingFor = fmt.Sprintf("draining: %d of %d pod(s) left", s.status.Pods.Pending, s.status.Pods.Total)
	return s.save(lullv1alpha1.PhaseDraining, reconcile.Result{RequeueAfter: s.retryDelay(progress)})
}

// evictOutcome is what became of one eviction request.
type evictOutcome int

const (
	evicted  evictOutcome = iota // the pod is going; its budgets count it
	refused                      // a PodDisruptionBudget refused it
	vanished                     // gone, or replaced by a pod of the same name
	failed                       // any other error (reported by the caller)
)

// walkRound is one drain round over the node's pods, in order. A pod
// already going counts as gone; a pod covered by a budget that allows no
// disruption now is blocked without asking (its budget's status change
// wakes the drainer); every other pod is handed to evict, and one evicted
// counts its budgets down for the rest of the round, so a budget allowing
// one disruption gets one request. The drainer's evict calls the eviction
// API; the preview's records the pod. Both walk the same rules, so a
// preview names the blockers the drainer will report.
func walkRound(pods []corev1.Pod, pdbs *pdbIndex, evict func(*corev1.Pod) evictOutcome) (blocked map[string]*corev1.Pod, gone int, progress bool) {
	blocked = map[string]*corev1.Pod{}
	for i := range pods {
		p := &pods[i]
		if p.DeletionTimestamp != nil {
			progress = true
			gone++
			continue
		}
		if pdbs.exhausted(p) {
			blocked[p.Namespace+"/"+p.Name] = p
			continue
		}
		switch evict(p) {
		case evicted:
			progress = true
			gone++
			pdbs.consume(p)
		case refused:
			blocked[p.Namespace+"/"+p.Name] = p
		case vanished:
			gone++
		}
	}
	return blocked, gone, progress
}

// pdbIndex answers, from the cache, whether a pod is covered by a
// PodDisruptionBudget that currently allows no disruption.
type pdbIndex struct {
	c    client.Reader
	ctx  context.Context
	byNS map[string][]policyv1.PodDisruptionBudget
}

func newPDBIndex(ctx context.Context, c client.Reader) pdbIndex {
	return pdbIndex{c: c, ctx: ctx, byNS: map[string][]policyv1.PodDisruptionBudget{}}
}

func (x *pdbIndex) matching(p *corev1.Pod) []*policyv1.PodDisruptionBudget {
	list, ok := x.byNS[p.Namespace]
	if !ok {
		var pdbs policyv1.PodDisruptionBudgetList
		if err := x.c.List(x.ctx, &pdbs, client.InNamespace(p.Namespace)); err != nil {
			return nil // let the eviction API decide
		}
		list = pdbs.Items // copies: consume may count them down
		x.byNS[p.Namespace] = list
	}
	var out []*policyv1.PodDisruptionBudget
	for i := range list {
		sel, err := metav1.LabelSelectorAsSelector(list[i].Spec.Selector)
		if err == nil && !sel.Empty() && sel.Matches(labels.Set(p.Labels)) {
			out = append(out, &list[i])
		}
	}
	return out
}

func (x *pdbIndex) exhausted(p *corev1.Pod) bool {
	for _, pdb := range x.matching(p) {
		if pdb.Status.ObservedGeneration >= pdb.Generation && pdb.Status.DisruptionsAllowed <= 0 {
			return true
		}
	}
	return false
}

// consume counts an eviction against the pod's budgets for the rest of
// the round, so a budget allowing one disruption gets one request.
func (x *pdbIndex) consume(p *corev1.Pod) {
	for _, pdb := range x.matching(p) {
		pdb.Status.DisruptionsAllowed--
	}
}

// evict issues one eviction for the pod, with its UID as precondition so a
// replacement pod with the same name is never evicted by mistake.
func (r *Reconciler) evict(ctx context.Context, p *corev1.Pod, grace int) error {
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
// it is blocked, up to MaxRetryDelay. A blocking budget gaining room wakes
// the controller at once (it watches PodDisruptionBudgets), so the longer
// delay costs no time.
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
	return d
}

// blockers records the PodDisruptionBudgets that refused evictions, with
// their pods, keeping the time each was first seen. The budgets come from
// the round's index: no second listing.
func (s *step) blockers(blocked map[string]*corev1.Pod, pdbs *pdbIndex) {
	prev := map[string]metav1.Time{}
	for _, b := range s.status.Blockers {
		prev[b.PodDisruptionBudget] = b.Since
	}
	byPDB := groupBlocked(blocked, pdbs)
	var out []lullv1alpha1.Blocker
	for _, id := range sortedKeys(byPDB) {
		since, ok := prev[id]
		if !ok {
			since = metav1.Time{Time: s.now}
			// One event per budget and node per 10 minutes: a budget that
			// lets pods go one by one blocks and unblocks every round.
			if s.r.memo.eventDue(s.node.Name+"|"+id, s.now, 10*time.Minute) {
				s.event(corev1.EventTypeWarning, "DrainBlocked",
					fmt.Sprintf("PodDisruptionBudget %s allows no disruption of %s", id, strings.Join(byPDB[id], ", ")))
			}
		}
		out = append(out, lullv1alpha1.Blocker{PodDisruptionBudget: id, Pods: byPDB[id], Since: since})
	}
	s.status.Blockers = out
}

// groupBlocked names, per PodDisruptionBudget (namespace/name), the
// blocked pods it covers.
func groupBlocked(blocked map[string]*corev1.Pod, pdbs *pdbIndex) map[string][]string {
	byPDB := map[string][]string{}
	for key, p := range blocked {
		found := false
		for _, pdb := range pdbs.matching(p) {
			id := pdb.Namespace + "/" + pdb.Name
			byPDB[id] = append(byPDB[id], key)
			found = true
		}
		if !found {
			byPDB["(unknown)"] = append(byPDB["(unknown)"], key)
		}
	}
	for _, pods := range byPDB {
		sort.Strings(pods)
	}
	return byPDB
}

// DrainPreview is what a drain's first round would do now.
type DrainPreview struct {
	// Evict are the pods (namespace/name) the round would evict.
	Evict []string
	// Blockers are the PodDisruptionBudgets that would refuse evictions
	// (Since is zero).
	Blockers []lullv1alpha1.Blocker
	// Refused are pods the drain refuses to evict (no controller, local
	// storage), with why.
	Refused []string
	// MaxGracePeriod is the longest termination grace period among the
	// pods to evict.
	MaxGracePeriod time.Duration
}

// PreviewDrain runs the selection and budget accounting of a drain round
// for nm's node without evicting anything: the same pods, the same
// PodDisruptionBudget arithmetic, the same blockers the drainer would
// report. Budgets are read from c.
func PreviewDrain(ctx context.Context, kube kubernetes.Interface, c client.Reader, o Options, nm *lullv1alpha1.NodeMaintenance) (*DrainPreview, error) {
	h, err := drainHelper(ctx, kube, o, nm)
	if err != nil {
		return nil, err
	}
	list, errs := h.GetPodsForDeletion(nm.Spec.NodeName)
	if list == nil {
		return nil, fmt.Errorf("listing pods on node %s: %v", nm.Spec.NodeName, errs)
	}
	out := &DrainPreview{}
	for _, e := range errs {
		out.Refused = append(out.Refused, e.Error())
	}
	pdbs := newPDBIndex(ctx, c)
	blocked, _, _ := walkRound(list.Pods(), &pdbs, func(p *corev1.Pod) evictOutcome {
		out.Evict = append(out.Evict, p.Namespace+"/"+p.Name)
		grace := time.Duration(ptr.Deref(p.Spec.TerminationGracePeriodSeconds, corev1.DefaultTerminationGracePeriodSeconds)) * time.Second
		if h.GracePeriodSeconds >= 0 {
			grace = time.Duration(h.GracePeriodSeconds) * time.Second
		}
		out.MaxGracePeriod = max(out.MaxGracePeriod, grace)
		return evicted // as if every eviction the budgets allow succeeds
	})
	byPDB := groupBlocked(blocked, &pdbs)
	for _, id := range sortedKeys(byPDB) {
		out.Blockers = append(out.Blockers, lullv1alpha1.Blocker{PodDisruptionBudget: id, Pods: byPDB[id]})
	}
	sort.Strings(out.Evict)
	return out, nil
}

// escalate applies the request's escalation once a blocked drain has
// waited longer than its timeout.
func (s *step) escalate(blocked map[string]*corev1.Pod) (reconcile.Result, bool, error) {
	msg := "drain blocked"
	if len(s.status.Blockers) > 0 {
		var parts []string
		for _, b := range s.status.Blockers {
			parts = append(parts, fmt.Sprintf("%s (pods %s)", b.PodDisruptionBudget, strings.Join(b.Pods, ", ")))
		}
		msg = "drain blocked by PodDisruptionBudget " + strings.Join(parts, "; ")
	} else if s.status.LastError != "" {
		msg = "drain blocked: " + s.status.LastError
	}
	s.cond(ConditionBlocked, true, "EvictionRefused", msg)
	if len(s.status.Blockers) == 0 {
		return reconcile.Result{}, false, nil
	}
	// The request's own settings win over its policy rule's, which win
	// over the drainer's flags.
	// A timeout stored before admission checked it and unreadable now is
	// ignored, never read as 0 (which would escalate at once); the
	// message says so.
	timeout, esc := s.r.Options.DrainTimeout, lullv1alpha1.EscalationWait
	if d := s.status.Decision; d != nil {
		if d.Timeout != nil && d.Timeout.Err() == nil {
			timeout = d.Timeout.Duration
		}
		if d.Escalation != "" {
			esc = d.Escalation
		}
	}
	if d := s.nm.Spec.Drain; d != nil {
		if err := d.Timeout.Err(); err != nil {
			s.cond(ConditionBlocked, true, "EvictionRefused", msg+"; spec.drain.timeout ignored: "+err.Error())
		} else if d.Timeout != nil {
			timeout = d.Timeout.Duration
		}
		if d.Escalation != "" {
			esc = d.Escalation
		}
	}
	since := s.status.Blockers[0].Since.Time
	if s.now.Sub(since) < timeout || esc == lullv1alpha1.EscalationWait {
		return reconcile.Result{}, false, nil
	}
	switch esc {
	case lullv1alpha1.EscalationAbort:
		why := fmt.Sprintf("%s for %s (timeout %s, escalation Abort)", msg, s.now.Sub(since).Round(time.Second), timeout)
		res, err := s.abort(lullv1alpha1.PhaseFailed, why)
		return res, true, err
	case lullv1alpha1.EscalationForce:
		if !s.r.Options.AllowForce {
			s.status.LastError = "escalation Force requested, but lull-drainer runs without --allow-force; still waiting"
			return reconcile.Result{}, false, nil
		}
		for key, p := range blocked {
			err := s.r.Kube.CoreV1().Pods(p.Namespace).Delete(s.ctx, p.Name, metav1.DeleteOptions{Preconditions: &metav1.Preconditions{UID: &p.UID}})
			if err != nil && !apierrors.IsNotFound(err) && !apierrors.IsConflict(err) {
				s.status.LastError = fmt.Sprintf("force-deleting %s: %v", key, err)
				continue
			}
			s.r.Metrics.Evictions.WithLabelValues("forced").Inc()
			s.event(corev1.EventTypeWarning, "ForceDeleted", fmt.Sprintf("deleted %s past its PodDisruptionBudget (escalation Force)", key))
		}
	}
	return reconcile.Result{}, false, nil
}

// drained records a node with no evictable pod left.
func (s *step) drained() (reconcile.Result, error) {
	s.status.DrainedAt = &metav1.Time{Time: s.now}
	s.status.Blockers = nil
	s.status.LastError = ""
	if s.status.StartedAt != nil {
		s.r.Metrics.DrainDuration.Observe(s.now.Sub(s.status.StartedAt.Time).Seconds())
	}
	s.cond(ConditionBlocked, false, "Drained", "nothing left to evict")
	s.cond(ConditionDrained, true, "Drained", "no evictable pod left on the node")
	s.event(corev1.EventTypeNormal, "Drained", "node drained; ready for maintenance")
	return s.hold(lullv1alpha1.PhaseDrained)
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
