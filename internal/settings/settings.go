// Package settings holds what lull-scheduler, lull-drainer and kubectl-lull
// must agree on to forecast the same disruptions, with its one set of
// defaults, its validation and its flags.
//
// The scheduler takes these settings as NodeDisruption plugin arguments,
// the drainer and kubectl-lull as flags; the argument and flag names are
// listed here once, so errors and help name them the same everywhere.
package settings

import (
	"fmt"
	"time"

	metav1validation "k8s.io/apimachinery/pkg/apis/meta/v1/validation"
	"k8s.io/apimachinery/pkg/util/validation"
	"k8s.io/apimachinery/pkg/util/validation/field"

	lullv1alpha1 "lull.dev/lull/api/v1alpha1"
	"lull.dev/lull/internal/window"
	"lull.dev/lull/lease"
)

// NoWindowPolicy is what a node that no MaintenanceWindow selects may do.
type NoWindowPolicy string

const (
	// NoWindowPermissive lets maintenance of such nodes start at any time.
	NoWindowPermissive NoWindowPolicy = "Permissive"
	// NoWindowRestrictive never lets it start.
	NoWindowRestrictive NoWindowPolicy = "Restrictive"
)

// Permits reports whether a node no window selects may be disrupted.
// Anything but Restrictive permits: validation rejects other values first.
func (p NoWindowPolicy) Permits() bool { return p != NoWindowRestrictive }

// Settings are what the scheduler, the drainer and kubectl-lull must agree
// on. A component configured differently from the others forecasts other
// disruptions than the ones that happen: the scheduler places pods on a
// node the drainer is about to drain, or kubectl-lull previews what the
// drainer will not do.
type Settings struct {
	// MaintenanceLabel is the node label that requests maintenance; its
	// value is the maintenance class.
	MaintenanceLabel string
	// TolerationKey: a pod with a toleration for this key does not mind
	// disruption, and the scheduler keeps it off no node for it.
	TolerationKey string
	// LeaseNamespace holds the node disruption leases.
	LeaseNamespace string
	// NodesWithoutWindow is the policy for nodes no MaintenanceWindow
	// selects.
	NodesWithoutWindow NoWindowPolicy
	// DefaultMaxUnavailable is the budget of nodes no MaintenanceWindow
	// selects: how many of them may be disrupted at once.
	DefaultMaxUnavailable int
	// WindowHorizon bounds the search for a node's next maintenance window;
	// a window opening later counts as none.
	WindowHorizon time.Duration
}

// Defaults returns the one set of defaults.
func Defaults() Settings {
	return Settings{
		MaintenanceLabel:      lullv1alpha1.MaintenanceLabel,
		TolerationKey:         lullv1alpha1.DisruptionTolerationKey,
		LeaseNamespace:        lease.DefaultNamespace,
		NodesWithoutWindow:    NoWindowPermissive,
		DefaultMaxUnavailable: 1,
		WindowHorizon:         window.DefaultHorizon,
	}
}

// WithDefaults returns s with its unset (zero) fields set to the defaults.
func (s Settings) WithDefaults() Settings {
	d := Defaults()
	setIfZero(&s.MaintenanceLabel, d.MaintenanceLabel)
	setIfZero(&s.TolerationKey, d.TolerationKey)
	setIfZero(&s.LeaseNamespace, d.LeaseNamespace)
	setIfZero(&s.NodesWithoutWindow, d.NodesWithoutWindow)
	setIfZero(&s.DefaultMaxUnavailable, d.DefaultMaxUnavailable)
	setIfZero(&s.WindowHorizon, d.WindowHorizon)
	return s
}

func setIfZero[T comparable](p *T, def T) {
	var zero T
	if *p == zero {
		*p = def
	}
}

// WindowOptions are the window engine's options these settings imply.
func (s Settings) WindowOptions() window.Options {
	return window.Options{Horizon: s.WindowHorizon}
}

// Name is a setting's name as a NodeDisruption plugin argument and as a
// flag of lull-drainer and kubectl-lull.
type Name struct{ Arg, Flag string }

// The settings' names. lull-scheduler has no defaultMaxUnavailable
// argument: it counts no budgets, and its args keep the default.
var (
	MaintenanceLabelName      = Name{Arg: "maintenanceLabel", Flag: "maintenance-label"}
	TolerationKeyName         = Name{Arg: "tolerationKey", Flag: "toleration-key"}
	LeaseNamespaceName        = Name{Arg: "leaseNamespace", Flag: "lease-namespace"}
	NodesWithoutWindowName    = Name{Arg: "nodesWithoutWindow", Flag: "nodes-without-window"}
	DefaultMaxUnavailableName = Name{Arg: "defaultMaxUnavailable", Flag: "default-max-unavailable"}
	WindowHorizonName         = Name{Arg: "windowHorizon", Flag: "window-horizon"}
)

// ValidateArgs checks the settings as plugin arguments at path (nil at the
// root); the errors name the arguments.
func (s Settings) ValidateArgs(path *field.Path) field.ErrorList {
	return s.validate(func(n Name) *field.Path { return path.Child(n.Arg) })
}

// Validate checks the settings as flags; the error names the flags.
func (s Settings) Validate() error {
	if errs := s.validate(func(n Name) *field.Path { return field.NewPath("--" + n.Flag) }); len(errs) > 0 {
		return fmt.Errorf("invalid settings: %w", errs.ToAggregate())
	}
	return nil
}

func (s Settings) validate(at func(Name) *field.Path) field.ErrorList {
	var errs field.ErrorList
	errs = append(errs, metav1validation.ValidateLabelName(s.MaintenanceLabel, at(MaintenanceLabelName))...)
	errs = append(errs, metav1validation.ValidateLabelName(s.TolerationKey, at(TolerationKeyName))...)
	for _, msg := range validation.IsDNS1123Label(s.LeaseNamespace) {
		errs = append(errs, field.Invalid(at(LeaseNamespaceName), s.LeaseNamespace, msg))
	}
	switch s.NodesWithoutWindow {
	case NoWindowPermissive, NoWindowRestrictive:
	default:
		errs = append(errs, field.NotSupported(at(NodesWithoutWindowName), s.NodesWithoutWindow,
			[]NoWindowPolicy{NoWindowPermissive, NoWindowRestrictive}))
	}
	if s.DefaultMaxUnavailable < 1 {
		errs = append(errs, field.Invalid(at(DefaultMaxUnavailableName), s.DefaultMaxUnavailable, "must be at least 1"))
	}
	if s.WindowHorizon <= 0 {
		errs = append(errs, field.Invalid(at(WindowHorizonName), s.WindowHorizon.String(), "must be more than 0"))
	}
	return errs
}
