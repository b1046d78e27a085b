package budget

import (
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
)

// The next in line is the oldest request still waiting, and it leaves the
// line as it is woken, so the next slot wakes another; a node that no
// longer waits leaves the line when its turn comes; a node waiting for two
// budgets is woken once, and the other budget's next in line with it.
func TestWaitersNextInLine(t *testing.T) {
	t0 := time.Date(2026, 11, 21, 10, 0, 0, 0, time.UTC)
	var w Waiters
	w.Wait("b", []string{"w1"}, t0.Add(2*time.Second))
	w.Wait("a", []string{"w1"}, t0.Add(time.Second))
	w.Wait("c", []string{"w1", "w2"}, t0)
	w.Wait("e", []string{"w2"}, t0.Add(3*time.Second))
	w.Wait("d", Budgets(nil, false), t0)
	waiting := map[string]bool{"a": true, "b": true, "c": true, "d": true, "e": true}
	still := func(n string) bool { return waiting[n] }

	assert.Equal(t, []string{"c"}, w.Next([]string{"w1"}, still), "c is first in w1")
	assert.Equal(t, []string{"a"}, w.Next([]string{"w1"}, still), "a second slot of w1 wakes the next request, not c again")
	assert.Equal(t, []string{"d"}, w.Next(Budgets(nil, false), still), "nodes without a window share the default budget")
	assert.Equal(t, 2, w.Len(), "b and e wait")

	w.Wait("c", []string{"w1", "w2"}, t0) // c found the budget full again: back at its place
	waiting["b"] = false                  // started elsewhere
	assert.Equal(t, []string{"c", "e"}, w.Next([]string{"w1", "w2"}, still), "c once, then w2's next")
	assert.Equal(t, 1, w.Len(), "b, behind c, was not reached")
	assert.Empty(t, w.Next([]string{"w1", "w2"}, still), "b no longer waits: it leaves the line")
	assert.Zero(t, w.Len())
}

// Nodes waiting since the same instant are taken by name, so the order is
// the same on every replica.
func TestWaitersTiesByName(t *testing.T) {
	t0 := time.Date(2026, 11, 21, 10, 0, 0, 0, time.UTC)
	var w Waiters
	for _, n := range []string{"n3", "n1", "n2"} {
		w.Wait(n, []string{"w"}, t0)
	}
	assert.Equal(t, []string{"n1"}, w.Next([]string{"w"}, func(string) bool { return true }))
}
