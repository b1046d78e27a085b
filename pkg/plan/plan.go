// Package plan previews what a maintenance request would do, without
// changing anything: per node, the action and the DisruptionPolicy rule
// that chose it, when it would start and what decides that (lull-agent on
// the node, window, budget, another lease holder), the pods a drain would
// evict, the PodDisruptionBudgets that would block it now, and warnings.
//
// It decides with the drainer's own code (the forecast, the gates of
// pkg/gate and the drain round of pkg/drain), from the cluster state it
// reads, so a preview and the drainer cannot disagree about the same
// state.
package plan

import (
	"context"
	"fmt"
	"sort"
	"strings"
	"time"

	coordinationv1 "k8s.io/api/coordination/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/client-go/kubernetes"
	"k8s.io/utils/clock"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"

	lullv1alpha1 "lull.dev/lull/api/v1alpha1"
	"lull.dev/lull/lease"
	"lull.dev/lull/pkg/agentlease"
	"lull.dev/lull/pkg/budget"
	"lull.dev/lull/pkg/drain"
	"lull.dev/lull/pkg/forecast"
	"lull.dev/lull/pkg/gate"
	"lull.dev/lull/pkg/options"
	"lull.dev/lull/pkg/policy"
	"lull.dev/lull/pkg/window"
)

// Options must match the drainer's configuration for the preview to match
// Options configure a preview: the drainer's options it decides by
// (pkg/options declares them once, defaults and flags, for lull-drainer
// and kubectl-lull alike) and the clock.
type Options struct {
	// Maintenance are the drainer's options: the shared settings (the
	// maintenance label, lease namespace, policy for nodes no window
	// selects, default budget and window search horizon), its identity
	// (the holder family), --delete-emptydir-data, and the namespace of
	// lull-agent's leases (a plan with host steps waits for an agent on
	// the node, as the drainer's).
	options.Maintenance
	// Clock gives now.
	Clock clock.WithTickerAndDelayedExecution
}

// DefaultOptions are the drainer's defaults.
func DefaultOptions() Options { return Options{Maintenance: options.DefaultMaintenance()} }

// withDefaults fills in what o leaves unset with the drainer's defaults.
func (o Options) withDefaults() Options {
	o.Maintenance.Default()
	if o.Clock == nil {
		o.Clock = clock.RealClock{}
	}
	return o
}

// Request is a prospective maintenance request.
type Request struct {
	// Nodes by name; or Selector (both: the union).
	Nodes    []string
	Selector labels.Selector
	// Class of a request of one kind of change; or Classes, several made
	// together (their steps merge into one plan). Classes wins when set.
	Class   string
	Classes []string
	// Changes made to the nodes (from two configurations compared);
	// beside or instead of classes.
	Changes  *lullv1alpha1.Changes
	Deadline *time.Time
}

// AllClasses is the request's classes: Classes, or Class alone.
func (r Request) AllClasses() []string {
	if len(r.Classes) > 0 {
		return r.Classes
	}
	if r.Class == "" {
		return nil
	}
	return []string{r.Class}
}

// Spec is the NodeMaintenance spec the request makes for node: class for
// one class, classes for several (the API takes exactly one of them).
func (r Request) Spec(node string) lullv1alpha1.NodeMaintenanceSpec {
	spec := lullv1alpha1.NodeMaintenanceSpec{NodeName: node}
	SetClasses(&spec, r.AllClasses())
	if r.Changes != nil {
		spec.Changes = r.Changes.DeepCopy()
	}
	if r.Deadline != nil {
		spec.Deadline = &metav1.Time{Time: *r.Deadline}
	}
	return spec
}

// SetClasses sets a NodeMaintenance spec's class (one class) or classes
// (several), clearing the other: the API takes exactly one of them.
func SetClasses(spec *lullv1alpha1.NodeMaintenanceSpec, classes []string) {
	spec.Class, spec.Classes = "", nil
	if len(classes) == 1 {
		spec.Class = classes[0]
	} else if len(classes) > 1 {
		spec.Classes = append([]string(nil), classes...)
	}
}

// Start says when a node's maintenance would start.
type Start string

