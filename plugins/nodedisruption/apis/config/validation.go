package config

import (
	"time"

	metav1validation "k8s.io/apimachinery/pkg/apis/meta/v1/validation"
	"k8s.io/apimachinery/pkg/util/validation/field"
)

// MaxHorizon bounds the scoring horizon (the window engine's own search
// horizon is 1500 days; scoring further ahead than a month says nothing).
const MaxHorizon = 31 * 24 * time.Hour

// ValidateNodeDisruptionArgs checks the args; path is where they sit in
// the configuration (nil at the root).
func ValidateNodeDisruptionArgs(path *field.Path, args *NodeDisruptionArgs) error {
	errs := args.Settings.ValidateArgs(path)
	errs = append(errs, metav1validation.ValidateLabelName(args.ExpectedRuntimeAnnotation, path.Child("expectedRuntimeAnnotation"))...)
	if h := args.Horizon.Duration; h <= 0 || h > MaxHorizon {
		errs = append(errs, field.Invalid(path.Child("horizon"), args.Horizon.Duration.String(), "must be more than 0 and at most 744h"))
	}
	return errs.ToAggregate()
}
