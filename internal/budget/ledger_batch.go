package budget

import (
	"context"
	"errors"
	"fmt"
	"time"

	"k8s.io/apimachinery/pkg/types"
	"sigs.k8s.io/controller-runtime/pkg/client"

	lullv1alpha1 "lull.dev/lull/api/v1alpha1"
)

// The ledger's writes are group commits. Every change of the ledger this
// process makes, a reservation or a release, is queued, and whoever holds
// Ledger.writing decides every change queued so far, in order, on one
// version of the ledger, and writes them in one update carrying that
// version's resourceVersion. Each reservation is decided counting the
// reservations and releases before it in the batch, exactly as if they
// had been written one by one; the write lands only if nobody wrote the
// ledger since that version was read, and a conflict decides the whole
// batch again on the ledger as the API server has it. The fence is the
// same; only the number of writes changes: in a 5,000-node wave with 16
// workers, half of them waited on the one-write-each lock.

// ledgerOp is one change waiting for the ledger: a reservation of node's
// slot for request uid, or (reserve false) its release.
type ledgerOp struct {
	reserve bool
	node    string
	uid     types.UID
	// nm, req and cached are a reservation's request, budget request and
	// cache.
	nm     *lullv1alpha1.NodeMaintenance
	req    Request
	cached client.Reader
	// took says a release's slot was taken by this process (Ledger.mine),
	// as seen when the release was queued.
	took bool

	// The outcome, set by the batch's commit (under Ledger.writing): res
	// for a reservation, released for a release, err for either; done
	// once set. changes says the batch's write carries this change.
	res      Result
	released bool
	err      error
	changes  bool
	done     bool
}

// batchTimeout bounds a batch's reads and writes: they are made for
// every caller in it, so not under the committing caller's context alone
// (its cancellation would fail the others' changes).
const batchTimeout = 30 * time.Second

// errBatchInterrupted is the answer of a change whose batch stopped
// before deciding it (a panic while deciding another change).
var errBatchInterrupted = errors.New("the budget ledger's batch of changes was interrupted before this change was decided; it is asked again")

// apply queues op and returns once it is decided: written by this call
// (which writes every change queued meanwhile too) or by the call that
// held the lock before it.
func (l *Ledger) apply(ctx context.Context, op *ledgerOp) {
	l.queueMu.Lock()
	l.queue = append(l.queue, op)
	l.queueMu.Unlock()
	l.writing.Lock()
	defer l.writing.Unlock()
	if op.done {
		return // written by the holder before us
	}
	l.queueMu.Lock()
	batch := l.queue
	l.queue = nil
	l.queueMu.Unlock()
	defer func() {
		// A panic while deciding one change (it goes on up to its
		// caller) leaves the others undecided: each is told so, never
		// answered with an empty result.
		for _, o := range batch {
			if !o.done {
				o.res, o.released, o.err, o.done = Result{}, false, errBatchInterrupted, true
			}
		}
	}()
	bctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), batchTimeout)
	defer cancel()
	l.commit(bctx, batch)
}

// commit decides batch on one version of the ledger and writes it. The
// first look is at the ledger as this process last read or wrote it;
// only a change is decided on it (the write fails if the ledger changed
// meanwhile). "Ours already", "no room" and "not there" for a slot this
// process took are answers the API server's ledger may contradict, so
// they have the batch decided again live. Called with writing held.
func (l *Ledger) commit(ctx context.Context, batch []*ledgerOp) {
	live, staleness := false, map[types.UID]bool{}
	for attempt := 0; ; attempt++ {
		cm, entries, err := l.current(ctx, live)
		if err != nil {
			for _, op := range batch { // the read's error names the ledger
				op.res, op.released, op.err, op.done = Result{}, false, err, true
			}
			return
		}
		pruned, needLive := l.decide(ctx, batch, entries, live, staleness)
		if needLive {
			live = true
			continue
		}
		if !needsWrite(batch) {
			l.settle(batch)
			return
		}
		err = l.write(ctx, cm, entries)
		if err == nil {
			l.settle(batch)
			return
		}
		if ledgerChanged(err) && attempt < 4+len(batch) {
			// (Five tries for one change, as before batches, and one
			// more for each change the batch carries: every conflict is
			// everyone's.)
			// Another replica wrote (or someone deleted) the ledger since
			// we read it: decide again against what it is now.
			live = true
			continue
		}
		for _, op := range batch {
			if op.changes {
				op.fail(l, pruned, err)
			} else {
				op.done = true
			}
		}
		return
	}
}

