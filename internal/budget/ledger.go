package budget

import (
	"context"
	"fmt"
	"sort"
	"sync"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/utils/clock"
	"sigs.k8s.io/controller-runtime/pkg/client"

	lullv1alpha1 "lull.dev/lull/api/v1alpha1"
)

// Ledger fences the budget in the API server. Starting one more node is a
// write of one object, a ConfigMap with a key per node holding a slot,
// made with the resourceVersion the budget was checked against: the API
// server serialises those writes, so of two replicas deciding at the same
// moment on the same ledger version only one write lands, and the other
// checks again against the ledger that now counts the first. One object
// for every window (rather than one per window) makes a start atomic also
// for a node that several windows govern, and covers the default budget
// of nodes no window selects.
type Ledger struct {
	// Client writes the ledger; Live reads it and the requests from the
	// API server (never from a cache).
	Client client.Client
	Live   client.Reader
	// Namespace and Name of the ConfigMap (Name: DefaultLedgerName).
	Namespace, Name string
	// Holder is written into the entries this replica makes.
	Holder string
	Clock  clock.PassiveClock

	// writing serialises this process's changes to the ledger (Reserve,
	// Release): the API server serialises them anyway, and workers of one
	// process racing each other only made conflicts (0.7 a node in a
	// 1,000-node wave). Whoever holds it writes every change queued
	// meanwhile in one write (ledger_batch.go): with 16 workers, half of
	// them waited here in a 5,000-node wave, each for a write of its own.
	writing sync.Mutex
	queueMu sync.Mutex
	queue   []*ledgerOp

	mu sync.Mutex
	// last is the ledger as last read or written, to skip the API call
	// when a release finds nothing to release. With concurrent callers it
	// may be older than a write of ours (a read answered before the write,
	// remembered after it), so the slots this process took are kept in
	// mine and always released by reading the ledger.
	last map[string]Entry
	mine map[string]types.UID
	// lastCM is the ConfigMap as last read or written (nil: it did not
	// exist), with its resourceVersion; lastKnown says whether there is
	// one. A change is written against it without reading the ledger
	// first: the write carries its resourceVersion, so it lands only if
	// nobody wrote since, exactly as after a read (a conflict reads it).
	lastCM    *corev1.ConfigMap
	lastKnown bool
	// settled are the requests whose slot this process gave back after
	// their own status stopped saying they disrupt (Settled), and when:
	// the cache may still show them disrupting for a moment, and counted,
	// one kept the slot it had just freed from the request woken for it,
	// which then waited for its next look (a 1,000-node wave ran with 4 of
	// 10 slots in use).
	settled map[types.UID]time.Time
}

// releasedFor is how long a settled request is not counted from the
// cache: far longer than the cache lags behind the status write.
const releasedFor = time.Minute

// endedFor is how long SettledAt remembers a settled request, for the
// recovery gate. The two memories fail closed in opposite directions: the
// budget's count errs by counting a request again (releasedFor, short),
// the gate by counting a finished node (endedFor, long: a cache that lags
// past releasedFor must not open the gate on a node still settling).
const endedFor = time.Hour

// Reserve takes a budget slot for the request's node when the budget has
// room, atomically with the check. A request that already holds its slot
// keeps it (Free, nothing written). Entries of requests that no longer
// exist or have finished are dropped in the same write.
//
// The count is the union of the ledger's entries, read live, and the
// requests the cache shows using budget. The ledger is the fence: a
// request starts disrupting only through Reserve and keeps its slot while
// lull's cordon is on its node, so the entries count every node disrupted
// even while the cache lags. The cache adds what the ledger may have lost
// (a ledger deleted or edited by hand, a release made too early): those
// requests have been disrupting for longer than the cache lags, so a lost
// entry never frees a slot (fail closed). Pruning is the one decision
// the cache cannot make alone, see prune. (Every start used to list every
// request from the API server: at 1,000 requests 0.3 s a list, twice a
// second.)
func (l *Ledger) Reserve(ctx context.Context, cached client.Reader, nm *lullv1alpha1.NodeMaintenance, req Request) (Result, error) {
	// The nodes other tools disrupt, from the cache: read once for the
	// first look and every attempt.
	others, err := disrupted(ctx, cached, req.Node)
	if err != nil {
		return Result{}, err
	}
	req.Also = append(others, req.Also...)
	if res, full, err := l.fullByLast(ctx, cached, nm, req); err != nil || full {
		return res, err
	}
	op := &ledgerOp{reserve: true, node: req.Node, uid: nm.UID, nm: nm, req: req, cached: cached}
	l.apply(ctx, op)
	return op.res, op.err
}

