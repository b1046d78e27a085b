package v1alpha1

import (
	"encoding/json"
	"fmt"
	"time"
)

// Duration is a Go duration ("30m", "1h30m") in a lull object. It differs
// from metav1.Duration in one way: it decodes every value. Text that is
// not a Go duration, stored before the CRDs checked it (or by a client
// that bypassed them), is kept in Invalid instead of failing the decode, so
// one such object cannot stop a typed informer and with it every other
// object; the controllers report it (Err) and treat the object as invalid.
// An invalid value is written back unchanged.
//
// Admission checks the format first (the rule below), then each field's
// bounds; the bound rules are guarded by the same format test so that text
// which is not a duration gets one message saying what to write, never
// CEL's "type conversion error". At most 20 characters and at most 6
// digits before a unit keep every accepted value below the ~2562047h a
// time.Duration holds.
//
// +kubebuilder:validation:Type=string
// +kubebuilder:validation:MaxLength=20
// +kubebuilder:validation:XValidation:rule="size(self) <= 20 && self.matches('^[-+]?(0|(([0-9]{1,6}([.][0-9]*)?|[.][0-9]{1,9})(ns|us|µs|ms|s|m|h))+)$')",message="must be a Go duration such as 30m, 1h30m or 90s (units h, m, s, ms, us, ns)"
type Duration struct {
	time.Duration `json:"-"`
	// Invalid is the stored JSON value, as it was, when it is not a Go
	// duration (`"soon"`); empty for a valid value, which is then Duration.
	Invalid string `json:"-"`
}

// DurationFormat is the format admission enforces (see Duration); the
// bound rules of the fields repeat it as their guard, and a test keeps it
// equal to the CRDs'.
const DurationFormat = `^[-+]?(0|(([0-9]{1,6}([.][0-9]*)?|[.][0-9]{1,9})(ns|us|µs|ms|s|m|h))+)$`

// NewDuration returns a valid Duration.
func NewDuration(d time.Duration) *Duration { return &Duration{Duration: d} }

// Err says why the stored value is unusable; nil for a valid one.
func (d *Duration) Err() error {
	if d == nil || d.Invalid == "" {
		return nil
	}
	return fmt.Errorf("%s is not a Go duration; write one such as 30m or 1h30m", d.Invalid)
}

// UnmarshalJSON never fails: JSON null leaves the zero value, a string
// that parses is the duration, anything else is kept in Invalid.
func (d *Duration) UnmarshalJSON(b []byte) error {
	*d = Duration{}
	if string(b) == "null" {
		return nil
	}
	var s string
	if err := json.Unmarshal(b, &s); err == nil {
		if v, err := time.ParseDuration(s); err == nil {
			d.Duration = v
			return nil
		}
	}
	d.Invalid = string(b)
	return nil
}

// MarshalJSON writes the value as metav1.Duration does ("1h30m0s"), or an
// invalid value exactly as it was stored.
func (d Duration) MarshalJSON() ([]byte, error) {
	if d.Invalid != "" && json.Valid([]byte(d.Invalid)) {
		return []byte(d.Invalid), nil
	}
	return json.Marshal(d.Duration.String())
}

// ToUnstructured lets runtime.DefaultUnstructuredConverter convert the
// value as MarshalJSON does.
func (d Duration) ToUnstructured() interface{} {
	if d.Invalid != "" {
		var v interface{}
		if err := json.Unmarshal([]byte(d.Invalid), &v); err == nil {
			return v
		}
	}
	return d.Duration.String()
}
