// Package window evaluates maintenance windows: given a window's spec and an
// instant it says whether material changes may start, since and until when,
// and when the next permitted period begins. It is pure: no clients and no
// clock; callers pass "now".
//
// A spec is compiled once (Compile) into a Window whose Evaluate costs a few
// microseconds whatever the anchor date: occurrences are found by calendar
// arithmetic from the anchor, never by stepping through every occurrence
// since it.
package window
