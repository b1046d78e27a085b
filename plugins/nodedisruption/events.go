package nodedisruption

import (
	"context"
	"sync"

	v1 "k8s.io/api/core/v1"
	"k8s.io/klog/v2"
	fwk "k8s.io/kube-scheduler/framework"

	lullv1alpha1 "lull.dev/lull/api/v1alpha1"
	"lull.dev/lull/internal/forecast"
	"lull.dev/lull/internal/groups"
)

// Event resources for our CRDs, in the <plural>.<version>.<group> form the
// scheduler uses to start dynamic informers for them.
const (
	NodeMaintenanceEvent   fwk.EventResource = "nodemaintenances.v1alpha1.lull.dev"
	MaintenanceWindowEvent fwk.EventResource = "maintenancewindows.v1alpha1.lull.dev"
)

// EventsToRegister registers Node and CRD events only. Leases are not
// registered: the framework would then watch every Lease in the cluster,
// including each kubelet's heartbeat every 10 s. The forecast watches the
// lease namespace itself and activates the pods a node rejected when it
// eases (onForecastChange).
func (pl *NodeDisruption) EventsToRegister(_ context.Context) ([]fwk.ClusterEventWithHint, error) {
	return []fwk.ClusterEventWithHint{
		{Event: fwk.ClusterEvent{Resource: fwk.Node, ActionType: fwk.Add | fwk.UpdateNodeLabel}, QueueingHintFn: pl.isSchedulableAfterNodeChange},
		{Event: fwk.ClusterEvent{Resource: NodeMaintenanceEvent, ActionType: fwk.Update | fwk.Delete}, QueueingHintFn: pl.isSchedulableAfterMaintenanceChange},
		{Event: fwk.ClusterEvent{Resource: MaintenanceWindowEvent, ActionType: fwk.All}, QueueingHintFn: pl.isSchedulableAfterWindowChange},
	}, nil
}

// isSchedulableAfterNodeChange: a new node without the maintenance label,
// or the label removed from a node that rejected the pod.
func (pl *NodeDisruption) isSchedulableAfterNodeChange(logger klog.Logger, pod *v1.Pod, oldObj, newObj interface{}) (fwk.QueueingHint, error) {
	newNode, err := forecast.As[v1.Node](newObj)
	if err != nil {
		return fwk.Queue, err
	}
	_, newLabelled := newNode.Labels[pl.args.MaintenanceLabel]
	if oldObj == nil {
		if newLabelled {
			logger.V(5).Info("new node carries the maintenance label", "pod", klog.KObj(pod), "node", klog.KObj(newNode))
			return fwk.QueueSkip, nil
		}
		logger.V(5).Info("new node may fit", "pod", klog.KObj(pod), "node", klog.KObj(newNode))
		return fwk.Queue, nil
	}
	oldNode, err := forecast.As[v1.Node](oldObj)
	if err != nil {
		return fwk.Queue, err
	}
	_, oldLabelled := oldNode.Labels[pl.args.MaintenanceLabel]
	if oldLabelled && !newLabelled && pl.rejected.rejectedBy(pod, newNode.Name) {
		logger.V(5).Info("maintenance label removed from a node that rejected the pod", "pod", klog.KObj(pod), "node", klog.KObj(newNode))
		return fwk.Queue, nil
	}
	logger.V(5).Info("node change irrelevant to NodeDisruption", "pod", klog.KObj(pod), "node", klog.KObj(newNode))
	return fwk.QueueSkip, nil
}

