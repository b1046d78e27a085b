package budget

import (
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
)

// The first in line is the oldest request still waiting; a node that no
// longer waits leaves the line when its turn comes; a node waiting for two
// budgets is woken once.
func TestWaitersFirstInLine(t *testing.T) {
	t0 := time.Date(2026, 11, 21, 10, 0, 0, 0, time.UTC)
	var w Waiters
	w.Wait("b", []string{"w1"}, t0.Add(2*time.Second))
	w.Wait("a", []string{"w1"}, t0.Add(time.Second))
	w.Wait("c", []string{"w1", "w2"}, t0)
	w.Wait("d", Budgets(nil), t0)
	waiting := map[string]bool{"a": true, "b": true, "c": true, "d": true}
	still := func(n string) bool { return waiting[n] }

	assert.Equal(t, []string{"c"}, w.First([]string{"w1", "w2"}, still), "c is first in both lines")
	assert.Equal(t, []string{"d"}, w.First(Budgets(nil), still), "nodes without a window share the default budget")

	waiting["c"] = false // started elsewhere
	assert.Equal(t, []string{"a"}, w.First([]string{"w1", "w2"}, still))
	assert.Equal(t, 3, w.Len(), "c left every line")

	w.Done("a")
	w.Wait("b", []string{"w2"}, t0.Add(2*time.Second)) // its windows changed
	assert.Empty(t, w.First([]string{"w1"}, still))
	assert.Equal(t, []string{"b"}, w.First([]string{"w2"}, still))
}

// Nodes waiting since the same instant are taken by name, so the order is
// the same on every replica.
func TestWaitersTiesByName(t *testing.T) {
	t0 := time.Date(2026, 11, 21, 10, 0, 0, 0, time.UTC)
	var w Waiters
	for _, n := range []string{"n3", "n1", "n2"} {
		w.Wait(n, []string{"w"}, t0)
	}
	assert.Equal(t, []string{"n1"}, w.First([]string{"w"}, func(string) bool { return true }))
}
