package maintenance

import (
	"sync"
	"time"

	"k8s.io/apimachinery/pkg/types"
)

// ownWrites remembers the controller's own writes of each request that
// the cache has not caught up with: which versions they replaced (or that
// the request was created), and when its status was last written.
type ownWrites struct {
	mu       sync.Mutex
	writes   map[string]writes
	statuses map[string]stamp
}

// stamp is when something was done for a request (by node).
type stamp struct {
	uid types.UID
	at  time.Time
}

// writes are the resourceVersions of a request that our own writes
// replaced since the cache last caught up with them.
type writes struct {
	uid      types.UID
	replaced map[string]bool
	at       time.Time
}

// staleFor is how long a cached request may lag behind our own write
// before it is acted on anyway (a write acted on from a stale copy only
// conflicts).
const staleFor = 5 * time.Second

// absent stands for "no object" among the versions our writes replaced.
const absent = ""

// statusWritten records that we wrote the status of the node's request
// uid.
func (m *ownWrites) statusWritten(node string, uid types.UID, now time.Time) {
	m.mu.Lock()
	defer m.mu.Unlock()
	if m.statuses == nil {
		m.statuses = map[string]stamp{}
	}
	m.statuses[node] = stamp{uid: uid, at: now}
}

// lastStatusWrite is when we last wrote the status of the node's request
// uid, if we did since it was last forgotten.
func (m *ownWrites) lastStatusWrite(node string, uid types.UID) (time.Time, bool) {
	m.mu.Lock()
	defer m.mu.Unlock()
	st, ok := m.statuses[node]
	return st.at, ok && st.uid == uid
}

func (m *ownWrites) forgetStatus(node string) {
	m.mu.Lock()
	defer m.mu.Unlock()
	delete(m.statuses, node)
}

// wrote records that a write of ours replaced version replaced of the
// request (name, uid).
func (m *ownWrites) wrote(name string, uid types.UID, replaced string, now time.Time) {
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

// stale reports whether the request read (name, uid, resourceVersion) is
// a version our own write already replaced: the cache has not caught up,
// and acting on it would redo the round and conflict on writing.
func (m *ownWrites) stale(name string, uid types.UID, rv string, now time.Time) bool {
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
func (m *ownWrites) created(name string, uid types.UID, now time.Time) {
	m.wrote(name, uid, absent, now)
}

// createdAhead reports whether we created request name so recently that
// a cache without it is only behind (as stale is for versions).
func (m *ownWrites) createdAhead(name string, now time.Time) bool {
	m.mu.Lock()
	defer m.mu.Unlock()
	w, ok := m.writes[name]
	return ok && w.replaced[absent] && now.Sub(w.at) <= staleFor
}
