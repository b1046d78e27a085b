package groups

import (
	"testing"

	"github.com/stretchr/testify/assert"
)

func TestIndex(t *testing.T) {
	var x Index[int]
	assert.Empty(t, x.Members("g1"), "the zero value is empty")
	x.Set("a", []string{"g1", "g2"}, 1)
	x.Set("b", []string{"g2"}, 2)
	assert.Equal(t, map[string]int{"a": 1}, x.Members("g1"))
	assert.Equal(t, map[string]int{"a": 1, "b": 2}, x.Members("g2"))
	assert.Equal(t, 2, x.Len())

	x.Set("a", []string{"g3"}, 3) // moves: out of g1 and g2
	assert.Empty(t, x.Members("g1"))
	assert.Equal(t, map[string]int{"b": 2}, x.Members("g2"))
	assert.Equal(t, map[string]int{"a": 3}, x.Members("g3"))

	x.Drop("b")
	x.Drop("nobody")
	assert.Empty(t, x.Members("g2"))
	assert.Equal(t, 1, x.Len())
	assert.Len(t, x.members, 1, "empty groups are forgotten")
}
