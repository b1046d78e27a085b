package plan

import (
	"fmt"
	"sort"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"

	lullv1alpha1 "lull.dev/lull/api/v1alpha1"
)

// This file holds the prospective request: its nodes, and the
// NodeMaintenance spec and node labels it makes.

// Request is a prospective maintenance request.
type Request struct {
	// Nodes by name; or Selector (both: the union).
	Nodes    []string
	Selector labels.Selector
	// Classes of change made together (their steps merge into one plan).
	Classes []string
	// Changes made to the nodes (from two configurations compared);
	// beside or instead of classes.
	Changes  *lullv1alpha1.Changes
	Deadline *time.Time
}

// Spec is the NodeMaintenance spec the request makes for node.
func (r Request) Spec(node string) lullv1alpha1.NodeMaintenanceSpec {
	spec := lullv1alpha1.NodeMaintenanceSpec{NodeName: node, Classes: cloneClasses(r.Classes)}
	if r.Changes != nil {
		spec.Changes = r.Changes.DeepCopy()
	}
	if r.Deadline != nil {
		spec.Deadline = &metav1.Time{Time: *r.Deadline}
	}
	return spec
}

// cloneClasses copies classes for a spec (nil for none: the API admits
// no empty list).
func cloneClasses(classes []string) []string {
	if len(classes) == 0 {
		return nil
	}
	return append([]string(nil), classes...)
}

// selectNodes resolves the request's nodes; a named node that does not
// exist is an error.
func selectNodes(all []corev1.Node, req Request) ([]*corev1.Node, error) {
	byName := map[string]*corev1.Node{}
	for i := range all {
		byName[all[i].Name] = &all[i]
	}
	picked := map[string]*corev1.Node{}
	for _, n := range req.Nodes {
		node, ok := byName[n]
		if !ok {
			return nil, fmt.Errorf("node %q not found", n)
		}
		picked[n] = node
	}
	if req.Selector != nil {
		for i := range all {
			if req.Selector.Matches(labels.Set(all[i].Labels)) {
				picked[all[i].Name] = &all[i]
			}
		}
	}
	if len(picked) == 0 {
		return nil, fmt.Errorf("no node selected")
	}
	out := make([]*corev1.Node, 0, len(picked))
	for _, n := range picked {
		out = append(out, n)
	}
	sort.Slice(out, func(i, j int) bool { return out[i].Name < out[j].Name })
	return out, nil
}

// labelClass is the maintenance label's value for a request of classes
// (the forecast reads the request's classes; the label only marks the
// node as requested).
func labelClass(classes []string) string {
	if len(classes) == 0 {
		return ""
	}
	return classes[0]
}

func withLabel(in map[string]string, key, class string) map[string]string {
	out := make(map[string]string, len(in)+1)
	for k, v := range in {
		out[k] = v
	}
	out[key] = class
	return out
}
