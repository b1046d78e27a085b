package plan

import (
	"context"
	"fmt"
	"strings"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"

	lullv1alpha1 "lull.dev/lull/api/v1alpha1"
	"lull.dev/lull/internal/agentlease"
	"lull.dev/lull/internal/budget"
	"lull.dev/lull/internal/forecast"
	"lull.dev/lull/internal/gate"
	"lull.dev/lull/internal/policy"
	"lull.dev/lull/lease"
)

// This file holds the preview itself: what it says of each node (Node,
// Result), and when each node's maintenance would start, decided with the
// drainer's gates.

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
	// rule gave (internal/policy's decision, as the drainer records it in
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
	classes := req.Classes
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
	fc := cl.Forecast.ComputeRequest(nm, withLabel(node.Labels, cl.Options.MaintenanceLabel, labelClass(req.Classes)))
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
	if cl.criticalUnread != "" && !p.drains() && (lullv1alpha1.Plan(p.Steps).Has(lullv1alpha1.StepRestartService) || lullv1alpha1.Plan(p.Steps).Has(lullv1alpha1.StepReloadService)) {
		p.warn("%s", cl.criticalUnread)
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
// (internal/gate), counting the nodes this preview already starts now against
// the budget.
func (cl *Cluster) start(ctx context.Context, c client.Reader, kube kubernetes.Interface, p *Node, req Request, fc *forecast.Node, ws []*lullv1alpha1.MaintenanceWindow, starting *[]string) error {
	greq := gate.Request{Classes: req.Classes, Changes: req.Changes, Forecast: fc, Now: cl.Now}
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
// it (internal/policy: a Drain step; a Reboot or PowerOff always has one).
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
