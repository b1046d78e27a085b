package cli

import (
	"time"

	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime"

	"lull.dev/lull/internal/plan"
)

// nodePlanView is one node of a plan (kind NodePlan): the preview's fields
// of the node, with the class and the time the plan was made.
type nodePlanView struct {
	Class string    `json:"class"`
	At    time.Time `json:"at"`
	plan.Node
}

// planObject is a List of the plan's nodes.
func planObject(res *plan.Result) (runtime.Object, error) {
	items := make([]*unstructured.Unstructured, 0, len(res.Nodes))
	for _, n := range res.Nodes {
		u, err := viewObject(KindNodePlan, n.Node, nodePlanView{Class: res.Class, At: res.At.UTC(), Node: n})
		if err != nil {
			return nil, err
		}
		items = append(items, u)
	}
	return viewList(items), nil
}

// statusObject is a List of the nodes' states.
func statusObject(rows []NodeStatus) (runtime.Object, error) {
	items := make([]*unstructured.Unstructured, 0, len(rows))
	for _, r := range rows {
		u, err := viewObject(KindNodeStatus, r.Node, r)
		if err != nil {
			return nil, err
		}
		items = append(items, u)
	}
	return viewList(items), nil
}

// windowsObject is a List of the windows' states, or the one window asked
// for by name.
func windowsObject(views []WindowView, byName bool) (runtime.Object, error) {
	items := make([]*unstructured.Unstructured, 0, len(views))
	for _, v := range views {
		u, err := viewObject(KindWindow, v.Name, v)
		if err != nil {
			return nil, err
		}
		items = append(items, u)
	}
	if byName && len(items) == 1 {
		return items[0], nil
	}
	return viewList(items), nil
}

// whyObject is the explanation for the pod namespace/name.
func whyObject(w *Why, namespace, name string) (runtime.Object, error) {
	u, err := viewObject(KindExplanation, name, w)
	if err != nil {
		return nil, err
	}
	u.SetNamespace(namespace)
	return u, nil
}
