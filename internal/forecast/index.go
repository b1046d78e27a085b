package forecast

import (
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/selection"
)

// windowIndex finds the windows that may select a node from the node's
// labels, so a node's forecast tries a handful of selectors instead of
// every window's. Each window is filed under one requirement every node it
// selects must meet: a label value (key=value, key in (values)), else a
// label key (key exists, key gt/lt n). A window with neither (no selector,
// or only requirements a node without the key meets) is tried for every
// node.
type windowIndex struct {
	byValue map[string]map[string]windowSet // label key -> value -> windows
	byKey   map[string]windowSet            // label key -> windows
	always  windowSet
}

type windowSet map[string]*compiledWindow

func newWindowIndex() windowIndex {
	return windowIndex{byValue: map[string]map[string]windowSet{}, byKey: map[string]windowSet{}, always: windowSet{}}
}

// filing is where a selector is filed: under key's values, under key, or
// (key empty) always.
func filing(sel labels.Selector) (key string, values []string) {
	reqs, _ := sel.Requirements()
	for _, r := range reqs {
		switch r.Operator() {
		case selection.Equals, selection.DoubleEquals, selection.In:
			return r.Key(), r.ValuesUnsorted()
		}
	}
	for _, r := range reqs {
		switch r.Operator() {
		case selection.Exists, selection.GreaterThan, selection.LessThan:
			return r.Key(), nil
		}
	}
	return "", nil
}

func (x *windowIndex) add(cw *compiledWindow) {
	key, values := filing(cw.selector)
	switch {
	case key == "":
		x.always[cw.name] = cw
	case values == nil:
		addTo(x.byKey, key, cw)
	default:
		byValue := x.byValue[key]
		if byValue == nil {
			byValue = map[string]windowSet{}
			x.byValue[key] = byValue
		}
		for _, v := range values {
			addTo(byValue, v, cw)
		}
	}
}

func (x *windowIndex) remove(cw *compiledWindow) {
	key, values := filing(cw.selector)
	switch {
	case key == "":
		delete(x.always, cw.name)
	case values == nil:
		removeFrom(x.byKey, key, cw.name)
	default:
		for _, v := range values {
			removeFrom(x.byValue[key], v, cw.name)
		}
		if len(x.byValue[key]) == 0 {
			delete(x.byValue, key)
		}
	}
}

func addTo(m map[string]windowSet, k string, cw *compiledWindow) {
	set := m[k]
	if set == nil {
		set = windowSet{}
		m[k] = set
	}
	set[cw.name] = cw
}

func removeFrom(m map[string]windowSet, k, name string) {
	delete(m[k], name)
	if len(m[k]) == 0 {
		delete(m, k)
	}
}

// candidates calls fn with every window that may select a node with lbls
// (each once: a window is filed under one key, and a node has one value
// for it).
func (x *windowIndex) candidates(lbls map[string]string, fn func(*compiledWindow)) {
	for _, cw := range x.always {
		fn(cw)
	}
	if len(x.byValue) == 0 && len(x.byKey) == 0 {
		return
	}
	for k, v := range lbls {
		for _, cw := range x.byValue[k][v] {
			fn(cw)
		}
		for _, cw := range x.byKey[k] {
			fn(cw)
		}
	}
}
