package v1

import (
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/utils/ptr"

	"lull.dev/lull/internal/settings"
	"lull.dev/lull/plugins/nodedisruption/apis/config"
)

func newScheme(t *testing.T) *runtime.Scheme {
	t.Helper()
	s := runtime.NewScheme()
	if err := config.AddToScheme(s); err != nil {
		t.Fatal(err)
	}
	if err := AddToScheme(s); err != nil {
		t.Fatal(err)
	}
	return s
}

// The generated conversions (zz_generated.conversion.go) and the
// hand-written ones for the shared settings (conversion.go), through a
// scheme, as the scheduler converts them.
func TestConversion(t *testing.T) {
	s := newScheme(t)
	versioned := &NodeDisruptionArgs{
		LeaseNamespace:               ptr.To("maint"),
		MaintenanceLabel:             ptr.To("example.com/maintenance"),
		TolerationKey:                ptr.To("example.com/disruption"),
		ExpectedRuntimeAnnotation:    ptr.To("example.com/runtime"),
		Horizon:                      &metav1.Duration{Duration: 6 * time.Hour},
		FilterRequestedOutsideWindow: ptr.To(true),
		NodesWithoutWindow:           ptr.To("Restrictive"),
		WindowHorizon:                &metav1.Duration{Duration: 720 * time.Hour},
	}
	internal := &config.NodeDisruptionArgs{
		Settings: settings.Settings{
			LeaseNamespace:        "maint",
			MaintenanceLabel:      "example.com/maintenance",
			TolerationKey:         "example.com/disruption",
			NodesWithoutWindow:    settings.NoWindowRestrictive,
			DefaultMaxUnavailable: 1, // no argument: the default
			WindowHorizon:         720 * time.Hour,
		},
		ExpectedRuntimeAnnotation:    "example.com/runtime",
		Horizon:                      metav1.Duration{Duration: 6 * time.Hour},
		FilterRequestedOutsideWindow: true,
	}

	gotInternal := &config.NodeDisruptionArgs{}
	if err := s.Convert(versioned, gotInternal, nil); err != nil {
		t.Fatal(err)
	}
	if diff := cmp.Diff(internal, gotInternal); diff != "" {
		t.Errorf("v1 to internal (-want,+got):\n%s", diff)
	}

	gotVersioned := &NodeDisruptionArgs{}
	if err := s.Convert(internal, gotVersioned, nil); err != nil {
		t.Fatal(err)
	}
	if diff := cmp.Diff(versioned, gotVersioned); diff != "" {
		t.Errorf("internal to v1 (-want,+got):\n%s", diff)
	}

	// Unset fields convert to zero values (defaulting fills them first
	// when decoding); DefaultMaxUnavailable keeps its default.
	empty := &config.NodeDisruptionArgs{}
	if err := s.Convert(&NodeDisruptionArgs{}, empty, nil); err != nil {
		t.Fatal(err)
	}
	if diff := cmp.Diff(&config.NodeDisruptionArgs{Settings: settings.Settings{DefaultMaxUnavailable: 1}}, empty); diff != "" {
		t.Errorf("empty v1 to internal (-want,+got):\n%s", diff)
	}
}

// The generated defaulter (zz_generated.defaults.go) is registered and
// calls SetDefaults_NodeDisruptionArgs.
func TestDefaulting(t *testing.T) {
	s := newScheme(t)
	args := &NodeDisruptionArgs{Horizon: &metav1.Duration{Duration: time.Hour}}
	s.Default(args)
	d := settings.Defaults()
	want := &NodeDisruptionArgs{
		LeaseNamespace:               ptr.To(d.LeaseNamespace),
		MaintenanceLabel:             ptr.To(d.MaintenanceLabel),
		TolerationKey:                ptr.To(d.TolerationKey),
		ExpectedRuntimeAnnotation:    ptr.To("lull.dev/expected-runtime"),
		Horizon:                      &metav1.Duration{Duration: time.Hour},
		FilterRequestedOutsideWindow: ptr.To(false),
		NodesWithoutWindow:           ptr.To(string(d.NodesWithoutWindow)),
		WindowHorizon:                &metav1.Duration{Duration: d.WindowHorizon},
	}
	if diff := cmp.Diff(want, args); diff != "" {
		t.Errorf("defaults (-want,+got):\n%s", diff)
	}
}
