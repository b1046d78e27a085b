package cli

import (
	"fmt"
	"sort"
	"time"

	"github.com/spf13/cobra"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/utils/ptr"

	lullv1alpha1 "lull.dev/lull/api/v1alpha1"
	"lull.dev/lull/internal/budget"
	"lull.dev/lull/internal/gate"
	"lull.dev/lull/internal/window"
)

// This file holds the windows command: each MaintenanceWindow's state now,
// its health gates and its next periods.

func newWindowsCommand(o *options) *cobra.Command {
	var count int
	var out *outputFlags
	cmd := &cobra.Command{
		Use:   "windows [NAME]",
		Short: "Show MaintenanceWindows: open or closed now, and the next periods in local time and UTC",
		Args:  cobra.MaximumNArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			if count < 1 {
				return fmt.Errorf("--count %d: show at least 1 period", count)
			}
			if err := out.validate(); err != nil {
				return err
			}
			c, _, err := o.clients()
			if err != nil {
				return err
			}
			var list lullv1alpha1.MaintenanceWindowList
			if err := c.List(cmd.Context(), &list); err != nil {
				return err
			}
			var nodes corev1.NodeList
			if err := c.List(cmd.Context(), &nodes); err != nil {
				return err
			}
			var ws []lullv1alpha1.MaintenanceWindow
			for _, w := range list.Items {
				if len(args) == 0 || w.Name == args[0] {
					ws = append(ws, w)
				}
			}
			if len(args) == 1 && len(ws) == 0 {
				return fmt.Errorf("MaintenanceWindow %q not found", args[0])
			}
			views := windowViews(ws, nodes.Items, o.clock.Now(), count)
			obj, err := windowsObject(views, len(args) == 1)
			if err != nil {
				return err
			}
			return out.printObj(o.out, obj, func(h humanOptions) error { return renderWindows(o.out, views, h) })
		},
	}
	cmd.Flags().IntVar(&count, "count", 3, "how many upcoming periods to show per window")
	out = addOutputFlags(cmd)
	return cmd
}

// WindowView is a window's state and next periods.
type WindowView struct {
	Name           string   `json:"name"`
	Strategy       string   `json:"strategy"`
	TimeZone       string   `json:"timeZone"`
	Permitted      bool     `json:"permitted"`
	Message        string   `json:"message"`
	Ended          bool     `json:"ended,omitempty"` // its RRULE (COUNT or UNTIL) has ended: no period follows
	Nodes          int      `json:"nodes"`
	MaxUnavailable int      `json:"maxUnavailable"`
	Periods        []Period `json:"periods"`
	// Gates are the window's health gates and what they say now.
	Gates []GateView `json:"gates,omitempty"`
}

// GateView is one health gate of a window.
type GateView struct {
	Gate    string `json:"gate"`
	Holds   bool   `json:"holds"`
	Reason  string `json:"reason,omitempty"`
	Message string `json:"message"`
}

// gateViews says what a window's gates say (internal/gate's HealthGates): the
// alerts gate as the drainer judges it from the window's status, the
// recovery gate as the drainer last recorded it; blocking pods are judged
// node by node.
func gateViews(mw *lullv1alpha1.MaintenanceWindow, now time.Time) []GateView {
	var out []GateView
	for _, v := range gate.Views(mw, now) {
		out = append(out, GateView{Gate: v.Gate, Holds: v.Holds, Reason: v.Reason, Message: v.Message})
	}
	return out
}

// Period is a permitted period, in the window's zone and in UTC.
type Period struct {
	Start      time.Time  `json:"start"`
	End        *time.Time `json:"end,omitempty"`
	LocalStart string     `json:"localStart"`
	LocalEnd   string     `json:"localEnd,omitempty"`
}

func windowViews(ws []lullv1alpha1.MaintenanceWindow, nodes []corev1.Node, now time.Time, count int) []WindowView {
	sort.Slice(ws, func(i, j int) bool { return ws[i].Name < ws[j].Name })
	out := make([]WindowView, 0, len(ws))
	for i := range ws {
		mw := &ws[i]
		v := WindowView{Name: mw.Name, Strategy: string(mw.Spec.Strategy), TimeZone: "UTC", Periods: []Period{}}
		if v.Strategy == "" {
			v.Strategy = string(lullv1alpha1.StrategySchedule)
		}
		if s := mw.Spec.Schedule; s != nil && s.TimeZone != "" {
			v.TimeZone = s.TimeZone
		}
		loc, err := time.LoadLocation(v.TimeZone)
		if err != nil {
			loc = time.UTC
		}
		compiled := window.CompileOrInvalid(&mw.Spec, window.Options{})
		r := compiled.Evaluate(now)
		v.Permitted, v.Message, v.Ended = r.Permitted, r.Message(), r.Ended
		sel := budget.WindowSelector(mw)
		for j := range nodes {
			if sel.Matches(labels.Set(nodes[j].Labels)) {
				v.Nodes++
			}
		}
		v.MaxUnavailable, _ = budget.MaxUnavailable(mw, v.Nodes)
		v.Gates = gateViews(mw, now)
		for j, iv := range compiled.Upcoming(now, count) {
			if j == 0 && iv.Start.Equal(r.Next.Start) {
				iv.Start = r.ShownStart(&mw.Status, mw.Generation) // stable for an always-open window
			}
			p := Period{Start: iv.Start.UTC(), LocalStart: iv.Start.In(loc).Format("Mon 2006-01-02 15:04 MST")}
			if !iv.Unbounded() {
				p.End = ptr.To(iv.End.UTC())
				p.LocalEnd = iv.End.In(loc).Format("Mon 2006-01-02 15:04 MST")
			}
			v.Periods = append(v.Periods, p)
		}
		out = append(out, v)
	}
	return out
}
