package budget

import (
	"context"
	"encoding/json"
	"fmt"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"sigs.k8s.io/controller-runtime/pkg/client"
)

// DefaultLedgerName is the ConfigMap that records who holds budget.
const DefaultLedgerName = "lull-budget"

// Entry is one node's budget slot in the ledger, stored as JSON under the
// node's name in the ledger ConfigMap's data.
type Entry struct {
	// Request is the NodeMaintenance holding the slot, and UID its UID (a
	// later request for the same node is another request).
	Request string    `json:"request"`
	UID     types.UID `json:"uid"`
	// Holder is the replica that took the slot.
	Holder string      `json:"holder"`
	Since  metav1.Time `json:"since"`
	// Budgets the slot was taken in: the windows that governed the
	// request when it started (DefaultBudget for the default budget).
	// The node counts against each until the entry goes, whatever its
	// labels say meanwhile. Entries written before this was recorded
	// have none and count by the node's labels alone.
	Budgets []string `json:"budgets,omitempty"`
}

// Entries returns the ledger as it is in the API server.
func (l *Ledger) Entries(ctx context.Context) (map[string]Entry, error) {
	_, entries, err := l.read(ctx)
	return entries, err
}

func (l *Ledger) name() string {
	if l.Name == "" {
		return DefaultLedgerName
	}
	return l.Name
}

// current returns the ledger as this process last read or wrote it, or
// reads it when live is set or nothing is remembered. Called with writing
// held, so no write of this process lands between the two.
func (l *Ledger) current(ctx context.Context, live bool) (*corev1.ConfigMap, map[string]Entry, error) {
	l.mu.Lock()
	if !live && l.lastKnown {
		cm, entries := l.lastCM, make(map[string]Entry, len(l.last))
		for k, v := range l.last {
			entries[k] = v
		}
		l.mu.Unlock()
		return cm, entries, nil
	}
	l.mu.Unlock()
	return l.read(ctx)
}

// read returns the ledger ConfigMap (nil when it does not exist yet) and
// its entries. An entry that cannot be parsed counts as holding budget
// (fail closed) under a placeholder request.
func (l *Ledger) read(ctx context.Context) (*corev1.ConfigMap, map[string]Entry, error) {
	var cm corev1.ConfigMap
	err := l.Live.Get(ctx, client.ObjectKey{Namespace: l.Namespace, Name: l.name()}, &cm)
	if apierrors.IsNotFound(err) {
		l.remember(nil, map[string]Entry{})
		return nil, map[string]Entry{}, nil
	}
	if err != nil {
		return nil, nil, fmt.Errorf("reading the budget ledger ConfigMap %s/%s: %w", l.Namespace, l.name(), err)
	}
	entries := make(map[string]Entry, len(cm.Data))
	for node, raw := range cm.Data {
		var e Entry
		if json.Unmarshal([]byte(raw), &e) != nil {
			e = Entry{Request: "(unreadable entry)"}
		}
		entries[node] = e
	}
	l.remember(&cm, entries)
	return &cm, entries, nil
}

// write stores entries with the resourceVersion cm was read at (creating
// the ConfigMap when cm is nil): a conflict means someone wrote first.
func (l *Ledger) write(ctx context.Context, cm *corev1.ConfigMap, entries map[string]Entry) error {
	data := make(map[string]string, len(entries))
	for node, e := range entries {
		b, err := json.Marshal(e)
		if err != nil {
			return err
		}
		data[node] = string(b)
	}
	if cm == nil {
		cm = &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Namespace: l.Namespace, Name: l.name(),
			Labels: map[string]string{"app.kubernetes.io/part-of": "lull"}}, Data: data}
		err := l.Client.Create(ctx, cm)
		if err == nil {
			l.remember(cm, entries)
		}
		return err
	}
	cm = cm.DeepCopy()
	cm.Data = data
	err := l.Client.Update(ctx, cm) // carries cm.ResourceVersion: a precondition
	if err == nil {
		l.remember(cm, entries) // with the resourceVersion the write made
	}
	return err
}

// remember records the ledger as read or written: cm (nil: it does not
// exist) and its entries.
func (l *Ledger) remember(cm *corev1.ConfigMap, entries map[string]Entry) {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.lastCM, l.lastKnown = cm, true
	l.last = make(map[string]Entry, len(entries))
	for k, v := range entries {
		l.last[k] = v
	}
}
