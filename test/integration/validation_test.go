package integration

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	corev1 "k8s.io/api/core/v1"
	apiextensionsv1 "k8s.io/apiextensions-apiserver/pkg/apis/apiextensions/v1"
	apiextensionsclient "k8s.io/apiextensions-apiserver/pkg/client/clientset/clientset"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/intstr"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/utils/ptr"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/config"
	metricsserver "sigs.k8s.io/controller-runtime/pkg/metrics/server"

	lullv1alpha1 "lull.dev/lull/api/v1alpha1"
	"lull.dev/lull/drainer/maintenance"
	"lull.dev/lull/drainer/windowcontroller"
	"lull.dev/lull/test/framework"
)

// bad is a duration as a client that skips Go's types would send it.
func bad(text string) *lullv1alpha1.Duration {
	return &lullv1alpha1.Duration{Invalid: fmt.Sprintf("%q", text)}
}

func dur(d time.Duration) *lullv1alpha1.Duration { return lullv1alpha1.NewDuration(d) }

const durationFormatMsg = "must be a Go duration such as 30m, 1h30m or 90s"

// TestFieldAdmission: every field a user sets is checked by the API server,
// format first (one message saying what to write, never CEL's "type
// conversion error"), then bounds; the boundary values are accepted.
func TestFieldAdmission(t *testing.T) {
	ctx := t.Context()
	windows := map[string]struct {
		mutate func(*lullv1alpha1.MaintenanceWindow)
		want   string // "" accepted
	}{
		"minTimeRemaining soon":       {func(w *lullv1alpha1.MaintenanceWindow) { w.Spec.MinTimeRemaining = bad("soon") }, `spec.minTimeRemaining: Invalid value: "soon": ` + durationFormatMsg},
		"minTimeRemaining negative":   {func(w *lullv1alpha1.MaintenanceWindow) { w.Spec.MinTimeRemaining = dur(-time.Minute) }, "minTimeRemaining must be from 0s to 744h"},
		"minTimeRemaining above 744h": {func(w *lullv1alpha1.MaintenanceWindow) { w.Spec.MinTimeRemaining = dur(745 * time.Hour) }, "minTimeRemaining must be from 0s to 744h"},
		"minTimeRemaining overflows":  {func(w *lullv1alpha1.MaintenanceWindow) { w.Spec.MinTimeRemaining = bad("9999999999h") }, durationFormatMsg},
		"minTimeRemaining 0s":         {func(w *lullv1alpha1.MaintenanceWindow) { w.Spec.MinTimeRemaining = bad("0") }, ""},
		"minTimeRemaining 744h":       {func(w *lullv1alpha1.MaintenanceWindow) { w.Spec.MinTimeRemaining = dur(744 * time.Hour) }, ""},
		"minTimeRemaining 1.5h":       {func(w *lullv1alpha1.MaintenanceWindow) { w.Spec.MinTimeRemaining = bad("1.5h") }, ""},
		"duration four hours":         {func(w *lullv1alpha1.MaintenanceWindow) { w.Spec.Schedule.Duration = *bad("four hours") }, `spec.schedule.duration: Invalid value: "four hours": ` + durationFormatMsg},
		"duration zero":               {func(w *lullv1alpha1.MaintenanceWindow) { w.Spec.Schedule.Duration = *bad("0s") }, "duration must be more than 0 and at most 744h"},
		"duration negative":           {func(w *lullv1alpha1.MaintenanceWindow) { w.Spec.Schedule.Duration = *bad("-4h") }, "duration must be more than 0 and at most 744h"},
		"duration 744h":               {func(w *lullv1alpha1.MaintenanceWindow) { w.Spec.Schedule.Duration = *bad("744h") }, ""},
		"duration 1ns":                {func(w *lullv1alpha1.MaintenanceWindow) { w.Spec.Schedule.Duration = *bad("1ns") }, ""},
		"maxUnavailable 0":            {func(w *lullv1alpha1.MaintenanceWindow) { w.Spec.MaxUnavailable = ptrIntStr(intstr.FromInt32(0)) }, ""},
		"maxUnavailable 0%":           {func(w *lullv1alpha1.MaintenanceWindow) { w.Spec.MaxUnavailable = ptrIntStr(intstr.FromString("0%")) }, ""},
		"maxUnavailable 100%":         {func(w *lullv1alpha1.MaintenanceWindow) { w.Spec.MaxUnavailable = ptrIntStr(intstr.FromString("100%")) }, ""},
		"maxUnavailable 100000":       {func(w *lullv1alpha1.MaintenanceWindow) { w.Spec.MaxUnavailable = ptrIntStr(intstr.FromInt32(100000)) }, ""},
		"maxUnavailable 150%":         {func(w *lullv1alpha1.MaintenanceWindow) { w.Spec.MaxUnavailable = ptrIntStr(intstr.FromString("150%")) }, "a percentage from 0% to 100%"},
		"maxUnavailable 101%":         {func(w *lullv1alpha1.MaintenanceWindow) { w.Spec.MaxUnavailable = ptrIntStr(intstr.FromString("101%")) }, "a percentage from 0% to 100%"},
		"maxUnavailable 05%":          {func(w *lullv1alpha1.MaintenanceWindow) { w.Spec.MaxUnavailable = ptrIntStr(intstr.FromString("05%")) }, "a percentage from 0% to 100%"},
		"maxUnavailable -1":           {func(w *lullv1alpha1.MaintenanceWindow) { w.Spec.MaxUnavailable = ptrIntStr(intstr.FromInt32(-1)) }, "a node count from 0 to 100000"},
		"maxUnavailable 100001":       {func(w *lullv1alpha1.MaintenanceWindow) { w.Spec.MaxUnavailable = ptrIntStr(intstr.FromInt32(100001)) }, "a node count from 0 to 100000"},
		"override strategy Schedule": {func(w *lullv1alpha1.MaintenanceWindow) {
			w.Spec.Override = &lullv1alpha1.Override{Strategy: "Schedule", Until: metav1.Now()}
		}, `Unsupported value: "Schedule": supported values: "Permissive", "Restrictive"`},
		"override strategy Restrictive": {func(w *lullv1alpha1.MaintenanceWindow) {
			w.Spec.Override = &lullv1alpha1.Override{Strategy: "Restrictive", Until: metav1.Now()}
		}, ""},
		"anchor 2026-02-30": {func(w *lullv1alpha1.MaintenanceWindow) { w.Spec.Schedule.Anchor = "2026-02-30" }, `spec.schedule.anchor: Invalid value: "2026-02-30": must be a date that exists`},
		"anchor 2026-13-01": {func(w *lullv1alpha1.MaintenanceWindow) { w.Spec.Schedule.Anchor = "2026-13-01" }, "must be a date that exists"},
		"anchor 2026-2-3":   {func(w *lullv1alpha1.MaintenanceWindow) { w.Spec.Schedule.Anchor = "2026-2-3" }, "must be a date YYYY-MM-DD such as 2026-12-19"},
		"anchor 2100-02-29": {func(w *lullv1alpha1.MaintenanceWindow) { w.Spec.Schedule.Anchor = "2100-02-29" }, "must be a date that exists"},
		"anchor 2028-02-29": {func(w *lullv1alpha1.MaintenanceWindow) { w.Spec.Schedule.Anchor = "2028-02-29" }, ""},
		"anchor 2000-02-29": {func(w *lullv1alpha1.MaintenanceWindow) { w.Spec.Schedule.Anchor = "2000-02-29" }, ""},
		"exclusion 2026-04-31": {func(w *lullv1alpha1.MaintenanceWindow) {
			w.Spec.Schedule.Exclude = []lullv1alpha1.Exclusion{{StartDate: "2026-04-01", EndDate: "2026-04-31"}}
		}, `spec.schedule.exclude[0].endDate: Invalid value: "2026-04-31": must be a date that exists`},
		"exclusion 2026-12-31": {func(w *lullv1alpha1.MaintenanceWindow) {
			w.Spec.Schedule.Exclude = []lullv1alpha1.Exclusion{{StartDate: "2026-12-01", EndDate: "2026-12-31"}}
		}, ""},
		"silences default": {func(w *lullv1alpha1.MaintenanceWindow) { w.Spec.Silences = silences() }, ""},
		"silences by instance": {func(w *lullv1alpha1.MaintenanceWindow) {
			w.Spec.Silences = silences(`instance="$(NODE_NAME):9100"`, `job!="x"`)
		}, ""},
		"silences regex only":  {func(w *lullv1alpha1.MaintenanceWindow) { w.Spec.Silences = silences(`node=~"$(NODE_NAME)|.*"`) }, "at least one matcher must be an equality matcher naming the node"},
		"silences no node":     {func(w *lullv1alpha1.MaintenanceWindow) { w.Spec.Silences = silences(`severity="page"`) }, "at least one matcher must be an equality matcher naming the node"},
		"silences node by !=":  {func(w *lullv1alpha1.MaintenanceWindow) { w.Spec.Silences = silences(`node!="$(NODE_NAME)"`) }, "at least one matcher must be an equality matcher naming the node"},
		"silences bad matcher": {func(w *lullv1alpha1.MaintenanceWindow) { w.Spec.Silences = silences(`node = $(NODE_NAME)`) }, "a matcher is a label name, an operator"},
		"silences url with user": {func(w *lullv1alpha1.MaintenanceWindow) {
			w.Spec.Silences = silences()
			w.Spec.Silences.URL = "http://u:p@am:9093"
		}, "url must be an http:// or https:// URL without credentials"},
		"silences duration 30s": {func(w *lullv1alpha1.MaintenanceWindow) {
			w.Spec.Silences = silences()
			w.Spec.Silences.Duration = dur(30 * time.Second)
		}, "duration must be from 1m to 24h"},
		"silences duration 1h": {func(w *lullv1alpha1.MaintenanceWindow) {
			w.Spec.Silences = silences()
			w.Spec.Silences.Duration = dur(time.Hour)
		}, ""},
	}
	i := 0
	for name, tc := range windows {
		i++
		t.Run("MaintenanceWindow/"+name, func(t *testing.T) {
			w := weekendWindow(fmt.Sprintf("adm-fields-%d", i))
			tc.mutate(w)
			err := cp.Client.Create(ctx, w)
			if tc.want == "" {
				require.NoError(t, err)
				require.NoError(t, cp.Client.Delete(ctx, w))
				return
			}
			require.Error(t, err)
			require.Contains(t, err.Error(), tc.want)
			require.NotContains(t, err.Error(), "type conversion error")
		})
	}

	timeouts := map[string]struct {
		d    *lullv1alpha1.Duration
		want string
	}{
		"later":    {bad("later"), durationFormatMsg},
		"0s":       {bad("0s"), "drain timeout must be positive and at most 744h"},
		"-5m":      {bad("-5m"), "drain timeout must be positive and at most 744h"},
		"745h":     {bad("745h"), "drain timeout must be positive and at most 744h"},
		"744h":     {bad("744h"), ""},
		"1ms":      {bad("1ms"), ""},
		"1h30m":    {bad("1h30m"), ""},
		"2 hours":  {bad("2 hours"), durationFormatMsg},
		"as 1800":  {&lullv1alpha1.Duration{Invalid: "1800"}, "spec.drain.timeout: Invalid value: \"integer\": spec.drain.timeout in body must be of type string"},
		"too long": {bad("1h1h1h1h1h1h1h1h1h1h1h"), "Too long: may not be more than 20 bytes"},
	}
	for name, tc := range timeouts {
		t.Run("NodeMaintenance/timeout "+name, func(t *testing.T) {
			nm := &lullv1alpha1.NodeMaintenance{ObjectMeta: metav1.ObjectMeta{Name: "adm-timeout"},
				Spec: lullv1alpha1.NodeMaintenanceSpec{NodeName: "adm-timeout", Classes: []string{"kernel-update"}, Drain: &lullv1alpha1.DrainOptions{Timeout: tc.d}}}
			err := cp.Client.Create(ctx, nm)
			if tc.want == "" {
				require.NoError(t, err)
				require.NoError(t, cp.Client.Delete(ctx, nm))
				return
			}
			require.Error(t, err)
			require.Contains(t, err.Error(), tc.want)
			require.NotContains(t, err.Error(), "type conversion error")
		})
		if strings.HasPrefix(name, "as ") {
			continue
		}
		t.Run("DisruptionPolicy/timeout "+name, func(t *testing.T) {
			p := &lullv1alpha1.DisruptionPolicy{ObjectMeta: metav1.ObjectMeta{Name: "adm-timeout"}, Spec: lullv1alpha1.DisruptionPolicySpec{Rules: []lullv1alpha1.DisruptionRule{
				{Name: "r", Class: "kernel-update", Action: lullv1alpha1.ActionDrain, Drain: &lullv1alpha1.RuleDrain{Timeout: tc.d}}}}}
			err := cp.Client.Create(ctx, p)
			if tc.want == "" {
				require.NoError(t, err)
				require.NoError(t, cp.Client.Delete(ctx, p))
				return
			}
			require.Error(t, err)
			require.Contains(t, err.Error(), tc.want)
			require.NotContains(t, err.Error(), "type conversion error")
		})
	}
}

