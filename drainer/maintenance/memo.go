package maintenance

import (
	"sync"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/types"
)

// memo is the controller's in-memory bookkeeping: when it last renewed
// each lease, last raised each repeated event and last wrote each
// request's status, which versions of each request its own writes
// replaced, and what each node's last drain round left blocked. Losing it
// (a restart) only means renewing at once, raising an event again, a write
// that conflicts, a progress write sooner, or a drain round that lists the
// pods again; no decision depends on it.
type memo struct {
	mu        sync.Mutex
	lastRenew map[string]time.Time
	lastEvent map[string]time.Time
	writes    map[string]writes
	rounds    map[string]blockedRound
	statuses  map[string]stamp
}

// stamp is when something was done for a request (by node).
type stamp struct {
	uid types.UID
	at  time.Time
}

// statusWritten records that we wrote the status of the node's request
// uid.
func (m *memo) statusWritten(node string, uid types.UID, now time.Time) {
	m.mu.Lock()
	defer m.mu.Unlock()
	if m.statuses == nil {
		m.statuses = map[string]stamp{}
	}
	m.statuses[node] = stamp{uid: uid, at: now}
}

// lastStatusWrite is when we last wrote the status of the node's request
// uid, if we did since it was last forgotten.
func (m *memo) lastStatusWrite(node string, uid types.UID) (time.Time, bool) {
	m.mu.Lock()
	defer m.mu.Unlock()
	st, ok := m.statuses[node]
	return st.at, ok && st.uid == uid
}

// writes are the resourceVersions of a request that our own writes
// replaced since the cache last caught up with them.
type writes struct {
	uid      types.UID
	replaced map[string]bool
	at       time.Time
}

// blockedRound is what a drain round left: pods that only
// PodDisruptionBudgets block (as the round saw them), each budget with the
// resourceVersion the round read it at, and when the node's pods were last
// listed.
type blockedRound struct {
	uid     types.UID
	at      time.Time
	budgets map[string]string
	pods    []corev1.Pod
	listed  time.Time
}

// renewDue reports whether the node's lease should be renewed now.
func (m *memo) renewDue(node string, now time.Time, every time.Duration) bool {
	m.mu.Lock()
	defer m.mu.Unlock()
	last, ok := m.lastRenew[node]
	return !ok || now.Sub(last) >= every
}

func (m *memo) renewed(node string, now time.Time) {
	m.mu.Lock()
	defer m.mu.Unlock()
	if m.lastRenew == nil {
		m.lastRenew = map[string]time.Time{}
	}
	m.lastRenew[node] = now
}

// eventDue rate-limits a repeated event by key.
func (m *memo) eventDue(key string, now time.Time, every time.Duration) bool {
	m.mu.Lock()
	defer m.mu.Unlock()
	if last, ok := m.lastEvent[key]; ok && now.Sub(last) < every {
		return false
	}
	if m.lastEvent == nil {
		m.lastEvent = map[string]time.Time{}
	}
	m.lastEvent[key] = now
	return true
}

// wrote records that a write of ours replaced version replaced of the
// request (name, uid).
func (m *memo) wrote(name string, uid types.UID, replaced string, now time.Time) {
	m.mu.Lock()
	defer m.mu.Unlock()
	if m.writes == nil {
		m.writes = map[string]writes{}
	}
	w := m.writes[name]
	if w.uid != uid {
		w = writes{uid: uid, replaced: map[string]bool{}}
	}
	if replaced != absent {
		delete(w.replaced, absent) // it exists: no longer only ours
	}
	w.replaced[replaced], w.at = true, now
	m.writes[name] = w
}

// staleFor is how long a cached request may lag behind our own write
// before it is acted on anyway (a write acted on from a stale copy only
// conflicts).
const staleFor = 5 * time.Second

// stale reports whether the request read (name, uid, resourceVersion) is
// a version our own write already replaced: the cache has not caught up,
// and acting on it would redo the round and conflict on writing.
func (m *memo) stale(name string, uid types.UID, rv string, now time.Time) bool {
	m.mu.Lock()
	defer m.mu.Unlock()
	w, ok := m.writes[name]
	if !ok {
		return false
	}
	if w.uid != uid || !w.replaced[rv] || now.Sub(w.at) > staleFor {
		delete(m.writes, name) // caught up (or moved on): forget
		return false
	}
	return true
}

// created records that we created request (name, uid): until the cache
// shows it, a reconcile that finds no request must not create it again.
func (m *memo) created(name string, uid types.UID, now time.Time) {
	m.wrote(name, uid, absent, now)
}

// absent stands for "no object" among the versions our writes replaced.
const absent = ""

// createdAhead reports whether we created request name so recently that
// a cache without it is only behind (as stale is for versions).
func (m *memo) createdAhead(name string, now time.Time) bool {
	m.mu.Lock()
	defer m.mu.Unlock()
	w, ok := m.writes[name]
	return ok && w.replaced[absent] && now.Sub(w.at) <= staleFor
}

// blocked records what the node's last drain round left blocked: the
// budgets, the pods, and when the pods were last listed; nil budgets
// forgets it (the round left something else to do).
func (m *memo) blocked(node string, uid types.UID, now time.Time, budgets map[string]string, pods []corev1.Pod, listed time.Time) {
	m.mu.Lock()
	defer m.mu.Unlock()
	if budgets == nil {
		delete(m.rounds, node)
		return
	}
	if m.rounds == nil {
		m.rounds = map[string]blockedRound{}
	}
	m.rounds[node] = blockedRound{uid: uid, at: now, budgets: budgets, pods: pods, listed: listed}
}

// blockedPods returns the pods the node's last drain round for request
// uid left blocked only by PodDisruptionBudgets, and when the node's pods
// were last listed, if that was no longer ago than maxAge: the next round
// may ask for these again without listing.
func (m *memo) blockedPods(node string, uid types.UID, now time.Time, maxAge time.Duration) ([]corev1.Pod, time.Time, bool) {
	m.mu.Lock()
	defer m.mu.Unlock()
	b, ok := m.rounds[node]
	if !ok || b.uid != uid || now.Sub(b.listed) >= maxAge || len(b.pods) == 0 {
		return nil, time.Time{}, false
	}
	return b.pods, b.listed, true
}

// lastBlocked returns what the node's last drain round for request uid
// left blocked, if it was no longer ago than maxAge.
func (m *memo) lastBlocked(node string, uid types.UID, now time.Time, maxAge time.Duration) (map[string]string, bool) {
	m.mu.Lock()
	defer m.mu.Unlock()
	b, ok := m.rounds[node]
	if !ok || b.uid != uid || now.Sub(b.at) >= maxAge {
		return nil, false
	}
	return b.budgets, true
}

func (m *memo) forget(node string) {
	m.mu.Lock()
	defer m.mu.Unlock()
	delete(m.lastRenew, node)
	delete(m.rounds, node)
	delete(m.statuses, node)
}