// isSchedulableAfterMaintenanceChange: a NodeMaintenance of a node that
// rejected the pod finished, was marked complete or was deleted.
func (pl *NodeDisruption) isSchedulableAfterMaintenanceChange(logger klog.Logger, pod *v1.Pod, oldObj, newObj interface{}) (fwk.QueueingHint, error) {
	var nm *lullv1alpha1.NodeMaintenance
	var err error
	ended := false
	if newObj == nil { // deleted
		nm, err = forecast.As[lullv1alpha1.NodeMaintenance](oldObj)
		ended = true
	} else {
		nm, err = forecast.As[lullv1alpha1.NodeMaintenance](newObj)
		if err == nil {
			ended = nm.Spec.Complete || nm.Status.Phase.Ending()
		}
	}
	if err != nil {
		return fwk.Queue, err
	}
	if ended && pl.rejected.rejectedBy(pod, nm.Spec.NodeName) {
		logger.V(5).Info("maintenance ended on a node that rejected the pod", "pod", klog.KObj(pod), "maintenance", klog.KObj(nm))
		return fwk.Queue, nil
	}
	logger.V(5).Info("maintenance change irrelevant to the pod", "pod", klog.KObj(pod), "maintenance", klog.KObj(nm))
	return fwk.QueueSkip, nil
}

// isSchedulableAfterWindowChange: a window's spec changed or it went away
// (which may close a window that kept a requested node filtered). Status
// updates are skipped.
func (pl *NodeDisruption) isSchedulableAfterWindowChange(logger klog.Logger, pod *v1.Pod, oldObj, newObj interface{}) (fwk.QueueingHint, error) {
	if oldObj == nil || newObj == nil {
		return fwk.Queue, nil
	}
	oldW, err := forecast.As[lullv1alpha1.MaintenanceWindow](oldObj)
	if err != nil {
		return fwk.Queue, err
	}
	newW, err := forecast.As[lullv1alpha1.MaintenanceWindow](newObj)
	if err != nil {
		return fwk.Queue, err
	}
	if oldW.Generation == newW.Generation {
		logger.V(5).Info("window status change irrelevant to the pod", "pod", klog.KObj(pod), "window", klog.KObj(newW))
		return fwk.QueueSkip, nil
	}
	return fwk.Queue, nil
}

// onForecastChange activates pods rejected on nodes that eased. This is
// how lease releases and expiries (which the framework does not watch)
// and every other change the forecast sees after the framework's own
// event reach the queue.
func (pl *NodeDisruption) onForecastChange(changes []forecast.Change) {
	var eased []string
	for _, c := range changes {
		if c.Eased() {
			eased = append(eased, c.Node)
		}
	}
	if len(eased) == 0 {
		return
	}
	pods := pl.rejected.take(eased)
	if len(pods) == 0 {
		return
	}
	logger := klog.Background().WithName(Name)
	logger.V(4).Info("activating pods rejected on nodes that eased", "nodes", eased, "pods", len(pods))
	pl.handle.Activate(logger, pods)
}

// rejections remembers, for unschedulable pods, the nodes this plugin
// rejected them on. Entries go when the pod is activated; a pod that was
// deleted meanwhile is ignored by Activate.
type rejections struct {
	mu     sync.Mutex
	byNode groups.Index[*v1.Pod] // node -> pod key -> pod
	// waiting are pods turned away before the forecast synced.
	waiting map[string]*v1.Pod
}

func newRejections() *rejections {
	return &rejections{waiting: map[string]*v1.Pod{}}
}

func (r *rejections) addWaiting(pod *v1.Pod) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.waiting[podKey(pod)] = pod
}

func (r *rejections) takeWaiting() map[string]*v1.Pod {
	r.mu.Lock()
	defer r.mu.Unlock()
	out := r.waiting
	r.waiting = map[string]*v1.Pod{}
	return out
}

func podKey(p *v1.Pod) string { return p.Namespace + "/" + p.Name }

func (r *rejections) add(pod *v1.Pod, nodes []string) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.byNode.Set(podKey(pod), nodes, pod)
}

func (r *rejections) rejectedBy(pod *v1.Pod, node string) bool {
	r.mu.Lock()
	defer r.mu.Unlock()
	_, ok := r.byNode.Members(node)[podKey(pod)]
	return ok
}

// take returns and forgets the pods rejected on any of the nodes.
func (r *rejections) take(nodes []string) map[string]*v1.Pod {
	r.mu.Lock()
	defer r.mu.Unlock()
	out := map[string]*v1.Pod{}
	for _, n := range nodes {
		for k, p := range r.byNode.Members(n) {
			out[k] = p
		}
	}
	for k := range out {
		r.byNode.Drop(k)
	}
	return out
}