// withoutValidation replaces the MaintenanceWindow CRD by one without the
// rules this package's CRD has (as a cluster installed before they existed)
// and returns a function that puts the real one back.
func withoutValidation(t *testing.T, name string) func() {
	t.Helper()
	ctx := t.Context()
	ac := apiextensionsclient.NewForConfigOrDie(cp.Config)
	crd, err := ac.ApiextensionsV1().CustomResourceDefinitions().Get(ctx, name, metav1.GetOptions{})
	require.NoError(t, err)
	orig := crd.Spec.DeepCopy()
	for i := range crd.Spec.Versions {
		strip(crd.Spec.Versions[i].Schema.OpenAPIV3Schema)
	}
	_, err = ac.ApiextensionsV1().CustomResourceDefinitions().Update(ctx, crd, metav1.UpdateOptions{})
	require.NoError(t, err)
	restore := func() {
		require.NoError(t, wait.PollUntilContextTimeout(context.Background(), 100*time.Millisecond, 30*time.Second, true, func(ctx context.Context) (bool, error) {
			crd, err := ac.ApiextensionsV1().CustomResourceDefinitions().Get(ctx, name, metav1.GetOptions{})
			if err != nil {
				return false, nil
			}
			crd.Spec = *orig
			_, err = ac.ApiextensionsV1().CustomResourceDefinitions().Update(ctx, crd, metav1.UpdateOptions{})
			return err == nil, nil
		}))
	}
	t.Cleanup(restore)
	return restore
}