// evaluateEntries evaluates req's budget counting the requests the cache
// shows using budget (but req's node's), the nodes in req.Also, and the
// ledger's entries for other nodes.
func (l *Ledger) evaluateEntries(ctx context.Context, cached client.Reader, req Request, entries map[string]Entry) (Result, error) {
	var act actives
	if err := cachedActive(ctx, cached, req.Node, l.settledUIDs(), &act); err != nil {
		return Result{}, err
	}
	for _, n := range req.Also {
		act.add(n)
	}
	for _, node := range sortedNodes(entries) {
		if node != req.Node {
			act.add(node, entries[node].Budgets...)
		}
	}
	return evaluate(ctx, cached, req, act.list())
}

// ledgerChanged reports whether a write of the ledger failed because the
// ledger changed (or was created or deleted) since it was read: the
// write is decided again on the ledger as it is now.
func ledgerChanged(err error) bool {
	return apierrors.IsConflict(err) || apierrors.IsAlreadyExists(err) || apierrors.IsNotFound(err)
}

// HoldsSlotField indexes the cache's NodeMaintenances by whether they
// hold a budget slot ("true"), so that counting the budget lists the few
// that do rather than every request: in a wave of 1,000 nodes, listing
// them all at each look was half of lull-drainer's allocations
// (docs/performance.md).
const HoldsSlotField = "lull.dev/holdsSlot"

// HoldsSlotIndex is the index function of HoldsSlotField.
func HoldsSlotIndex(o client.Object) []string {
	if nm, ok := o.(*lullv1alpha1.NodeMaintenance); ok && nm.Status.HoldsSlot() {
		return []string{"true"}
	}
	return nil
}

// cachedActive adds the requests cached shows using budget, except
// node's and those settled (see Settled). The cached objects are only
// read, so they are not copied. A reader without the index (the API
// server, a test's client) is asked for every request, which gives the
// same answer.
func cachedActive(ctx context.Context, cached client.Reader, node string, settled map[types.UID]bool, act *actives) error {
	var all lullv1alpha1.NodeMaintenanceList
	if err := cached.List(ctx, &all, client.UnsafeDisableDeepCopy, client.MatchingFields{HoldsSlotField: "true"}); err != nil {
		all = lullv1alpha1.NodeMaintenanceList{}
		if err := cached.List(ctx, &all, client.UnsafeDisableDeepCopy); err != nil {
			return fmt.Errorf("listing NodeMaintenances: %w", err)
		}
	}
	items := all.Items
	if len(settled) > 0 {
		items = make([]lullv1alpha1.NodeMaintenance, 0, len(all.Items))
		for i := range all.Items {
			if !settled[all.Items[i].UID] {
				items = append(items, all.Items[i])
			}
		}
	}
	addRequests(act, items, node)
	return nil
}

// settledUIDs are the requests settled less than releasedFor ago; those
// settled endedFor ago or more are forgotten.
func (l *Ledger) settledUIDs() map[types.UID]bool {
	l.mu.Lock()
	defer l.mu.Unlock()
	now := l.now().Time
	out := make(map[types.UID]bool, len(l.settled))
	for uid, at := range l.settled {
		switch age := now.Sub(at); {
		case age < releasedFor:
			out[uid] = true
		case age >= endedFor:
			delete(l.settled, uid)
		}
	}
	return out
}

// fullByLast answers "no room" without reading the ledger from the API
// server when the ledger as this process last read or wrote it already
// fills the request's budget. It counts only the entries whose request the
// cache shows using budget (and unreadable ones), so it can only be too
// cautious, never too generous: a slot this process released is gone from
// its view, one another replica released belongs to a request the cache
// soon shows no longer using budget, and a budget with room is left to the
// live count, which also decides every start. With hundreds of requests
// waiting, each looking again every 30 s, this spares a ledger read per
// look (13 a second in a 1,000-node wave).
func (l *Ledger) fullByLast(ctx context.Context, cached client.Reader, nm *lullv1alpha1.NodeMaintenance, req Request) (Result, bool, error) {
	l.mu.Lock()
	if l.last == nil {
		l.mu.Unlock()
		return Result{}, false, nil
	}
	last := make(map[string]Entry, len(l.last))
	for k, v := range l.last {
		last[k] = v
	}
	l.mu.Unlock()
	if e, ok := last[req.Node]; ok && e.UID == nm.UID {
		return Result{}, false, nil // ours already: the live read confirms it
	}
	var held actives
	for _, node := range sortedNodes(last) {
		e := last[node]
		if node == req.Node {
			continue
		}
		var holder lullv1alpha1.NodeMaintenance
		if e.UID == "" || (cached.Get(ctx, client.ObjectKey{Name: e.Request}, &holder) == nil && holder.UID == e.UID && holder.Status.HoldsSlot()) {
			held.add(node, e.Budgets...)
		}
	}
	for _, n := range req.Also {
		held.add(n)
	}
	res, err := evaluate(ctx, cached, req, held.list())
	if err != nil || res.Free {
		return Result{}, false, err
	}
	return res, true, nil
}

