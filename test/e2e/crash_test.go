package e2e

import (
	"context"
	"fmt"
	"math/rand"
	"os"
	"slices"
	"sort"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	corev1 "k8s.io/api/core/v1"
	policyv1 "k8s.io/api/policy/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/intstr"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"

	lullv1alpha1 "lull.dev/lull/api/v1alpha1"
)

// crashConfig reads the crash test's knobs: LULL_CRASH_SEED replays a run's
// kill moments (the seed is printed), LULL_CRASH_KILLS sets how many kills
// (50 in make test, 200 in make soak).
func crashConfig(t *testing.T) (seed int64, kills int) {
	seed, kills = time.Now().UnixNano(), 50
	if v := os.Getenv("LULL_CRASH_SEED"); v != "" {
		n, err := strconv.ParseInt(v, 10, 64)
		require.NoError(t, err, "LULL_CRASH_SEED")
		seed = n
	}
	if v := os.Getenv("LULL_CRASH_KILLS"); v != "" {
		n, err := strconv.Atoi(v)
		require.NoError(t, err, "LULL_CRASH_KILLS")
		kills = n
	}
	return seed, kills
}

// killer kills the leading lull-drainer with SIGKILL at random moments; the
// supervisor starts it again. A replica started again within the leader
// lease's 15 s finds its own name on the lease and leads again at once, so
// every takeoverEvery-th kill keeps the victim down until the other
// replica leads: that one takes over mid-drain, from its own caches. It
// runs in its own goroutine and records, never fails the test itself.
type killer struct {
	mu        sync.Mutex
	kills     int
	takeovers int
	resume    []time.Duration
	err       error
	done      chan struct{}
}

// takeoverEvery: one kill in this many keeps the victim down until the
// other replica leads (each costs a leader lease, 15 s).
const takeoverEvery = 5

func startKiller(ctx context.Context, rng *rand.Rand, target int, sup *supervisor) *killer {
	k := &killer{done: make(chan struct{})}
	go func() {
		defer close(k.done)
		for k.count() < target {
			select {
			case <-ctx.Done():
				return
			case <-time.After(time.Duration(100+rng.Intn(900)) * time.Millisecond): // a random moment
			}
			var victim string
			for _, p := range drainerProcs() {
				if p.leading() {
					victim = p.name
					break
				}
			}
			if victim == "" {
				continue
			}
			release, others := func() {}, drainerProcs()
			if (k.count()+1)%takeoverEvery == 0 {
				release = sup.hold(victim)
				others = slices.DeleteFunc(others, func(p drainerProc) bool { return p.name == victim })
			}
			if err := (&proc{name: victim}).signal(syscall.SIGKILL); err != nil {
				release()
				continue
			}
			killedAt := time.Now()
			next, err := leader(ctx, 2*time.Minute, others...)
			release()
			k.mu.Lock()
			k.kills++
			if err != nil {
				k.err = fmt.Errorf("no replica leads after kill %d: %w", k.kills, err)
				k.mu.Unlock()
				return
			}
			if next != victim {
				k.takeovers++
			}
			k.resume = append(k.resume, time.Since(killedAt).Round(100*time.Millisecond))
			k.mu.Unlock()
		}
	}()
	return k
}

func (k *killer) count() int {
	k.mu.Lock()
	defer k.mu.Unlock()
	return k.kills
}

func (k *killer) finished() bool {
	select {
	case <-k.done:
		return true
	default:
		return false
	}
}