func strip(s *apiextensionsv1.JSONSchemaProps) {
	if s == nil {
		return
	}
	s.XValidations, s.Pattern, s.MaxLength, s.Enum = nil, "", nil, nil
	for k, p := range s.Properties {
		strip(&p)
		s.Properties[k] = p
	}
	if s.Items != nil {
		strip(s.Items.Schema)
	}
}

// TestUnreadableWindowDoesNotStall: a window stored before admission
// checked its fields (here: minTimeRemaining "soon" and a schedule
// duration "four hours", written while the CRD lacked the rules) neither
// stops the drainer's typed informers nor any other request; the window's
// status says what is wrong, and it keeps the nodes it selects closed.
func TestUnreadableWindowDoesNotStall(t *testing.T) {
	e := newDrainEnv(t)
	restore := withoutValidation(t, "maintenancewindows.lull.dev")
	legacy := weekendWindow("legacy")
	legacy.Spec.NodeSelector = &metav1.LabelSelector{MatchLabels: map[string]string{"pool": "legacy"}}
	legacy.Spec.MinTimeRemaining = bad("soon")
	legacy.Spec.Schedule.Duration = *bad("four hours")
	legacy.Spec.MaxUnavailable = ptrIntStr(intstr.FromString("150%"))
	require.NoError(t, wait.PollUntilContextTimeout(e.ctx, 100*time.Millisecond, 30*time.Second, true, func(ctx context.Context) (bool, error) {
		return cp.Client.Create(ctx, legacy.DeepCopy()) == nil, nil // until the stripped CRD is in force
	}))
	t.Cleanup(func() { _ = cp.Client.Delete(context.Background(), legacy) })
	restore()
	// The real rules are back: the same object would be refused now.
	require.NoError(t, wait.PollUntilContextTimeout(e.ctx, 100*time.Millisecond, 30*time.Second, true, func(ctx context.Context) (bool, error) {
		again := legacy.DeepCopy()
		again.Name = "legacy-again"
		err := cp.Client.Create(ctx, again)
		if err == nil {
			_ = cp.Client.Delete(ctx, again)
		}
		return err != nil && strings.Contains(err.Error(), durationFormatMsg), nil
	}))

	e.node("fine", nil)
	e.node("old", map[string]string{"pool": "legacy"})
	e.start(nil)
	mgr, err := ctrl.NewManager(cp.Config, ctrl.Options{Scheme: framework.Scheme(), Metrics: metricsserver.Options{BindAddress: "0"},
		Controller: config.Controller{SkipNameValidation: ptr.To(true)}})
	require.NoError(t, err)
	require.NoError(t, (&windowcontroller.Reconciler{Client: mgr.GetClient(), Clock: e.clock, Metrics: windowcontroller.NewCollector(e.clock)}).SetupWithManager(mgr))
	go func() { _ = mgr.Start(e.ctx) }()

	e.label("fine", ptr.To("kernel-update"))
	e.label("old", ptr.To("kernel-update"))
	e.waitNM("fine", "Drained", phaseIs(lullv1alpha1.PhaseDrained))
	nm := e.waitNM("old", "WaitingForWindow", phaseIs(lullv1alpha1.PhaseWaitingForWindow))
	require.False(t, e.nodeObj("old").Spec.Unschedulable, "an invalid window permits nothing")
	require.Contains(t, nm.Status.Windows, "legacy")

	got := waitWindow(t, "legacy", func(w *lullv1alpha1.MaintenanceWindow) bool {
		return condStatus(w, windowcontroller.ConditionReady) == metav1.ConditionFalse
	})
	ready := meta.FindStatusCondition(got.Status.Conditions, windowcontroller.ConditionReady)
	require.Equal(t, "InvalidSpec", ready.Reason)
	for _, want := range []string{`spec.minTimeRemaining: Invalid value: "\"soon\""`, `"four hours" is not a Go duration`, "spec.maxUnavailable"} {
		require.Contains(t, ready.Message, want)
	}
	// Nothing rewrote the stored values.
	require.Equal(t, `"soon"`, got.Spec.MinTimeRemaining.Invalid)
}

