package scheme

import (
	"bytes"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/serializer/json"
	kubeschedulerconfig "k8s.io/kubernetes/pkg/scheduler/apis/config"
	kubeschedulerscheme "k8s.io/kubernetes/pkg/scheduler/apis/config/scheme"
	configv1 "k8s.io/kubernetes/pkg/scheduler/apis/config/v1"

	"lull.dev/lull/internal/settings"
	"lull.dev/lull/plugins/nodedisruption/apis/config"
)

const fullConfig = `apiVersion: kubescheduler.config.k8s.io/v1
kind: KubeSchedulerConfiguration
leaderElection:
  leaderElect: true
  resourceName: lull-scheduler
  resourceNamespace: lull-system
profiles:
- schedulerName: lull-scheduler
  plugins:
    multiPoint:
      enabled:
      - name: NodeDisruption
        weight: 3
  pluginConfig:
  - name: NodeDisruption
    args:
      leaseNamespace: maint
      maintenanceLabel: example.com/maintenance
      windowHorizon: 720h
      horizon: 6h
      filterRequestedOutsideWindow: true
  - name: NodeResourcesFit
    args:
      scoringStrategy:
        type: MostAllocated
`

func decode(t *testing.T, data string) *kubeschedulerconfig.KubeSchedulerConfiguration {
	t.Helper()
	obj, gvk, err := kubeschedulerscheme.Codecs.UniversalDecoder().Decode([]byte(data), nil, nil)
	if err != nil {
		t.Fatalf("decoding: %v", err)
	}
	cfg, ok := obj.(*kubeschedulerconfig.KubeSchedulerConfiguration)
	if !ok {
		t.Fatalf("decoded %v into %T", gvk, obj)
	}
	return cfg
}

func argsOf(t *testing.T, cfg *kubeschedulerconfig.KubeSchedulerConfiguration) *config.NodeDisruptionArgs {
	t.Helper()
	for _, pc := range cfg.Profiles[0].PluginConfig {
		if pc.Name == "NodeDisruption" {
			a, ok := pc.Args.(*config.NodeDisruptionArgs)
			if !ok {
				t.Fatalf("NodeDisruption args decoded as %T", pc.Args)
			}
			return a
		}
	}
	t.Fatal("no NodeDisruption args")
	return nil
}

func TestDecodeDefaultsAndRoundTrip(t *testing.T) {
	cfg := decode(t, fullConfig)
	got := argsOf(t, cfg)
	want := &config.NodeDisruptionArgs{
		Settings: settings.Settings{
			LeaseNamespace:        "maint",
			MaintenanceLabel:      "example.com/maintenance",
			TolerationKey:         "lull.dev/disruption",
			NodesWithoutWindow:    settings.NoWindowPermissive,
			DefaultMaxUnavailable: 1,
			WindowHorizon:         720 * time.Hour,
		},
		ExpectedRuntimeAnnotation:    "lull.dev/expected-runtime",
		Horizon:                      metav1.Duration{Duration: 6 * time.Hour},
		FilterRequestedOutsideWindow: true,
	}
	if diff := cmp.Diff(want, got); diff != "" {
		t.Errorf("decoded args (-want,+got):\n%s", diff)
	}
	if err := config.ValidateNodeDisruptionArgs(nil, got); err != nil {
		t.Errorf("decoded args do not validate: %v", err)
	}

	// Encode the whole configuration back to v1 YAML and decode it again:
	// nothing may be lost on the way.
	enc := kubeschedulerscheme.Codecs.EncoderForVersion(
		json.NewSerializerWithOptions(json.DefaultMetaFactory, kubeschedulerscheme.Scheme, kubeschedulerscheme.Scheme, json.SerializerOptions{Yaml: true}),
		configv1.SchemeGroupVersion)
	var buf bytes.Buffer
	if err := enc.Encode(cfg, &buf); err != nil {
		t.Fatalf("encoding: %v", err)
	}
	if !bytes.Contains(buf.Bytes(), []byte("kind: NodeDisruptionArgs")) || !bytes.Contains(buf.Bytes(), []byte("leaseNamespace: maint")) {
		t.Errorf("encoded configuration lacks our args:\n%s", buf.String())
	}
	again := argsOf(t, decode(t, buf.String()))
	if diff := cmp.Diff(want, again); diff != "" {
		t.Errorf("args after a round trip (-want,+got):\n%s", diff)
	}
}