// decide decides every change of batch, in order, on entries (changing
// them), and says how many stale entries it dropped and whether an answer
// needs the live ledger first (live not set yet). A reservation's failed
// count fails that reservation alone.
func (l *Ledger) decide(ctx context.Context, batch []*ledgerOp, entries map[string]Entry, live bool, staleness map[types.UID]bool) (pruned int, needLive bool) {
	prunedOnce := false
	for _, op := range batch {
		if l.decideOne(ctx, op, entries, live, staleness, &pruned, &prunedOnce) {
			return pruned, true
		}
	}
	return pruned, false
}

// decideOne decides op on entries (see decide) and says whether it needs
// the live ledger first. A panic while deciding it (a broken cache) is
// its own answer, as an error: the other changes of the batch are still
// decided, as they were when each call decided alone.
func (l *Ledger) decideOne(ctx context.Context, op *ledgerOp, entries map[string]Entry, live bool, staleness map[types.UID]bool, pruned *int, prunedOnce *bool) (needLive bool) {
	defer func() {
		if r := recover(); r != nil {
			op.res, op.released, op.changes = Result{}, false, false
			op.err = fmt.Errorf("deciding the budget of node %s: panic: %v", op.node, r)
			needLive = false
		}
	}()
	op.res, op.released, op.err, op.changes = Result{}, false, nil, false
	e, listed := entries[op.node]
	if !op.reserve {
		if !listed || (op.uid != "" && e.UID != op.uid) {
			if op.took && !live {
				// We took it, and the ledger as remembered does not
				// show it: a read older than our write was
				// remembered last. Ask the API server.
				return true
			}
			return false
		}
		delete(entries, op.node)
		op.changes = true
		return false
	}
	if listed && e.UID == op.uid {
		if !live {
			return true
		}
		op.res = Result{Free: true}
		return false
	}
	if !*prunedOnce {
		*pruned, *prunedOnce = l.prune(ctx, op.cached, entries, staleness), true
	}
	res, err := l.evaluateEntries(ctx, op.cached, op.req, entries)
	if err != nil {
		op.res, op.err = res, err
		return false
	}
	if !res.Free {
		if !live {
			return true
		}
		op.res = res
		return false
	}
	entries[op.node] = Entry{Request: op.nm.Name, UID: op.uid, Holder: l.Holder, Since: l.now(), Budgets: op.req.budgets()}
	op.res, op.changes = res, true
	return false
}

// needsWrite reports whether any change of batch needs a write.
func needsWrite(batch []*ledgerOp) bool {
	for _, op := range batch {
		if op.changes {
			return true
		}
	}
	return false
}

// settle records the outcome of a batch whose changes are in the ledger
// (written, or nothing to write): the slots this process holds now.
func (l *Ledger) settle(batch []*ledgerOp) {
	for _, op := range batch {
		switch {
		case op.reserve && op.changes:
			l.took(op.node, op.uid)
		case !op.reserve:
			op.released = op.changes
			l.took(op.node, "")
		}
		op.done = true
	}
}

// fail records that op could not be decided or written: err, said for
// its node.
func (op *ledgerOp) fail(l *Ledger, pruned int, err error) {
	op.res, op.released, op.done = Result{}, false, true
	if op.reserve {
		op.err = fmt.Errorf("reserving budget for node %s in ConfigMap %s/%s (%d stale entries dropped): %w", op.node, l.Namespace, l.name(), pruned, err)
		return
	}
	op.err = fmt.Errorf("releasing the budget of node %s in ConfigMap %s/%s: %w", op.node, l.Namespace, l.name(), err)
}
