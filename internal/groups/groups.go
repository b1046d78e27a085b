// Package groups indexes members that belong to several groups at once,
// with a value per member, both ways: a group's members and a member's
// groups, so dropping a member touches only its own groups.
package groups

import "slices"

// Index holds members in groups. The zero value is empty and ready; it is
// not safe for concurrent use (callers hold their own lock).
type Index[V any] struct {
	members map[string]map[string]V // group -> member -> value
	of      map[string][]string     // member -> its groups
}

// Set puts member in groups with value v, replacing what it had.
func (x *Index[V]) Set(member string, groups []string, v V) {
	x.Drop(member)
	if x.members == nil {
		x.members, x.of = map[string]map[string]V{}, map[string][]string{}
	}
	for _, g := range groups {
		if x.members[g] == nil {
			x.members[g] = map[string]V{}
		}
		x.members[g][member] = v
	}
	x.of[member] = slices.Clone(groups)
}

// Drop takes member out of every group.
func (x *Index[V]) Drop(member string) {
	for _, g := range x.of[member] {
		delete(x.members[g], member)
		if len(x.members[g]) == 0 {
			delete(x.members, g)
		}
	}
	delete(x.of, member)
}

// Members returns group's members with their values. The map is the
// index's own: read it, do not change it, and do not keep it across a Set
// or Drop.
func (x *Index[V]) Members(group string) map[string]V { return x.members[group] }

// Len is the number of members in any group.
func (x *Index[V]) Len() int { return len(x.of) }
