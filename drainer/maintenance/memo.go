package maintenance

import (
	"sync"
	"time"
)

// memo is the controller's in-memory bookkeeping: when it last renewed
// each lease and last raised each repeated event. Losing it (a restart)
// only means renewing at once and raising an event again; no decision
// depends on it.
type memo struct {
	mu        sync.Mutex
	lastRenew map[string]time.Time
	lastEvent map[string]time.Time
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

func (m *memo) forget(node string) {
	m.mu.Lock()
	defer m.mu.Unlock()
	delete(m.lastRenew, node)
}
