package budget

import (
	"slices"
	"strings"
	"sync"
	"time"

	lullv1alpha1 "lull.dev/lull/api/v1alpha1"
	"lull.dev/lull/internal/groups"
)

// DefaultBudget names, in Waiters, the budget shared by nodes no window
// selects (no window can have this name).
const DefaultBudget = "(default)"

// Budgets names the budgets a request counts against: its windows', and
// the default budget when no window selects its node or withDefault (a
// request that was once under the default budget keeps its slot there).
func Budgets(windows []string, withDefault bool) []string {
	if len(windows) == 0 {
		return []string{DefaultBudget}
	}
	if withDefault {
		return append(slices.Clone(windows), DefaultBudget)
	}
	return windows
}

// Recorded names the budgets a request counts against as its status
// records them: every window that has governed it, and the default budget
// if it ever had no window (see NodeMaintenanceStatus.Windows).
func Recorded(st *lullv1alpha1.NodeMaintenanceStatus) []string {
	return Budgets(st.Windows, st.DefaultBudget)
}

// Waiters is the line of requests waiting for budget, per budget, oldest
// request first. When a slot frees, the drainer wakes the first in line of
// the freed node's budgets rather than every waiting request: with a
// thousand requests waiting for a few slots, waking them all counted the
// budget a thousand times for each freed slot, and the one request that
// could start waited in the work queue behind the others.
//
// It is a hint kept in memory, never a decision: the woken request still
// takes its slot through the Ledger, a request missing from the line (a
// new leader) is found again by its own periodic look, and one that no
// longer waits is dropped when its turn comes.
type Waiters struct {
	mu    sync.Mutex
	lines groups.Index[time.Time] // budget -> node -> since
}

// Wait puts node in line for budgets, ordered by since (the request's
// creation); a node already in line moves to the given budgets.
func (w *Waiters) Wait(node string, budgets []string, since time.Time) {
	w.mu.Lock()
	defer w.mu.Unlock()
	w.lines.Set(node, budgets, since)
}

// Done takes node out of every line.
func (w *Waiters) Done(node string) {
	w.mu.Lock()
	defer w.mu.Unlock()
	w.lines.Drop(node)
}

// Next takes out of line, for each of budgets, the first node that still
// waits (still reports it; the others leave the line too) and returns
// them. Each freed slot thus wakes a different request: two slots freed
// at once used to wake the same first request twice, and the second slot
// stayed free until a periodic look. A woken request that finds the
// budget full again goes back in line at its place (Wait, by its
// creation time).
func (w *Waiters) Next(budgets []string, still func(node string) bool) []string {
	w.mu.Lock()
	defer w.mu.Unlock()
	var out []string
	for _, b := range budgets {
		for _, node := range w.orderLocked(b) {
			w.lines.Drop(node)
			if still(node) {
				out = append(out, node)
				break
			}
		}
	}
	return out
}

// orderLocked is budget b's line, oldest first (ties by node name).
func (w *Waiters) orderLocked(b string) []string {
	line := w.lines.Members(b)
	nodes := make([]string, 0, len(line))
	for n := range line {
		nodes = append(nodes, n)
	}
	slices.SortFunc(nodes, func(x, y string) int {
		if c := line[x].Compare(line[y]); c != 0 {
			return c
		}
		return strings.Compare(x, y)
	})
	return nodes
}

// Len is how many nodes wait, for any budget.
func (w *Waiters) Len() int {
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.lines.Len()
}