// A request for a node that does not exist ends NodeNotFound, with a
// condition and an event saying so, not Completed.
func TestDrainerNodeNotFound(t *testing.T) {
	e := newDrainEnv(t)
	e.start(nil)
	nm := &lullv1alpha1.NodeMaintenance{ObjectMeta: metav1.ObjectMeta{Name: "ghost"},
		Spec: lullv1alpha1.NodeMaintenanceSpec{NodeName: "ghost", Classes: []string{"kernel-update"}}}
	require.NoError(t, e.c.Create(e.ctx, nm))
	t.Cleanup(func() { _ = cp.Client.Delete(context.Background(), nm) })
	got := e.waitNM("ghost", "NodeNotFound without finalizer", func(nm *lullv1alpha1.NodeMaintenance) bool {
		return nm.Status.Phase == lullv1alpha1.PhaseNodeNotFound && len(nm.Finalizers) == 0
	})
	c := meta.FindStatusCondition(got.Status.Conditions, maintenance.ConditionCordoned)
	require.Equal(t, "NodeNotFound", c.Reason)
	require.Contains(t, c.Message, `node "ghost" does not exist`)
	require.True(t, got.Status.Phase.Finished())
	require.NoError(t, wait.PollUntilContextTimeout(e.ctx, 100*time.Millisecond, 30*time.Second, true, func(ctx context.Context) (bool, error) {
		evs, err := e.cs.EventsV1().Events(metav1.NamespaceDefault).List(ctx, metav1.ListOptions{})
		if err != nil {
			return false, nil
		}
		for _, ev := range evs.Items {
			if ev.Regarding.Name == "ghost" && ev.Reason == "NodeNotFound" && ev.Type == "Warning" {
				return true, nil
			}
		}
		return false, nil
	}))
}