// windowDrain is a drain whose scheduled window closes while it runs: the
// app pinned to its node (label <app>=yes) has a PodDisruptionBudget of
// maxUnavailable 1, so after the first eviction the drain waits for a
// replacement with nowhere to go. Then the window's schedule is shortened to
// close a few seconds later; once the drainer acted on the close (windowEnd
// Pause: stays cordoned and leased; Abort: uncordoned and released) the
// replacement may run on the spare node, so the budget would allow the next
// eviction, and the window stays closed a while: nothing may be evicted.
// Then an override opens it and the drain finishes.
type windowDrain struct {
	policy           lullv1alpha1.WindowEndPolicy
	node, app        string
	start            time.Time // the schedule's start (this minute)
	state            int
	labelled         time.Time
	closeAt          time.Time
	unblocked        time.Time
	allowedSince     time.Time
	killsAtUnblock   int
	reopened         time.Time
	evictedAtClose   int
	evictedInClosed  int
	killsWhileClosed int
	// frees is when the budget frees the last disruption an unfinished
	// eviction holds (Cluster.UnfinishedEvictions): a kill in the middle
	// of an eviction request stalls the drain until then, so the deadlines
	// of the steps that wait on the budget extend to it (within).
	frees time.Time
}

// within reports whether the scenario is still within d of since, or of
// the moment its budget frees a disruption an unfinished eviction held.
func (w *windowDrain) within(since time.Time, d time.Duration) bool {
	return time.Since(since) < d || time.Since(w.frees) < d/2
}

// noteUnfinished extends the deadlines while the budget counts a pod an
// eviction left running (a kill mid-request).
func (w *windowDrain) noteUnfinished(t *testing.T) {
	pods, frees := cluster.UnfinishedEvictions(t.Context(), w.app)
	if frees.After(w.frees) {
		t.Logf("%s: PodDisruptionBudget %s counts %v as evicted by evictions that did not finish (a kill mid-request); it frees them at %s",
			w.app, w.app, pods, frees.Format("15:04:05"))
		w.frees = frees
	}
}

func (e *sysEnv) newWindowDrain(iv *invariants, policy lullv1alpha1.WindowEndPolicy, node string) *windowDrain {
	t := e.t
	w := &windowDrain{policy: policy, node: node, app: "e2e-win-" + strings.ToLower(string(policy))}
	w.start = time.Now().UTC().Truncate(time.Minute)
	e.window(&lullv1alpha1.MaintenanceWindow{
		ObjectMeta: metav1.ObjectMeta{Name: w.app},
		Spec: lullv1alpha1.MaintenanceWindowSpec{
			NodeSelector: &metav1.LabelSelector{MatchLabels: map[string]string{"pool": w.app}},
			Strategy:     lullv1alpha1.StrategySchedule,
			Schedule: &lullv1alpha1.Schedule{TimeZone: "UTC", StartTime: w.start.Format("15:04"), Duration: lullv1alpha1.Duration{Duration: 2 * time.Hour},
				Recurrence: &lullv1alpha1.Recurrence{Frequency: lullv1alpha1.Daily}},
			WindowEnd: policy,
		},
	})
	e.patchNode(node, fmt.Sprintf(`{"metadata":{"labels":{"pool":%q,%q:"yes"}}}`, w.app, w.app))
	t.Cleanup(func() { e.patchNodeBg(node, fmt.Sprintf(`{"metadata":{"labels":{%q:null}}}`, w.app)) })
	cluster.GuardedApp(t, w.app, 4, policyv1.PodDisruptionBudgetSpec{MaxUnavailable: ptr.To(intstr.FromInt32(1))},
		func(s *corev1.PodSpec) { s.NodeSelector = map[string]string{w.app: "yes"} })
	waitAppRunning(t.Context(), t, w.app, 4)
	iv.restrict(node)
	iv.permit(node, w.start)
	return w
}