const (
	// StartImmediately: action None, the request completes at once.
	StartImmediately Start = "Immediately"
	// StartNow: every gate is open; the drainer starts at once.
	StartNow Start = "Now"
	// StartWindow: at StartAt, when a window opens (or the deadline passes).
	StartWindow Start = "WindowOpens"
	// StartNoWindow: no window opens within the search horizon.
	StartNoWindow Start = "NoWindow"
	// StartBudget: when another node's maintenance frees the budget.
	StartBudget Start = "BudgetFrees"
	// StartHolder: when the lease holder releases the node.
	StartHolder Start = "HolderReleases"
	// StartAgent: the plan has host steps and no lull-agent runs on the
	// node; the request waits in phase WaitingForAgent until one does.
	StartAgent Start = "WaitingForAgent"
	// StartGates: a health gate of the node's windows holds it (alerts,
	// blocking pods, recovery); it starts when the gates pass.
	StartGates Start = "WaitingForGates"
	// StartInProgress: the node's request has already started.
	StartInProgress Start = "InProgress"
)

// Windows is the combined state of the windows deciding a node.
type Windows struct {
	Names     []string   `json:"names,omitempty"`
	Permitted bool       `json:"permitted"`
	NextStart *time.Time `json:"nextStart,omitempty"`
	NextEnd   *time.Time `json:"nextEnd,omitempty"`
	Message   string     `json:"message"`
}

// Node is the preview for one node.
type Node struct {
	Node string `json:"node"`
	// Action is the plan's most disruptive step (None: nothing to do).
	Action lullv1alpha1.DisruptionAction `json:"action"`
	// Rule that chose the action, "policy/rule" or "(default)".
	Rule string `json:"rule"`
	// Classes are the rules that decided each class, and the steps each
	// rule gave (pkg/policy's decision, as the drainer records it in
	// status.decision.classes).
	Classes []lullv1alpha1.ClassDecision `json:"classes,omitempty"`
	// Changes are the rules that decided each change, and the steps each
	// contributed (status.decision.changes).
	Changes []lullv1alpha1.ChangeDecision `json:"changes,omitempty"`
	// Steps is the merged plan in the order it would be carried out: each
	// step with the classes that need it, its timeout (host steps) and the
	// steps it makes pointless (covers).
	Steps []lullv1alpha1.PlannedStep `json:"steps,omitempty"`
	// Start says when it would start.
	Start Start `json:"start"`
	// StartAt is when it would start, when known.
	StartAt *time.Time `json:"startAt,omitempty"`
	// WaitingFor says what it would wait for, as the request's status would.
	WaitingFor string `json:"waitingFor,omitempty"`
	// HeldBy are the nodes holding the budget it would wait for, now (the
	// status counts them without naming them).
	HeldBy  []string `json:"heldBy,omitempty"`
	Windows *Windows `json:"windows,omitempty"`
	// LeaseHolder is the node's current lease holder, if any.
	LeaseHolder string `json:"leaseHolder,omitempty"`
	// Evict are the pods a drain would evict (namespace/name).
	Evict []string `json:"evict,omitempty"`
	// Blockers are the PodDisruptionBudgets that would refuse evictions now.
	Blockers []lullv1alpha1.Blocker `json:"blockers,omitempty"`
	// Refused are pods the drain will not evict, with why.
	Refused []string `json:"refused,omitempty"`
	// DrainEstimate is how long the drain is expected to take if nothing
	// blocks it, and DrainEstimateBasis how that was estimated.
	DrainEstimate      metav1.Duration `json:"drainEstimate,omitempty"`
	DrainEstimateBasis string          `json:"drainEstimateBasis,omitempty"`
	// Existing is the node's active request, if it has one.
	Existing *lullv1alpha1.NodeMaintenance `json:"-"`
	// ForeignLease is true when another actor holds the node's lease.
	ForeignLease bool     `json:"-"`
	Warnings     []string `json:"warnings,omitempty"`
}

// Result is a whole preview.
type Result struct {
	At time.Time `json:"at"`
	// Class is the requested class, or the requested classes joined by
	// commas; Classes lists them.
	Class   string   `json:"class"`
	Classes []string `json:"classes,omitempty"`
	// Changes is the requested change set, if any.
	Changes *lullv1alpha1.Changes `json:"changes,omitempty"`
	Nodes   []Node                `json:"nodes"`
}

// roundOverhead is added to the longest grace period for a drain estimate:
// eviction rounds, status writes and the API server's deletion.
const roundOverhead = 5 * time.Second

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
}