// Host steps and several classes are checked at admission, each with a
// message saying what to fix.
func TestStepsAdmission(t *testing.T) {
	ctx := t.Context()
	rs := func(u string) lullv1alpha1.Step {
		return lullv1alpha1.Step{Type: lullv1alpha1.StepRestartService, Unit: u}
	}
	rules := map[string]struct {
		rule lullv1alpha1.DisruptionRule
		want string
	}{
		"restart with unit":    {lullv1alpha1.DisruptionRule{Steps: []lullv1alpha1.Step{rs("chronyd"), {Type: lullv1alpha1.StepReboot, Timeout: dur(time.Hour)}}}, ""},
		"drain reboot":         {lullv1alpha1.DisruptionRule{Steps: []lullv1alpha1.Step{{Type: lullv1alpha1.ActionDrain}, {Type: lullv1alpha1.StepReboot}}, Drain: &lullv1alpha1.RuleDrain{Escalation: lullv1alpha1.EscalationWait}}, ""},
		"restart without unit": {lullv1alpha1.DisruptionRule{Steps: []lullv1alpha1.Step{rs("")}}, "a RestartService or ReloadService step names its unit"},
		"unit on reboot":       {lullv1alpha1.DisruptionRule{Steps: []lullv1alpha1.Step{{Type: lullv1alpha1.StepReboot, Unit: "x"}}}, "unit names the systemd unit"},
		"unit with shell":      {lullv1alpha1.DisruptionRule{Steps: []lullv1alpha1.Step{rs("a;reboot")}}, "spec.rules[0].steps[0].unit"},
		"timeout on drain":     {lullv1alpha1.DisruptionRule{Steps: []lullv1alpha1.Step{{Type: lullv1alpha1.ActionDrain, Timeout: dur(time.Minute)}}}, "timeout applies to the steps lull-agent carries out"},
		"timeout too long":     {lullv1alpha1.DisruptionRule{Steps: []lullv1alpha1.Step{{Type: lullv1alpha1.StepReboot, Timeout: dur(25 * time.Hour)}}}, "a step's timeout must be positive and at most 24h"},
		"None with others":     {lullv1alpha1.DisruptionRule{Steps: []lullv1alpha1.Step{{Type: lullv1alpha1.ActionNone}, {Type: lullv1alpha1.StepReboot}}}, "None means the class needs nothing done"},
		"action and steps":     {lullv1alpha1.DisruptionRule{Action: lullv1alpha1.ActionDrain, Steps: []lullv1alpha1.Step{{Type: lullv1alpha1.StepReboot}}}, "set exactly one of steps"},
		"neither":              {lullv1alpha1.DisruptionRule{}, "set exactly one of steps"},
		"action restart":       {lullv1alpha1.DisruptionRule{Action: lullv1alpha1.StepRestartService}, "a RestartService or ReloadService step names its unit"},
		"reload and daemon-reload": {lullv1alpha1.DisruptionRule{Steps: []lullv1alpha1.Step{{Type: lullv1alpha1.StepDaemonReload},
			{Type: lullv1alpha1.StepReloadService, Unit: "nginx", Timeout: dur(time.Minute)}}}, ""},
		"files rule":                   {lullv1alpha1.DisruptionRule{Files: []string{"/etc/chrony.conf", "/etc/containerd/certs.d/**"}, Steps: []lullv1alpha1.Step{rs("chronyd")}}, ""},
		"units rule, the changed unit": {lullv1alpha1.DisruptionRule{Units: []string{"*"}, Steps: []lullv1alpha1.Step{{Type: lullv1alpha1.StepDaemonReload}, rs("")}}, ""},
		"units rule, action restart":   {lullv1alpha1.DisruptionRule{Units: []string{"nginx.service"}, Action: lullv1alpha1.StepReloadService}, ""},
		"files rule, restart without unit": {lullv1alpha1.DisruptionRule{Files: []string{"/etc/x"}, Steps: []lullv1alpha1.Step{rs("")}},
			"only in a rule matching units may it leave it out"},
		"class and files": {lullv1alpha1.DisruptionRule{Class: "c", Files: []string{"/etc/x"}, Action: lullv1alpha1.ActionNone}, "set exactly one of class"},
		"no matcher":      {lullv1alpha1.DisruptionRule{Class: "-", Action: lullv1alpha1.ActionNone}, "set exactly one of class"},
		"relative glob":   {lullv1alpha1.DisruptionRule{Files: []string{"etc/x"}, Action: lullv1alpha1.ActionNone}, "spec.rules[0].files[0]"},
		"WriteFiles step": {lullv1alpha1.DisruptionRule{Steps: []lullv1alpha1.Step{{Type: lullv1alpha1.StepWriteFiles}}}, "WriteFiles is not a rule's step"},
		"unknown action":  {lullv1alpha1.DisruptionRule{Action: "Reload"}, "Unsupported value: \"Reload\""},
		"osImage false":   {lullv1alpha1.DisruptionRule{OSImage: ptr.To(false), Action: lullv1alpha1.ActionNone}, "osImage: true matches"},
		"drain settings no drain": {lullv1alpha1.DisruptionRule{Steps: []lullv1alpha1.Step{rs("chronyd")}, Drain: &lullv1alpha1.RuleDrain{Escalation: lullv1alpha1.EscalationWait}},
			"drain settings apply only to rules that drain"},
	}
	for name, tc := range rules {
		t.Run("DisruptionPolicy/"+name, func(t *testing.T) {
			r := tc.rule
			r.Name = "r"
			switch {
			case r.Class == "-":
				r.Class = ""
			case r.Class == "" && r.Files == nil && r.Units == nil && r.OSImage == nil:
				r.Class = "c"
			}
			p := &lullv1alpha1.DisruptionPolicy{ObjectMeta: metav1.ObjectMeta{Name: "adm-steps"}, Spec: lullv1alpha1.DisruptionPolicySpec{Rules: []lullv1alpha1.DisruptionRule{r}}}
			err := cp.Client.Create(ctx, p)
			if tc.want == "" {
				require.NoError(t, err)
				require.NoError(t, cp.Client.Delete(ctx, p))
				return
			}
			require.Error(t, err)
			require.Contains(t, err.Error(), tc.want)
		})
	}
	requests := map[string]struct {
		spec lullv1alpha1.NodeMaintenanceSpec
		want string
	}{
		"classes":           {lullv1alpha1.NodeMaintenanceSpec{Classes: []string{"ssh-keys", "kernel-update"}}, ""},
		"neither":           {lullv1alpha1.NodeMaintenanceSpec{}, "say what changes: classes"},
		"changes only":      {lullv1alpha1.NodeMaintenanceSpec{Changes: &lullv1alpha1.Changes{Files: []string{"/etc/chrony.conf"}, Units: []string{"chronyd.service"}, Config: "chrony-v2"}}, ""},
		"class and changes": {lullv1alpha1.NodeMaintenanceSpec{Classes: []string{"kernel-update"}, Changes: &lullv1alpha1.Changes{KernelArguments: []string{"quiet"}}}, ""},
		"relative path":     {lullv1alpha1.NodeMaintenanceSpec{Changes: &lullv1alpha1.Changes{Files: []string{"etc/x"}}}, "spec.changes.files[0]"},
		// Issue 43, finding 7: a path a rule would match by name but that
		// is another file on disk.
		"dot-dot path":    {lullv1alpha1.NodeMaintenanceSpec{Changes: &lullv1alpha1.Changes{Files: []string{"/etc/containerd/certs.d/../../systemd/system/x.service"}}}, "spec.changes.files[0]"},
		"dot path":        {lullv1alpha1.NodeMaintenanceSpec{Changes: &lullv1alpha1.Changes{Files: []string{"/etc/./x"}}}, "spec.changes.files[0]"},
		"double slash":    {lullv1alpha1.NodeMaintenanceSpec{Changes: &lullv1alpha1.Changes{Files: []string{"/etc//x"}}}, "spec.changes.files[0]"},
		"dot file":        {lullv1alpha1.NodeMaintenanceSpec{Changes: &lullv1alpha1.Changes{Files: []string{"/etc/.x", "/etc/..x/y"}}}, ""},
		"bad config name": {lullv1alpha1.NodeMaintenanceSpec{Changes: &lullv1alpha1.Changes{Files: []string{"/etc/x"}, Config: "Not_A_Name"}}, "spec.changes.config"},
		"repeated":        {lullv1alpha1.NodeMaintenanceSpec{Classes: []string{"a", "a"}}, "classes must not repeat a class"},
		"bad class":       {lullv1alpha1.NodeMaintenanceSpec{Classes: []string{"Kernel"}}, "spec.classes[0]"},
	}
	for name, tc := range requests {
		t.Run("NodeMaintenance/"+name, func(t *testing.T) {
			nm := &lullv1alpha1.NodeMaintenance{ObjectMeta: metav1.ObjectMeta{Name: "adm-classes"}, Spec: tc.spec}
			nm.Spec.NodeName = "adm-classes"
			err := cp.Client.Create(ctx, nm)
			if tc.want == "" {
				require.NoError(t, err)
				require.NoError(t, cp.Client.Delete(ctx, nm))
				return
			}
			require.Error(t, err)
			require.Contains(t, err.Error(), tc.want)
		})
	}
}