func TestDefaultsWithoutArgs(t *testing.T) {
	cfg := decode(t, `apiVersion: kubescheduler.config.k8s.io/v1
kind: KubeSchedulerConfiguration
profiles:
- schedulerName: lull-scheduler
  plugins:
    multiPoint:
      enabled:
      - name: NodeDisruption
`)
	got := argsOf(t, cfg)
	// The shared settings default to internal/settings' one set of defaults, as
	// lull-drainer's and kubectl-lull's flags do (their tests check that).
	want := &config.NodeDisruptionArgs{
		Settings:                  settings.Defaults(),
		ExpectedRuntimeAnnotation: "lull.dev/expected-runtime",
		Horizon:                   metav1.Duration{Duration: 24 * time.Hour},
	}
	if diff := cmp.Diff(want, got); diff != "" {
		t.Errorf("defaults (-want,+got):\n%s", diff)
	}
	if got.LeaseNamespace != "lull-leases" || got.MaintenanceLabel != "lull.dev/maintenance" || got.NodesWithoutWindow != settings.NoWindowPermissive {
		t.Errorf("defaults differ from the documented ones: %+v", got.Settings)
	}
}

func TestDecodeErrors(t *testing.T) {
	for name, tc := range map[string]struct {
		args string
	}{
		"unknown field":      {"leaseNamespaces: x"},
		"bad horizon":        {"horizon: soon"},
		"wrong type bool":    {"filterRequestedOutsideWindow: maybe"},
		"bad window horizon": {"windowHorizon: later"},
	} {
		t.Run(name, func(t *testing.T) {
			data := fullConfig[:len(fullConfig)-len("  - name: NodeResourcesFit\n    args:\n      scoringStrategy:\n        type: MostAllocated\n")]
			data = data[:bytes.Index([]byte(data), []byte("      leaseNamespace: maint"))] + "      " + tc.args + "\n"
			if _, _, err := kubeschedulerscheme.Codecs.UniversalDecoder().Decode([]byte(data), nil, nil); err == nil {
				t.Errorf("decoding %q succeeded", tc.args)
			}
		})
	}
}

func TestValidation(t *testing.T) {
	valid := func() *config.NodeDisruptionArgs {
		s := settings.Defaults()
		s.LeaseNamespace = "lull-system"
		return &config.NodeDisruptionArgs{Settings: s, ExpectedRuntimeAnnotation: "lull.dev/expected-runtime",
			Horizon: metav1.Duration{Duration: time.Hour}}
	}
	for name, tc := range map[string]struct {
		mutate  func(*config.NodeDisruptionArgs)
		wantErr string
	}{
		"valid":               {func(*config.NodeDisruptionArgs) {}, ""},
		"bad namespace":       {func(a *config.NodeDisruptionArgs) { a.LeaseNamespace = "Lull_System" }, "leaseNamespace"},
		"empty label":         {func(a *config.NodeDisruptionArgs) { a.MaintenanceLabel = "" }, "maintenanceLabel"},
		"zero horizon":        {func(a *config.NodeDisruptionArgs) { a.Horizon.Duration = 0 }, "horizon"},
		"huge horizon":        {func(a *config.NodeDisruptionArgs) { a.Horizon.Duration = 800 * time.Hour }, "horizon"},
		"bad window policy":   {func(a *config.NodeDisruptionArgs) { a.NodesWithoutWindow = "Sometimes" }, "nodesWithoutWindow"},
		"bad toleration":      {func(a *config.NodeDisruptionArgs) { a.TolerationKey = "not a key" }, "tolerationKey"},
		"zero window horizon": {func(a *config.NodeDisruptionArgs) { a.WindowHorizon = 0 }, "windowHorizon"},
	} {
		t.Run(name, func(t *testing.T) {
			a := valid()
			tc.mutate(a)
			err := config.ValidateNodeDisruptionArgs(nil, a)
			switch {
			case tc.wantErr == "" && err != nil:
				t.Errorf("unexpected error: %v", err)
			case tc.wantErr != "" && (err == nil || !bytes.Contains([]byte(err.Error()), []byte(tc.wantErr))):
				t.Errorf("error %v, want one naming %s", err, tc.wantErr)
			}
		})
	}
}

var _ runtime.Object = &config.NodeDisruptionArgs{}
