package maintenance

import (
	"sync"
	"time"
)

// The controller's in-memory bookkeeping, one small type per job:
// renewals (lease.go), eventLimiter (repeated events), ownWrites
// (memo_writes.go: the controller's own writes the cache has not caught
// up with) and blockedRounds (memo_rounds.go: what a node's last drain
// round left blocked). Losing any of it (a restart) only means renewing
// at once, raising an event again, a write that conflicts, a progress
// write sooner, or a drain round that lists the pods again; no decision
// depends on it.

// renewals records when the drainer last renewed each node's lease.
type renewals struct {
	mu   sync.Mutex
	last map[string]time.Time
}

// due reports whether the node's lease should be renewed now.
func (m *renewals) due(node string, now time.Time, every time.Duration) bool {
	m.mu.Lock()
	defer m.mu.Unlock()
	last, ok := m.last[node]
	return !ok || now.Sub(last) >= every
}

// renewed records that the node's lease was renewed (or taken) now.
func (m *renewals) renewed(node string, now time.Time) {
	m.mu.Lock()
	defer m.mu.Unlock()
	if m.last == nil {
		m.last = map[string]time.Time{}
	}
	m.last[node] = now
}

func (m *renewals) forget(node string) {
	m.mu.Lock()
	defer m.mu.Unlock()
	delete(m.last, node)
}

// eventLimiter rate-limits repeated events by key.
type eventLimiter struct {
	mu   sync.Mutex
	last map[string]time.Time
}

// due reports whether the event keyed key may be raised now (and records
// that it is), at most once per every.
func (m *eventLimiter) due(key string, now time.Time, every time.Duration) bool {
	m.mu.Lock()
	defer m.mu.Unlock()
	if last, ok := m.last[key]; ok && now.Sub(last) < every {
		return false
	}
	if m.last == nil {
		m.last = map[string]time.Time{}
	}
	m.last[key] = now
	return true
}

// forget drops what the controller remembers of the node: its lease is
// released (or lost), so its renewals, drain rounds and status writes
// start afresh.
func (r *Reconciler) forget(node string) {
	r.renewals.forget(node)
	r.rounds.forget(node)
	r.writes.forgetStatus(node)
}
