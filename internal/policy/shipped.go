package policy

import (
	_ "embed"
	"fmt"

	"sigs.k8s.io/yaml"

	lullv1alpha1 "lull.dev/lull/api/v1alpha1"
	"lull.dev/lull/internal/settings"
)

// shippedYAML is the DisruptionPolicy "default" lull ships. lull-drainer
// creates it and keeps it as shipped while it carries ManagedByAnnotation
// (docs/policy.md, "The shipped policy"); this file is its only copy.
//
//go:embed default.yaml
var shippedYAML []byte

// ShippedName is the name of the policy lull ships.
const ShippedName = "default"

// ManagedByAnnotation on the shipped policy, with the value ManagedBy,
// lets lull-drainer keep it as shipped: create it when it is missing and
// put back the shipped spec when it differs (an upgrade brings a new
// one). Remove the annotation to make the policy yours.
const (
	ManagedByAnnotation = "lull.dev/managed-by"
	ManagedBy           = settings.Drainer
)

// Shipped returns the policy lull ships, annotated as lull-drainer's.
func Shipped() (*lullv1alpha1.DisruptionPolicy, error) {
	var p lullv1alpha1.DisruptionPolicy
	if err := yaml.UnmarshalStrict(shippedYAML, &p); err != nil {
		return nil, fmt.Errorf("the shipped DisruptionPolicy (internal/policy/default.yaml) does not decode: %w", err)
	}
	if p.Annotations == nil {
		p.Annotations = map[string]string{}
	}
	p.Annotations[ManagedByAnnotation] = ManagedBy
	return &p, nil
}

// ShippedYAML is the shipped policy as it is written, comments included.
func ShippedYAML() []byte { return shippedYAML }
