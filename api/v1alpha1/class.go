package v1alpha1

import (
	"fmt"
	"regexp"
)

var classRegexp = regexp.MustCompile(ClassPattern)

// ValidateClass says why class is not a valid maintenance class, or returns
// nil. It is the CRDs' rule for spec.classes (ClassPattern, MaxClassLength),
// so a maintenance label whose value fails it never becomes a
// NodeMaintenance: the API server refuses it and the drainer reports
// InvalidMaintenanceLabel on the node. Tools check it first to say why.
func ValidateClass(class string) error {
	switch {
	case class == "":
		return fmt.Errorf("the maintenance class is empty (give one, e.g. kernel-update)")
	case len(class) > MaxClassLength:
		return fmt.Errorf("the maintenance class %q is longer than %d characters", class, MaxClassLength)
	case !classRegexp.MatchString(class):
		return fmt.Errorf("%q is not a valid maintenance class: use lower-case letters, digits, '-', '.' and '_', "+
			"starting and ending with a letter or digit (e.g. kernel-update)", class)
	}
	return nil
}

// HasOnlyClass reports whether class is the request's one class (as a
// request made from the maintenance label has).
func (s *NodeMaintenanceSpec) HasOnlyClass(class string) bool {
	return len(s.Classes) == 1 && s.Classes[0] == class
}
