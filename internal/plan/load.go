package plan

import (
	"context"
	"fmt"
	"sort"
	"time"

	coordinationv1 "k8s.io/api/coordination/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"

	lullv1alpha1 "lull.dev/lull/api/v1alpha1"
	"lull.dev/lull/internal/agentlease"
	"lull.dev/lull/internal/disruptors"
	"lull.dev/lull/internal/forecast"
	"lull.dev/lull/internal/settings"
	"lull.dev/lull/internal/window"
	"lull.dev/lull/lease"
)

// Cluster is the state a preview decides from, read once.
type Cluster struct {
	Options  Options
	Now      time.Time
	Nodes    []corev1.Node
	Windows  map[string]*lullv1alpha1.MaintenanceWindow
	Policies []lullv1alpha1.DisruptionPolicy
	// Requests are the active (not finished) NodeMaintenances by node.
	Requests map[string]*lullv1alpha1.NodeMaintenance
	// Forecast fed with everything read; Stop it when done.
	Forecast *forecast.Forecast

	nms    []lullv1alpha1.NodeMaintenance
	leases map[string]*coordinationv1.Lease
	// agentLeases are the leases of the agent namespace by name: all of
	// them when it is the lease namespace, else lull-agent's (labelled),
	// as the drainer's cache holds them.
	agentLeases map[string]*coordinationv1.Lease
	// criticalUnread says why the guard's criticalUnits could not be read
	// (empty: they were, or there are none): a preview of an undrained
	// restart warns with it.
	criticalUnread string
	// others are the nodes another tool disrupts (internal/disruptors), read
	// from Nodes on first use.
	others map[string]disruptors.Disruption
}

// Load reads nodes, NodeMaintenances, MaintenanceWindows,
// DisruptionPolicies, the node leases and lull-agent's leases, and feeds a
// forecast with them as the controllers' informers feed theirs.
func Load(ctx context.Context, c client.Reader, o Options) (*Cluster, error) {
	o = o.withDefaults()
	l := &listed{}
	if err := l.list(ctx, c, o); err != nil {
		return nil, err
	}
	f := forecast.New(forecast.Options{Settings: o.Settings, Clock: o.Clock, AdmissionNamespace: o.AdmissionNamespace})
	cl := &Cluster{Options: o, Now: o.Clock.Now(), Nodes: l.nodes.Items, Policies: l.policies.Items, Forecast: f, criticalUnread: l.unread,
		Windows: map[string]*lullv1alpha1.MaintenanceWindow{}, Requests: map[string]*lullv1alpha1.NodeMaintenance{},
		nms: l.nms.Items}
	sort.Slice(cl.Nodes, func(i, j int) bool { return cl.Nodes[i].Name < cl.Nodes[j].Name })
	cl.feed(l)
	f.SetSynced()
	return cl, nil
}

// listed is what Load reads from the API server.
type listed struct {
	nodes    corev1.NodeList
	nms      lullv1alpha1.NodeMaintenanceList
	windows  lullv1alpha1.MaintenanceWindowList
	policies lullv1alpha1.DisruptionPolicyList
	leases   coordinationv1.LeaseList
	// admission is the admission guard's ConfigMap (its criticalUnits),
	// nil when there is none or it may not be read; unread says why it
	// could not be read (empty: read, or there is none).
	admission *corev1.ConfigMap
	unread    string
	// agents are lull-agent's leases: leases itself when the agent
	// namespace is the lease namespace.
	agents *coordinationv1.LeaseList
}