// step advances the scenario by what the cluster shows now; it reports
// whether the scenario has finished.
func (w *windowDrain) step(e *sysEnv, iv *invariants, spare string, k *killer) bool {
	t := e.t
	t.Helper()
	ctx := t.Context()
	var nm lullv1alpha1.NodeMaintenance
	_ = e.c.Get(ctx, client.ObjectKey{Name: w.node}, &nm)
	w.noteUnfinished(t)
	switch w.state {
	case 0: // request it
		e.patchNode(w.node, `{"metadata":{"labels":{"lull.dev/maintenance":"kernel-update"}}}`)
		w.labelled, w.state = time.Now(), 1
	case 1: // the drain is under way: close the window a few seconds from now
		require.True(t, w.within(w.labelled, 4*time.Minute), "%s: no eviction from %s; last status %+v", w.app, w.node, nm.Status)
		if iv.evictions(w.node) == 0 {
			return false
		}
		w.closeAt = time.Now().Add(5 * time.Second).Truncate(time.Second)
		iv.closes(w.node, w.closeAt)
		e.editWindow(w.app, func(mw *lullv1alpha1.MaintenanceWindow) {
			mw.Spec.Schedule.Duration = lullv1alpha1.Duration{Duration: w.closeAt.Sub(w.start)}
		})
		w.evictedAtClose, w.state = iv.evictions(w.node), 2
	case 2: // the drainer acted on the close
		// Acting on a close asks no budget: no allowance for an unfinished eviction.
		require.True(t, time.Since(w.closeAt) < 3*time.Minute, "%s: the drainer did not act on the close; last status %+v", w.app, nm.Status)
		if time.Now().Before(w.closeAt) {
			return false
		}
		n, err := cluster.Clientset.CoreV1().Nodes().Get(ctx, w.node, metav1.GetOptions{})
		if err != nil {
			return false
		}
		switch w.policy {
		case lullv1alpha1.WindowEndPause:
			if nm.Status.Phase != lullv1alpha1.PhaseDraining || !strings.Contains(nm.Status.WaitingFor, "paused") {
				return false
			}
			require.True(t, n.Spec.Unschedulable, "paused: %s stays cordoned", w.node)
		case lullv1alpha1.WindowEndAbort:
			if nm.Status.Phase != lullv1alpha1.PhaseWaitingForWindow {
				return false
			}
			require.False(t, n.Spec.Unschedulable, "aborted: %s uncordoned", w.node)
		}
		t.Logf("%s: window closed at %s; drainer: %s (%s)", w.app, w.closeAt.Format("15:04:05"), nm.Status.Phase, nm.Status.WaitingFor)
		e.patchNode(spare, fmt.Sprintf(`{"metadata":{"labels":{%q:"yes"}}}`, w.app))
		// Left on the spare, the label would let the next run's pods
		// (go test -count) go there: its drain would end before the close.
		t.Cleanup(func() { e.patchNodeBg(spare, fmt.Sprintf(`{"metadata":{"labels":{%q:null}}}`, w.app)) })
		w.unblocked, w.killsAtUnblock, w.state = time.Now(), k.count(), 3
	case 3: // closed, and the budget allows an eviction: hold a while (leaders change meanwhile)
		if w.allowedSince.IsZero() {
			p, err := cluster.Clientset.PolicyV1().PodDisruptionBudgets("default").Get(ctx, w.app, metav1.GetOptions{})
			if err == nil && p.Status.DisruptionsAllowed > 0 {
				w.allowedSince = time.Now()
			}
			require.True(t, w.within(w.unblocked, 2*time.Minute), "%s: the budget never allowed an eviction again", w.app)
			return false
		}
		if time.Since(w.allowedSince) < 15*time.Second || (!k.finished() && k.count() == w.killsAtUnblock && time.Since(w.allowedSince) < time.Minute) {
			return false
		}
		w.evictedInClosed = iv.evictions(w.node) - w.evictedAtClose
		w.killsWhileClosed = k.count() - w.killsAtUnblock
		w.reopened = time.Now()
		iv.permit(w.node, w.reopened)
		e.editWindow(w.app, func(mw *lullv1alpha1.MaintenanceWindow) {
			mw.Spec.Override = &lullv1alpha1.Override{Strategy: lullv1alpha1.OverridePermissive, Until: metav1.Time{Time: time.Now().Add(time.Hour)}, Reason: "e2e: reopen"}
		})
		w.state = 4
	case 4: // drained in the reopened window: complete it
		require.True(t, w.within(w.reopened, 4*time.Minute), "%s: not drained after reopening; last status %+v", w.app, nm.Status)
		if nm.Status.Phase == lullv1alpha1.PhaseDrained {
			e.patchNode(w.node, `{"metadata":{"labels":{"lull.dev/maintenance":null}}}`)
			w.state = 5
		}
	case 5:
		require.True(t, w.within(w.reopened, 5*time.Minute), "%s: not completed; last status %+v", w.app, nm.Status)
		if nm.Status.Phase == lullv1alpha1.PhaseCompleted {
			w.state = 6
		}
	}
	return w.state == 6
}

