package forecast

import v1 "k8s.io/api/core/v1"

// Blocks is Filter's decision for a node's forecast: the reason, and
// whether pods are kept off the node. The NodeDisruption plugin filters
// with it and `kubectl lull why` explains rejections with it.
func Blocks(n *Node, filterRequestedOutsideWindow bool) (string, bool) {
	switch {
	case n == nil:
		return "", false
	case n.Certain || n.WindowOpen:
		return n.Reason, true
	case n.Maintenance != nil && filterRequestedOutsideWindow:
		return n.Reason, true
	}
	return "", false
}

// Tolerates reports whether the pod tolerates disruption: a toleration for
// key, or one that tolerates every taint.
func Tolerates(pod *v1.Pod, key string) bool {
	for _, t := range pod.Spec.Tolerations {
		if t.Key == key || (t.Key == "" && t.Operator == v1.TolerationOpExists) {
			return true
		}
	}
	return false
}