// list lists everything Load reads; the error names what failed.
func (l *listed) list(ctx context.Context, c client.Reader, o Options) error {
	l.agents = &l.leases // the same namespace: the same list
	type listing struct {
		list client.ObjectList
		what string
		opts []client.ListOption
	}
	lists := []listing{{&l.nodes, "nodes", nil}, {&l.nms, "NodeMaintenances", nil}, {&l.windows, "MaintenanceWindows", nil}, {&l.policies, "DisruptionPolicies", nil},
		{&l.leases, "leases in " + o.LeaseNamespace, []client.ListOption{client.InNamespace(o.LeaseNamespace)}}}
	if o.AgentNamespace != o.LeaseNamespace {
		l.agents = &coordinationv1.LeaseList{}
		lists = append(lists, listing{l.agents, "lull-agent's leases in " + o.AgentNamespace,
			[]client.ListOption{client.InNamespace(o.AgentNamespace), client.MatchingLabelsSelector{Selector: agentlease.Selector()}}})
	}
	for _, li := range lists {
		if err := c.List(ctx, li.list, li.opts...); err != nil {
			return fmt.Errorf("listing %s: %w", li.what, err)
		}
	}
	// The guard's criticalUnits, as the drainer plans with them; one who
	// may not read them previews with the shipped default list.
	cm := &corev1.ConfigMap{}
	switch err := c.Get(ctx, client.ObjectKey{Namespace: o.AdmissionNamespace, Name: settings.AdmissionConfigMap}, cm); {
	case err == nil:
		l.admission = cm
	case apierrors.IsForbidden(err):
		l.unread = fmt.Sprintf("you may not read ConfigMap %s/%s, whose criticalUnits lull-drainer plans with: this preview plans with the shipped list, "+
			"so a restart of a unit the admin added there is shown undrained while lull drains for it (ask for get on it)", o.AdmissionNamespace, settings.AdmissionConfigMap)
	case !apierrors.IsNotFound(err):
		return fmt.Errorf("reading ConfigMap %s/%s: %w", o.AdmissionNamespace, settings.AdmissionConfigMap, err)
	}
	return nil
}

// feed feeds the cluster's forecast with what was listed, and indexes the
// node leases, lull-agent's leases, the active requests and the windows.
func (cl *Cluster) feed(l *listed) {
	f := cl.Forecast
	for i := range l.nodes.Items {
		f.SetNode(&l.nodes.Items[i])
	}
	cl.leases = map[string]*coordinationv1.Lease{}
	for i := range l.leases.Items {
		f.SetLease(&l.leases.Items[i])
		if node, ok := lease.NodeOf(l.leases.Items[i].Name); ok {
			cl.leases[node] = &l.leases.Items[i]
		}
	}
	cl.agentLeases = map[string]*coordinationv1.Lease{}
	for i := range l.agents.Items {
		cl.agentLeases[l.agents.Items[i].Name] = &l.agents.Items[i]
	}
	for i := range l.nms.Items {
		nm := &l.nms.Items[i]
		f.SetMaintenance(nm)
		if nm.DeletionTimestamp == nil && !nm.Spec.Complete && !nm.Status.Phase.Finished() {
			cl.Requests[nm.Spec.NodeName] = nm
		}
	}
	if l.admission != nil {
		f.SetAdmission(l.admission)
	}
	for i := range l.policies.Items {
		f.SetPolicy(&l.policies.Items[i])
	}
	for i := range l.windows.Items {
		f.SetWindow(&l.windows.Items[i])
		cl.Windows[l.windows.Items[i].Name] = &l.windows.Items[i]
	}
}

// Node returns a node by name.
func (cl *Cluster) Node(name string) *corev1.Node {
	i := sort.Search(len(cl.Nodes), func(i int) bool { return cl.Nodes[i].Name >= name })
	if i < len(cl.Nodes) && cl.Nodes[i].Name == name {
		return &cl.Nodes[i]
	}
	return nil
}

// WindowsOf is the combined window state deciding a node (as if a request
// of the classes were made), and the governing windows.
func (cl *Cluster) WindowsOf(node *corev1.Node, classes ...string) (*Windows, []*lullv1alpha1.MaintenanceWindow) {
	req := Request{Classes: classes}
	nm := &lullv1alpha1.NodeMaintenance{ObjectMeta: metav1.ObjectMeta{Name: node.Name}, Spec: req.Spec(node.Name)}
	return cl.windowsOf(cl.Forecast.ComputeRequest(nm, withLabel(node.Labels, cl.Options.MaintenanceLabel, labelClass(classes))))
}

func (cl *Cluster) windowsOf(fc *forecast.Node) (*Windows, []*lullv1alpha1.MaintenanceWindow) {
	if fc == nil || fc.Windows == nil {
		return nil, nil
	}
	w := &Windows{Names: fc.Windows.Names, Permitted: fc.Windows.Permitted, Message: fc.Windows.Message}
	if fc.Windows.HasNext {
		w.NextStart = ptr.To(fc.Windows.Next.Start.UTC())
		if fc.Windows.Next.End.Before(window.Forever) {
			w.NextEnd = ptr.To(fc.Windows.Next.End.UTC())
		}
	}
	var ws []*lullv1alpha1.MaintenanceWindow
	for _, name := range fc.Windows.Names {
		if mw := cl.Windows[name]; mw != nil {
			ws = append(ws, mw)
		}
	}
	return w, ws
}