// Release gives up node's slot if request uid holds it; released says
// whether this call freed a slot (so the caller can wake the next request
// in line). It reads the ledger only when the last version seen has the
// node (or none was seen yet), so a request that waits does not read it
// on every round.
func (l *Ledger) Release(ctx context.Context, node string, uid types.UID) (released bool, err error) {
	l.mu.Lock()
	known := l.last != nil
	_, listed := l.last[node]
	_, took := l.mine[node]
	l.mu.Unlock()
	if known && !listed && !took {
		return false, nil
	}
	op := &ledgerOp{node: node, uid: uid, took: took}
	l.apply(ctx, op)
	return op.released, op.err
}

// Settled tells the ledger that request uid, whose slot this process
// released, is no longer using budget by its own stored status (phase
// Uncordoning, say): until the cache shows that too, the count leaves it
// out. A request released before its status says so (an abort whose
// status write may yet fail) is not settled, and the cache keeps counting
// it: fail closed.
func (l *Ledger) Settled(uid types.UID) {
	if uid == "" {
		return
	}
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.settled == nil {
		l.settled = map[types.UID]time.Time{}
	}
	l.settled[uid] = l.now().Time
}

// SettledAt says when request uid was settled (Settled) by this process,
// less than endedFor ago: its stored status says it ended then, though
// the cache may not show it yet (the recovery gate: gate.HealthSource.Ended).
func (l *Ledger) SettledAt(uid types.UID) (time.Time, bool) {
	l.mu.Lock()
	defer l.mu.Unlock()
	at, ok := l.settled[uid]
	if !ok || l.now().Sub(at) >= endedFor {
		return time.Time{}, false
	}
	return at, true
}

// took records that this process took node's slot for request uid; an
// empty uid forgets it.
func (l *Ledger) took(node string, uid types.UID) {
	l.mu.Lock()
	defer l.mu.Unlock()
	if uid == "" {
		delete(l.mine, node)
		return
	}
	delete(l.settled, uid) // it holds a slot again: count it
	if l.mine == nil {
		l.mine = map[string]types.UID{}
	}
	l.mine[node] = uid
}

func (l *Ledger) now() metav1.Time {
	if l.Clock == nil {
		return metav1.Now()
	}
	return metav1.Time{Time: l.Clock.Now()}
}

// prune drops entries whose request is gone (or replaced by another with
// the node's name) or has finished, and returns how many it dropped.
// Entries of requests still waiting stay: their own reconcile releases
// them, and one just reserved looks exactly like that until its status is
// written. A request the cache shows finished has finished (the cache is
// never ahead, and a finished request stays finished). A request the cache
// does not show may only be too new for it (another replica reserved for a
// request created a moment ago), so one live read confirms it is gone
// before its entry goes; when that read fails the entry stays and counts.
//
// seen remembers each request's answer for one Reserve, which may look at
// the ledger twice.
func (l *Ledger) prune(ctx context.Context, cached client.Reader, entries map[string]Entry, seen map[types.UID]bool) int {
	n := 0
	for node, e := range entries {
		if e.UID == "" {
			continue // unreadable: kept, counts against the budget
		}
		stale, ok := seen[e.UID]
		if !ok {
			stale = l.stale(ctx, cached, e)
			seen[e.UID] = stale
		}
		if stale {
			delete(entries, node)
			n++
		}
	}
	return n
}

// stale reports whether e's request has finished or is gone: from the
// cache when it shows the request, else from one live read. A read error
// is not stale.
func (l *Ledger) stale(ctx context.Context, cached client.Reader, e Entry) bool {
	var nm lullv1alpha1.NodeMaintenance
	err := cached.Get(ctx, client.ObjectKey{Name: e.Request}, &nm)
	switch {
	case err == nil && nm.UID == e.UID:
		return nm.Status.Phase.Finished()
	case err != nil && !apierrors.IsNotFound(err):
		return false
	}
	err = l.Live.Get(ctx, client.ObjectKey{Name: e.Request}, &nm)
	switch {
	case apierrors.IsNotFound(err):
		return true
	case err != nil:
		return false
	}
	return nm.UID != e.UID || nm.Status.Phase.Finished()
}

func sortedNodes(entries map[string]Entry) []string {
	out := make([]string, 0, len(entries))
	for k := range entries {
		out = append(out, k)
	}
	sort.Strings(out)
	return out
}
