package install

import (
	"io"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"github.com/spf13/pflag"
	kubeschedulerconfig "k8s.io/kubernetes/pkg/scheduler/apis/config"
	kubeschedulerscheme "k8s.io/kubernetes/pkg/scheduler/apis/config/scheme"

	"lull.dev/lull/drainer/app"
	"lull.dev/lull/internal/settings"
	"lull.dev/lull/plugins/nodedisruption/apis/config"
	_ "lull.dev/lull/plugins/nodedisruption/apis/config/scheme" // decodes NodeDisruptionArgs
)

// sharedSettings returns the shared settings lull-scheduler gets from its
// rendered configuration and lull-drainer from its rendered command, each
// decoded the way the component does it.
func sharedSettings(t *testing.T, objs map[string]object, ns string) (scheduler, drainer settings.Settings) {
	t.Helper()
	cfgText, _ := get(t, objs["v1/ConfigMap/"+ns+"/lull-scheduler-config"], "data", "config.yaml").(string)
	obj, _, err := kubeschedulerscheme.Codecs.UniversalDecoder().Decode([]byte(cfgText), nil, nil)
	if err != nil {
		t.Fatalf("decoding the scheduler configuration: %v\n%s", err, cfgText)
	}
	for _, pc := range obj.(*kubeschedulerconfig.KubeSchedulerConfiguration).Profiles[0].PluginConfig {
		if a, ok := pc.Args.(*config.NodeDisruptionArgs); ok {
			scheduler = a.Settings
		}
	}
	if scheduler == (settings.Settings{}) {
		t.Fatalf("no NodeDisruption args in\n%s", cfgText)
	}
	dc := get(t, objs["apps/v1/Deployment/"+ns+"/lull-drainer"], "spec", "template", "spec", "containers", 0)
	var args []string
	for _, a := range get(t, dc, "command").([]any)[1:] {
		args = append(args, a.(string))
	}
	o := app.NewOptions()
	fs := pflag.NewFlagSet("lull-drainer", pflag.ContinueOnError)
	fs.SetOutput(io.Discard)
	o.AddFlags(fs)
	if err := fs.Parse(args); err != nil {
		t.Fatalf("lull-drainer's flags %v: %v", args, err)
	}
	if err := o.Settings.Validate(); err != nil {
		t.Fatalf("lull-drainer's flags %v: %v", args, err)
	}
	return scheduler, o.Settings
}

// agree requires the two halves to have the same settings, apart from
// those one of them does not read (the drainer the toleration key, the
// scheduler the default budget).
func agree(t *testing.T, what string, scheduler, drainer settings.Settings) {
	t.Helper()
	drainer.TolerationKey = scheduler.TolerationKey
	scheduler.DefaultMaxUnavailable = drainer.DefaultMaxUnavailable
	if diff := cmp.Diff(scheduler, drainer); diff != "" {
		t.Errorf("%s: lull-scheduler's and lull-drainer's shared settings differ (-scheduler +drainer):\n%s", what, diff)
	}
}

func TestInstallGivesBothHalvesTheSameSettings(t *testing.T) {
	s, d := sharedSettings(t, renderKustomize(t), "lull-system")
	agree(t, "kubectl kustomize manifests/install", s, d)
	if s != settings.Defaults() || d != settings.Defaults() {
		t.Errorf("the install's settings are not the defaults:\nscheduler %+v\ndrainer   %+v\ndefaults  %+v", s, d, settings.Defaults())
	}
}

func TestChartSharedSettingsValues(t *testing.T) {
	values := `
leaseNamespace: maint-leases
nodesWithoutWindow: Restrictive
maintenanceLabel: example.com/maintenance
tolerationKey: example.com/disruption
defaultMaxUnavailable: 3
windowHorizon: 720h
`
	f := filepath.Join(t.TempDir(), "values.yaml")
	if err := os.WriteFile(f, []byte(values), 0o644); err != nil {
		t.Fatal(err)
	}
	h := renderHelm(t, "--values", f)
	s, d := sharedSettings(t, h, "lull-system")
	agree(t, "helm template charts/lull", s, d)
	want := settings.Settings{MaintenanceLabel: "example.com/maintenance", TolerationKey: "example.com/disruption", LeaseNamespace: "maint-leases",
		NodesWithoutWindow: settings.NoWindowRestrictive, DefaultMaxUnavailable: 3, WindowHorizon: 720 * time.Hour}
	d.TolerationKey = want.TolerationKey // not the drainer's
	if diff := cmp.Diff(want, d); diff != "" {
		t.Errorf("drainer settings (-want +got):\n%s", diff)
	}
	if s.TolerationKey != want.TolerationKey {
		t.Errorf("scheduler toleration key %q, want %q", s.TolerationKey, want.TolerationKey)
	}
	// The admission guard protects the configured label, not the default.
	vap := h["admissionregistration.k8s.io/v1/ValidatingAdmissionPolicy/<nil>/lull-maintenance-label"]
	if got := get(t, vap, "spec", "matchConstraints", "objectSelector", "matchExpressions", 0, "key"); got != want.MaintenanceLabel {
		t.Errorf("the guard selects nodes with %v, want %s", got, want.MaintenanceLabel)
	}
	for _, v := range get(t, vap, "spec", "variables").([]any) {
		e := get(t, v, "expression").(string)
		if strings.Contains(e, "labels[") && !strings.Contains(e, `"`+want.MaintenanceLabel+`"`) {
			t.Errorf("guard variable reads another label: %s", e)
		}
	}
}
