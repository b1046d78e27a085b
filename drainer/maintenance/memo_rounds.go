package maintenance

import (
	"sync"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/types"
)

// blockedRounds remembers what each node's last drain round left blocked,
// so the next round may ask for those pods again without listing.
type blockedRounds struct {
	mu     sync.Mutex
	rounds map[string]blockedRound
	// asked is when the eviction API was last asked about every budget
	// that blocks the node's drain (drain.Drain.AskBudgets), by node.
	asked map[string]stamp
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

// blocked records what the node's last drain round left blocked: the
// budgets, the pods, and when the pods were last listed; nil budgets
// forgets it (the round left something else to do).
func (m *blockedRounds) blocked(node string, uid types.UID, now time.Time, budgets map[string]string, pods []corev1.Pod, listed time.Time) {
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
func (m *blockedRounds) blockedPods(node string, uid types.UID, now time.Time, maxAge time.Duration) ([]corev1.Pod, time.Time, bool) {
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
func (m *blockedRounds) lastBlocked(node string, uid types.UID, now time.Time, maxAge time.Duration) (map[string]string, bool) {
	m.mu.Lock()
	defer m.mu.Unlock()
	b, ok := m.rounds[node]
	if !ok || b.uid != uid || now.Sub(b.at) >= maxAge {
		return nil, false
	}
	return b.budgets, true
}

// askDue reports whether the node's next round for request uid must ask
// the eviction API about every blocking budget, whatever the cache shows
// (it has not within every), and when it must at the latest.
func (m *blockedRounds) askDue(node string, uid types.UID, now time.Time, every time.Duration) (bool, time.Time) {
	m.mu.Lock()
	defer m.mu.Unlock()
	a, ok := m.asked[node]
	if !ok || a.uid != uid {
		// First sight of the request in this process: its cache was just
		// listed from the API server, so it is trusted for one interval;
		// asking at once would send an eviction from every new leader
		// (a drainer killed mid-request leaves its budget counting the pod
		// for two minutes).
		if m.asked == nil {
			m.asked = map[string]stamp{}
		}
		m.asked[node] = stamp{uid: uid, at: now}
		return false, now.Add(every)
	}
	if now.Sub(a.at) >= every {
		return true, now
	}
	return false, a.at.Add(every)
}

// askedAll records that a round for request uid asked the eviction API
// about every budget blocking the node now.
func (m *blockedRounds) askedAll(node string, uid types.UID, now time.Time) {
	m.mu.Lock()
	defer m.mu.Unlock()
	if m.asked == nil {
		m.asked = map[string]stamp{}
	}
	m.asked[node] = stamp{uid: uid, at: now}
}

// blockedBy returns the nodes whose last drain round left pods that
// budget (namespace/name) blocks.
func (m *blockedRounds) blockedBy(budget string) []string {
	m.mu.Lock()
	defer m.mu.Unlock()
	var out []string
	for node, b := range m.rounds {
		if _, ok := b.budgets[budget]; ok {
			out = append(out, node)
		}
	}
	return out
}

func (m *blockedRounds) forget(node string) {
	m.mu.Lock()
	defer m.mu.Unlock()
	delete(m.rounds, node)
	delete(m.asked, node)
}