// Load reads nodes, NodeMaintenances, MaintenanceWindows,
// DisruptionPolicies, the node leases and lull-agent's leases, and feeds a
// forecast with them as the controllers' informers feed theirs.
func Load(ctx context.Context, c client.Reader, o Options) (*Cluster, error) {
	o = o.withDefaults()
	var (
		nodes    corev1.NodeList
		nms      lullv1alpha1.NodeMaintenanceList
		windows  lullv1alpha1.MaintenanceWindowList
		policies lullv1alpha1.DisruptionPolicyList
		leases   coordinationv1.LeaseList
		agents   = &leases // the same namespace: the same list
	)
	type listing struct {
		list client.ObjectList
		what string
		opts []client.ListOption
	}
	lists := []listing{{&nodes, "nodes", nil}, {&nms, "NodeMaintenances", nil}, {&windows, "MaintenanceWindows", nil}, {&policies, "DisruptionPolicies", nil},
		{&leases, "leases in " + o.LeaseNamespace, []client.ListOption{client.InNamespace(o.LeaseNamespace)}}}
	if o.AgentNamespace != o.LeaseNamespace {
		agents = &coordinationv1.LeaseList{}
		lists = append(lists, listing{agents, "lull-agent's leases in " + o.AgentNamespace,
			[]client.ListOption{client.InNamespace(o.AgentNamespace), client.MatchingLabelsSelector{Selector: agentlease.Selector()}}})
	}
	for _, l := range lists {
		if err := c.List(ctx, l.list, l.opts...); err != nil {
			return nil, fmt.Errorf("listing %s: %w", l.what, err)
		}
	}
	f := forecast.New(forecast.Options{Settings: o.Settings, Clock: o.Clock})
	cl := &Cluster{Options: o, Now: o.Clock.Now(), Nodes: nodes.Items, Policies: policies.Items, Forecast: f,
		Windows: map[string]*lullv1alpha1.MaintenanceWindow{}, Requests: map[string]*lullv1alpha1.NodeMaintenance{},
		nms: nms.Items}
	sort.Slice(cl.Nodes, func(i, j int) bool { return cl.Nodes[i].Name < cl.Nodes[j].Name })
	for i := range nodes.Items {
		f.SetNode(&nodes.Items[i])
	}
	cl.leases = map[string]*coordinationv1.Lease{}
	for i := range leases.Items {
		f.SetLease(&leases.Items[i])
		if node, ok := lease.NodeOf(leases.Items[i].Name); ok {
			cl.leases[node] = &leases.Items[i]
		}
	}
	cl.agentLeases = map[string]*coordinationv1.Lease{}
	for i := range agents.Items {
		cl.agentLeases[agents.Items[i].Name] = &agents.Items[i]
	}
	for i := range nms.Items {
		nm := &nms.Items[i]
		f.SetMaintenance(nm)
		if nm.DeletionTimestamp == nil && !nm.Spec.Complete && !nm.Status.Phase.Finished() {
			cl.Requests[nm.Spec.NodeName] = nm
		}
	}
	for i := range policies.Items {
		f.SetPolicy(&policies.Items[i])
	}
	for i := range windows.Items {
		f.SetWindow(&windows.Items[i])
		cl.Windows[windows.Items[i].Name] = &windows.Items[i]
	}
	f.SetSynced()
	return cl, nil
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

// labelClass is the maintenance label's value for a request of classes
// (the forecast reads the request's classes; the label only marks the
// node as requested).
func labelClass(classes []string) string {
	if len(classes) == 0 {
		return ""
	}
	return classes[0]
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

func withLabel(in map[string]string, key, class string) map[string]string {
	out := make(map[string]string, len(in)+1)
	for k, v := range in {
		out[k] = v
	}
	out[key] = class
	return out
}

// Preview computes the preview. c reads lull's objects, nodes, leases and
// PodDisruptionBudgets; kube lists pods (through the drain library).
func Preview(ctx context.Context, c client.Reader, kube kubernetes.Interface, o Options, req Request) (*Result, error) {
	cl, err := Load(ctx, c, o)
	if err != nil {
		return nil, err
	}
	defer cl.Forecast.Stop()
	return cl.Preview(ctx, c, kube, req)
}

// Preview computes the preview from the loaded state; c and kube read
// pods and PodDisruptionBudgets, and count the budget as the drainer does.
func (cl *Cluster) Preview(ctx context.Context, c client.Reader, kube kubernetes.Interface, req Request) (*Result, error) {
	c = cl.reader(c)
	targets, err := selectNodes(cl.Nodes, req)
	if err != nil {
		return nil, err
	}
	classes := req.AllClasses()
	res := &Result{At: cl.Now, Class: strings.Join(classes, ","), Classes: classes, Changes: req.Changes}
	var starting []string // nodes this preview starts now: they use budget
	for _, node := range targets {
		p, err := cl.previewNode(ctx, c, kube, req, node, &starting)
		if err != nil {
			return nil, fmt.Errorf("previewing node %s: %w", node.Name, err)
		}
		res.Nodes = append(res.Nodes, p)
	}
	cl.warnSharedWindows(res)
	return res, nil
}

// previewNode is the preview for one node: when the request would start
// (the drainer's gates), and what its drain would do.
func (cl *Cluster) previewNode(ctx context.Context, c client.Reader, kube kubernetes.Interface, req Request, node *corev1.Node, starting *[]string) (Node, error) {
	p := Node{Node: node.Name}
	nm := cl.prospective(&p, node, req)
	fc := cl.Forecast.ComputeRequest(nm, withLabel(node.Labels, cl.Options.MaintenanceLabel, labelClass(req.AllClasses())))
	cl.warnLease(&p, fc)
	if node.Spec.Unschedulable && (p.Existing == nil || !p.Existing.Status.CordonedByLull) {
		p.warn("node is already cordoned by someone else; lull will leave that cordon in place")
	}
	var ws []*lullv1alpha1.MaintenanceWindow
	p.Windows, ws = cl.windowsOf(fc)
	if err := cl.start(ctx, c, kube, &p, req, fc, ws, starting); err != nil {
		return p, err
	}
	if p.drains() {
		if err := cl.previewDrain(ctx, c, kube, &p, nm); err != nil {
			return p, err
		}
		p.warnWindowTooShort(fc, cl.Now)
	}
	return p, nil
}

// prospective is the request the preview decides for: a new one, or the
// node's active request as it stands (its status, its drain options).
func (cl *Cluster) prospective(p *Node, node *corev1.Node, req Request) *lullv1alpha1.NodeMaintenance {
	nm := &lullv1alpha1.NodeMaintenance{ObjectMeta: metav1.ObjectMeta{Name: node.Name}, Spec: req.Spec(node.Name)}
	if ex := cl.Requests[node.Name]; ex != nil {
		p.Existing = ex
		p.warn("node is already under maintenance: NodeMaintenance %s (class %s, phase %s)", ex.Name, ex.Spec.ClassNames(), ex.Status.Phase.OrPending())
		nm.Status = ex.Status
		nm.Spec.Drain = ex.Spec.Drain // a forced request keeps the drain options
	}
	return nm
}

// decider is the policy decision for the previewed request: the one the
// node's forecast already took from the request's spec (ComputeRequest
// decides with the same merged policies), so a preview of thousands of
// nodes decides each once; decide where the forecast holds none.
func decider(fc *forecast.Node, decide func([]string, *lullv1alpha1.Changes) lullv1alpha1.Decision) func([]string, *lullv1alpha1.Changes) lullv1alpha1.Decision {
	if fc == nil || fc.Maintenance == nil || fc.Maintenance.Name == "" {
		return decide
	}
	d := fc.Maintenance.Decision
	return func([]string, *lullv1alpha1.Changes) lullv1alpha1.Decision { return d }
}

// start decides when the request would start with the drainer's gates
// (pkg/gate), counting the nodes this preview already starts now against
// the budget.
func (cl *Cluster) start(ctx context.Context, c client.Reader, kube kubernetes.Interface, p *Node, req Request, fc *forecast.Node, ws []*lullv1alpha1.MaintenanceWindow, starting *[]string) error {
	greq := gate.Request{Classes: req.AllClasses(), Changes: req.Changes, Forecast: fc, Now: cl.Now}
	if ex := p.Existing; ex != nil && ex.Status.StartedAt != nil {
		greq.Started, greq.Decision = true, ex.Status.Decision // started requests keep their decision
	}
	decide := decider(fc, cl.Forecast.Decide)
	if ex := p.Existing; ex != nil && ex.Status.Phase.Disrupting() {
		d, _ := gate.Decide(greq, decide)
		p.decided(d)
		p.Start, p.WaitingFor = StartInProgress, ex.Status.WaitingFor
		return nil
	}
	v, err := gate.Check(ctx, greq, gate.Checks{
		Decide: decide,
		// The drainer's judgement, from the snapshot's agent leases.
		Agent: func(ctx context.Context) (bool, string, error) {
			return agentlease.Lookup(ctx, c, cl.Options.AgentNamespace, p.Node, cl.Now)
		},
		Health: func(ctx context.Context) (gate.HealthVerdict, error) {
			return gate.CheckHealth(ctx, gate.HealthSource{Reader: c, Pods: gate.PodsFromAPI(kube)}, ws, p.Node, cl.Now)
		},
		Budget: func(ctx context.Context) (budget.Result, error) {
			return budget.Check(ctx, c, c, budget.Request{Node: p.Node, Windows: ws,
				DefaultMaxUnavailable: cl.Options.DefaultMaxUnavailable, Also: *starting})
		},
		Lease: func(context.Context) (*lease.HeldError, error) { return cl.heldByOther(p, fc), nil },
	})
	if err != nil {
		return err
	}
	p.decided(v.Decision)
	p.Start, p.WaitingFor = startOf(v), v.Message
	if v.Gate == gate.Budget {
		p.HeldBy = v.Budget.InUse
	}
	switch p.Start {
	case StartImmediately:
		p.StartAt = ptr.To(cl.Now.UTC())
		p.WaitingFor = policy.Describe(greq.Classes, greq.Changes, v.Decision) + ": completes at once, without lease, window or budget"
	case StartWindow:
		p.StartAt = ptr.To(v.Window.Opens.UTC())
	case StartNow:
		p.StartAt = ptr.To(cl.Now.UTC())
		*starting = append(*starting, p.Node)
	}
	return nil
}

// decided records the policy decision the node's request goes by: the
// action and its rule, each class's rule, and the merged steps.
func (p *Node) decided(d lullv1alpha1.Decision) {
	p.Action, p.Rule = d.Action, d.RuleRef()
	p.Classes, p.Changes, p.Steps = d.Classes, d.Changes, d.Steps
}

// drains reports whether the plan drains the node, as the drainer reads
// it (pkg/policy: a Drain step; a Reboot or PowerOff always has one).
func (p *Node) drains() bool { return lullv1alpha1.Plan(p.Steps).Has(lullv1alpha1.ActionDrain) }

// startOf names the start a verdict predicts.
func startOf(v gate.Verdict) Start {
	switch v.Gate {
	case gate.Policy:
		return StartImmediately
	case gate.Window:
		if v.Window.Opens.IsZero() && v.Window.Reason != gate.ReasonUnknown {
			return StartNoWindow
		}
		return StartWindow
	case gate.Budget:
		return StartBudget
	case gate.Lease:
		return StartHolder
	case gate.Agent:
		return StartAgent
	case gate.Health:
		return StartGates
	}
	return StartNow
}

// warnLease notes who else holds the node's lease; any drainer replica's
// lease is lull's own.
func (cl *Cluster) warnLease(p *Node, fc *forecast.Node) {
	if fc == nil || fc.Lease == nil {
		return
	}
	p.LeaseHolder = fc.Lease.Holder
	if lease.SameFamily(fc.Lease.Holder, cl.Options.Identity) {
		return
	}
	p.ForeignLease = true
	what := fc.Lease.Holder
	if fc.Lease.Operation != "" {
		what += " for " + fc.Lease.Operation
	}
	if fc.Lease.Reason != "" {
		what += " (" + fc.Lease.Reason + ")"
	}
	if l := cl.leases[p.Node]; l != nil {
		// The protocol's expiry is by observation; the holder's own renew
		// time only hints that it stopped.
		renewed, d := lease.FromLease(p.Node, l).Renewed, lease.ExpiryDuration(l)
		if !renewed.IsZero() && cl.Now.After(renewed.Add(d)) {
			what += fmt.Sprintf("; its holder last renewed it at %s, more than its duration (%s) ago: unless it renews, the drainer takes the lease over after seeing it unrenewed for %s",
				renewed.UTC().Format(time.RFC3339), d, d)
		}
	}
	p.warn("node is leased by %s", what)
}

// heldByOther is the lease gate of the preview: the lease another actor
// holds, as the drainer's acquire would report it; nil when it is free or
// lull's.
func (cl *Cluster) heldByOther(p *Node, fc *forecast.Node) *lease.HeldError {
	if !p.ForeignLease {
		return nil
	}
	held := &lease.HeldError{Node: p.Node, Holder: fc.Lease.Holder, Operation: fc.Lease.Operation, Reason: fc.Lease.Reason, Since: fc.Lease.Since}
	if l := cl.leases[p.Node]; l != nil {
		held.Duration = lease.FromLease(p.Node, l).Duration
	}
	return held
}

// previewDrain fills in what the drain's first round would do now.
func (cl *Cluster) previewDrain(ctx context.Context, c client.Reader, kube kubernetes.Interface, p *Node, nm *lullv1alpha1.NodeMaintenance) error {
	whole := lullv1alpha1.Plan(p.Steps).TakesNodeDown()
	d, err := drain.New(ctx, kube, cl.Options.DrainOptions(whole), nm)
	if err != nil {
		return err
	}
	if whole && nm.Spec.Drain != nil && nm.Spec.Drain.PodSelector != nil {
		p.warn("spec.drain.podSelector is ignored: the plan reboots or powers off the node, so every evictable pod is drained first")
	}
	dp, err := d.Preview(ctx, c)
	if err != nil {
		return err
	}
	p.Evict, p.Blockers, p.Refused = dp.Evict, dp.Blockers, dp.Refused
	if len(dp.Evict) > 0 {
		p.DrainEstimate = metav1.Duration{Duration: dp.MaxGracePeriod + roundOverhead}
		p.DrainEstimateBasis = "longest grace period + eviction rounds"
		if med, n := cl.recordedDrains(); n > 0 && med > p.DrainEstimate.Duration {
			p.DrainEstimate = metav1.Duration{Duration: med}
			p.DrainEstimateBasis = fmt.Sprintf("median of %d drain(s) recorded in NodeMaintenances", n)
		}
	}
	for _, b := range dp.Blockers {
		p.warn("PodDisruptionBudget %s allows no more disruption now; it would block %s", b.PodDisruptionBudget, strings.Join(b.Pods, ", "))
	}
	for _, r := range dp.Refused {
		p.warn("the drain will not evict: %s", r)
	}
	return nil
}

// warnSharedWindows warns when more planned nodes wait for the same window
// than its budget lets start at once: they will not all start when it opens.
func (cl *Cluster) warnSharedWindows(res *Result) {
	byWindow := map[string][]int{}
	for i, n := range res.Nodes {
		if n.Start == StartWindow && n.Windows != nil {
			for _, w := range n.Windows.Names {
				byWindow[w] = append(byWindow[w], i)
			}
		}
	}
	names := make([]string, 0, len(byWindow))
	for name := range byWindow {
		names = append(names, name)
	}
	sort.Strings(names)
	for _, name := range names {
		mw, idx := cl.Windows[name], byWindow[name]
		if mw == nil {
			continue
		}
		sel, selected := budget.WindowSelector(mw), 0
		for i := range cl.Nodes {
			if sel.Matches(labels.Set(cl.Nodes[i].Labels)) {
				selected++
			}
		}
		max, err := budget.MaxUnavailable(mw, selected)
		if err != nil || max == 0 || len(idx) <= max {
			continue
		}
		for _, i := range idx {
			res.Nodes[i].warn("%d of the planned nodes wait for window %s, which allows %d disrupted at once: they start one after another as its budget frees, not all when it opens",
				len(idx), name, max)
		}
	}
}

// recordedDrains is the median duration of the drains the cluster's
// NodeMaintenances record (started to drained), and how many there are.
func (cl *Cluster) recordedDrains() (time.Duration, int) {
	var ds []time.Duration
	for i := range cl.nms {
		st := &cl.nms[i].Status
		if st.StartedAt != nil && st.DrainedAt != nil && st.DrainedAt.After(st.StartedAt.Time) {
			ds = append(ds, st.DrainedAt.Sub(st.StartedAt.Time))
		}
	}
	if len(ds) == 0 {
		return 0, 0
	}
	sort.Slice(ds, func(i, j int) bool { return ds[i] < ds[j] })
	return ds[len(ds)/2], len(ds)
}

// warnWindowTooShort warns when the permitted period the drain would run
// in is shorter than the drain estimate.
func (p *Node) warnWindowTooShort(fc *forecast.Node, now time.Time) {
	est := p.DrainEstimate.Duration
	if fc == nil || fc.Windows == nil || !fc.Windows.HasStart || est == 0 || fc.PastDeadline {
		return
	}
	// The period the drain would start in (minTimeRemaining included).
	start, end := fc.Windows.Start.Start, fc.Windows.Start.End
	if !end.Before(window.Forever) {
		return
	}
	if start.Before(now) {
		start = now
	}
	if left := end.Sub(start); left < est {
		p.warn("the window %s lasts %s from when the drain would start (%s), less than the drain estimate %s: the drain would run past its end",
			strings.Join(fc.Windows.Names, ","), left.Round(time.Second), start.UTC().Format(time.RFC3339), est)
	}
}

func (p *Node) warn(format string, args ...any) {
	p.Warnings = append(p.Warnings, fmt.Sprintf(format, args...))
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