// Crash anywhere: the leading lull-drainer is killed with SIGKILL at random
// moments (LULL_CRASH_KILLS, default 50) while three nodes of a budget-1
// window are drained round after round with PDB-guarded pods, a node sits
// behind a window that never opens, and two scheduled windows close in the
// middle of a drain (windowEnd Pause and Abort). The killed replica is
// started again and mostly leads again at once; every fifth kill keeps it
// down until the other replica takes over. The shared invariant watchers run
// throughout; afterwards every request has finished.
func TestSystemCrashAnywhere(t *testing.T) {
	begin := time.Now()
	e := newSysEnv(t)
	ctx := t.Context()
	seed, target := crashConfig(t)
	fmt.Printf("crash-anywhere: seed %d, %d kills (replay: LULL_CRASH_SEED=%d LULL_CRASH_KILLS=%d)\n", seed, target, seed, target)
	rng := rand.New(rand.NewSource(seed))

	nodes := e.pickNodes("e2e-crash", 3)
	frozen := e.pickNodes("e2e-frozen", 1)[0]
	pauseNode := e.pickNodes("e2e-win-pause", 1)[0]
	abortNode := e.pickNodes("e2e-win-abort", 1)[0]
	spare := e.pickNodes("e2e-spare", 1)[0]
	e.oneAtATimeWindow("e2e-crash")
	e.window(&lullv1alpha1.MaintenanceWindow{
		ObjectMeta: metav1.ObjectMeta{Name: "e2e-frozen"},
		Spec: lullv1alpha1.MaintenanceWindowSpec{
			NodeSelector: &metav1.LabelSelector{MatchLabels: map[string]string{"pool": "e2e-frozen"}},
			Strategy:     lullv1alpha1.StrategyRestrictive,
		},
	})
	// Guarded pods on the round nodes and the frozen one, so drains are
	// paced by the PDB and the frozen node has pods that must stay.
	cluster.GuardedApp(t, "crash", 9, policyv1.PodDisruptionBudgetSpec{MaxUnavailable: ptr.To(intstr.FromInt32(1))}, func(s *corev1.PodSpec) {
		s.Affinity = &corev1.Affinity{NodeAffinity: &corev1.NodeAffinity{RequiredDuringSchedulingIgnoredDuringExecution: &corev1.NodeSelector{
			NodeSelectorTerms: []corev1.NodeSelectorTerm{{MatchExpressions: []corev1.NodeSelectorRequirement{{
				Key: "pool", Operator: corev1.NodeSelectorOpIn, Values: []string{"e2e-crash", "e2e-frozen"}}}}}}}}
	})
	waitAppRunning(ctx, t, "crash", 9)
	cluster.WaitBudgetAllows(t, "crash", 1)

	iv := e.watchInvariants(append(append([]string(nil), nodes...), frozen, pauseNode, abortNode, spare)...)
	iv.budget("e2e-crash", 1, nodes...)
	iv.restrict(frozen) // never permitted
	iv.restrict(spare)  // no request: nothing may leave it
	windows := []*windowDrain{
		e.newWindowDrain(iv, lullv1alpha1.WindowEndPause, pauseNode),
		e.newWindowDrain(iv, lullv1alpha1.WindowEndAbort, abortNode),
	}
	sup := superviseLull(t)
	e.patchNode(frozen, `{"metadata":{"labels":{"lull.dev/maintenance":"kernel-update"}}}`)
	round := 0
	label := func() {
		round++
		for _, n := range nodes {
			e.patchNode(n, fmt.Sprintf(`{"metadata":{"labels":{"lull.dev/maintenance":"kernel-round-%d"}}}`, round))
		}
	}
	label()
	k := startKiller(ctx, rng, target, sup)
	m := &meddler{rng: rand.New(rand.NewSource(seed + 1)), pool: "e2e-crash", moved: map[string]time.Time{}, uncordoned: map[string]time.Time{}}

	// The operator: complete whatever is drained, start a new round while
	// kills remain, step the window scenarios; until the killer is done and
	// every request has finished.
	completed := map[string]int{}
	counted := map[string]bool{} // NodeMaintenance UIDs already counted as completed
	deadline := time.Now().Add(5*time.Minute + time.Duration(target)*12*time.Second)
	for {
		require.True(t, time.Now().Before(deadline), "crash test did not finish: %d kills, completed %v; %s", k.count(), completed, cluster.LogsHint())
		k.mu.Lock()
		kerr := k.err
		k.mu.Unlock()
		require.NoError(t, kerr, cluster.LogsHint())
		done := k.finished()
		for _, n := range nodes {
			var nm lullv1alpha1.NodeMaintenance
			if e.c.Get(ctx, client.ObjectKey{Name: n}, &nm) != nil {
				done = false
				continue
			}
			var node corev1.Node
			if e.c.Get(ctx, client.ObjectKey{Name: n}, &node) != nil {
				done = false
				continue
			}
			_, labelled := node.Labels["lull.dev/maintenance"]
			switch {
			case labelled && nm.Status.Phase.Finished():
				// A new round's label the drainer has not turned into a
				// request yet: not done (ending here left its requests
				// behind, found by CI on 010d918).
				done = false
			case nm.Status.Phase == lullv1alpha1.PhaseDrained:
				e.patchNode(n, `{"metadata":{"labels":{"lull.dev/maintenance":null}}}`)
				if !counted[string(nm.UID)] {
					counted[string(nm.UID)] = true
					completed[n]++
				}
				done = false
			case !nm.Status.Phase.Finished():
				done = false
			}
		}
		if !m.step(e, nodes) {
			done = false
		}
		if !k.finished() && allCompleted(e, nodes) && m.calm(e) {
			label()
			done = false
		}
		for _, w := range windows {
			if !w.step(e, iv, spare, k) {
				done = false
			}
		}
		if done {
			break
		}
		time.Sleep(300 * time.Millisecond) // the operator's pace, not an assertion
	}
	// The frozen node's request waited all along; nothing left it.
	var nm lullv1alpha1.NodeMaintenance
	require.NoError(t, e.c.Get(ctx, client.ObjectKey{Name: frozen}, &nm))
	require.Equal(t, lullv1alpha1.PhaseWaitingForWindow, nm.Status.Phase)
	e.complete(frozen)
	violations := iv.check()
	require.LessOrEqual(t, 1, iv.maxDisrupting("e2e-crash"))

	resume := append([]time.Duration(nil), k.resume...)
	sort.Slice(resume, func(i, j int) bool { return resume[i] < resume[j] })
	require.NotEmpty(t, resume)
	require.GreaterOrEqual(t, k.takeovers, k.kills/takeoverEvery, "every %d-th kill keeps the victim down: the other replica takes over", takeoverEvery)
	t.Logf("kills %d, takeovers %d, rounds %d, completions %v, restarts %v, resume times %v", k.kills, k.takeovers, round, completed, sup.restartCounts(), resume)
	t.Logf("meddling: %d relabels out of the window mid-drain, %d foreign uncordons, cordoned again after %v", m.relabels, m.uncordons, m.recordoned)
	for _, w := range windows {
		t.Logf("%s: %d evicted before the close at %s, %d while closed (budget allowed from %s, %d leader kills), reopened %s",
			w.app, w.evictedAtClose, w.closeAt.Format("15:04:05"), w.evictedInClosed, w.allowedSince.Format("15:04:05"), w.killsWhileClosed, w.reopened.Format("15:04:05"))
	}
	summary("crash-anywhere", map[string]any{"seed": seed, "kills": k.kills, "takeovers": k.takeovers, "rounds": round,
		"leader_again_median": resume[len(resume)/2], "leader_again_max": resume[len(resume)-1],
		"window_closes": "Pause,Abort", "relabels": m.relabels, "foreign_uncordons": m.uncordons,
		"violations": violations, "duration": time.Since(begin)})
}