// A NodeConfig's paths are absolute and clean, and a file to remove has
// no contents.
func TestNodeConfigAdmission(t *testing.T) {
	ctx := t.Context()
	ns := &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: lullv1alpha1.ConfigNamespace}}
	if err := cp.Client.Create(ctx, ns); err != nil && !apierrors.IsAlreadyExists(err) {
		t.Fatal(err)
	}
	for name, tc := range map[string]struct {
		file lullv1alpha1.ConfigFile
		want string
	}{
		"a file":        {lullv1alpha1.ConfigFile{Path: "/etc/chrony.conf", Contents: []byte("pool x\n"), Mode: ptr.To[int32](0o644), User: "root"}, ""},
		"removed":       {lullv1alpha1.ConfigFile{Path: "/etc/old.conf", Absent: true, Previous: strings.Repeat("a", 64)}, ""},
		"relative":      {lullv1alpha1.ConfigFile{Path: "etc/x"}, "spec.files[0].path"},
		"dot-dot":       {lullv1alpha1.ConfigFile{Path: "/etc/../root/.ssh/authorized_keys"}, "spec.files[0].path"},
		"dot":           {lullv1alpha1.ConfigFile{Path: "/etc/./x"}, "spec.files[0].path"},
		"dotfile":       {lullv1alpha1.ConfigFile{Path: "/etc/.hidden/..x", Contents: []byte("x")}, ""},
		"trailing /":    {lullv1alpha1.ConfigFile{Path: "/etc/x/"}, "spec.files[0].path"},
		"removed, with": {lullv1alpha1.ConfigFile{Path: "/etc/x", Absent: true, Contents: []byte("x")}, "a file to remove (absent: true) has no contents"},
		"bad hash":      {lullv1alpha1.ConfigFile{Path: "/etc/x", Previous: "abc"}, "spec.files[0].previous"},
		"mode too big":  {lullv1alpha1.ConfigFile{Path: "/etc/x", Mode: ptr.To[int32](0o10000)}, "spec.files[0].mode"},
	} {
		t.Run(name, func(t *testing.T) {
			nc := &lullv1alpha1.NodeConfig{ObjectMeta: metav1.ObjectMeta{Name: "adm-config", Namespace: lullv1alpha1.ConfigNamespace},
				Spec: lullv1alpha1.NodeConfigSpec{Files: []lullv1alpha1.ConfigFile{tc.file}}}
			err := cp.Client.Create(ctx, nc)
			if tc.want == "" {
				require.NoError(t, err)
				require.NoError(t, cp.Client.Delete(ctx, nc))
				return
			}
			require.Error(t, err)
			require.Contains(t, err.Error(), tc.want)
		})
	}
}

// silences is a window's silences at an Alertmanager, with matchers.
func silences(matchers ...string) *lullv1alpha1.Silences {
	return &lullv1alpha1.Silences{URL: "http://alertmanager.monitoring:9093", Matchers: matchers}
}