// meddler does, at random moments, what others do to nodes lull works on
// (issue 27): it relabels a disrupting node out of its window's pool for a
// few seconds (its slot must stay taken: the budget watcher counts it), and
// uncordons a node lull holds (lull must cordon it again while it holds it).
// It runs in the operator's loop, so it never races the operator's labels.
type meddler struct {
	rng        *rand.Rand
	pool       string
	moved      map[string]time.Time // node -> when it goes back to pool
	uncordoned map[string]time.Time // node -> when it was uncordoned
	relabels   int
	uncordons  int
	recordoned []time.Duration
}

// step meddles, puts moved nodes back when their time is up, and follows
// up uncordons; it reports whether nothing is pending.
func (m *meddler) step(e *sysEnv, nodes []string) bool {
	t := e.t
	ctx := t.Context()
	for n, back := range m.moved {
		if time.Now().After(back) {
			e.patchNode(n, fmt.Sprintf(`{"metadata":{"labels":{"pool":%q}}}`, m.pool))
			delete(m.moved, n)
		}
	}
	for n, at := range m.uncordoned {
		var nm lullv1alpha1.NodeMaintenance
		var node corev1.Node
		if e.c.Get(ctx, client.ObjectKey{Name: n}, &nm) != nil || e.c.Get(ctx, client.ObjectKey{Name: n}, &node) != nil {
			continue
		}
		switch {
		case node.Spec.Unschedulable:
			m.recordoned = append(m.recordoned, time.Since(at).Round(100*time.Millisecond))
			delete(m.uncordoned, n)
		case !nm.Status.Phase.Disrupting():
			delete(m.uncordoned, n) // the request ended or aborted meanwhile
		default:
			require.Less(t, time.Since(at), 2*time.Minute, "%s uncordoned by someone else at %s while lull holds it (phase %s): not cordoned again; %s",
				n, at.Format("15:04:05"), nm.Status.Phase, cluster.LogsHint())
		}
	}
	if m.rng.Intn(15) == 0 { // about every five seconds at the operator's pace
		var held []string
		for _, n := range nodes {
			var nm lullv1alpha1.NodeMaintenance
			if e.c.Get(ctx, client.ObjectKey{Name: n}, &nm) == nil && nm.Status.CordonedByLull &&
				(nm.Status.Phase == lullv1alpha1.PhaseDraining || nm.Status.Phase == lullv1alpha1.PhaseDrained) {
				held = append(held, n)
			}
		}
		if len(held) > 0 {
			n := held[m.rng.Intn(len(held))]
			if _, ok := m.moved[n]; !ok && m.rng.Intn(2) == 0 {
				e.patchNode(n, `{"metadata":{"labels":{"pool":"e2e-crash-moved"}}}`)
				m.moved[n] = time.Now().Add(time.Duration(1+m.rng.Intn(4)) * time.Second)
				m.relabels++
			} else if _, ok := m.uncordoned[n]; !ok {
				e.patchNode(n, `{"spec":{"unschedulable":false}}`)
				m.uncordoned[n] = time.Now()
				m.uncordons++
			}
		}
	}
	return len(m.moved) == 0 && len(m.uncordoned) == 0
}

// calm puts every moved node back, so a new round starts with the pool as
// the scenario made it; it reports whether nothing is pending.
func (m *meddler) calm(e *sysEnv) bool {
	for n := range m.moved {
		e.patchNode(n, fmt.Sprintf(`{"metadata":{"labels":{"pool":%q}}}`, m.pool))
		delete(m.moved, n)
	}
	return len(m.uncordoned) == 0
}
